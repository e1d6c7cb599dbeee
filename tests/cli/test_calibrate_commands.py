"""``spectune calibrate`` and ``spectune estimate --study``, through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tuner import serde
from tuner.cli import app
from tuner.config.space import load_space
from tuner.search.twin_steer import PRIOR_ATTR, TWIN_ATTR
from tuner.sim.twin.fit import FittedTwin
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.twin_calibrate import calibration_path, calibration_plan

SPACE = "qwen2.5-14b-awq-4090x1"
runner = CliRunner()
ESTIMATE = (
    "estimate",
    "--hardware",
    "4090x1",
    "--model",
    "Qwen/Qwen2.5-14B-Instruct-AWQ",
    "--draft",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "--k",
    "4",
    "--json",
)


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_calibration_plan_pins_one_parameter_per_launch() -> None:
    plan = calibration_plan(load_space(SPACE))
    drafts = [(c.server.draft or "none", c.server.k) for c in plan]
    assert drafts[0] == ("none", 0)  # the target alone: decode, overhead, prefill, memory
    assert drafts[1] == ("Qwen/Qwen2.5-0.5B-Instruct", 1)  # the draft's pass cost
    assert drafts[2] == ("Qwen/Qwen2.5-0.5B-Instruct", 8)  # the decay over positions
    assert {"ngram", "Qwen/Qwen2.5-1.5B-Instruct"} <= {d for d, _ in drafts}
    assert len({c.server for c in plan}) <= 6  # a handful of launches


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_calibrate_stores_the_host_twin_and_optimize_starts_from_it(tmp_path: Path) -> None:
    code, out = _run(
        "calibrate", "--space", SPACE, "--backend", "sim", "--studies-dir", str(tmp_path), "--json"
    )
    assert code == 0, out
    data = json.loads(out)
    path = calibration_path(tmp_path, load_space(SPACE))
    assert Path(data["path"]) == path and path.is_file()
    twin = serde.load(FittedTwin, json.loads(path.read_text()))
    assert twin.observations >= 5
    assert twin.params.decode == pytest.approx(1.0, abs=0.1)  # the sim is the shipped model
    code, out = _run(
        "optimize",
        "--space",
        SPACE,
        "--backend",
        "sim",
        "--trials",
        "2",
        "--study",
        "s",
        "--studies-dir",
        str(tmp_path),
        "--confirm-top",
        "0",
        "--json",
    )
    assert code == 0, out
    study = optuna.load_study(study_name="s", storage=open_storage(default_storage("s", tmp_path)))
    assert study.user_attrs[PRIOR_ATTR] == serde.dump(twin)
    assert TWIN_ATTR in study.user_attrs


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_estimate_with_a_study_uses_its_fitted_twin(tmp_path: Path) -> None:
    code, out = _run(
        "optimize",
        "--space",
        SPACE,
        "--backend",
        "sim",
        "--trials",
        "2",
        "--study",
        "e",
        "--studies-dir",
        str(tmp_path),
        "--confirm-top",
        "0",
        "--json",
    )
    assert code == 0, out
    study = optuna.load_study(study_name="e", storage=open_storage(default_storage("e", tmp_path)))
    fitted = serde.load(FittedTwin, study.user_attrs[TWIN_ATTR])
    slow = serde.dump(fitted)
    slow["params"]["draft"] = 3.0  # as if the study had measured a slow draft
    study.set_user_attr(TWIN_ATTR, slow)
    shipped = json.loads(_run(*ESTIMATE)[1])["result"]["output_tok_s"]
    code, out = _run(*ESTIMATE, "--study", "e", "--studies-dir", str(tmp_path))
    assert code == 0, out
    assert json.loads(out)["result"]["output_tok_s"] < 0.9 * shipped


def test_estimate_with_an_unknown_study_is_one_line(tmp_path: Path) -> None:
    code, out = _run(*ESTIMATE, "--study", "nope", "--studies-dir", str(tmp_path))
    assert code == 2
    assert "no study 'nope'" in out
