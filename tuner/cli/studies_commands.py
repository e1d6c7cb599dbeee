"""``spectune studies``: the studies of a studies folder or a storage, and where each stands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from tuner.cli import options as opt
from tuner.cli.app import app, console, err_console, handle_errors, print_json

if TYPE_CHECKING:
    from tuner.study.listing import StudySummary

__all__ = ["studies_command"]


@app.command("studies")
@handle_errors
def studies_command(
    storage: opt.Storage = None,
    studies_dir: opt.StudiesDir = Path("studies"),
    as_json: opt.Json = False,
) -> None:
    """List the studies in the studies folder (or --storage): trials, state, best config."""
    # Here, not at the top: they import Optuna and SQLAlchemy, which `spectune --help` and the
    # commands without a study never need (tests/cli/test_startup.py).
    from tuner.study.listing import StudySummary, folder_storages, list_studies
    from tuner.study.storage import safe_url

    storages = [storage] if storage is not None else folder_storages(studies_dir)
    found, problems = list_studies(storages)
    for problem in problems:
        err_console.print(f"warning: {problem}", markup=False, highlight=False, soft_wrap=True)
    where = safe_url(storage) if storage is not None else str(studies_dir)
    if as_json:
        print_json(found, list[StudySummary])
        return
    if not found:
        console.print(
            f"no study in {where}: spectune optimize creates one", markup=False, highlight=False
        )
        return
    columns = ("study", "state", "trials", "failed", "source", "space", "best")
    table = Table(*columns, title=Text(where))
    for summary in found:
        cells = (
            summary.name,
            summary.state.value,
            _trials(summary),
            str(summary.failed),
            summary.source or "-",
            f"{summary.space or '?'} on {summary.hardware or '?'}",
            _best(summary),
        )
        table.add_row(*(Text(cell) for cell in cells))  # names as written, never markup
    console.print(table)


def _trials(summary: StudySummary) -> str:
    running = f", {summary.running} running" if summary.running else ""
    budget = "" if summary.budget is None else f" of {summary.budget}"
    return f"{summary.trials}{budget}{running}"


def _best(summary: StudySummary) -> str:
    best = summary.best
    if best is None:
        return "no feasible trial"
    how = "confirmed" if best["confirmed"] else "one run"
    return (
        f"#{best['trial']}: {best['throughput']:.1f} {best['unit']}, "
        f"p95 TTFT {best['p95_ttft_ms']:.0f} ms ({how})"
    )
