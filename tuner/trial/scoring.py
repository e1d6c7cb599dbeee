"""Turns a trial's measurements into Optuna objectives and constraints.

A trial is measured at every (concurrency, temperature) pair of its workload's traffic
(:attr:`~tuner.config.workload.WorkloadSpec.conditions`). Two objectives: the traffic-weighted
output tokens/s (maximize) and the worst p95 TTFT over the pairs in ms (minimize). Three
constraints, set on every trial in this order (:data:`CONSTRAINT_KEYS`, alphabetical: the order
in which Optuna's database storages read them back, so every storage shows one order):

- ``errors``: the share of failed requests minus the share allowed (``slo.max_failed_requests``);
- ``oom``: 1 when the config ran, or was predicted to run, out of memory; -1 otherwise;
- ``ttft_slo``: the worst p95 TTFT minus the limit, so the limit holds at every level.

A space that limits the stream's smoothness (``slo.stream_gap_p99_ms``) adds a fourth,
``stream`` (:data:`STREAM_KEY`, between ``oom`` and ``ttft_slo`` in that order): the worst p99
gap between streamed chunks minus the limit. Speculation delivers tokens in bursts, and a user
who serves a reader may cap the pause they see.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna

from tuner.results import TrialResult

__all__ = [
    "CONSTRAINT_KEYS",
    "DIRECTIONS",
    "LEGACY_CONSTRAINT_KEYS",
    "OBJECTIVE_NAMES",
    "STREAM_KEY",
    "Score",
    "TrialStatus",
    "failed_share",
    "level_tok_s",
    "pessimistic_ttft_ms",
    "score",
    "stored_constraints",
]

OBJECTIVE_NAMES = ("output_tok_s", "p95_ttft_ms")
DIRECTIONS = (optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE)
CONSTRAINT_KEYS = ("errors", "oom", "ttft_slo")
LEGACY_CONSTRAINT_KEYS = ("oom", "ttft_slo")
"""The keys of studies created before the ``errors`` constraint."""
STREAM_KEY = "stream"


class TrialStatus(enum.StrEnum):
    """How a trial (or a confirmation run) ended; the values are what studies store."""

    OK = "ok"
    OOM_PREDICTED = "OOM predicted"
    OOM = "OOM"
    OVER_TTFT = "over TTFT limit"
    OVER_STREAM = "over stream-gap limit"  # its stream paused longer than the space allows
    FAILED_REQUESTS = "failed requests"  # the server failed requests under this config's load
    FAILED = "failed"  # an infrastructure fault: a crash, a hang, nothing measured (FAIL)

    @property
    def oom(self) -> bool:
        """Out of memory, observed at start-up or predicted before it."""
        return self in (TrialStatus.OOM, TrialStatus.OOM_PREDICTED)

    @property
    def measured(self) -> bool:
        """The server ran and the benchmark produced numbers that count."""
        return self in (TrialStatus.OK, TrialStatus.OVER_TTFT, TrialStatus.OVER_STREAM)


@dataclass(frozen=True)
class Score:
    """A trial's objectives, constraints (in :data:`CONSTRAINT_KEYS` order) and status.

    Attributes:
        failed_share: failed over sent requests, all pairs together (0 when nothing ran).
        reason: why the trial is not scored on its numbers (failed requests); None otherwise.
        stream: the worst p99 chunk gap minus the space's limit (ms); None without a limit.
    """

    values: tuple[float, float]
    constraints: tuple[float, float, float]
    status: TrialStatus
    failed_share: float = 0.0
    reason: str | None = None
    stream: float | None = None

    @property
    def feasible(self) -> bool:
        return all(c <= 0 for c in self.constraints) and (self.stream is None or self.stream <= 0)

    def keyed(self) -> dict[str, float]:
        """The constraints by key, ``stream`` among them where the space sets a limit."""
        keyed = dict(zip(CONSTRAINT_KEYS, self.constraints, strict=True))
        if self.stream is not None:
            keyed[STREAM_KEY] = self.stream
        return dict(sorted(keyed.items()))


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
    ttft_limit_ms: float,
    *,
    weights: Sequence[float] | None = None,
    max_failed_share: float = 0.0,
    oom: TrialStatus | None = None,
    broken: str | None = None,
    unrecorded: int = 0,
    stream_gap_limit_ms: float | None = None,
) -> Score:
    """Scores a measured or simulated trial, or an OOM (``results`` None, ``oom`` set).

    Args:
        results: one result per measured (level, temperature) pair.
        ttft_limit_ms: the p95 TTFT limit, checked at every pair.
        weights: each pair's share of the traffic (default: equal shares).
        max_failed_share: the share of requests that may fail.
        oom: the OOM status when nothing ran.
        broken: why measuring stopped early (the server stopped answering); the trial then
            counts as failing requests whatever the share.
        unrecorded: requests of a pair that left no result (the server died in it), failed.
        stream_gap_limit_ms: the p99 gap between streamed chunks allowed at every pair.
    """
    penalty = pessimistic_ttft_ms(ttft_limit_ms)
    unmeasured = None if stream_gap_limit_ms is None else -1.0  # other constraints say why
    if results is None or oom is not None:
        return Score(
            (0.0, penalty),
            (-1.0, 1.0, penalty - ttft_limit_ms),
            oom or TrialStatus.OOM,
            stream=unmeasured,
        )
    measured = [results] if isinstance(results, TrialResult) else list(results)
    share = failed_share(measured, unrecorded)
    if broken is not None or share > max_failed_share or not measured:
        failed = sum(r.errors for r in measured) + unrecorded
        sent = sum(len(r.requests) for r in measured) + unrecorded
        first = next((q.error for r in measured for q in r.requests if q.error), None)
        reason = (
            f"{failed} of {sent} requests failed ({share:.0%}, {max_failed_share:.0%} allowed)"
            + (f"; first: {first}" if first else "")
            + (f"; then {broken}" if broken else "")
        )
        violation = max(share - max_failed_share, 1.0 / max(sent, 1))
        return Score(
            (0.0, penalty),
            (violation, -1.0, penalty - ttft_limit_ms),
            TrialStatus.FAILED_REQUESTS,
            share,
            reason,
            stream=unmeasured,
        )
    shares = list(weights) if weights is not None else [1.0] * len(measured)
    if len(shares) != len(measured):
        raise ValueError(f"{len(shares)} weights for {len(measured)} results")
    total = sum(shares)
    tok_s = sum(w * r.output_tok_s for w, r in zip(shares, measured, strict=True)) / total
    p95s = [r.ttft_ms(95) for r in measured]
    ttft = penalty if any(p is None for p in p95s) else max(p for p in p95s if p is not None)
    over = ttft - ttft_limit_ms
    stream = None
    if stream_gap_limit_ms is not None:
        gaps = [g for g in (r.itl_ms(99) for r in measured) if g is not None]
        stream = max(gaps, default=0.0) - stream_gap_limit_ms
    status = TrialStatus.OK
    if over > 0:
        status = TrialStatus.OVER_TTFT
    elif stream is not None and stream > 0:
        status = TrialStatus.OVER_STREAM
    return Score((tok_s, ttft), (share - max_failed_share, -1.0, over), status, share, None, stream)


def level_tok_s(
    results: Sequence[TrialResult], weights: Sequence[float]
) -> tuple[tuple[int, float], ...]:
    """(concurrency, output tok/s) per level, its temperatures weighted by their shares."""
    sums: dict[int, list[float]] = {}
    for result, weight in zip(results, weights, strict=True):
        total = sums.setdefault(result.concurrency, [0.0, 0.0])
        total[0] += weight * result.output_tok_s
        total[1] += weight
    return tuple((level, tok_s / weight) for level, (tok_s, weight) in sums.items() if weight)


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
