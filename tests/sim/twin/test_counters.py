"""A lower K of a measured drafter, read off vLLM's per-position counters, and steered by them."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from tuner import serde
from tuner.config.space import load_space
from tuner.config.trial import SpecMethod, SpeculativeConfig
from tuner.config.verification import Verification
from tuner.results import Source
from tuner.search.proposals import COUNTERS_SOURCE, PREDICTED_ONLY_ATTR, PROPOSED_ATTR, propose
from tuner.search.twin_screen import TwinProposal, TwinScreen
from tuner.search.twin_steer import _counts
from tuner.sim.twin import TwinPhysics
from tuner.sim.twin.counters import PositionCounts, reusable, wilson
from tuner.sim.twin.fit import FittedTwin, Observation, fit, observe
from tuner.sim.virtual_time import simulate
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import CONSTRAINT_KEYS, TrialStatus

SPACE = load_space(str(Path(__file__).parent / "spaces" / "lower-k-14b-4090x1.yaml"))
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
# Counters at K=4 no geometric decay fits: the draft keeps two tokens, rarely a third.
DRAFTS = 3000.0
ACCEPTED = (2700.0, 2550.0, 600.0, 150.0)


def test_counters_give_each_lower_k_exactly() -> None:
    counts = PositionCounts.measured(1000, [800, 600, 420, 250])
    assert [counts.accepted_at(k).mid for k in (1, 2, 3, 4)] == pytest.approx(
        [0.8, 1.4, 1.82, 2.07], abs=1e-12
    )
    two = counts.accepted_at(2)
    assert two.low < two.mid < two.high
    # Wilson's 95 % interval of 8 in 10, as tabulated (0.490, 0.943).
    assert wilson(8, 10) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert two.low == pytest.approx(wilson(800, 1000)[0] + wilson(600, 1000)[0])
    assert not two.continued and two.counted == 2
    # A trial at K=2 pools into positions 1-2 only.
    pooled = counts + PositionCounts.measured(500, [450, 300])
    assert pooled.drafts == (1500.0, 1500.0, 1000.0, 1000.0)
    assert pooled.accepted_at(2).mid == pytest.approx(1250 / 1500 + 900 / 1500)
    with pytest.raises(ValueError, match="outside"):
        PositionCounts.measured(10, [11])


def test_the_interval_covers_the_truth_in_a_seeded_simulation() -> None:
    """Geometric drafts with known conditional rates, 200 steps a measurement, 1000 times."""
    rng = np.random.default_rng(7)
    conditional = np.array([0.85, 0.8, 0.7, 0.6])
    reach = np.cumprod(conditional)
    steps, runs = 200, 1000
    covered = np.zeros(4)
    position_covered = np.zeros(4)
    for _ in range(runs):
        kept = np.cumprod(rng.random((steps, 4)) < conditional, axis=1)
        counts = PositionCounts.measured(steps, kept.sum(axis=0).tolist())
        for k in range(1, 5):
            found = counts.accepted_at(k)
            covered[k - 1] += found.low <= reach[:k].sum() <= found.high
        for i, (_, low, high) in enumerate(counts.reach()):
            position_covered[i] += low <= reach[i] <= high
    # Each position's Wilson interval is close to its nominal 95 % (binomial counts are
    # discrete: its exact coverage at 0.85 of 200 is 94.1 %); K=1 is that interval itself.
    # The sums at K >= 2, summed bounds of correlated positions, cover more than 95 %.
    assert (position_covered / runs >= 0.92).all()
    assert covered[0] == position_covered[0]
    assert (covered[1:] / runs >= 0.95).all()
    print("coverage per K:", covered / runs, "per position:", position_covered / runs)


def test_only_drafters_that_draft_one_token_after_another_carry_to_a_lower_k() -> None:
    assert reusable(SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, DRAFT))
    assert reusable(SpeculativeConfig(SpecMethod.NGRAM, 4))
    assert not reusable(SpeculativeConfig(SpecMethod.SUFFIX, 4))
    assert not reusable(SpeculativeConfig(SpecMethod.EAGLE3, 4, "h", parallel_drafting=True))
    assert reusable(SpeculativeConfig(SpecMethod.DFLASH, 4, "d"))  # about: the block's width
    block = Verification.BLOCK
    assert not reusable(SpeculativeConfig(SpecMethod.DFLASH, 4, "d", rejection_sample_method=block))
    assert not reusable(
        SpeculativeConfig(SpecMethod.DFLASH, 4, "d", enable_adaptive_verification=True)
    )
    assert not reusable(None)


def test_stored_pairs_give_their_counters_back() -> None:
    level = {
        "temperature": 0.8,
        "acceptance_per_position": [0.5, 0.25],
        "spec_drafts": 400.0,
    }
    temperature, counts = _counts(level, 0.2)
    assert temperature == 0.8
    assert counts == PositionCounts.measured(400, [200, 100])
    # Records from before spec_drafts: steps from the tokens (one request's first token is
    # its prefill's): (1001 - 1) tokens at 2.5 tokens a step.
    old = {"acceptance_per_position": [0.5], "mean_acceptance_length": 2.5}
    _, counts = _counts({**old, "output_tokens": 1001, "requests": 1, "errors": 0}, 0.2)
    assert counts.drafts == (400.0,)


def _measured_at_k4() -> Observation:
    config = SPACE.config(SPACE.speculative(DRAFT, 4), 0.86, 2048, 0.2)
    result = simulate(
        SPACE.hardware,
        SPACE.target,
        SPACE.draft_model(DRAFT),
        config.server,
        0.2,
        SPACE.workload,
        1,
        0,
        TwinPhysics(FittedTwin().params),
    )
    found = observe(config, result)
    counts = PositionCounts.measured(DRAFTS, ACCEPTED)
    return replace(
        found, reach=tuple(a / DRAFTS for a in ACCEPTED), drafts=DRAFTS, counts=((0.2, counts),)
    )


def _twin() -> FittedTwin:
    return fit(SPACE.hardware, [_measured_at_k4()], FittedTwin())


def _by_k(proposals: list[TwinProposal]) -> dict[int, TwinProposal]:
    return {int(p.params["num_speculative_tokens"]): p for p in proposals if p.method == DRAFT}


def test_the_twin_predicts_a_lower_k_from_the_counters_not_its_fitted_decay() -> None:
    twin = _twin()
    assert twin.counters[(DRAFT, "code", 0.2)] == PositionCounts.measured(DRAFTS, ACCEPTED)
    assert serde.load(FittedTwin, serde.dump(twin)).counters == twin.counters
    screen = TwinScreen(SPACE)
    physics = TwinPhysics(twin.params)
    fitted_only = replace(twin, counters={})
    for k in (1, 2, 3):
        counted, interval, _ = screen._accepted(twin, physics, screen.arm(DRAFT, k), 0.2)
        assert counted == pytest.approx(sum(ACCEPTED[:k]) / DRAFTS)
        assert interval is not None and interval.low < counted < interval.high
        fitted, none, _ = screen._accepted(fitted_only, physics, screen.arm(DRAFT, k), 0.2)
        assert none is None
        if k >= 2:  # the fit's geometric decay cannot follow a third position this rare
            assert abs(fitted - counted) > 0.1
    # Counters of another temperature than the space serves say nothing: the fit predicts.
    elsewhere = replace(twin, counters={(DRAFT, "code", 0.6): twin.counters[(DRAFT, "code", 0.2)]})
    assert screen._accepted(elsewhere, physics, screen.arm(DRAFT, 2), 0.2)[1] is None
    counted_ranks = _by_k(screen.rank(twin))
    fitted_ranks = _by_k(screen.rank(fitted_only))
    assert counted_ranks[2].accepted is not None and fitted_ranks[2].accepted is None
    assert counted_ranks[2].output_tok_s != pytest.approx(fitted_ranks[2].output_tok_s, rel=0.02)
    high = counted_ranks[2].high_tok_s
    assert high is not None and high > counted_ranks[2].output_tok_s


def test_on_a_temperature_mix_every_temperature_must_be_counted() -> None:
    space = load_space(str(Path(__file__).parents[3] / "benchmarks" / "held_out_mixed_space.yaml"))
    assert space.workload.temperature_mix == ((0.2, 0.7), (0.8, 0.3))
    screen = TwinScreen(space)
    cold = PositionCounts.measured(1000, [900, 800, 700])
    hot = PositionCounts.measured(1000, [500, 200, 100])
    only_cold = FittedTwin(counters={(DRAFT, "code", 0.2): cold})
    assert screen.measured(only_cold, screen.arm(DRAFT, 2), space.workload.mean_temperature) is None
    both = FittedTwin(counters={(DRAFT, "code", 0.2): cold, (DRAFT, "code", 0.8): hot})
    found = screen.measured(both, screen.arm(DRAFT, 2), space.workload.mean_temperature)
    assert found is not None
    assert found.mid == pytest.approx(0.7 * 1.7 + 0.3 * 0.7)
    assert found.high == pytest.approx(
        0.7 * cold.accepted_at(2).high + 0.3 * hot.accepted_at(2).high
    )
    above = screen.measured(both, screen.arm(DRAFT, 4), space.workload.mean_temperature)
    assert above is not None and above.continued and above.counted == 3
    # Past K=3 at the decay the twin's acceptance model gives the drafter.
    decay = TwinPhysics(both.params).decay(
        space.draft_model(DRAFT), SpecMethod.DRAFT_MODEL, space.workload.prompt_set
    )
    assert decay < 1
    assert above.mid == pytest.approx(
        0.7 * cold.accepted_at(4, decay).mid + 0.3 * hot.accepted_at(4, decay).mid
    )


def test_a_k_above_the_counters_continues_their_last_rate_within_bounds() -> None:
    counts = PositionCounts.measured(1000, [800, 600, 420, 250])
    six = counts.accepted_at(6)
    assert six.continued and six.counted == 4
    # Position 4 kept 250 of the 420 steps that kept position 3: each further position keeps
    # that share again.
    rate = 250 / 420
    assert six.mid == pytest.approx(2.07 + 0.25 * rate + 0.25 * rate**2)
    four = counts.accepted_at(4)
    # At least what K=4 keeps (nothing past it); at most position 4's reach at each extra one.
    assert six.low == pytest.approx(four.low)
    assert six.high == pytest.approx(four.high + 2 * wilson(250, 1000)[1])
    assert six.low < four.mid < six.mid < six.high
    # One position counted: its own reach is the rate.
    one = PositionCounts.measured(100, [50])
    assert one.accepted_at(3).mid == pytest.approx(0.5 + 0.25 + 0.125)
    # Falling by a decay a position: 0.5, then 0.5 * 0.8, then that * 0.5 * 0.8 ** 2.
    assert one.accepted_at(3, 0.8).mid == pytest.approx(0.5 + 0.2 + 0.2 * 0.32)
    assert one.accepted_at(3, 0.8).high == one.accepted_at(3).high  # the bound needs no model
    with pytest.raises(ValueError, match="K=0"):
        counts.accepted_at(0)


def test_a_k_above_the_counters_is_bounded_in_a_seeded_simulation() -> None:
    """Drafts whose conditional rate keeps falling past the counted K=4 (by about 0.93 a
    position): K=6 continued at position 4's rate is a little high; falling at the drafter's
    decay, it is close. Either way the bounds hold the truth."""
    rng = np.random.default_rng(11)
    conditional = np.array([0.85, 0.8, 0.75, 0.7, 0.65, 0.6])
    truth = np.cumprod(conditional).sum()
    steps, runs = 500, 300
    covered = 0
    errors: dict[float, list[float]] = {1.0: [], 0.93: []}
    for _ in range(runs):
        kept = np.cumprod(rng.random((steps, 4)) < conditional[:4], axis=1)
        counts = PositionCounts.measured(steps, kept.sum(axis=0).tolist())
        for decay, found in errors.items():
            six = counts.accepted_at(6, decay)
            covered += six.low <= truth <= six.high
            found.append(six.mid / truth - 1)
    assert covered == 2 * runs
    assert 0.01 < float(np.median(errors[1.0])) < 0.05
    assert abs(float(np.median(errors[0.93]))) < 0.01


def _incumbent(low: float) -> optuna.trial.FrozenTrial:
    """A completed, feasible no-speculation trial whose tok/s is at least ``low``."""
    config = SPACE.config(None, 0.86, 2048, 0.2)
    record = TrialRecord(
        number=0,
        state=TrialState.COMPLETE,
        server=config.server,
        trial_temperature=0.2,
        status=TrialStatus.OK,
        source=Source.SIMULATED,
        values=(low * 1.05, 100.0),
        levels=({"tok_s_interval": [low, low * 1.05, low * 1.1], "weight": 1.0},),
    )
    return optuna.trial.create_trial(
        state=TrialState.COMPLETE,
        values=[low * 1.05, 100.0],
        params={"draft": "none"},
        distributions={"draft": CategoricalDistribution(["none", DRAFT])},
        user_attrs=record.to_attrs(),
        system_attrs={f"constraints:{k}": -1.0 for k in CONSTRAINT_KEYS},
    )


@pytest.mark.parametrize("can_win", [True, False])
def test_a_lower_k_is_measured_only_when_it_could_beat_the_incumbent(can_win: bool) -> None:
    twin = _twin()
    screen = TwinScreen(SPACE)
    ranked = screen.rank(twin)
    best = ranked[0]
    assert best.method == DRAFT and best.params["num_speculative_tokens"] < 4  # a lower K
    assert best.accepted is not None
    ceiling = screen.ceiling(best)
    assert ceiling is not None and ceiling > best.output_tok_s
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(_incumbent(ceiling * (0.98 if can_win else 1.02)))
    # Every config but the lower K has been measured: the question is that one alone.
    done = [
        optuna.trial.create_trial(
            state=TrialState.COMPLETE,
            values=[1.0, 1.0],
            params=p.params,
            distributions={k: CategoricalDistribution([v]) for k, v in p.params.items()},
        )
        for p in ranked[1:]
    ]
    propose(study, screen, twin, done)
    waiting = study.get_trials(states=(TrialState.WAITING,))
    if can_win:
        (queued,) = waiting
        assert queued.system_attrs["fixed_params"] == best.params
        attrs: dict[str, Any] = queued.user_attrs[PROPOSED_ATTR]
        assert attrs["acceptance"] == COUNTERS_SOURCE
        assert attrs["high_tok_s"] == pytest.approx(ceiling, abs=1e-3)
        assert PREDICTED_ONLY_ATTR not in study.user_attrs
    else:
        assert waiting == []
        (entry,) = study.user_attrs[PREDICTED_ONLY_ATTR].values()
        assert entry["params"] == best.params and entry["source"] == "predicted"
        assert entry["acceptance"] == COUNTERS_SOURCE
        assert "cannot reach trial 0" in entry["reason"]
        assert math.isclose(entry["high_tok_s"], ceiling, abs_tol=1e-3)
