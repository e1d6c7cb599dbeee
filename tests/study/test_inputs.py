"""Bad study inputs: one line, exit 2, nothing lost; two runs of one study share its budget."""

from __future__ import annotations

import socket
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.study.study import extend_budget
from tuner.trial.record import BUDGET_ATTR

runner = CliRunner()
SIM = ("optimize", "--backend", "sim", "--hardware", "4090x2", "--confirm-top", "0")


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_corrupt_sqlite_file_is_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    db.write_bytes(b"not a database " * 100)
    before = db.read_bytes()
    code, out, err = _run(*SIM, "--trials", "2", "--storage", f"sqlite:///{db}")
    assert code == 2
    assert out == ""  # no live table drawn before the error
    assert err.count("\n") == 1 and "is not an Optuna database" in err
    assert "database server" not in err
    assert db.read_bytes() == before


def test_a_changed_ttft_limit_names_the_flag(tmp_path: Path) -> None:
    dirs = ("--studies-dir", str(tmp_path), "--study", "s", "--trials", "1")
    assert _run(*SIM, *dirs, "--slo-ttft-ms", "500")[0] == 0
    code, out, err = _run(*SIM, *dirs, "--slo-ttft-ms", "300")
    assert code == 2 and out == ""
    assert "TTFT limit of 500 ms, not 300" in err and "--slo-ttft-ms" in err
    assert "search space or hardware" not in err


def test_a_busy_dashboard_port_is_one_line(tmp_path: Path) -> None:
    assert _run(*SIM, "--studies-dir", str(tmp_path), "--study", "s", "--trials", "1")[0] == 0
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        code, _, err = _run("dashboard", "s", "--studies-dir", str(tmp_path), "--port", str(port))
    assert code == 2
    assert err.count("\n") == 1 and f"--port {port}" in err and "Traceback" not in err


def test_a_second_run_adds_to_a_running_study_budget(tmp_path: Path) -> None:
    # Plain storage: Optuna warns that heartbeats do not cover ask/tell, which this test uses.
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'b.db'}", directions=["maximize"])
    assert extend_budget(study, 5) == 5  # run A: five trials
    study.ask()  # A is working on its first
    assert extend_budget(study, 3) == 8  # run B joins: A keeps its five
    assert study.user_attrs[BUDGET_ATTR] == 8


def test_a_resume_after_an_ended_run_starts_from_what_is_done(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'c.db'}", directions=["maximize"])
    extend_budget(study, 10)
    for _ in range(4):  # interrupted after four trials: nothing runs any more
        study.tell(study.ask(), 1.0)
    assert extend_budget(study, 10) == 14


def test_the_gp_sampler_without_pytorch_names_the_extra(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here: --sampler gp works")
    code, out, err = _run(*SIM, "--trials", "1", "--studies-dir", str(tmp_path), "--sampler", "gp")
    assert code == 2 and out == ""
    assert "spectune[gp]" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing stored
