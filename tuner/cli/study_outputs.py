"""What ``--json`` prints for the commands on a study: ``optimize``, ``export``, ``confirm`` and
``report``, one record each (``optimize --plan`` prints a
:class:`~tuner.search.plan.StudyPlan`, ``studies`` a list of
:class:`~tuner.study.listing.StudySummary`: records of their own).

As :mod:`tuner.cli.outputs`, written and read through :mod:`tuner.serde`. A trial's throughput
is printed under its space's metric (``output_tok_s`` or ``goodput_req_s``): the record holds the
metric and the value, and prints the value under the metric's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import SerializerFunctionWrapHandler, model_serializer, model_validator

from tuner.analysis.confirmed import Confirmed
from tuner.analysis.k_table import KTableVerdict
from tuner.analysis.provenance import Provenance
from tuner.cli.outputs import flattened, nested
from tuner.config.trial import ServerConfig
from tuner.trial.scoring import TrialStatus

if TYPE_CHECKING:
    from pathlib import Path

    from tuner.export.vllm import Exported
    from tuner.report.page import Report
    from tuner.study.run import OptimizeResult
    from tuner.trial.record import TrialRecord

__all__ = [
    "ChartOutput",
    "ConfirmedOutput",
    "ExportOutput",
    "OptimizeOutput",
    "ReportOutput",
    "TrialOutput",
]

Metric = Literal["output_tok_s", "goodput_req_s"]  # Objective.metric: the key a value prints as


def _metric(name: str) -> Metric:
    """``Objective.metric`` as the type says it is."""
    if name == "goodput_req_s":
        return "goodput_req_s"
    return "output_tok_s"


def _under_metric(data: dict[str, Any]) -> dict[str, Any]:
    """``throughput`` printed under its metric's name, where the field stands."""
    metric = data["metric"]
    return {
        (metric if key == "throughput" else key): value
        for key, value in data.items()
        if key != "metric"
    }


def _metric_read(data: Any) -> Any:
    """The metric and the value of what :func:`_under_metric` printed."""
    if not isinstance(data, dict) or "metric" in data:
        return data
    metric = next((name for name in get_args(Metric) if name in data), None)
    if metric is None:
        return data  # refused: no throughput under either name
    rest = {key: value for key, value in data.items() if key != metric}
    return {**rest, "metric": metric, "throughput": data[metric]}


@dataclass(frozen=True)
class TrialOutput:
    """One trial of ``optimize --json``: its numbers, server config and measured summary."""

    trial: int
    source: str
    metric: Metric
    throughput: float
    p95_ttft_ms: float
    status: TrialStatus
    tokens_per_joule: float | None
    temperature: float
    server: ServerConfig
    summary: dict[str, Any]

    @classmethod
    def of(cls, record: TrialRecord, metric: str) -> TrialOutput:
        throughput, ttft = record.objective
        return cls(
            record.number,
            record.source,
            _metric(metric),
            throughput,
            ttft,
            record.status,
            record.tokens_per_joule,
            record.trial_temperature,
            record.server,
            dict(record.summary),
        )

    @model_serializer(mode="wrap")
    def _named(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _under_metric(handler(self))

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        return _metric_read(data)


@dataclass(frozen=True)
class OptimizeOutput:
    """``spectune optimize --json``: the study, its feasible Pareto front, the recommended
    trial and the file written for it, and why a time budget stopped it early."""

    study: str
    storage: str  # the URL without its password
    trials: int
    pareto_front: tuple[TrialOutput, ...]
    recommended: TrialOutput | None
    best_yaml: str | None
    time_budget: str | None
    k_table: KTableVerdict | None

    @classmethod
    def of(cls, result: OptimizeResult) -> OptimizeOutput:
        from tuner.study.storage import safe_url

        metric = result.space.objective.metric
        best = result.recommended
        return cls(
            result.study,
            safe_url(result.storage),
            result.trials,
            tuple(TrialOutput.of(record, metric) for record in result.pareto),
            None if best is None else TrialOutput.of(best.record, metric),
            None if result.best_yaml is None else str(result.best_yaml),
            result.budget_note,
            result.k_table,
        )


@dataclass(frozen=True)
class ExportOutput:
    """``spectune export --json``: the exported trial's numbers and facts, and the text
    written (to ``out``, or nowhere else where ``out`` is None)."""

    trial: int
    format: str
    source: str
    metric: Metric
    throughput: float
    p95_ttft_ms: float
    confirmed: bool
    provenance: Provenance
    batch_size_table: tuple[tuple[int, int, int], ...]
    text: str
    out: str | None

    @classmethod
    def of(cls, exported: Exported, out: Path | None) -> ExportOutput:
        facts = exported.provenance
        return cls(
            facts.trial,
            exported.format,
            facts.source,
            _metric(facts.objective.metric),
            facts.throughput,
            facts.p95_ttft_ms,
            facts.confirmed,
            facts,
            exported.batch_size_table,
            exported.text,
            None if out is None else str(out),
        )

    @model_serializer(mode="wrap")
    def _named(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _under_metric(handler(self))

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        return _metric_read(data)


@dataclass(frozen=True)
class ConfirmedOutput:
    """One config of ``spectune confirm --json``: its confirmation, and whether its runs
    agree and meet the TTFT limit, beside the confirmation's own keys."""

    confirmed: Confirmed
    stable: bool
    feasible: bool

    @classmethod
    def all_of(cls, results: Sequence[Confirmed], ttft_limit_ms: float) -> list[ConfirmedOutput]:
        return [cls(c, c.stable, c.feasible(ttft_limit_ms)) for c in results]

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return flattened(handler(self), "confirmed")

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        return nested(data, "confirmed", ("stable", "feasible"))


@dataclass(frozen=True)
class ChartOutput:
    """A chart of the report: its PNG and the points drawn (0: nothing to show)."""

    png: str
    points: int


@dataclass(frozen=True)
class ReportOutput:
    """``spectune report --json``: the page, its charts by name, and its best trials."""

    html: str
    charts: dict[str, ChartOutput]
    best: tuple[int, ...]  # trial numbers, best first

    @classmethod
    def of(cls, report: Report) -> ReportOutput:
        charts = {c.name: ChartOutput(str(c.path), c.points) for c in report.charts}
        return cls(str(report.html), charts, tuple(c.number for c in report.best))
