"""A study's trials as flat points: what charts, tables and the per-level analysis read.

Each completed trial becomes one :class:`Point` with its outcome (feasible, over the TTFT limit,
or out of memory), the tuned settings and the measured numbers. OOM trials carry no throughput
or TTFT: the pessimistic values they report to Optuna are for the sampler, not for people.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config.trial import server_from_dict
from tuner.trial.scoring import TrialStatus

__all__ = ["Outcome", "Point", "point", "points"]


class Outcome(enum.StrEnum):
    """How a completed trial ended, as charts mark it."""

    FEASIBLE = "feasible"
    OVER_TTFT = "over TTFT limit"
    OOM = "OOM"


@dataclass(frozen=True)
class Point:
    """One completed trial, flattened."""

    number: int
    outcome: Outcome
    draft: str  # "none", "ngram" or the draft model id
    k: int  # speculative tokens; 0 without speculation
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    temperature: float
    source: str
    output_tok_s: float | None  # None when the trial ran out of memory
    p95_ttft_ms: float | None
    acceptance_rate: float | None
    levels: tuple[tuple[int, float], ...]  # (concurrency, output tok/s) per measured level
    oom_predicted: bool = False

    @property
    def speculative(self) -> bool:
        """Whether the trial speculated (a draft or ngram, K > 0)."""
        return self.k > 0

    @property
    def draft_label(self) -> str:
        """The draft's short name (``Qwen2.5-0.5B-Instruct``), ``ngram`` or ``none``."""
        return self.draft.rstrip("/").rsplit("/", 1)[-1]


def _outcome(trial: FrozenTrial) -> Outcome:
    status = str(trial.user_attrs.get("status", TrialStatus.OK.value))
    constraints = trial.constraints
    if status in (TrialStatus.OOM, TrialStatus.OOM_PREDICTED) or constraints.get("oom", -1) > 0:
        return Outcome.OOM
    if constraints.get("ttft_slo", -1) > 0 or status == TrialStatus.OVER_TTFT:
        return Outcome.OVER_TTFT
    return Outcome.FEASIBLE


def point(trial: FrozenTrial) -> Point | None:
    """The trial as a point; None unless it completed with a recorded config."""
    if trial.state is not TrialState.COMPLETE or "server" not in trial.user_attrs:
        return None
    attrs = trial.user_attrs
    server = server_from_dict(attrs["server"])
    outcome = _outcome(trial)
    values = trial.values or [0.0, 0.0]
    measured = outcome is not Outcome.OOM
    summary = attrs.get("summary") or {}
    accept = summary.get("acceptance_rate")
    return Point(
        number=trial.number,
        outcome=outcome,
        draft=server.draft or "none",
        k=server.k,
        gpu_memory_utilization=server.gpu_memory_utilization,
        max_num_batched_tokens=server.max_num_batched_tokens,
        temperature=float(attrs.get("temperature", 0.0)),
        source=str(attrs.get("source", "measured")),
        output_tok_s=float(values[0]) if measured else None,
        p95_ttft_ms=float(values[1]) if measured else None,
        acceptance_rate=None if accept is None else float(accept),
        levels=tuple(
            (int(level["concurrency"]), float(level["output_tok_s"]))
            for level in attrs.get("levels") or ()
            if level.get("output_tok_s") is not None
        ),
        oom_predicted=attrs.get("status") == TrialStatus.OOM_PREDICTED.value,
    )


def points(study: optuna.Study) -> list[Point]:
    """Every completed trial with a recorded config, by trial number."""
    found = (point(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    return sorted((p for p in found if p is not None), key=lambda p: p.number)
