"""Turns a trial's measurements into Optuna objectives and constraints.

A trial is measured at every (concurrency, temperature) pair of its workload's traffic
(:attr:`~tuner.config.workload.WorkloadSpec.conditions`). Two objectives: the traffic-weighted
output tokens/s (maximize) and the worst p95 TTFT over the pairs in ms (minimize). Three
constraints, set on every trial in this order (:data:`CONSTRAINT_KEYS`, alphabetical: the order
in which Optuna's database storages read them back, so every storage shows one order):

- ``errors``: the share of failed requests minus the share allowed (``slo.max_failed_requests``);
- ``oom``: 1 when the config ran, or was predicted to run, out of memory; -1 otherwise;
- ``ttft_slo``: the worst p95 TTFT minus the limit, so the limit holds at every level.

A space that limits the stream's smoothness (``slo.stream_gap_p99_ms``) adds ``stream``
(:data:`STREAM_KEY`): the worst p99 gap between streamed chunks minus the limit. Speculation
delivers tokens in bursts, and a user who serves a reader may cap the pause they see. A space
that limits the time per output token (``slo.tpot_ms``) adds ``tpot_slo`` (:data:`TPOT_KEY`):
the worst p95 TPOT minus the limit. Both sort among the others alphabetically.

A goodput study (``slo.objective: goodput``) climbs request-rate steps instead of weighing
levels (:mod:`tuner.trial.traffic`); :func:`score_goodput` makes its first objective the
highest rate whose every measurement met the limits (:func:`meets`), in requests/s, and takes
the TTFT and the limits' constraints at that step (at the lowest step when none passed, which
makes the trial infeasible).

An OOM trial, and a trial whose server failed more requests than allowed (a config that breaks
the server under load), is COMPLETE with pessimistic but finite values, so the sampler learns
where the boundary is instead of proposing the same config again. Such a trial is never scored
on the requests that survived: failed requests end early and would inflate the throughput.

Studies created before ``errors`` existed keep their two keys (Optuna's samplers want the same
keys on every trial): for them :func:`stored_constraints` folds ``errors`` into ``ttft_slo``, as
a failed request never delivered its first token within the limit.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from tuner.config.schema import Objective
from tuner.results import TrialResult

if TYPE_CHECKING:  # annotations only: the CLI's tables import this module at start
    from tuner.config.space import SearchSpace
    from tuner.config.workload import Condition

__all__ = [
    "CONSTRAINT_KEYS",
    "DIRECTIONS",
    "LEGACY_CONSTRAINT_KEYS",
    "OBJECTIVE_NAMES",
    "QUALITY_KEY",
    "STREAM_KEY",
    "TPOT_KEY",
    "Limits",
    "Score",
    "TrialStatus",
    "failed_share",
    "meets",
    "pessimistic_ttft_ms",
    "score",
    "score_goodput",
    "stored_constraints",
    "with_quality",
]

OBJECTIVE_NAMES = (Objective.THROUGHPUT.metric, "p95_ttft_ms")
"""A throughput study's objective names; a goodput study's first is ``goodput_req_s``
(:attr:`Limits.names`)."""
DIRECTIONS: tuple[Literal["maximize"], Literal["minimize"]] = ("maximize", "minimize")
"""The objectives' directions as ``optuna.create_study`` takes them (names, so that importing
this module does not import Optuna)."""
CONSTRAINT_KEYS = ("errors", "oom", "ttft_slo")
LEGACY_CONSTRAINT_KEYS = ("oom", "ttft_slo")
"""The keys of studies created before the ``errors`` constraint."""
STREAM_KEY = "stream"
TPOT_KEY = "tpot_slo"
QUALITY_KEY = "quality"


class TrialStatus(enum.StrEnum):
    """How a trial (or a confirmation run) ended; the values are what studies store."""

    OK = "ok"
    OOM_PREDICTED = "OOM predicted"
    OOM = "OOM"
    OVER_TTFT = "over TTFT limit"
    OVER_STREAM = "over stream-gap limit"  # its stream paused longer than the space allows
    OVER_TPOT = "over TPOT limit"  # its tokens came slower than the space allows
    # A lossy verifier's answers kept less of standard verification's than the space allows.
    BELOW_QUALITY = "below quality limit"
    FAILED_REQUESTS = "failed requests"  # the server failed requests under this config's load
    FAILED = "failed"  # an infrastructure fault: a crash, a hang, nothing measured (FAIL)

    @property
    def oom(self) -> bool:
        """Out of memory, observed at start-up or predicted before it."""
        return self in (TrialStatus.OOM, TrialStatus.OOM_PREDICTED)

    @property
    def measured(self) -> bool:
        """The server ran and the benchmark produced numbers that count."""
        return self in (
            TrialStatus.OK,
            TrialStatus.OVER_TTFT,
            TrialStatus.OVER_STREAM,
            TrialStatus.OVER_TPOT,
            TrialStatus.BELOW_QUALITY,
        )


@dataclass(frozen=True)
class Limits:
    """What every measured pair (or goodput step) must meet: a space's ``slo`` section.

    Attributes:
        ttft_ms: p95 time to first token.
        max_failed_share: the share of requests that may fail.
        stream_gap_ms: p99 gap between streamed chunks; None: no limit.
        tpot_ms: p95 time per output token; None: no limit.
        objective: what the study maximises: throughput, or goodput (request-rate steps).
        min_similarity: the share of standard verification's words a lossy verifier's answers
            must keep (``quality.min_similarity``); None: the space offers no lossy verifier.
    """

    ttft_ms: float
    max_failed_share: float = 0.0
    stream_gap_ms: float | None = None
    tpot_ms: float | None = None
    objective: Objective = Objective.THROUGHPUT
    min_similarity: float | None = None

    @classmethod
    def of(cls, space: SearchSpace, ttft_ms: float | None = None) -> Limits:
        """``space``'s limits (``ttft_ms`` in place of its TTFT limit, where given)."""
        return cls(
            space.ttft_limit_ms if ttft_ms is None else ttft_ms,
            space.max_failed_requests,
            space.stream_gap_limit_ms,
            space.tpot_limit_ms,
            space.objective,
            None if space.quality is None else space.quality.min_similarity,
        )

    @property
    def goodput(self) -> bool:
        return self.objective is Objective.GOODPUT

    @property
    def names(self) -> tuple[str, str]:
        """The study's objective names (Optuna's metric names)."""
        return (self.objective.metric, OBJECTIVE_NAMES[1])


@dataclass(frozen=True)
class Score:
    """A trial's objectives, constraints (in :data:`CONSTRAINT_KEYS` order) and status.

    Attributes:
        failed_share: failed over sent requests, all pairs together (0 when nothing ran).
        reason: why the trial is not scored on its numbers (failed requests); None otherwise.
        stream: the worst p99 chunk gap minus the space's limit (ms); None without a limit.
        tpot: the worst p95 TPOT minus the space's limit (ms); None without a limit.
        steps: a goodput trial's (request rate, passed) per step measured, lowest rate first.
        quality: the space's least similarity minus this trial's (:func:`with_quality`); None
            where the space offers no lossy verifier.
    """

    values: tuple[float, float]
    constraints: tuple[float, float, float]
    status: TrialStatus
    failed_share: float = 0.0
    reason: str | None = None
    stream: float | None = None
    tpot: float | None = None
    steps: tuple[tuple[float, bool], ...] = ()
    quality: float | None = None

    @property
    def feasible(self) -> bool:
        return all(c <= 0 for c in self.keyed().values())

    def keyed(self) -> dict[str, float]:
        """The constraints by key, ``stream``, ``tpot_slo`` and ``quality`` among them where
        the space sets those limits."""
        keyed = dict(zip(CONSTRAINT_KEYS, self.constraints, strict=True))
        limits = ((STREAM_KEY, self.stream), (TPOT_KEY, self.tpot), (QUALITY_KEY, self.quality))
        for key, value in limits:
            if value is not None:
                keyed[key] = value
        return dict(sorted(keyed.items()))


def with_quality(score: Score, limits: Limits, similarity: float | None) -> Score:
    """``score`` with the quality constraint of a space that offers a lossy verifier: its
    least similarity minus ``similarity`` (None: the trial's answers are standard
    verification's own, or nothing was measured to check). A measured trial below the limit
    is BELOW_QUALITY."""
    if limits.min_similarity is None:
        return score
    over = limits.min_similarity - (1.0 if similarity is None else similarity)
    below = over > 0 and score.status is TrialStatus.OK
    return replace(score, quality=over, status=TrialStatus.BELOW_QUALITY if below else score.status)


def pessimistic_ttft_ms(ttft_limit_ms: float) -> float:
    """What an OOM trial reports as TTFT: finite, and worse than anything feasible."""
    return 10.0 * ttft_limit_ms


def failed_share(results: Sequence[TrialResult], unrecorded: int = 0) -> float:
    """Failed over sent requests across ``results`` plus ``unrecorded`` failed ones; 0 when
    none was sent."""
    sent = sum(len(r.requests) for r in results) + unrecorded
    return (sum(r.errors for r in results) + unrecorded) / sent if sent else 0.0


def score(
    results: TrialResult | Sequence[TrialResult] | None,
    limits: Limits,
    *,
    weights: Sequence[float] | None = None,
    oom: TrialStatus | None = None,
    broken: str | None = None,
    unrecorded: int = 0,
) -> Score:
    """Scores a measured or simulated trial, or an OOM (``results`` None, ``oom`` set).

    Args:
        results: one result per measured (level, temperature) pair.
        limits: the space's limits, checked at every pair.
        weights: each pair's share of the traffic (default: equal shares).
        oom: the OOM status when nothing ran.
        broken: why measuring stopped early (the server stopped answering); the trial then
            counts as failing requests whatever the share.
        unrecorded: requests of a pair that left no result (the server died in it), failed.
    """
    measured = [results] if isinstance(results, TrialResult) else results
    unscored = _unscored(measured, limits, oom, broken, unrecorded)
    if unscored is not None:
        return unscored
    assert measured is not None  # nothing measured is an OOM, scored above
    shares = list(weights) if weights is not None else [1.0] * len(measured)
    if len(shares) != len(measured):
        raise ValueError(f"{len(shares)} weights for {len(measured)} results")
    total = sum(shares)
    tok_s = sum(w * r.output_tok_s for w, r in zip(shares, measured, strict=True)) / total
    return _scored(tok_s, measured, limits, failed_share(measured))


def score_goodput(
    results: Sequence[TrialResult],
    conditions: Sequence[Condition],
    limits: Limits,
    *,
    oom: TrialStatus | None = None,
    broken: str | None = None,
    unrecorded: int = 0,
) -> Score:
    """Scores a goodput trial: the highest request rate whose every measurement met the limits.

    Args:
        results: one result per measured (rate, temperature) pair.
        conditions: the pair each result was measured at (``request_rate`` set).
        limits: the space's limits, a step's every pair held to them.
        oom, broken, unrecorded: as for :func:`score`.
    """
    unscored = _unscored(list(results), limits, oom, broken, unrecorded)
    if unscored is not None:
        return unscored
    steps: dict[float, list[TrialResult]] = {}
    for result, condition in zip(results, conditions, strict=True):
        assert condition.request_rate is not None, "a goodput step offers a request rate"
        steps.setdefault(condition.request_rate, []).append(result)
    verdicts = tuple((rate, meets(steps[rate], limits)) for rate in sorted(steps))
    passed = [rate for rate, ok in verdicts if ok]
    rate = max(passed, default=min(steps))  # none passed: the lowest step says which limit broke
    scored = _scored(max(passed, default=0.0), steps[rate], limits, failed_share(results))
    return replace(scored, steps=verdicts)


def meets(results: Sequence[TrialResult], limits: Limits) -> bool:
    """Whether every one of ``results`` met the limits (a goodput step passes)."""
    return bool(results) and _scored(0.0, results, limits, failed_share(results)).feasible


def _unscored(
    measured: Sequence[TrialResult] | None,
    limits: Limits,
    oom: TrialStatus | None,
    broken: str | None,
    unrecorded: int,
) -> Score | None:
    """The score of a trial that cannot be scored on its numbers: an OOM, or lost requests."""
    penalty = pessimistic_ttft_ms(limits.ttft_ms)
    stream, tpot = (
        None if limit is None else -1.0 for limit in (limits.stream_gap_ms, limits.tpot_ms)
    )
    if measured is None or oom is not None:
        return Score(
            (0.0, penalty),
            (-1.0, 1.0, penalty - limits.ttft_ms),
            oom or TrialStatus.OOM,
            stream=stream,
            tpot=tpot,
        )
    share = failed_share(measured, unrecorded)
    if broken is None and share <= limits.max_failed_share and measured:
        return None
    failed = sum(r.errors for r in measured) + unrecorded
    sent = sum(len(r.requests) for r in measured) + unrecorded
    first = next((q.error for r in measured for q in r.requests if q.error), None)
    reason = (
        f"{failed} of {sent} requests failed ({share:.0%}, {limits.max_failed_share:.0%} allowed)"
        + (f"; first: {first}" if first else "")
        + (f"; then {broken}" if broken else "")
    )
    violation = max(share - limits.max_failed_share, 1.0 / max(sent, 1))
    return Score(
        (0.0, penalty),
        (violation, -1.0, penalty - limits.ttft_ms),
        TrialStatus.FAILED_REQUESTS,
        share,
        reason,
        stream=stream,
        tpot=tpot,
    )


def _scored(value: float, measured: Sequence[TrialResult], limits: Limits, share: float) -> Score:
    """``value`` as the first objective, the worst p95 TTFT of ``measured`` as the second, and
    each limit's constraint at its worst over ``measured``."""
    penalty = pessimistic_ttft_ms(limits.ttft_ms)
    p95s = [r.ttft_ms(95) for r in measured]
    ttft = penalty if any(p is None for p in p95s) else max(p for p in p95s if p is not None)
    over = ttft - limits.ttft_ms
    stream = _worst_over(measured, limits.stream_gap_ms, lambda r: r.itl_ms(99))
    tpot = _worst_over(measured, limits.tpot_ms, lambda r: r.tpot_ms(95))
    status = TrialStatus.OK
    if over > 0:
        status = TrialStatus.OVER_TTFT
    elif tpot is not None and tpot > 0:
        status = TrialStatus.OVER_TPOT
    elif stream is not None and stream > 0:
        status = TrialStatus.OVER_STREAM
    return Score(
        (value, ttft),
        (share - limits.max_failed_share, -1.0, over),
        status,
        share,
        None,
        stream,
        tpot,
    )


def _worst_over(
    measured: Sequence[TrialResult],
    limit: float | None,
    value: Callable[[TrialResult], float | None],
) -> float | None:
    """The worst of ``value`` over ``measured`` minus ``limit``; None without a limit."""
    if limit is None:
        return None
    found = [v for v in map(value, measured) if v is not None]
    return max(found, default=0.0) - limit


def stored_constraints(constraints: Mapping[str, float], keys: Sequence[str]) -> dict[str, float]:
    """The constraints to set on a trial of a study whose trials carry ``keys``.

    Where ``errors`` is not among them (a study created before it), a violated ``errors``
    makes ``ttft_slo`` violated too, so the trial stays infeasible.
    """
    values = {key: float(constraints[key]) for key in keys if key in constraints}
    errors = float(constraints.get("errors", -1.0))
    if "errors" not in keys and errors > 0 and "ttft_slo" in values:
        values["ttft_slo"] = max(values["ttft_slo"], errors)
    return values
