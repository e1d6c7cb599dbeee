"""Turns a trial's outcome into Optuna objectives and constraints.

Two objectives: output tokens/s (maximize) and p95 TTFT in ms (minimize), both from the first
concurrency level. Two constraints, set on every trial in this order: ``oom`` (1 when the config
ran, or was predicted to run, out of memory; -1 otherwise) and ``ttft_slo`` (p95 TTFT minus the
limit; feasible when <= 0). An OOM trial is COMPLETE with pessimistic but finite values, so the
sampler learns where the memory boundary is instead of proposing the same config again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import optuna

from tuner.results import TrialResult

__all__ = [
    "CONSTRAINT_KEYS",
    "DIRECTIONS",
    "OBJECTIVE_NAMES",
    "Score",
    "TrialStatus",
    "pessimistic_ttft_ms",
    "score",
]

OBJECTIVE_NAMES = ("output_tok_s", "p95_ttft_ms")
DIRECTIONS = (optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE)
CONSTRAINT_KEYS = ("oom", "ttft_slo")


class TrialStatus(enum.StrEnum):
    """How a trial (or a confirmation run) ended; the values are what studies store."""

    OK = "ok"
    OOM_PREDICTED = "OOM predicted"
    OOM = "OOM"
    OVER_TTFT = "over TTFT limit"
    FAILED = "failed"  # an infrastructure fault: a crash, a hang, nothing measured (FAIL)

    @property
    def oom(self) -> bool:
        """Out of memory, observed at start-up or predicted before it."""
        return self in (TrialStatus.OOM, TrialStatus.OOM_PREDICTED)

    @property
    def measured(self) -> bool:
        """The server ran and the benchmark produced numbers."""
        return self in (TrialStatus.OK, TrialStatus.OVER_TTFT)


@dataclass(frozen=True)
class Score:
    values: tuple[float, float]
    constraints: tuple[float, float]  # in CONSTRAINT_KEYS order
    status: TrialStatus

    @property
    def feasible(self) -> bool:
        return all(c <= 0 for c in self.constraints)


def pessimistic_ttft_ms(ttft_limit_ms: float) -> float:
    """What an OOM trial reports as TTFT: finite, and worse than anything feasible."""
    return 10.0 * ttft_limit_ms


def score(
    result: TrialResult | None, ttft_limit_ms: float, *, oom: TrialStatus | None = None
) -> Score:
    """Scores a measured or simulated run, or an OOM (``result`` None, ``oom`` set)."""
    if result is None or oom is not None:
        penalty = pessimistic_ttft_ms(ttft_limit_ms)
        return Score((0.0, penalty), (1.0, penalty - ttft_limit_ms), oom or TrialStatus.OOM)
    p95 = result.ttft_ms(95)
    ttft = pessimistic_ttft_ms(ttft_limit_ms) if p95 is None else p95
    over = ttft - ttft_limit_ms
    status = TrialStatus.OVER_TTFT if over > 0 else TrialStatus.OK
    return Score((result.output_tok_s, ttft), (-1.0, over), status)
