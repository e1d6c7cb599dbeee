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
cannot reach the incumbent. A pair that loses its own race stops at half the count, yet the
trial may still win the mix on its other pairs: a trial not pruned after its last pair goes
back to each pair it stopped below the incumbent and tops it up to the p95 floor (the server
is the same; the temperature is request-side). So a trial that completes, and may be
recommended, rests on the full count at every pair whose TTFT and requests it meets. A
goodput climb and a timed window keep their fixed measurements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from tuner.bench.loadgen import STALLED
from tuner.config.trial import TrialConfig
from tuner.config.workload import Condition, WorkloadSpec
from tuner.errors import FailureKind, MeasurementError, StartupFailure
from tuner.results import TrialResult
from tuner.trial.backends import Backend
from tuner.trial.race import Race
from tuner.trial.rounds import (
    BELOW_INCUMBENT,
    TOPPED_UP,
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
    stopped_below: dict[int, _PairRounds] = {}
    pairs = trial_pairs(workload, limits, results, done)
    count = len(workload.conditions)
    for index, condition in enumerate(pairs):
        pair_seed = seed * _PAIR_STRIDE + index
        try:
            if race is not None and adaptive:
                rounds = _PairRounds(backend, config, condition, pair_seed, count)
                result, measure = rounds.until_clear(limits, race.pair(index, count))
                if measure.stopped == BELOW_INCUMBENT:
                    stopped_below[index] = rounds
            else:
                pair = _pair_config(
                    config, condition, pair_seed, workload.requests, workload.warmup
                )
                result = backend.measure(pair, condition.concurrency, pair_seed)
                measure = PairMeasure(
                    len(result.requests), 1, tok_s_interval(result), "fixed count"
                )
        except (MeasurementError, StartupFailure) as exc:
            _raise_if_fault(exc, results)
            broken = f"at {condition.label}: {exc}"
            return Traffic(tuple(results), tuple(done), broken, workload.requests, tuple(measures))
        results.append(result)
        done.append(condition)
        measures.append(measure)
        if _stalled(result):
            return Traffic(tuple(results), tuple(done), STALLED, measures=tuple(measures))
        if failed_share(results) > limits.max_failed_share:
            break  # the trial cannot count any more: measuring on would cost time only
        if race is not None and adaptive:
            measured = [(c, m.interval) for c, m in zip(done, measures, strict=True)]
            pruned = race.prune_reason(measured, workload.conditions[len(done) :])
            if pruned is not None:
                return Traffic(tuple(results), tuple(done), measures=tuple(measures), pruned=pruned)
    traffic = Traffic(tuple(results), tuple(done), measures=tuple(measures))
    if not stopped_below or failed_share(results) > limits.max_failed_share:
        return traffic
    return _topped_up(traffic, stopped_below, limits)


def _topped_up(traffic: Traffic, stopped_below: dict[int, _PairRounds], limits: Limits) -> Traffic:
    """``traffic`` with each pair in ``stopped_below`` measured on to the p95 floor. It is not
    judged again: measured in full, a trial that loses the mix completes with its numbers,
    which tell the sampler more than a PRUNED state."""
    results, measures = list(traffic.results), list(traffic.measures)
    for index, rounds in stopped_below.items():
        try:
            result = rounds.until(rounds.plan.floor)
        except (MeasurementError, StartupFailure) as exc:
            _raise_if_fault(exc, results)
            broken = f"at {rounds.condition.label}, topping up: {exc}"
            return replace(
                traffic,
                results=tuple(results),
                measures=tuple(measures),
                broken=broken,
                unrecorded=rounds.plan.size,
            )
        results[index] = result
        measures[index] = rounds.measure(result, TOPPED_UP)
        if _stalled(result):
            return replace(
                traffic, results=tuple(results), measures=tuple(measures), broken=STALLED
            )
        if failed_share(results) > limits.max_failed_share:
            break
    return replace(traffic, results=tuple(results), measures=tuple(measures))


def _stalled(result: TrialResult) -> bool:
    """Whether a request of ``result`` timed out without a token: the server stopped answering."""
    return any(STALLED in (q.error or "") for q in result.requests)


def _raise_if_fault(exc: MeasurementError | StartupFailure, results: list[TrialResult]) -> None:
    """Re-raises ``exc`` when it is the trial's fault rather than this config breaking the
    server under load: nothing was served yet, or the server ran out of memory."""
    if not results or (isinstance(exc, StartupFailure) and exc.kind is FailureKind.OOM):
        raise exc


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


@dataclass
class _PairRounds:
    """One pair measured a round at a time on the running server.

    Each round after the first has its own seed (other prompts; a round's seed never meets
    another pair's), and each sends the workload's warm-up first.
    """

    backend: Backend
    config: TrialConfig
    condition: Condition
    pair_seed: int
    count: int
    rounds: list[TrialResult] = field(default_factory=list)

    @property
    def plan(self) -> Rounds:
        return Rounds.of(self.config.client.workload.requests, self.condition.concurrency)

    def until_clear(
        self, limits: Limits, incumbent: PairInterval | None
    ) -> tuple[TrialResult, PairMeasure]:
        """Rounds until :func:`stop_reason` says the pair's rank is clear."""
        while True:
            result = self._round(self.plan.ceiling)
            lost = _stalled(result)
            if lost or failed_share([result]) > limits.max_failed_share:
                reason: str | None = "failed requests"
            else:
                reason = stop_reason(self.plan, result, incumbent, limits.ttft_ms)
            if reason is not None:
                return result, self.measure(result, reason)

    def until(self, requests: int) -> TrialResult:
        """Rounds until the pair has ``requests`` measured (none when it has)."""
        result = merged(self.rounds)
        while len(result.requests) < requests:
            result = self._round(requests)
        return result

    def measure(self, result: TrialResult, stopped: str) -> PairMeasure:
        return PairMeasure(len(result.requests), len(self.rounds), tok_s_interval(result), stopped)

    def _round(self, upto: int) -> TrialResult:
        """One more round, never past ``upto`` requests in all; every round so far, merged."""
        sent = sum(len(r.requests) for r in self.rounds)
        size = min(self.plan.size, upto - sent)
        seed = self.pair_seed + len(self.rounds) * self.count
        pair = _pair_config(
            self.config, self.condition, seed, size, self.config.client.workload.warmup
        )
        self.rounds.append(self.backend.measure(pair, self.condition.concurrency, seed))
        return merged(self.rounds)


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
