"""A space is checked whole before its study is stored, and a study that never ran gives its
name to a fixed space."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.space import builtin_spaces
from tuner.study.storage import open_storage
from tuner.trial.record import SPACE_ATTR
from tuner.trial.scoring import DIRECTIONS

runner = CliRunner()
SPACE = "qwen2.5-14b-awq-4090x1"


def _space(folder: Path, **server: Any) -> Path:
    raw = yaml.safe_load(builtin_spaces()[SPACE].read_text())
    raw["server"] = {**(raw.get("server") or {}), **server}
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _optimize(folder: Path, space: Path) -> Any:
    argv = ["optimize", "--backend", "sim", "--space", str(space), "--study", "s1"]
    argv += ["--trials", "1", "--confirm-top", "0", "--studies-dir", str(folder)]
    return runner.invoke(app, argv)


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"tensor_parallel_size": 4}, "server.tensor_parallel_size = 4: more than the 1 GPUs"),
        ({"extra_flags": {"served-model-name": "x"}}, "extra flag --served-model-name"),
    ],
)
def test_a_space_every_trial_would_fail_stores_nothing(
    tmp_path: Path, server: dict[str, Any], message: str
) -> None:
    result = _optimize(tmp_path, _space(tmp_path, **server))
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s1.db").exists()


def test_a_study_that_never_ran_is_replaced_by_a_fixed_space(tmp_path: Path) -> None:
    # What an earlier version left: the broken space stored, then the error, no trial.
    broken = yaml.safe_load(_space(tmp_path, tensor_parallel_size=4).read_text())
    storage = open_storage(f"sqlite:///{tmp_path / 's1.db'}")
    stored = optuna.create_study(study_name="s1", storage=storage)
    stored.set_user_attr(SPACE_ATTR, broken)
    result = _optimize(tmp_path, _space(tmp_path, tensor_parallel_size=1))
    assert result.exit_code == 0, result.stderr
    study = optuna.load_study(
        study_name="s1", storage=open_storage(f"sqlite:///{tmp_path / 's1.db'}")
    )
    assert len(study.trials) == 1
    assert study.user_attrs[SPACE_ATTR]["server"]["tensor_parallel_size"] == 1


def test_a_study_whose_trials_all_failed_takes_the_corrected_space(tmp_path: Path) -> None:
    # What a flag vLLM refuses only at start-up leaves: the space stored, one FAIL trial.
    broken = yaml.safe_load(_space(tmp_path, extra_flags={"enable-chaos": True}).read_text())
    url = f"sqlite:///{tmp_path / 's1.db'}"  # no heartbeat: the trial is asked by hand
    stored = optuna.create_study(study_name="s1", storage=url, directions=list(DIRECTIONS))
    stored.set_user_attr(SPACE_ATTR, broken)
    failed = stored.ask()
    stored.tell(failed, state=optuna.trial.TrialState.FAIL)
    result = _optimize(tmp_path, _space(tmp_path))
    assert result.exit_code == 0, result.stderr
    study = optuna.load_study(
        study_name="s1", storage=open_storage(f"sqlite:///{tmp_path / 's1.db'}")
    )
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.COMPLETE]
    assert "extra_flags" not in study.user_attrs[SPACE_ATTR].get("server", {})


def test_a_study_with_trials_still_refuses_another_space(tmp_path: Path) -> None:
    assert _optimize(tmp_path, _space(tmp_path)).exit_code == 0
    result = _optimize(tmp_path, _space(tmp_path, max_model_len=4096))
    assert result.exit_code == 2 and "was created with a different search space" in result.stderr
    assert "resuming" not in result.output  # a refused resume prints the error alone
    assert len(result.stderr.strip().splitlines()) == 1
