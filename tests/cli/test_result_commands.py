"""The result commands through typer's CliRunner: export, report, confirm, and their errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from typer.testing import CliRunner

from tests.testbed.results import StudyCopy
from tuner.cli import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_export_formats_and_outputs(levels: StudyCopy, tmp_path: Path) -> None:
    where = ("--studies-dir", str(levels.studies_dir))
    code, out, err = _run("export", "levels", *where)
    assert code == 0, err
    assert out.startswith("# spectune export: study levels")
    assert yaml.safe_load(out)["model"] == "Qwen/Qwen2.5-32B-Instruct-AWQ"

    compose = tmp_path / "deploy" / "docker-compose.yml"
    code, out, err = _run("export", "levels", *where, "--format", "compose", "--out", str(compose))
    assert code == 0, err
    assert "Wrote" in out and "(compose)" in out
    assert yaml.safe_load(compose.read_text())["services"]["vllm"]["ipc"] == "host"

    script = tmp_path / "run.sh"
    code, _, err = _run("export", "levels", *where, "--format", "docker-run", "--out", str(script))
    assert code == 0, err
    assert os.access(script, os.X_OK)

    code, out, err = _run(
        "export", "levels", *where, "--format", "json", "--pick", "min-ttft", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["format"] == "json" and data["provenance"]["pick"] == "min-ttft"
    assert json.loads(data["text"])["provenance"]["trial"] == data["trial"]

    code, out, err = _run("export", "levels", *where, "--pick", "5", "--json")
    assert code == 0, err
    assert json.loads(out)["trial"] == 5


def test_report_command(levels: StudyCopy, tmp_path: Path) -> None:
    code, out, err = _run("report", "levels", "--studies-dir", str(levels.studies_dir))
    assert code == 0, err
    assert (levels.folder / "report" / "report.html").is_file()
    assert "pareto (" in out
    code, out, err = _run(
        "report",
        "levels",
        "--studies-dir",
        str(levels.studies_dir),
        "--out",
        str(tmp_path / "r"),
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["html"] == str(tmp_path / "r" / "report.html")
    assert all(chart["points"] > 0 for chart in data["charts"].values())


def test_confirm_command_then_export_uses_it(levels: StudyCopy) -> None:
    where = ("--studies-dir", str(levels.studies_dir))
    code, out, err = _run("confirm", "levels", *where, "--top", "2", "--repeats", "2", "--json")
    assert code == 0, err
    confirmed = json.loads(out)
    assert len(confirmed) == 2
    assert all(len(c["runs"]) == 2 and c["stable"] and c["feasible"] for c in confirmed)
    assert all(c["output_tok_s"]["n"] == 2 and c["output_tok_s"]["ci95"] for c in confirmed)
    code, out, err = _run("export", "levels", *where, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["confirmed"] and data["trial"] in {c["trial"] for c in confirmed}

    code, out, err = _run("confirm", "levels", *where, "--top", "1", "--repeats", "2")
    assert code == 0, err
    assert "run 2/2" in out and "Confirmed" in out and "Updated" in out
    assert "mean of 2 runs" in (levels.folder / "best.yaml").read_text()


def test_bad_input_is_one_line_exit_2(levels: StudyCopy) -> None:
    where = ["--studies-dir", str(levels.studies_dir)]
    cases = [
        (["export", "nope", *where], "no study 'nope'"),
        (["export", "levels", *where, "--format", "helm"], "unknown export format 'helm'"),
        (["export", "levels", *where, "--pick", "fastest"], "unknown pick 'fastest'"),
        (["export", "levels", *where, "--pick", "999"], "has no trial 999"),
        (["report", "nope", *where], "no study 'nope'"),
        (["dashboard", "nope", *where], "no study 'nope'"),
        (["confirm", "levels", *where, "--backend", "cloud"], "unknown backend 'cloud'"),
        (
            ["export", "x", "--storage", "postgresql+psycopg://u:hunter2pw@127.0.0.1:1/db"],
            "cannot open storage",
        ),
    ]
    for args, message in cases:
        code, out, err = _run(*args)
        assert code == 2, (args, out, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
        assert message in lines[0], (args, err)
        assert "hunter2pw" not in err
