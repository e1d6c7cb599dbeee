"""Measures one running server at every (concurrency, temperature) pair of the traffic.

The pairs come from the workload (:attr:`~tuner.config.workload.WorkloadSpec.conditions`), level
by level; the temperature is request-side, so the server is never restarted between them.
Measuring stops early once the trial can no longer count: more requests failed than the space
allows, or the server stopped answering (a request that timed out without a token, or a later
pair where nothing succeeded, or where the server died other than out of memory, after earlier
pairs had been served: this config breaks the server under load, which the ``errors``
constraint tells the sampler; a server that fails at the first pair is a fault, a FAIL). Each
pair gets its own seed, so prompts differ from pair to pair.

A goodput study climbs its request-rate steps instead (:class:`Climb`): each step offers its
rate (Poisson arrivals, no cap on requests in flight, so the server's own queueing shows in
TTFT) at every temperature of the mix; the climb stops at the first step that misses a limit,
then measures once between it and the last step that passed, at their geometric mean.
(vLLM's ``bench sweep serve_sla`` likewise narrows the rate between measured points.)

A trial that races an incumbent (a :class:`~tuner.trial.race.Race`) measures each pair in rounds
until its rank is clear (:mod:`tuner.trial.rounds`), and after each pair ends PRUNED once it
cannot reach the incumbent. A goodput climb and a timed window keep their fixed measurements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from tuner.bench.loadgen import STALLED
from tuner.config.trial import TrialConfig
from tuner.config.workload import Condition, WorkloadSpec
from tuner.errors import FailureKind, MeasurementError, StartupFailure
from tuner.results import TrialResult
from tuner.trial.backends import Backend
from tuner.trial.race import Race
from tuner.trial.rounds import (
    PairInterval,
    PairMeasure,
    Rounds,
    merged,
    stop_reason,
    tok_s_interval,
)
from tuner.trial.scoring import Limits, failed_share, meets

__all__ = ["Climb", "Traffic", "climb_pairs", "measure_traffic", "trial_pairs"]

# Seeds of a trial's pairs are this far apart: a trial's seeds never meet the next trial's.
_PAIR_STRIDE = 7919


@dataclass(frozen=True)
class Traffic:
    """What measuring the traffic produced.

    Attributes:
        results: one per measured pair, in the order of ``conditions``.
        conditions: the pairs measured (a prefix of the workload's when measuring stopped).
        broken: why measuring stopped before the last pair; None when every pair ran.
        unrecorded: requests of a pair that produced no result (the server died in it), all
            counted as failed.
        measures: how much each pair was measured, with its tok/s interval.
        pruned: why the trial cannot reach the incumbent; None when it still can.
    """

    results: tuple[TrialResult, ...]
    conditions: tuple[Condition, ...]
    broken: str | None = None
    unrecorded: int = 0
    measures: tuple[PairMeasure, ...] = ()
    pruned: str | None = None

    @property
    def lost_requests(self) -> bool:
        """Whether any request failed (the server is then not trusted for the next trial)."""
        return self.broken is not None or any(r.errors for r in self.results)


@dataclass(frozen=True)
class Climb:
    """Where a goodput climb stands: the steps measured so far, and whether each passed.

    Attributes:
        steps: the workload's rates, lowest first.
        measured: (rate, passed) in the order measured.
    """

    steps: tuple[float, ...]
    measured: tuple[tuple[float, bool], ...] = ()

    def next_rate(self) -> float | None:
        """The rate to measure next; None when the climb is done."""
        passed = dict(self.measured)
        missed = [rate for rate, ok in self.measured if not ok]
        if not missed:
            return next((rate for rate in self.steps if rate not in passed), None)
        below = [rate for rate in self.steps if rate < min(missed) and passed.get(rate)]
        if not below or len(missed) > 1 or len(self.measured) > len(below) + 1:
            return None  # the lowest step missed, or the step between was measured
        between = round(math.sqrt(max(below) * min(missed)), 3)
        return between if max(below) < between < min(missed) else None

    def record(self, rate: float, passed: bool) -> Climb:
        return replace(self, measured=(*self.measured, (rate, passed)))

    @property
    def goodput(self) -> float:
        """The highest rate that passed; 0 when none did."""
        return max((rate for rate, ok in self.measured if ok), default=0.0)


def measure_traffic(
    backend: Backend, config: TrialConfig, seed: int, limits: Limits, race: Race | None = None
) -> Traffic:
    """Measures the running server at each pair of ``config``'s workload, or climbs its
    request-rate steps in a goodput study; in rounds, pruning on the way, when ``race`` is
    given (not for a goodput climb or a timed window).

    Raises:
        MeasurementError: the first pair produced nothing (an infrastructure fault).
    """
    workload = config.client.workload
    results: list[TrialResult] = []
    done: list[Condition] = []
    measures: list[PairMeasure] = []
    adaptive = race is not None and not limits.goodput and workload.duration_s is None
    pairs = trial_pairs(workload, limits, results, done)
    count = len(workload.conditions)
    for index, condition in enumerate(pairs):
        pair_seed = seed * _PAIR_STRIDE + index
        try:
            if race is not None and adaptive:
                incumbent = race.pair(index, count)
                result, measure = _rounds(
                    backend, config, condition, pair_seed, count, limits, incumbent
                )
            else:
                pair = _pair_config(
                    config, condition, pair_seed, workload.requests, workload.warmup
                )
                result = backend.measure(pair, condition.concurrency, pair_seed)
                measure = PairMeasure(
                    len(result.requests), 1, tok_s_interval(result), "fixed count"
                )
        except (MeasurementError, StartupFailure) as exc:
            if not results or (isinstance(exc, StartupFailure) and exc.kind is FailureKind.OOM):
                raise
            return Traffic(
                tuple(results),
                tuple(done),
                f"at {condition.label}: {exc}",
                workload.requests,
                tuple(measures),
            )
        results.append(result)
        done.append(condition)
        measures.append(measure)
        if any(STALLED in (q.error or "") for q in result.requests):
            return Traffic(tuple(results), tuple(done), STALLED, measures=tuple(measures))
        if failed_share(results) > limits.max_failed_share:
            break  # the trial cannot count any more: measuring on would cost time only
        if race is not None and adaptive:
            measured = [(c, m.interval) for c, m in zip(done, measures, strict=True)]
            pruned = race.prune_reason(measured, workload.conditions[len(done) :])
            if pruned is not None:
                return Traffic(tuple(results), tuple(done), measures=tuple(measures), pruned=pruned)
    return Traffic(tuple(results), tuple(done), measures=tuple(measures))


def _pair_config(
    config: TrialConfig, condition: Condition, seed: int, requests: int, warmup: int
) -> TrialConfig:
    """``config``'s request side at ``condition``: ``requests`` after ``warmup``, seeded."""
    workload = config.client.workload
    return replace(
        config,
        client=replace(
            config.client,
            sampling_temperature=condition.sampling_temperature,
            workload=replace(
                workload,
                seed=workload.seed + seed,
                request_rate=condition.request_rate or workload.request_rate,
                requests=requests,
                warmup=warmup,
            ),
        ),
    )


def _rounds(
    backend: Backend,
    config: TrialConfig,
    condition: Condition,
    pair_seed: int,
    count: int,
    limits: Limits,
    incumbent: PairInterval | None,
) -> tuple[TrialResult, PairMeasure]:
    """One pair, a round at a time until :func:`stop_reason` says its rank is clear.

    Each round after the first has its own seed (other prompts; a round's seed never meets
    another pair's), and each sends the workload's warm-up first.
    """
    workload = config.client.workload
    plan = Rounds.of(workload.requests, condition.concurrency)
    rounds: list[TrialResult] = []
    while True:
        sent = sum(len(r.requests) for r in rounds)
        size = min(plan.size, plan.ceiling - sent)
        seed = pair_seed + len(rounds) * count
        pair = _pair_config(config, condition, seed, size, workload.warmup)
        rounds.append(backend.measure(pair, condition.concurrency, seed))
        result = merged(rounds)
        lost = any(STALLED in (q.error or "") for q in result.requests)
        if lost or failed_share([result]) > limits.max_failed_share:
            reason: str | None = "failed requests"
        else:
            reason = stop_reason(plan, result, incumbent, limits.ttft_ms)
        if reason is not None:
            measure = PairMeasure(len(result.requests), len(rounds), tok_s_interval(result), reason)
            return result, measure


def trial_pairs(
    workload: WorkloadSpec, limits: Limits, results: list[TrialResult], done: list[Condition]
) -> Iterable[Condition]:
    """The pairs a trial measures, in order: its workload's (every level, each at every
    temperature, with its share), or in a goodput study its climb (:func:`climb_pairs`;
    ``results`` and ``done`` are the caller's, filled in as it measures or predicts). A trial
    and the simulator's forecast of it (:mod:`tuner.search.forecast`) both take their pairs
    from here."""
    return climb_pairs(workload, limits, results, done) if limits.goodput else workload.conditions


def climb_pairs(
    workload: WorkloadSpec, limits: Limits, results: list[TrialResult], done: list[Condition]
) -> Iterator[Condition]:
    """The pairs of a goodput climb, each step decided by how the steps before it measured
    (``results`` and ``done`` are the caller's, filled in as it measures or predicts)."""
    climb = Climb(workload.rate_steps)
    while (rate := climb.next_rate()) is not None:
        yield from workload.step(rate)
        step = [r for r, c in zip(results, done, strict=True) if c.request_rate == rate]
        climb = climb.record(rate, meets(step, limits))
