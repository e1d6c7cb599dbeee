"""A study's trials as flat points: what charts, tables and the per-level analysis read.

Each completed trial becomes one :class:`Point` with its outcome (feasible, over the TTFT limit,
failed requests, or out of memory), the tuned settings and the measured numbers, read from its
:class:`~tuner.trial.record.TrialRecord`. OOM trials carry no throughput or TTFT: the
pessimistic values they report to Optuna are for the sampler, not for people.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.analysis.picks import pareto_front
from tuner.results import Source
from tuner.trial.record import TrialRecord, records
from tuner.trial.scoring import TrialStatus

__all__ = ["Outcome", "Point", "acceptance_by_temperature", "level_tok_s", "point", "points"]


class Outcome(enum.StrEnum):
    """How a completed trial ended, as charts mark it."""

    FEASIBLE = "feasible"
    OVER_TTFT = "over TTFT limit"
    OVER_STREAM = "over stream-gap limit"  # its stream paused longer than the space allows
    OVER_TPOT = "over TPOT limit"  # its tokens came slower than the space allows
    LOST_REQUESTS = "failed requests"  # the server failed requests: no numbers that count
    OOM = "OOM"


@dataclass(frozen=True)
class Point:
    """One completed trial, flattened."""

    number: int
    outcome: Outcome
    draft: str  # a SpecMethod name (none, ngram) or the draft model id
    k: int  # speculative tokens; 0 without speculation
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    temperature: float
    source: Source
    throughput: float | None  # tok/s, or goodput req/s; None: out of memory, lost requests
    p95_ttft_ms: float | None
    acceptance_rate: float | None
    levels: tuple[tuple[int, float], ...]  # (concurrency, output tok/s) per measured level
    oom_predicted: bool = False
    on_front: bool = False  # on the study's feasible Pareto front
    duplicate_of: int | None = None  # "same as #N": a repeat of trial N's result
    # (temperature, draft acceptance) per temperature measured, its levels weighted by share:
    # a trial measured on a temperature mix has one point per temperature, not one at the mean.
    acceptance_by_temperature: tuple[tuple[float, float], ...] = ()
    joules_per_token: float | None = None  # GPU energy per output token; None: not read

    @property
    def speculative(self) -> bool:
        """Whether the trial speculated (a draft or ngram, K > 0)."""
        return self.k > 0

    @property
    def draft_label(self) -> str:
        """The draft's short name (``Qwen2.5-0.5B-Instruct``), ``ngram`` or ``none``."""
        return self.draft.rstrip("/").rsplit("/", 1)[-1]


def _outcome(record: TrialRecord) -> Outcome:
    if record.oom:
        return Outcome.OOM
    if record.lost_requests:
        return Outcome.LOST_REQUESTS
    if record.over_ttft:
        return Outcome.OVER_TTFT
    if record.over_tpot:
        return Outcome.OVER_TPOT
    if record.over_stream:
        return Outcome.OVER_STREAM
    return Outcome.FEASIBLE


def point(record: TrialRecord, front: Collection[int] = ()) -> Point | None:
    """The record as a point; None unless its trial completed.

    Args:
        record: the trial's record.
        front: the trial numbers on the study's Pareto front.
    """
    if record.state is not TrialState.COMPLETE:
        return None
    server = record.server
    return Point(
        number=record.number,
        outcome=_outcome(record),
        draft=record.draft,
        k=server.k,
        gpu_memory_utilization=server.gpu_memory_utilization,
        max_num_batched_tokens=server.max_num_batched_tokens,
        temperature=record.trial_temperature,
        source=record.source,
        throughput=record.throughput,
        p95_ttft_ms=record.p95_ttft_ms,
        acceptance_rate=record.acceptance_rate,
        levels=level_tok_s(record.levels, record.steps),
        oom_predicted=record.status is TrialStatus.OOM_PREDICTED,
        on_front=record.number in front,
        duplicate_of=record.duplicate_of,
        acceptance_by_temperature=acceptance_by_temperature(record),
        joules_per_token=record.joules_per_token,
    )


def level_tok_s(
    levels: Sequence[Mapping[str, Any]], steps: Sequence[tuple[float, bool]] = ()
) -> tuple[tuple[int, float], ...]:
    """(concurrency, output tok/s) per measured level, its temperatures weighted by their
    share, levels first measured first; none for a goodput run (its ``steps`` are rates).

    ``levels`` are measured pairs as :func:`tuner.bench.summary.level_summary` writes them: a
    trial record's, or a confirmation run's before it is stored.
    """
    if steps:
        return ()
    sums: dict[int, list[float]] = {}
    for level in levels:
        if level.get("output_tok_s") is None:
            continue
        weight = float(level.get("weight") or 1.0)  # within a level: the temperature share
        total = sums.setdefault(int(level["concurrency"]), [0.0, 0.0])
        total[0] += weight * float(level["output_tok_s"])
        total[1] += weight
    return tuple((c, tok_s / weight) for c, (tok_s, weight) in sums.items())


def acceptance_by_temperature(record: TrialRecord) -> tuple[tuple[float, float], ...]:
    """(temperature, acceptance) for each temperature ``record`` measured with speculation,
    the levels at that temperature weighted by their share, lowest temperature first."""
    sums: dict[float, list[float]] = {}
    for level in record.levels:
        rate, temperature = level.get("acceptance_rate"), level.get("temperature")
        if rate is None or temperature is None:
            continue
        weight = float(level.get("weight") or 1.0)
        total = sums.setdefault(float(temperature), [0.0, 0.0])
        total[0] += weight * float(rate)
        total[1] += weight
    return tuple((t, rate / weight) for t, (rate, weight) in sorted(sums.items()))


def points(study: optuna.Study) -> list[Point]:
    """Every completed trial with a recorded config, by trial number."""
    done = records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    front = {r.number for r in pareto_front(study)}
    found = (point(r, front) for r in done)
    return sorted((p for p in found if p is not None), key=lambda p: p.number)
