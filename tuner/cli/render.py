"""What the CLI prints: the live trial table, the Pareto front, the recommendation.

Every number carries its source (measured, simulated, predicted) so nobody mistakes a
simulated figure for a measurement.
"""

from __future__ import annotations

from rich.table import Table

from tuner.analysis.confirmed import Confirmed, Interval, Run
from tuner.analysis.recommend import TrialView
from tuner.config.trial import ServerConfig
from tuner.trial.runner import TrialOutcome

__all__ = ["config_label", "outcome_row", "trial_table", "views_table"]

TRIAL_COLUMNS = (
    "#",
    "draft",
    "K",
    "gpu-mem",
    "batched",
    "temp",
    "tok/s",
    "p95 TTFT ms",
    "accept",
    "restart",
    "status",
)


def _draft_name(server: ServerConfig) -> str:
    draft = server.draft or "none"
    return draft.split("/")[-1]


def config_label(server: ServerConfig, temperature: float) -> str:
    """A one-line description of a trial's config."""
    k = f" K={server.k}" if server.speculative else ""
    return (
        f"draft={_draft_name(server)}{k} gpu-mem={server.gpu_memory_utilization:.2f} "
        f"batched={server.max_num_batched_tokens} temp={temperature:.2f}"
    )


def trial_table(title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for name in TRIAL_COLUMNS:
        table.add_column(name, justify="left" if name in ("draft", "status") else "right")
    return table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def outcome_row(number: int, outcome: TrialOutcome) -> list[str]:
    server = outcome.config.server
    primary = outcome.primary
    measured = primary is not None
    p95 = primary.ttft_ms(95) if primary else None
    return [
        str(number),
        _draft_name(server),
        str(server.k) if server.speculative else "-",
        f"{server.gpu_memory_utilization:.2f}",
        str(server.max_num_batched_tokens),
        f"{outcome.config.client.temperature:.2f}",
        f"{primary.output_tok_s:.1f}" if measured and primary else "-",
        "-" if p95 is None else f"{p95:.0f}",
        _pct(primary.acceptance_rate) if primary else "-",
        "yes" if outcome.restarted else "no",
        outcome.status.value,
    ]


def views_table(title: str, views: list[TrialView]) -> Table:
    table = trial_table(title)
    for v in views:
        table.add_row(
            str(v.number),
            _draft_name(v.server),
            str(v.server.k) if v.server.speculative else "-",
            f"{v.server.gpu_memory_utilization:.2f}",
            str(v.server.max_num_batched_tokens),
            f"{v.temperature:.2f}",
            f"{v.output_tok_s:.1f}",
            f"{v.p95_ttft_ms:.0f}",
            _pct(v.acceptance_rate),
            "yes" if v.restarted else "no",
            v.status,
        )
    return table


def _interval(value: Interval | None, digits: int) -> str:
    return "-" if value is None else value.format(digits)


def confirmed_table(results: list[Confirmed], ttft_limit_ms: float) -> Table:
    """Re-measured configs: mean and 95 % confidence interval over their runs."""
    source = results[0].source if results else "measured"
    table = Table(
        "trial",
        "runs",
        "output tok/s",
        "p95 TTFT ms",
        "verdict",
        title=f"Confirmed ({source}, mean ± 95 % CI)",
        title_justify="left",
    )
    for c in results:
        verdict = "ok" if c.feasible(ttft_limit_ms) else "dropped"
        table.add_row(
            str(c.trial),
            str(len(c.runs)),
            _interval(c.output_tok_s, 1),
            _interval(c.p95_ttft_ms, 0),
            verdict,
        )
    return table


def confirm_run_line(number: int, repeat: int, run: Run, repeats: int, source: str) -> str:
    tok_s = "-" if run.output_tok_s is None else f"{run.output_tok_s:.1f} tok/s {source}"
    return f"confirming trial {number}, run {repeat + 1}/{repeats}: {run.status}, {tok_s}"
