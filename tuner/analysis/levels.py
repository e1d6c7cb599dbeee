"""Speculation per load level: the best K at each measured concurrency, and vLLM's K table.

Speculation pays at low concurrency and loses once the GPUs are busy (BRIEF.md): at dozens of
parallel requests the target's forward pass is compute-bound and verifying K extra tokens per
sequence costs more than it saves. When a workload measures several concurrency levels, every
trial records its throughput at each, so the study can say which K wins where.

For one draft (the exported config's), :func:`speculation_by_level` takes, at each level, the
best measured throughput per K among that draft's trials, and the best without speculation
(K = 0, from trials without a draft). Speculation is switched off at a level where no K beats
running without it. The throughput compared at each level is the best any trial reached there,
whatever its other settings: the study varied those too.

vLLM 0.24 added ``num_speculative_tokens_per_batch_size`` to the speculative config: a list of
inclusive ``[first_batch_size, last_batch_size, K]`` ranges starting at 1, with K = 0 meaning no
speculation; every K is capped at ``num_speculative_tokens``, and batch sizes past the last
range keep its K (checked in vLLM's ``config/speculative.py`` and
``v1/spec_decode/dynamic/utils.py``, PR #32374). :func:`batch_size_table` turns the per-level
choice into those ranges, splitting between two measured levels at their geometric mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.analysis.trials import Outcome, Point

__all__ = [
    "LevelChoice",
    "batch_size_table",
    "best_by_draft",
    "measured_levels",
    "speculation_by_level",
    "speculation_stops",
]


@dataclass(frozen=True)
class LevelChoice:
    """The K to use at one concurrency level, and the evidence for it."""

    concurrency: int
    k: int  # 0: speculation off at this level
    output_tok_s: float  # the best throughput measured with that K here
    trial: int  # the trial that measured it
    by_k: tuple[tuple[int, float], ...]  # best tok/s per K here (0 = without speculation)

    @property
    def baseline_tok_s(self) -> float | None:
        """The best throughput without speculation at this level, if any trial measured it."""
        return dict(self.by_k).get(0)


def _usable(points: Sequence[Point]) -> list[Point]:
    # Over-limit trials count: their throughput at each level is real. Out-of-memory trials
    # measured nothing; a trial that lost requests is not judged on the ones that survived.
    over = (Outcome.FEASIBLE, Outcome.OVER_TTFT, Outcome.OVER_TPOT, Outcome.OVER_STREAM)
    return [p for p in points if p.outcome in over and p.levels]


def measured_levels(points: Sequence[Point]) -> list[int]:
    """The concurrency levels the study measured, ascending."""
    return sorted({c for p in _usable(points) for c, _ in p.levels})


def _best_per_k(points: Sequence[Point], concurrency: int) -> dict[int, tuple[float, int]]:
    best: dict[int, tuple[float, int]] = {}
    for p in points:
        for c, tok_s in p.levels:
            if c == concurrency and (p.k not in best or tok_s > best[p.k][0]):
                best[p.k] = (tok_s, p.number)
    return best


def speculation_by_level(points: Sequence[Point], draft: str) -> list[LevelChoice]:
    """The best K for ``draft`` at each measured level (see the module docstring).

    Args:
        points: the study's trials.
        draft: the draft model id or ``"ngram"``; ``"none"`` gives K = 0 everywhere.
    """
    usable = _usable(points)
    relevant = [p for p in usable if p.draft == draft or not p.speculative]
    choices = []
    for concurrency in measured_levels(usable):
        best = _best_per_k(relevant, concurrency)
        if not best:
            continue
        k, (tok_s, trial) = max(best.items(), key=lambda item: (item[1][0], -item[0]))
        choices.append(
            LevelChoice(
                concurrency, k, tok_s, trial, tuple(sorted((kk, v[0]) for kk, v in best.items()))
            )
        )
    return choices


def speculation_stops(choices: Sequence[LevelChoice]) -> int | None:
    """The lowest measured level from which on no K beats running without speculation;
    None when speculation pays at the highest level (or nothing was measured)."""
    stops = None
    for choice in reversed(choices):  # ascending levels: walk down while it stays off
        if choice.k != 0:
            break
        stops = choice.concurrency
    return stops


def best_by_draft(points: Sequence[Point]) -> dict[int, dict[str, tuple[int, float, int]]]:
    """Per level, per draft: (best K, its tok/s, trial). Drafts include ``none``."""
    usable = _usable(points)
    table: dict[int, dict[str, tuple[int, float, int]]] = {}
    for concurrency in measured_levels(usable):
        row: dict[str, tuple[int, float, int]] = {}
        for p in usable:
            for c, tok_s in p.levels:
                if c == concurrency and (p.draft not in row or tok_s > row[p.draft][1]):
                    row[p.draft] = (p.k, tok_s, p.number)
        table[concurrency] = row
    return table


def _split(low_level: int, high_level: int) -> int:
    """The last batch size that belongs to ``low_level``'s range."""
    middle = math.floor(math.sqrt(low_level * high_level))
    return max(low_level, min(high_level - 1, middle))


def batch_size_table(choices: Sequence[LevelChoice]) -> list[tuple[int, int, int]]:
    """vLLM's ``num_speculative_tokens_per_batch_size`` ranges for ``choices``.

    Args:
        choices: one per level, ascending concurrency.

    Returns:
        ``(first, last, K)`` ranges from batch size 1 up to the highest level, neighbours with
        equal K merged; empty without choices.
    """
    ranges: list[tuple[int, int, int]] = []
    start = 1
    for index, choice in enumerate(choices):
        last = (
            _split(choice.concurrency, choices[index + 1].concurrency)
            if index + 1 < len(choices)
            else max(choice.concurrency, start)
        )
        if ranges and ranges[-1][2] == choice.k:
            ranges[-1] = (ranges[-1][0], last, choice.k)
        else:
            ranges.append((start, last, choice.k))
        start = last + 1
    return ranges
