"""``spectune studies`` and the line ``optimize`` prints when it resumes a study."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.trial.record import BUDGET_ATTR

runner = CliRunner(env={"COLUMNS": "300"})
# The shipped one-GPU space on the simulator, without the warm start: the trials alone.
SIM = ["--backend", "sim", "--space", "qwen2.5-14b-awq-4090x1", "--sampler", "tpe"]
SIM += ["--confirm-top", "0"]


def _optimize(folder: Path, study: str, trials: int) -> str:
    args = ["optimize", *SIM, "--studies-dir", str(folder), "--study", study]
    result = runner.invoke(app, [*args, "--trials", str(trials), "--json"])
    assert result.exit_code == 0, result.stderr
    return result.stderr


def test_rerunning_optimize_says_it_resumes_and_how_many_trials_it_adds(tmp_path: Path) -> None:
    assert "resuming" not in _optimize(tmp_path, "again", 2)  # a new study
    assert "resuming study again (2 trials, adding 3)" in _optimize(tmp_path, "again", 3)


def test_studies_lists_each_study_with_its_state_trials_and_best(tmp_path: Path) -> None:
    _optimize(tmp_path, "done", 2)
    _optimize(tmp_path, "cut", 2)
    url = f"sqlite:///{tmp_path / 'cut.db'}"
    cut = optuna.load_study(study_name="cut", storage=url)
    cut.set_user_attr(BUDGET_ATTR, 5)  # as a run stopped after 2 of 5 trials leaves it
    (tmp_path / "not-a-study.db").write_text("not SQLite")
    result = runner.invoke(app, ["studies", "--studies-dir", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    listed = {s["name"]: s for s in json.loads(result.stdout)}
    assert set(listed) == {"done", "cut"}
    assert listed["done"]["state"] == "finished" and listed["done"]["trials"] == 2
    assert listed["cut"]["state"] == "stopped" and listed["cut"]["budget"] == 5
    assert listed["done"]["source"] == "simulated" and listed["done"]["hardware"] == "4090x1"
    best = listed["done"]["best"]
    exported = runner.invoke(
        app, ["export", "done", "--studies-dir", str(tmp_path), "--format", "json", "--json"]
    )
    facts = json.loads(exported.stdout)
    assert (best["trial"], best["unit"]) == (facts["trial"], "tok/s")
    assert best["throughput"] == pytest.approx(facts["output_tok_s"])  # one source of truth
    assert "not-a-study.db" in result.stderr  # one warning line; the others are still listed

    cut.ask()  # a trial running now
    table = runner.invoke(app, ["studies", "--studies-dir", str(tmp_path)])
    assert table.exit_code == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if "│ cut " in line)
    assert "running" in row and "2 of 5, 1 running" in row
    done = next(line for line in table.stdout.splitlines() if "│ done " in line)
    assert f"#{best['trial']}: {best['throughput']:.1f} tok/s" in done and "(one run)" in done


def test_studies_of_one_storage_and_of_an_empty_folder(tmp_path: Path) -> None:
    _optimize(tmp_path, "one", 1)
    url = f"sqlite:///{tmp_path / 'one.db'}"
    result = runner.invoke(app, ["studies", "--storage", url, "--json"])
    assert [s["name"] for s in json.loads(result.stdout)] == ["one"]
    empty = runner.invoke(app, ["studies", "--studies-dir", str(tmp_path / "none")])
    assert empty.exit_code == 0
    assert "no study in" in empty.stdout and "spectune optimize creates one" in empty.stdout


def test_a_study_whose_space_cannot_be_read_here_is_one_line_and_hides_no_other(
    tmp_path: Path,
) -> None:
    _optimize(tmp_path, "good", 1)
    url = f"sqlite:///{tmp_path / 'good.db'}"
    odd = optuna.create_study(study_name="odd", storage=url)
    odd.set_user_attr("space", {"name": "odd", "hardware": "9090x9", "target": "x/y"})
    result = runner.invoke(app, ["studies", "--storage", url, "--json"])
    assert result.exit_code == 0, result.stderr
    assert [s["name"] for s in json.loads(result.stdout)] == ["good"]
    assert f"warning: study odd in {url}: " in result.stderr and "9090x9" in result.stderr
