"""What optimize prints: the live trial table at 80 columns, failed rows with their config, the
wording without a feasible trial, and argument errors before any table."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

from optuna.trial import TrialState
from rich.console import Console
from typer.testing import CliRunner

from tuner.cli import app
from tuner.cli.render import draft_label, record_row, records_table
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.results import Source
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

runner = CliRunner()
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
SERVER = ServerConfig(
    "Qwen/Qwen2.5-32B-Instruct-AWQ",
    2,
    8192,
    0.92,
    16384,
    SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, DRAFT),
)
RECORD = TrialRecord(
    number=123,
    state=TrialState.COMPLETE,
    server=SERVER,
    trial_temperature=0.25,
    status=TrialStatus.OK,
    source=Source.MEASURED,
    values=(1234.5, 1234.0),
    constraints={"oom": -1.0, "ttft_slo": -1.0},
    restarted=True,
    summary={"acceptance_rate": 0.782},
)


def _rendered(records: list[TrialRecord], width: int = 80) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(records_table("study s", records))
    return out.getvalue().splitlines()


def test_every_kind_of_row_fits_80_columns_unabridged() -> None:
    rows = [
        RECORD,
        replace(RECORD, number=124, status=TrialStatus.OOM_PREDICTED, values=(0.0, 5000.0)),
        replace(RECORD, number=125, status=TrialStatus.OVER_TTFT),
        replace(RECORD, number=126, duplicate_of=123, restarted=False),
        replace(RECORD, number=127, state=TrialState.FAIL, status=TrialStatus.FAILED, values=None),
        replace(RECORD, number=128, server=replace(SERVER, speculative=None)),
        replace(
            RECORD,
            number=129,
            server=replace(SERVER, speculative=SpeculativeConfig(SpecMethod.NGRAM, 5)),
        ),
        replace(
            RECORD,
            number=130,
            gpu={"tokens_per_joule": 12.345, "throttled_pairs": 1, "tenants_moved_pairs": 2},
        ),
    ]
    lines = _rendered(rows)
    assert max(len(line) for line in lines) <= 80
    table = "\n".join(lines)
    assert "…" not in table  # nothing cut short
    marked = "ok hot tenants"  # throttled, and another process's memory moved while measured
    for text in (
        "0.5B",
        "ngram",
        "none",
        "OOM pred.",
        "over TTFT",
        "same as #123",
        "failed",
        marked,
    ):
        assert text in table, text
    assert "1234.5" in table and "78.2%" in table and "12.35" in table


def test_a_failed_trial_shows_its_config() -> None:
    failed = replace(RECORD, state=TrialState.FAIL, status=TrialStatus.FAILED, values=None)
    row = record_row(failed)
    assert row[:6] == ["123", "0.5B", "4", "0.92", "16384", "0.25"]
    assert row[6:8] == ["-", "-"] and row[-1] == "failed"


def test_draft_labels_are_sizes_where_the_name_has_one() -> None:
    def label(draft: str) -> str:
        spec = SpeculativeConfig(SpecMethod.DRAFT_MODEL, 3, draft)
        return draft_label(replace(SERVER, speculative=spec))

    assert label("meta-llama/Llama-3.2-1B-Instruct") == "1B"
    assert label("/models/my-draft/") == "my-draft"  # no size in the name: the folder's name
    assert label(DRAFT) == "0.5B"


def test_nothing_feasible_says_so(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--trials",
            "3",
            "--studies-dir",
            str(tmp_path),
            "--slo-ttft-ms",
            "1",
            "--confirm-top",
            "0",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert "Pareto front: no feasible trial" in result.stdout
    assert "n/a" not in result.stdout
    assert "No config recommended: 3 trials, none feasible: 3 over the TTFT limit;" in result.stdout
    assert "relax slo.ttft_ms" in result.stdout


def test_argument_errors_come_before_the_live_table(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["optimize", "--backend", "sim", "--trials", "0", "--studies-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --trials 0")
    assert "tok/s" not in result.stdout and "trials" not in result.stdout  # no table, no bar
    result = runner.invoke(
        app, ["optimize", "--backend", "sim", "--sampler", "nope", "--studies-dir", str(tmp_path)]
    )
    assert result.exit_code == 2 and "unknown sampler 'nope'" in result.stderr
    assert result.stdout == ""
