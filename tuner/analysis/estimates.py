"""A candidate's numbers as every page prints them: each estimate with the bounds of its own
measurement, and what stands behind it.

An estimate and its bounds must come from one measurement. The report, the export and the CLI
once took a confirmation run's p95 TTFT and set it beside the order-statistic bounds of the
trial it confirmed ("p95 TTFT 82.9 ms, 95 % lower bound 90.6 ms"), and called a config
confirmed by one run "one run, not confirmed". Here a :class:`Measured` refuses bounds that
do not hold its value, and :class:`Numbers` is built only from one source: the confirmation
record where there is one (its mean and Student-t interval, or its single run with that run's
own bounds), else the trial's single measurement.

Two kinds of bounds appear:

- ``ci95``: the Student-t 95 % interval of a mean over repeated runs on fresh servers;
- ``p95 bounds``: distribution-free 95 % bounds on a p95 from one run's requests
  (:mod:`tuner.bench.percentiles`); with few requests only the lower one exists.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.analysis.confirmed import Confirmed, Interval
from tuner.results import Source
from tuner.trial.record import TrialRecord

__all__ = ["Bounds", "Measured", "Numbers", "numbers_of", "scored_ttft_bounds"]

# Order-statistic bounds and the value they bound come from the same samples but are scaled
# to milliseconds in different orders: allow for the last bits of a float.
_SLACK = 1e-9


class Bounds(enum.StrEnum):
    """What an estimate's bounds are."""

    NONE = "none"  # a single measurement of a mean: no spread to speak of
    CI95 = "95 % CI"  # Student-t interval of a mean over runs
    ORDER_STATISTIC = "95 % bounds"  # order-statistic bounds on a percentile from requests


@dataclass(frozen=True)
class Measured:
    """A measured number and, where known, its 95 % bounds (the simulator's prediction of a
    run is :class:`tuner.sim.estimate.Estimate`, the public ``tuner.Estimate``).

    ``n`` counts runs (``CI95``, ``NONE``) or requests (``ORDER_STATISTIC``).

    Raises:
        ValueError: a bound that does not contain the value.
    """

    value: float
    low: float | None = None
    high: float | None = None
    bounds: Bounds = Bounds.NONE
    n: int = 1

    def __post_init__(self) -> None:
        slack = _SLACK * max(1.0, abs(self.value))
        if self.low is not None and self.low > self.value + slack:
            raise ValueError(f"lower bound {self.low} above its estimate {self.value}")
        if self.high is not None and self.high < self.value - slack:
            raise ValueError(f"upper bound {self.high} below its estimate {self.value}")

    @classmethod
    def of_interval(cls, interval: Interval) -> Measured:
        """A mean over runs with its Student-t interval (none for one run)."""
        if interval.half_width is None:
            return cls(interval.mean, n=interval.n)
        return cls(interval.mean, interval.low, interval.high, Bounds.CI95, interval.n)

    @classmethod
    def of_percentile(
        cls, value: float, bounds: tuple[float | None, float | None, int] | None
    ) -> Measured:
        """One run's percentile with its order-statistic bounds (none where not recorded)."""
        if bounds is None:
            return cls(value)
        low, high, requests = bounds
        return cls(value, low, high, Bounds.ORDER_STATISTIC, requests)

    def text(self, digits: int, unit: str = "") -> str:
        """``183.9 ± 3.6 tok/s (95 % CI, n=3)``, ``7854 ms (95 % lower bound 6975 ms from 40
        requests, too few for an upper bound)``, or the bare value."""
        value = f"{self.value:.{digits}f}{unit}"
        if self.bounds is Bounds.CI95 and self.low is not None and self.high is not None:
            half = (self.high - self.low) / 2.0
            return f"{self.value:.{digits}f} ± {half:.{digits}f}{unit} (95 % CI, n={self.n})"
        if self.bounds is Bounds.ORDER_STATISTIC:
            return f"{value} ({self.bounds_text(digits, unit)})"
        return value

    def bounds_text(self, digits: int, unit: str = "") -> str:
        """What the order-statistic bounds say, naming only the sides that exist."""
        low = None if self.low is None else f"{self.low:.{digits}f}{unit}"
        high = None if self.high is None else f"{self.high:.{digits}f}{unit}"
        n = f"from {self.n} requests"
        if low and high:
            return f"95 % bounds {low} to {high} {n}"
        if low:
            return f"95 % lower bound {low} {n}, too few for an upper bound"
        if high:
            return f"95 % upper bound {high} {n}, too few for a lower bound"
        return f"{self.n} requests, too few to bound it"


@dataclass(frozen=True)
class Numbers:
    """What a candidate measured, from one source: its confirmation or its own trial."""

    source: Source
    throughput: Measured  # the study's first objective: output tok/s, or goodput req/s
    p95_ttft_ms: Measured
    acceptance_rate: float | None
    runs: int  # measurements behind the numbers
    confirmed: bool  # measured again on fresh servers (the confirmation record says so)

    @property
    def runs_note(self) -> str:
        """What stands behind the numbers, in the words every page uses."""
        if not self.confirmed:
            return "one run, not confirmed"
        if self.runs == 1:
            return "one confirmation run on a fresh server, no interval from one run"
        return f"mean of {self.runs} runs on fresh servers"


def scored_ttft_bounds(
    levels: Sequence[Mapping[str, Any]], steps: Sequence[tuple[float, bool]] = ()
) -> tuple[float | None, float | None, int] | None:
    """Order-statistic 95 % bounds on a run's scored p95 TTFT (its worst pair's) and the
    requests behind them; None where a pair did not record them.

    A goodput run is scored at its goodput's step (its lowest if none passed), so only that
    step's pairs count.
    """
    if steps:
        rate = max((r for r, ok in steps if ok), default=min(r for r, _ in steps))
        levels = [level for level in levels if level.get("offered_rate") == rate]
    pairs = [p for p in levels if p.get("ttft_p95_ms") is not None]
    if not pairs or any("ttft_p95_interval_ms" not in p for p in pairs):
        return None
    worst = max(pairs, key=lambda p: float(p["ttft_p95_ms"]))
    low, high = worst["ttft_p95_interval_ms"]
    requests = int(worst.get("requests", 0)) - int(worst.get("errors", 0))
    return _finite(low), _finite(high), requests


def _finite(value: Any) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def numbers_of(record: TrialRecord, confirmed: Confirmed | None) -> Numbers:
    """A candidate's numbers: its confirmation's where it has one, else its trial's."""
    if confirmed is None or confirmed.throughput is None or confirmed.p95_ttft_ms is None:
        return Numbers(
            source=record.source,
            throughput=Measured(record.objective[0]),
            p95_ttft_ms=Measured.of_percentile(
                record.objective[1], scored_ttft_bounds(record.levels, record.steps)
            ),
            acceptance_rate=record.acceptance_rate,
            runs=1,
            confirmed=False,
        )
    measured = confirmed.measured
    rates = [r.acceptance_rate for r in measured if r.acceptance_rate is not None]
    ttft = confirmed.p95_ttft_ms
    if len(measured) == 1:  # one run has no interval, but its own requests bound its p95
        ttft_estimate = Measured.of_percentile(ttft.mean, measured[0].p95_ttft_bounds)
    else:
        ttft_estimate = Measured.of_interval(ttft)
    return Numbers(
        source=confirmed.source,
        throughput=Measured.of_interval(confirmed.throughput),
        p95_ttft_ms=ttft_estimate,
        acceptance_rate=sum(rates) / len(rates) if rates else None,
        runs=len(measured),
        confirmed=True,
    )
