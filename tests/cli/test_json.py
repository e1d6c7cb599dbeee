"""``--json`` prints JSON on standard output wherever a command offers it, errors included,
each the dump of the record declared for it (tuner/cli/outputs.py, tuner/cli/study_outputs.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from tuner import serde
from tuner.catalog.gpus import DetectedGpu, DetectedGpus, GpuLink, GpuSpec, parse_hardware
from tuner.cli import app
from tuner.cli.outputs import (
    BenchOutput,
    CalibrateOutput,
    DetectedOutput,
    ErrorOutput,
    EstimateOutput,
    ModelOutput,
)
from tuner.cli.study_outputs import (
    ConfirmedOutput,
    ExportOutput,
    OptimizeOutput,
    ReportOutput,
    TrialOutput,
)
from tuner.search.plan import StudyPlan
from tuner.study.listing import StudySummary

runner = CliRunner()
SPACE = ["--space", "qwen2.5-14b-awq-4090x1"]


def _offering_json(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        if any("--json" in getattr(p, "opts", ()) for p in command.params):
            yield (*path, name)
        if hasattr(command, "commands"):
            yield from _offering_json(command, (*path, name))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A studies folder with one simulated study, ``j``, confirmed once."""
    studies = tmp_path_factory.mktemp("studies")
    args = ["optimize", "--backend", "sim", *SPACE, "--trials", "3", "--study", "j"]
    made = runner.invoke(
        app, [*args, "--confirm-top", "1", "--confirm-repeats", "1", "--studies-dir", str(studies)]
    )
    assert made.exit_code == 0, made.stderr
    return studies


def _argv(folder: Path) -> dict[tuple[str, ...], list[str]]:
    """One run of each command that offers --json (an error is a run too: it must be JSON)."""
    where = ["--studies-dir", str(folder)]
    return {
        ("optimize",): ["--backend", "sim", "--study", "j", "--trials", "1", *where],
        ("studies",): where,
        ("report",): ["j", *where],
        ("export",): ["j", *where],
        ("confirm",): ["j", "--top", "1", "--repeats", "1", *where],
        ("estimate",): ["--hardware", "4090x1", "--model", "Qwen/Qwen2.5-14B-Instruct-AWQ"],
        ("calibrate",): ["--backend", "sim", *SPACE, *where],
        ("bench",): ["--url", "http://127.0.0.1:9", "--requests", "1"],  # nothing listens
        ("hardware",): [],
        ("hardware", "list"): [],
        ("hardware", "detect"): [],  # no NVIDIA driver here: an error, as JSON
        ("models",): [],
    }


# The record each command prints under --json: what a script reading it can check it against.
KINDS: dict[tuple[str, ...], Any] = {
    ("optimize",): OptimizeOutput,
    ("studies",): list[StudySummary],
    ("report",): ReportOutput,
    ("export",): ExportOutput,
    ("confirm",): list[ConfirmedOutput],
    ("estimate",): EstimateOutput,
    ("calibrate",): CalibrateOutput,
    ("bench",): BenchOutput,
    ("hardware",): list[GpuSpec],
    ("hardware", "list"): list[GpuSpec],
    ("hardware", "detect"): DetectedOutput,
    ("models",): list[ModelOutput],
}


def _parses_as(kind: Any, stdout: str) -> Any:
    """The record ``stdout`` holds, checked to dump back to the very JSON it was read from."""
    record = serde.load_json(kind, stdout)
    assert serde.dump(record, kind) == json.loads(stdout), kind
    return record


def _run(path: tuple[str, ...], args: list[str]) -> Any:
    result = runner.invoke(app, [*path, *args, "--json"])
    try:
        json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"spectune {' '.join(path)} --json printed {result.stdout[:300]!r}")
    return result


def test_every_command_offering_json_prints_its_record(folder: Path) -> None:
    argv = _argv(folder)
    offering = set(_offering_json(typer.main.get_command(app)))
    assert offering == set(argv) == set(KINDS)  # none forgotten, none without its record
    for path, args in argv.items():
        result = _run(path, args)
        if result.exit_code != 0:
            assert result.exit_code == 2, (path, result.stdout)
            error = _parses_as(ErrorOutput, result.stdout)
            assert error.error in result.stderr  # the one line a reader sees, too
        else:
            _parses_as(KINDS[path], result.stdout)


def test_the_plan_reads_back_as_its_record(folder: Path) -> None:
    # --plan is no command of its own: the same command, another record.
    args = ["optimize", "--plan", "--backend", "sim", *SPACE, "--time-budget", "2h"]
    plan = _parses_as(StudyPlan, runner.invoke(app, [*args, "--json"]).stdout)
    assert plan.trials and plan.budget_s == 7200 and plan.confirm_cost.total_s > 0


def test_a_trial_s_throughput_is_keyed_by_its_metric_either_way(folder: Path) -> None:
    # optimize and export print the throughput under the space's metric: goodput reads too.
    args = ["optimize", "--backend", "sim", "--study", "j", "--trials", "1"]
    result = runner.invoke(app, [*args, "--studies-dir", str(folder), "--json"])
    row = json.loads(result.stdout)["pareto_front"][0]
    goodput = {("goodput_req_s" if key == "output_tok_s" else key): v for key, v in row.items()}
    trial = serde.load(TrialOutput, goodput)
    assert (trial.metric, trial.throughput) == ("goodput_req_s", row["output_tok_s"])
    assert list(serde.dump(trial)) == list(goodput)  # the key where it stood, the other absent
    with pytest.raises(ValidationError):
        serde.load(TrialOutput, {k: v for k, v in row.items() if k != "output_tok_s"})


def test_an_error_under_json_is_one_json_object_and_exit_code_2(folder: Path) -> None:
    result = runner.invoke(app, ["export", "missing", "--studies-dir", str(folder), "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error.startswith("no study 'missing' in sqlite:///") and "\n" not in error


def test_a_usage_error_under_json_is_json_too() -> None:
    # A misspelt flag or a value typer cannot convert is refused before the command runs.
    for path in _offering_json(typer.main.get_command(app)):
        result = runner.invoke(app, [*path, "--json", "--no-such-flag"])
        assert result.exit_code == 2, (path, result.output)
        error = json.loads(result.stdout)["error"]
        assert "--no-such-flag" in error and error in result.stderr, (path, error)
    bad_value = runner.invoke(app, ["optimize", "--json", "--trials", "many"])
    assert bad_value.exit_code == 2
    assert json.loads(bad_value.stdout)["error"].startswith("Invalid value for '--trials'")


def test_detect_and_bench_records_read_back() -> None:
    # Neither runs here (no NVIDIA driver, no server): their records, built as the commands do.
    gpus = (DetectedGpu(0, "NVIDIA GeForce RTX 4090", 23.99),)
    detected = DetectedGpus(gpus, "550.54", "12.4", (GpuLink((0, 1), 0, 20),))
    shown = DetectedOutput.of(detected, parse_hardware("4090x1"), None)
    data = serde.dump(shown)
    assert data["links"] == [
        {"gpus": [0, 1], "nvlink_links": 0, "topology_level": 20, "path": "PCIe switches (PXB)"}
    ]
    assert (data["catalog"], data["hardware"]) == ("RTX 4090", "4090x1")
    assert serde.load(DetectedOutput, data) == shown
    bench = BenchOutput("http://h:8000", "m", {"output_tok_s": 12.5, "ttft_p95_ms": 80.0})
    assert list(serde.dump(bench)) == ["url", "model", "output_tok_s", "ttft_p95_ms"]
    assert serde.load_json(BenchOutput, serde.dump_json(bench)) == bench
