"""Confirmed results: the repeated runs of a config, their means and 95 % intervals.

:func:`tuner.study.confirm.confirm` writes them into the study's ``confirmed`` user attribute;
picks, exports and reports read them back with :func:`load_confirmed`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.results import Source
from tuner.trial.scoring import TrialStatus

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

__all__ = [
    "CONFIRMED_ATTR",
    "Confirmed",
    "Interval",
    "Run",
    "interval",
    "load_confirmed",
    "t_quantile_975",
]

CONFIRMED_ATTR = "confirmed"

# Two-sided 95 % quantiles of Student's t (the 0.975 point) by degrees of freedom; scipy is
# not a dependency and confirmations have a handful of runs, so a table is exact enough.
_T_975 = (
    12.7062,
    4.3027,
    3.1824,
    2.7764,
    2.5706,
    2.4469,
    2.3646,
    2.3060,
    2.2622,
    2.2281,
    2.2010,
    2.1788,
    2.1604,
    2.1448,
    2.1314,
    2.1199,
    2.1098,
    2.1009,
    2.0930,
    2.0860,
    2.0796,
    2.0739,
    2.0687,
    2.0639,
    2.0595,
    2.0555,
    2.0518,
    2.0484,
    2.0452,
    2.0423,
)
_T_975_LARGE = ((40, 2.0211), (60, 2.0003), (120, 1.9799))
_Z_975 = 1.9600


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom.

    Between tabulated values above 30 the next smaller tabulated df is used, which widens the
    interval slightly rather than narrowing it.

    Raises:
        ValueError: ``df`` is below 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T_975):
        return _T_975[df - 1]
    value = _T_975[-1]
    for tabulated, quantile in _T_975_LARGE:
        if df >= tabulated:
            value = quantile
    return _Z_975 if df > 1000 else value


@dataclass(frozen=True)
class Interval:
    """A sample mean with its two-sided 95 % Student-t confidence interval."""

    mean: float
    half_width: float | None  # None with fewer than two values: no spread to speak of
    n: int

    @property
    def low(self) -> float | None:
        """The lower end of the interval; None for a single value."""
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        """The upper end of the interval; None for a single value."""
        return None if self.half_width is None else self.mean + self.half_width

    def to_dict(self) -> dict[str, Any]:
        """``{mean, ci95: [low, high] or None, n}`` as stored with the study."""
        ci = None if self.half_width is None else [self.low, self.high]
        return {"mean": self.mean, "ci95": ci, "n": self.n}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        """Reads what :meth:`to_dict` wrote."""
        ci = data.get("ci95")
        mean = float(data["mean"])
        half = None if not ci else (float(ci[1]) - float(ci[0])) / 2.0
        return cls(mean, half, int(data["n"]))

    def format(self, digits: int = 1, unit: str = "") -> str:
        """``59.4 ± 1.3 tok/s (95 % CI, n=3)``, or just the mean for a single value."""
        if self.half_width is None:
            return f"{self.mean:.{digits}f}{unit} (n={self.n})"
        return f"{self.cell(digits)}{unit} (95 % CI, n={self.n})"

    def cell(self, digits: int = 1) -> str:
        """``59.4 ± 1.3``: a table cell, whose header says what the interval is."""
        if self.half_width is None:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"


def interval(values: Sequence[float]) -> Interval:
    """Mean and 95 % confidence interval of ``values`` (at least one).

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("a confidence interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, None, 1)
    sem = statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, t_quantile_975(len(values) - 1) * sem, len(values))


@dataclass(frozen=True)
class Run:
    """One re-measurement of a config on a freshly started server."""

    status: TrialStatus  # FAILED for an infrastructure fault
    throughput: float | None = None  # the study's first objective (tok/s, or req/s)
    p95_ttft_ms: float | None = None
    acceptance_rate: float | None = None
    levels: tuple[tuple[int, float], ...] = ()  # (concurrency, output tok/s) per level
    failure: str | None = None
    # Order-statistic 95 % bounds on this run's scored p95 TTFT and the requests behind them
    # (tuner.analysis.estimates.scored_ttft_bounds); None for runs stored before they were.
    p95_ttft_bounds: tuple[float | None, float | None, int] | None = None

    @property
    def ok(self) -> bool:
        """Whether the run started, was measured and met the TTFT limit."""
        return self.status is TrialStatus.OK

    def to_dict(self) -> dict[str, Any]:
        """The run as plain JSON data."""
        return {
            "status": self.status.value,
            "output_tok_s": self.throughput,
            "p95_ttft_ms": self.p95_ttft_ms,
            "acceptance_rate": self.acceptance_rate,
            "levels": [list(level) for level in self.levels],
            "failure": self.failure,
            "p95_ttft_bounds": None if self.p95_ttft_bounds is None else list(self.p95_ttft_bounds),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Run:
        """Reads what :meth:`to_dict` wrote."""
        return cls(
            status=TrialStatus(data["status"]),
            throughput=_opt_float(data.get("output_tok_s")),
            p95_ttft_ms=_opt_float(data.get("p95_ttft_ms")),
            acceptance_rate=_opt_float(data.get("acceptance_rate")),
            levels=tuple((int(c), float(v)) for c, v in data.get("levels") or ()),
            failure=data.get("failure"),
            p95_ttft_bounds=_bounds(data.get("p95_ttft_bounds")),
        )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _bounds(value: Any) -> tuple[float | None, float | None, int] | None:
    if value is None:
        return None
    low, high, requests = value
    return _opt_float(low), _opt_float(high), int(requests)


@dataclass(frozen=True)
class Confirmed:
    """A trial's config, re-measured: every run and the intervals over the measured ones."""

    trial: int
    source: Source
    runs: tuple[Run, ...]
    date: str = ""

    @property
    def measured(self) -> list[Run]:
        """The runs that produced throughput and TTFT."""
        return [r for r in self.runs if r.throughput is not None and r.p95_ttft_ms is not None]

    @property
    def stable(self) -> bool:
        """Every run started and was measured (no OOM, no crash): the config is repeatable."""
        return (
            bool(self.runs)
            and all(r.throughput is not None for r in self.runs)
            and not any(r.status.oom or r.status is TrialStatus.FAILED for r in self.runs)
        )

    @property
    def throughput(self) -> Interval | None:
        """The first objective (output tok/s, or goodput req/s) over the measured runs; None
        if none was measured."""
        values = [r.throughput for r in self.measured if r.throughput is not None]
        return interval(values) if values else None

    @property
    def p95_ttft_ms(self) -> Interval | None:
        """p95 TTFT (ms) over the measured runs; None if none was measured."""
        values = [r.p95_ttft_ms for r in self.measured if r.p95_ttft_ms is not None]
        return interval(values) if values else None

    def level_tok_s(self) -> dict[int, Interval]:
        """Output tok/s per concurrency level over the runs."""
        by_level: dict[int, list[float]] = {}
        for run in self.measured:
            for concurrency, tok_s in run.levels:
                by_level.setdefault(concurrency, []).append(tok_s)
        return {c: interval(v) for c, v in sorted(by_level.items())}

    def feasible(self, ttft_limit_ms: float) -> bool:
        """Stable, and the mean p95 TTFT is within the limit."""
        ttft = self.p95_ttft_ms
        return self.stable and ttft is not None and ttft.mean <= ttft_limit_ms

    def to_dict(self) -> dict[str, Any]:
        """The confirmation as stored in the study's ``confirmed`` attribute."""
        tok_s, ttft = self.throughput, self.p95_ttft_ms
        return {
            "trial": self.trial,
            "source": self.source.value,
            "date": self.date,
            "runs": [r.to_dict() for r in self.runs],
            "output_tok_s": None if tok_s is None else tok_s.to_dict(),
            "p95_ttft_ms": None if ttft is None else ttft.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmed:
        """Reads what :meth:`to_dict` wrote."""
        return cls(
            trial=int(data["trial"]),
            source=Source(data.get("source", Source.MEASURED.value)),
            runs=tuple(Run.from_dict(r) for r in data.get("runs") or ()),
            date=str(data.get("date", "")),
        )


def load_confirmed(study: optuna.Study) -> dict[int, Confirmed]:
    """The study's confirmations by trial number (empty when none ran)."""
    raw = study.user_attrs.get(CONFIRMED_ATTR) or {}
    return {int(number): Confirmed.from_dict(entry) for number, entry in raw.items()}
