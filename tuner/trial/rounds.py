"""Measures a (level, temperature) pair in rounds, until its estimate can rank the trial.

A fixed count spends as much on a pair that is clearly losing as on one whose rank is close.
Here a pair is measured a round at a time (:class:`Rounds`: half the workload's ``requests``,
at least two requests per slot so each round fills its level), and after each
round its output tok/s gets a :class:`PairInterval`. The pair stops (:func:`stop_reason`):

- at the **ceiling**, twice the workload's ``requests``, however close the decision;
- once its interval lies wholly **below the incumbent's** pair (the best feasible trial so far,
  the pair at the same position of the mix), after the **early floor**, half the requests (a
  trial that still wins the mix tops such a pair up to the p95 floor later:
  :mod:`tuner.trial.traffic`);
- once its p95 TTFT's order-statistic lower bound (:func:`tuner.bench.percentiles.
  quantile_interval`) is over the limit: the trial is infeasible, whatever its speed;
- otherwise not before the **p95 floor**, the workload's ``requests``: a pair that may win is
  measured at least as much as a fixed count does, so a recommended config's p95 rests on as
  many requests as before; then once its interval lies wholly above the incumbent's, or its
  half-width is within :data:`WIDTH_SHARE` of its estimate, or when there is no incumbent to
  rank against (the study's first feasible trial).

The interval is a ratio estimate (tokens over request time, request by request, with a
Student t quantile), scaled onto the measured tok/s: requests are treated as independent
draws, which a closed loop of a warm server makes them close to. With fewer than
:data:`MIN_REQUESTS_FOR_INTERVAL` requests it is unbounded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_serializer, model_validator, with_config

from tuner.bench.percentiles import quantile_interval
from tuner.catalog.gpu_state import combined
from tuner.results import SpecDecodeStats, TrialResult

__all__ = [
    "BELOW_INCUMBENT",
    "MIN_REQUESTS_FOR_INTERVAL",
    "TOPPED_UP",
    "WIDTH_SHARE",
    "PairInterval",
    "PairMeasure",
    "Rounds",
    "merged",
    "stop_reason",
    "tok_s_interval",
]

WIDTH_SHARE = 0.10
"""A pair whose interval's half-width is within this share of its estimate is tight enough."""
MIN_REQUESTS_FOR_INTERVAL = 3
BELOW_INCUMBENT = "below the incumbent"
"""Why a losing pair stopped at the early floor."""
TOPPED_UP = "below the incumbent, topped up to the p95 floor"
"""Why a pair that lost its own race was measured on: its trial may still win the mix."""
_Z = 1.959964  # the standard normal's 97.5 % point


@dataclass(frozen=True)
class PairInterval:
    """One pair's output tok/s, estimated from its own requests, with its 95 % bounds (``high``
    may be inf); stored as ``[low, mid, high]``, an unbounded ``high`` as null."""

    low: float
    mid: float
    high: float

    @property
    def half_share(self) -> float:
        """Half the width over the estimate (inf when unbounded or zero)."""
        if not math.isfinite(self.high) or self.mid <= 0:
            return math.inf
        return (self.high - self.low) / 2 / self.mid

    @model_serializer(mode="plain")
    def _stored(self) -> list[float | None]:
        return [self.low, self.mid, self.high if math.isfinite(self.high) else None]

    @model_validator(mode="before")
    @classmethod
    def _from_stored(cls, data: Any) -> Any:
        if not isinstance(data, list | tuple):
            return data
        low, mid, high = data
        return {"low": low or 0.0, "mid": mid or 0.0, "high": math.inf if high is None else high}


@dataclass(frozen=True)
class Rounds:
    """How one pair is measured: ``size`` requests a round, from ``early`` requests a losing
    pair may stop, from ``floor`` any pair, never past ``ceiling``."""

    size: int
    early: int
    floor: int
    ceiling: int

    @classmethod
    def of(cls, requests: int, concurrency: int) -> Rounds:
        """The rounds for a workload of ``requests`` per pair at ``concurrency`` in flight."""
        size = min(requests, max(math.ceil(requests / 2), 2 * concurrency))
        return cls(size, max(size, math.ceil(requests / 2)), requests, 2 * requests)


@with_config(ConfigDict(serialize_by_alias=True))
@dataclass(frozen=True)
class PairMeasure:
    """How much one pair was measured, as its trial record stores it (:func:`tuner.serde.dump`,
    beside the pair's summary).

    Attributes:
        requests: measured requests (warm-up left out), every round together; not stored here:
            the summary has them.
        rounds: the rounds it took.
        interval: its output tok/s with 95 % bounds, stored as ``tok_s_interval``.
        stopped: why measuring it stopped (``fixed count``: not measured in rounds).
    """

    requests: Annotated[int, Field(exclude=True)]
    rounds: int
    interval: Annotated[PairInterval, Field(serialization_alias="tok_s_interval")]
    stopped: str


def tok_s_interval(result: TrialResult) -> PairInterval:
    """``result``'s output tok/s with 95 % bounds from its requests' spread."""
    done = [r for r in result.succeeded if r.e2e_latency and r.completion_tokens]
    mid = result.output_tok_s
    n = len(done)
    if n < MIN_REQUESTS_FOR_INTERVAL or mid <= 0:
        return PairInterval(0.0, mid, math.inf)
    tokens = [float(r.completion_tokens or 0) for r in done]
    times = [float(r.e2e_latency or 0.0) for r in done]
    ratio = sum(tokens) / sum(times)
    spread = sum((y - ratio * x) ** 2 for y, x in zip(tokens, times, strict=True)) / (n - 1)
    mean_time = sum(times) / n
    share = _t_quantile(n - 1) * math.sqrt(spread / n) / mean_time / ratio
    return PairInterval(max(0.0, mid * (1 - share)), mid, mid * (1 + share))


def _t_quantile(df: int) -> float:
    """Student t's 97.5 % point (Cornish-Fisher expansion; within 2 % from 2 degrees up)."""
    z, v = _Z, float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
    )


def stop_reason(
    rounds: Rounds,
    result: TrialResult,
    incumbent: PairInterval | None,
    ttft_limit_ms: float,
) -> str | None:
    """Why measuring the pair (all rounds so far, merged in ``result``) may stop; None to go
    on. ``incumbent`` is the best feasible trial's interval at this pair (None: no such)."""
    n = len(result.requests)
    if n >= rounds.ceiling:
        return "ceiling"
    if n < rounds.early:
        return None
    interval = tok_s_interval(result)
    ttfts = [r.ttft * 1000.0 for r in result.succeeded if r.ttft is not None]
    low_p95, _ = quantile_interval(ttfts, 95)
    if low_p95 is not None and low_p95 > ttft_limit_ms:
        return "p95 TTFT over the limit"
    if incumbent is not None and interval.high < incumbent.low:
        return BELOW_INCUMBENT
    if n < rounds.floor:
        return None
    if incumbent is None:
        return "no incumbent"
    if interval.low > incumbent.high:
        return "above the incumbent"
    if interval.half_share <= WIDTH_SHARE:
        return "tight"
    return None


def merged(results: Sequence[TrialResult]) -> TrialResult:
    """One pair's rounds as one result: their requests, their durations added (the rounds ran
    one after another on the same server), their counters summed, their peaks the highest,
    their GPU windows combined."""
    first = results[0]
    if len(results) == 1:
        return first
    stats = [r.spec_decode for r in results if r.spec_decode is not None]
    usage = [r.kv_cache_usage for r in results if r.kv_cache_usage is not None]
    preempted = [r.preemptions for r in results if r.preemptions is not None]
    peaks = [r.peak_memory_gib for r in results if r.peak_memory_gib]
    notes = tuple(dict.fromkeys(note for r in results for note in r.notes))
    windows = [r.gpu for r in results if r.gpu is not None]
    return TrialResult(
        source=first.source,
        concurrency=first.concurrency,
        duration_s=sum(r.duration_s for r in results),
        requests=tuple(q for r in results for q in r.requests),
        spec_decode=_summed(stats) if stats else None,
        kv_cache_usage=max(usage) if usage else None,
        preemptions=sum(preempted) if preempted else None,
        peak_memory_gib=tuple(max(gib) for gib in zip(*peaks, strict=False)) if peaks else (),
        notes=notes,
        # A round without readings would leave its tokens without their joules.
        gpu=combined(windows) if len(windows) == len(results) else None,
    )


def _summed(stats: Sequence[SpecDecodeStats]) -> SpecDecodeStats:
    width = max(len(s.accepted_per_position) for s in stats)
    positions = [
        sum(s.accepted_per_position[i] for s in stats if i < len(s.accepted_per_position))
        for i in range(width)
    ]
    return SpecDecodeStats(
        sum(s.drafts for s in stats),
        sum(s.draft_tokens for s in stats),
        sum(s.accepted_tokens for s in stats),
        tuple(positions),
    )
