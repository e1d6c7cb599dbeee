"""Confirmed results: the repeated runs of a config, their means and 95 % intervals.

:func:`tuner.study.confirm.confirm` writes them into the study's ``confirmed`` user attribute
(:func:`tuner.serde.dump`: each :class:`Confirmed` with its runs and the intervals over them);
picks, exports and reports read them back with :func:`load_confirmed`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ConfigDict, Field, computed_field, model_validator, with_config

from tuner import serde
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
    """A sample mean with its two-sided 95 % Student-t confidence interval, stored as ``{mean,
    ci95: [low, high] or None, n}``."""

    mean: float
    # None with fewer than two values: no spread to speak of. Stored as its bounds (ci95).
    half_width: Annotated[float | None, Field(exclude=True)]
    n: int

    @property
    def low(self) -> float | None:
        """The lower end of the interval; None for a single value."""
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        """The upper end of the interval; None for a single value."""
        return None if self.half_width is None else self.mean + self.half_width

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ci95(self) -> tuple[float, float] | None:
        """``(low, high)``; None for a single value."""
        if self.low is None or self.high is None:
            return None
        return self.low, self.high

    @model_validator(mode="before")
    @classmethod
    def _from_bounds(cls, data: Any) -> Any:
        """The half-width of the stored bounds."""
        if isinstance(data, dict) and "ci95" in data:
            ci = data["ci95"]
            half = None if not ci else (float(ci[1]) - float(ci[0])) / 2.0
            return {**data, "half_width": half}
        return data

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


# Fields stored under another name (serialize_by_alias) are read by either.
_STORED_AS = ConfigDict(validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)


@with_config(_STORED_AS)
@dataclass(frozen=True)
class Run:
    """One re-measurement of a config on a freshly started server."""

    status: TrialStatus  # FAILED for an infrastructure fault
    # The study's first objective (tok/s, or req/s), stored as output_tok_s.
    throughput: Annotated[float | None, Field(alias="output_tok_s")] = None
    p95_ttft_ms: float | None = None
    acceptance_rate: float | None = None
    levels: tuple[tuple[int, float], ...] = ()  # (concurrency, output tok/s) per level
    failure: str | None = None
    # Order-statistic 95 % bounds on this run's scored p95 TTFT and the requests behind them
    # (tuner.analysis.estimates.scored_ttft_bounds); None for runs stored before they were.
    p95_ttft_bounds: tuple[float | None, float | None, int] | None = None
    # Output tokens per joule of GPU energy over the run's pairs; None where its GPUs were not
    # read (no NVML, a GPU the simulator has no power for) or runs stored before it was, and
    # then not written: a run without it is stored as runs were before.
    tokens_per_joule: Annotated[float | None, Field(exclude_if=lambda value: value is None)] = None

    @property
    def ok(self) -> bool:
        """Whether the run started, was measured and met the TTFT limit."""
        return self.status is TrialStatus.OK


@with_config(_STORED_AS)
@dataclass(frozen=True)
class Confirmed:
    """A trial's config, re-measured: every run and the intervals over the measured ones
    (stored beside the runs, as ``output_tok_s`` and ``p95_ttft_ms``, for other readers)."""

    trial: int
    source: Source
    runs: tuple[Run, ...]
    date: str = ""

    @property
    def measured(self) -> list[Run]:
        """The runs that produced throughput and TTFT."""
        return [r for r in self.runs if r.throughput is not None and r.p95_ttft_ms is not None]

    @property
    def tokens_per_joule(self) -> float | None:
        """The mean output tokens per joule of the measured runs; None unless every one of
        them read its GPUs' energy (a mean of some would favour the runs that did)."""
        read = [r.tokens_per_joule for r in self.measured]
        if not read or any(value is None for value in read):
            return None
        return sum(value or 0.0 for value in read) / len(read)

    @property
    def stable(self) -> bool:
        """Every run started and was measured (no OOM, no crash): the config is repeatable."""
        return (
            bool(self.runs)
            and all(r.throughput is not None for r in self.runs)
            and not any(r.status.oom or r.status is TrialStatus.FAILED for r in self.runs)
        )

    @computed_field(alias="output_tok_s")  # type: ignore[prop-decorator]
    @property
    def throughput(self) -> Interval | None:
        """The first objective (output tok/s, or goodput req/s) over the measured runs; None
        if none was measured."""
        values = [r.throughput for r in self.measured if r.throughput is not None]
        return interval(values) if values else None

    @computed_field  # type: ignore[prop-decorator]
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

    @model_validator(mode="before")
    @classmethod
    def _older(cls, data: Any) -> Any:
        """Confirmations stored before ``source`` was are measured ones."""
        if isinstance(data, dict):
            return {"source": Source.MEASURED, **data, "runs": data.get("runs") or ()}
        return data


def load_confirmed(study: optuna.Study) -> dict[int, Confirmed]:
    """The study's confirmations by trial number (empty when none ran)."""
    raw = study.user_attrs.get(CONFIRMED_ATTR) or {}
    return {int(number): serde.load(Confirmed, entry) for number, entry in raw.items()}
