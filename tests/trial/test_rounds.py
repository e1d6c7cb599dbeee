"""Measurement rounds: a pair is measured until its rank is clear, between a floor and a ceiling.

The pairs are measured on the simulator (virtual time); the incumbent each pair races is set
around the pair's own fixed-count measurement, so the test knows which way the rank must fall.
"""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest

from tests.trial.traffic_support import small_space
from tuner.config.trial import LaunchContext, TrialConfig
from tuner.config.workload import Condition
from tuner.results import RequestRecord, Source, TrialResult
from tuner.trial import rounds as rounds_module
from tuner.trial.backends.sim import SimBackend
from tuner.trial.race import Incumbent, Race
from tuner.trial.rounds import PairInterval, Rounds, merged, stop_reason, tok_s_interval
from tuner.trial.scoring import Limits
from tuner.trial.traffic import measure_traffic

ONE_PAIR = {"concurrency": [1], "temperature": [0.2], "requests": 8, "warmup": 1}


def _started(tmp_path: Path, **workload: object) -> tuple[SimBackend, TrialConfig, Limits]:
    space = small_space(tmp_path, workload={**ONE_PAIR, **workload})
    config = space.config(space.speculative("ngram", 3), 0.9, 2048, 0.2)
    backend = SimBackend(space.hardware, seed=1)
    backend.start(config.server, LaunchContext("rounds", 0, tmp_path))
    return backend, config, Limits.of(space)


def _race(tok_s: float, share: float, pairs: int = 1) -> Race:
    """An incumbent at ``tok_s`` +/- ``share`` at each of ``pairs`` equal pairs; nothing
    bounds a pair not measured yet."""
    interval = PairInterval(tok_s * (1 - share), tok_s, tok_s * (1 + share))
    return Race(Incumbent(7, (interval,) * pairs, (1.0,) * pairs), lambda _: None)


def test_a_pair_clearly_below_the_incumbent_stops_at_the_early_floor(tmp_path: Path) -> None:
    backend, config, limits = _started(tmp_path)
    fixed = measure_traffic(backend, config, 3, limits).results[0].output_tok_s
    traffic = measure_traffic(backend, config, 3, limits, _race(10 * fixed, 0.01))
    (measure,) = traffic.measures
    plan = Rounds.of(8, 1)
    assert (plan.size, plan.early, plan.floor, plan.ceiling) == (4, 4, 8, 16)
    assert measure.stopped == "below the incumbent"
    assert measure.requests == plan.early == len(traffic.results[0].requests)
    assert measure.rounds == 1
    assert measure.interval.high < 10 * fixed * 0.99


def test_a_pair_that_may_win_is_measured_at_least_the_p95_floor(tmp_path: Path) -> None:
    backend, config, limits = _started(tmp_path)
    fixed = measure_traffic(backend, config, 3, limits).results[0].output_tok_s
    traffic = measure_traffic(backend, config, 3, limits, _race(fixed / 10, 0.01))
    (measure,) = traffic.measures
    # Clear of the incumbent from its first rounds, yet a winner's p95 rests on the full count.
    assert measure.stopped == "above the incumbent"
    assert measure.requests == 8
    assert measure.rounds == 2
    assert traffic.pruned is None


def test_a_close_pair_stops_at_the_ceiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, config, limits = _started(tmp_path)
    fixed = measure_traffic(backend, config, 3, limits).results[0].output_tok_s
    monkeypatch.setattr(rounds_module, "WIDTH_SHARE", 0.0)  # never tight enough on its own
    traffic = measure_traffic(backend, config, 3, limits, _race(fixed, 0.5))
    (measure,) = traffic.measures
    assert measure.stopped == "ceiling"
    assert measure.requests == 16 == len(traffic.results[0].requests)
    assert measure.rounds == 4
    # The merged rounds are one pair's result: every round's requests and time added.
    assert traffic.results[0].duration_s > 0
    assert math.isfinite(measure.interval.high)


def test_a_pair_over_the_ttft_limit_stops_early(tmp_path: Path) -> None:
    space_limit = {"ttft_ms": 0.001}  # every request misses it
    space = small_space(tmp_path, workload=ONE_PAIR, slo=space_limit)
    config = space.config(space.speculative("ngram", 3), 0.9, 2048, 0.2)
    backend = SimBackend(space.hardware, seed=1)
    backend.start(config.server, LaunchContext("rounds", 0, tmp_path))
    traffic = measure_traffic(backend, config, 3, Limits.of(space), _race(1.0, 0.01))
    assert traffic.measures[0].stopped == "p95 TTFT over the limit"
    assert traffic.measures[0].requests == 4


def test_without_a_race_every_pair_is_measured_at_the_fixed_count(tmp_path: Path) -> None:
    backend, config, limits = _started(tmp_path, concurrency=[1, 4], temperature=[0.2, 0.8])
    traffic = measure_traffic(backend, config, 3, limits)
    assert [m.requests for m in traffic.measures] == [8, 8, 8, 8]
    assert {m.stopped for m in traffic.measures} == {"fixed count"}
    assert all(m.interval.low <= m.interval.mid <= m.interval.high for m in traffic.measures)


def test_a_trial_that_cannot_reach_the_incumbent_is_pruned_after_its_first_pair(
    tmp_path: Path,
) -> None:
    backend, config, limits = _started(tmp_path, concurrency=[1, 4], temperature=[0.2, 0.8])
    fixed = measure_traffic(backend, config, 3, limits)
    best = max(r.output_tok_s for r in fixed.results)
    interval = PairInterval(20 * best, 21 * best, 22 * best)
    race = Race(Incumbent(4, (interval,) * 4, (0.25,) * 4), lambda _: 2 * best)
    traffic = measure_traffic(backend, config, 3, limits, race)
    assert len(traffic.conditions) == 1
    assert traffic.pruned is not None
    assert "cannot reach trial 4" in traffic.pruned
    assert "1 of 4 pairs measured, 3 predicted" in traffic.pruned
    # Unbounded predictions never prune before the pairs are measured.
    unbounded = Race(race.incumbent, lambda _: None)
    measured = measure_traffic(backend, config, 3, limits, unbounded)
    assert len(measured.conditions) == 4
    assert measured.pruned is not None and "4 of 4 pairs measured" in measured.pruned


def test_a_settled_race_travels_to_another_process_and_prunes_alike(tmp_path: Path) -> None:
    # A Ray slot gets the race as a pickled record: the ceilings computed by the driver, the
    # forecast left behind.
    backend, config, limits = _started(tmp_path, concurrency=[1, 4], temperature=[0.2, 0.8])
    best = max(r.output_tok_s for r in measure_traffic(backend, config, 3, limits).results)
    interval = PairInterval(20 * best, 21 * best, 22 * best)
    asked: list[Condition] = []

    def ceiling(condition: Condition) -> float:
        asked.append(condition)
        return 2 * best

    race = Race(Incumbent(4, (interval,) * 4, (0.25,) * 4), ceiling)
    conditions = config.client.workload.conditions
    settled = pickle.loads(pickle.dumps(race.settled(conditions)))
    assert asked == list(conditions)  # every ceiling computed once, before it travels
    here = measure_traffic(backend, config, 3, limits, race)
    there = measure_traffic(backend, config, 3, limits, settled)
    assert there.pruned == here.pruned and there.pruned is not None
    assert len(there.conditions) == len(here.conditions) == 1
    # A condition the driver did not settle has no ceiling: it never prunes on a guess.
    assert settled.ceiling(Condition(64, 0.2, 1.0)) is None
    # Without an incumbent nothing is computed and nothing prunes.
    asked.clear()
    alone = Race(None, ceiling).settled(conditions)
    assert asked == [] and alone.prune_reason([(conditions[0], interval)], conditions[1:]) is None


def _result(latencies: list[float], ttft: float = 0.01) -> TrialResult:
    requests = tuple(
        RequestRecord(start=0.0, first_token=ttft, end=latency, completion_tokens=100)
        for latency in latencies
    )
    return TrialResult(Source.SIMULATED, 1, sum(latencies), requests)


def test_the_rules_in_order_of_requests() -> None:
    plan = Rounds(size=10, early=20, floor=40, ceiling=80)
    clear_below = PairInterval(1000.0, 1010.0, 1020.0)
    steady = [1.0, 1.01, 0.99] * 5  # 15 requests: under the early floor, nothing stops
    assert stop_reason(plan, _result(steady), clear_below, 500.0) is None
    steady = [1.0, 1.01, 0.99] * 10  # 30: clearly below the incumbent stops
    assert stop_reason(plan, _result(steady), clear_below, 500.0) == "below the incumbent"
    clear_above = PairInterval(1.0, 2.0, 3.0)  # 30 requests: a winner waits for the p95 floor
    assert stop_reason(plan, _result(steady), clear_above, 500.0) is None
    assert stop_reason(plan, _result(steady * 2), clear_above, 500.0) == "above the incumbent"
    close = PairInterval(50.0, 100.0, 150.0)  # overlaps every estimate below (about 100 tok/s)
    assert stop_reason(plan, _result(steady * 2), close, 500.0) == "tight"
    assert stop_reason(plan, _result(steady * 2), None, 500.0) == "no incumbent"
    noisy = [0.2, 3.0, 1.0, 5.0] * 10  # 40 requests, too spread to be tight
    assert stop_reason(plan, _result(noisy), close, 500.0) is None
    assert stop_reason(plan, _result(noisy * 2), close, 500.0) == "ceiling"


def test_the_interval_narrows_with_requests_and_merging_keeps_every_request() -> None:
    few = _result([1.0, 1.2, 0.8, 1.1])
    many = merged([few] * 10)
    assert len(many.requests) == 40
    assert many.duration_s == pytest.approx(10 * few.duration_s)
    assert many.output_tok_s == pytest.approx(few.output_tok_s)
    assert tok_s_interval(many).half_share < tok_s_interval(few).half_share
    assert tok_s_interval(_result([1.0, 1.0])).high == math.inf  # too few to bound


def test_a_pair_that_loses_its_race_is_topped_up_when_its_trial_may_win_the_mix(
    tmp_path: Path,
) -> None:
    """One pair clearly below the incumbent's, the other far above: the first stops at the
    early floor, but the trial is not pruned, so it goes back and measures that pair to the
    p95 floor before it may count as a candidate."""
    backend, config, limits = _started(tmp_path, temperature=[0.2, 0.8])
    fixed = measure_traffic(backend, config, 3, limits).results
    ahead = PairInterval(1.49 * fixed[0].output_tok_s, 1.5 * fixed[0].output_tok_s, math.inf)
    behind = PairInterval(0.0, fixed[1].output_tok_s / 10, fixed[1].output_tok_s / 9)
    race = Race(Incumbent(5, (ahead, behind), (0.5, 0.5)), lambda _: None)
    traffic = measure_traffic(backend, config, 3, limits, race)
    assert traffic.pruned is None
    first, second = traffic.measures
    assert first.stopped == "below the incumbent, topped up to the p95 floor"
    assert (first.requests, first.rounds) == (8, 2) == (len(traffic.results[0].requests), 2)
    assert first.interval.high < ahead.low
    assert (second.stopped, second.requests) == ("above the incumbent", 8)
