"""Pruning against the incumbent when the prior is wrong about a config: a trial measured above
its own prediction has its other pairs' bounds raised by as much."""

from __future__ import annotations

import pickle

from tuner.config.workload import Condition
from tuner.trial.race import Incumbent, Race
from tuner.trial.rounds import PairInterval

# Two pairs of equal weight; the incumbent is at least 400 tok/s over the mix.
FIRST, SECOND = Condition(1, 0.2, 0.5), Condition(4, 0.2, 0.5)
INCUMBENT = Incumbent(2, (PairInterval(400, 410, 420),) * 2, (0.5, 0.5))


def _race(predicted: float) -> Race:
    """A race whose prediction is ``predicted`` at each pair, its band +50 %."""
    return Race(INCUMBENT, lambda _: 1.5 * predicted, lambda _: predicted)


def test_a_trial_measured_as_predicted_is_pruned_on_its_band() -> None:
    race = _race(200.0)
    measured = [(FIRST, PairInterval(190, 200, 210))]  # as predicted
    reason = race.prune_reason(measured, [SECOND])
    # Its best case: (210 + 1.5 x 200) / 2 = 255 < 400.
    assert reason is not None and "at most 255.0 tok/s" in reason
    assert "raised" not in reason


def test_a_trial_measured_above_its_prediction_has_its_other_pairs_raised_alike() -> None:
    # The prior put this config at 200 a pair; its first pair measured 400: the world is
    # kinder to it than the band says, and the same acceptance serves its second pair.
    race = _race(200.0)
    measured = [(FIRST, PairInterval(390, 400, 410))]
    assert race.surprise(measured) == 2.0
    assert race.prune_reason(measured, [SECOND]) is None  # (410 + 2 x 300) / 2 > 400
    # Far enough below the incumbent it still loses, and says by how much it was raised.
    slow = _race(100.0)
    low = [(FIRST, PairInterval(140, 150, 160))]
    reason = slow.prune_reason(low, [SECOND])
    assert reason is not None and "raised 1.50x as measured above it" in reason


def test_a_trial_below_its_prediction_keeps_its_band() -> None:
    race = _race(200.0)
    below = [(FIRST, PairInterval(90, 100, 110))]
    assert race.surprise(below) == 1.0
    assert race.surprise([]) == 1.0
    # No prediction at a pair: that pair says nothing of the surprise.
    unknown = Race(INCUMBENT, lambda _: 300.0)
    assert unknown.surprise([(FIRST, PairInterval(390, 400, 410))]) == 1.0


def test_a_settled_race_carries_its_predictions_to_another_process() -> None:
    race = _race(200.0)
    settled = pickle.loads(pickle.dumps(race.settled([FIRST, SECOND])))
    measured = [(FIRST, PairInterval(390, 400, 410))]
    assert settled.surprise(measured) == 2.0
    assert settled.prune_reason(measured, [SECOND]) == race.prune_reason(measured, [SECOND])
