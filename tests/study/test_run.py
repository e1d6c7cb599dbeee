"""One run opened once: the storage opened once, refusals before anything is stored, a resume
on the stored space said first, and best.yaml written by optimize itself."""

import dataclasses
from pathlib import Path
from typing import Any

import optuna
import pytest

from tuner.config.space import SearchSpace, load_space
from tuner.errors import ConfigError
from tuner.export.vllm import export
from tuner.study import request as request_module
from tuner.study import storage as storage_module
from tuner.study.executor import InProcess
from tuner.study.optimize import OpenedRun, OptimizeRequest, StudyRun, optimize


def _request(tmp_path: Path, space: SearchSpace | None = None, **kw: Any) -> OptimizeRequest:
    return OptimizeRequest(
        study="s",
        space=space or load_space(),
        backend="sim",
        trials=2,
        studies_dir=tmp_path,
        sampler="random",
        confirm_top=1,
        confirm_repeats=1,
        **kw,
    )


def test_optimize_opens_the_storage_once_checks_once_and_writes_best_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    checked: list[OptimizeRequest] = []

    class Counted(storage_module.BudgetedStorage):
        def __init__(self, url: str, **kw: Any) -> None:
            opened.append(url)
            super().__init__(url, **kw)

    def check(request: OptimizeRequest) -> None:
        checked.append(request)
        request_module.check_request(request)

    monkeypatch.setattr(storage_module, "BudgetedStorage", Counted)
    monkeypatch.setattr("tuner.study.run.check_request", check)
    result = optimize(_request(tmp_path))
    assert len(opened) == 1 and len(checked) == 1
    assert result.recommended is not None and result.best_yaml == result.paths.best_yaml
    assert result.best_yaml.read_text() == export(result.handle, result.space, "vllm").text


def test_a_refused_run_stores_no_study(tmp_path: Path) -> None:
    # The default space is 4090x2: one GPU a trial cannot run it.
    with pytest.raises(ConfigError, match="--gpus-per-trial 1 does not match"):
        OpenedRun.open(_request(tmp_path, gpus_per_trial=1))
    storage = f"sqlite:///{tmp_path / 's.db'}"
    assert optuna.study.get_all_study_names(storage) == []


def test_a_default_space_resumes_the_stored_one_and_says_so_first(tmp_path: Path) -> None:
    optimize(_request(tmp_path))
    notices: list[str] = []
    other = load_space().with_ttft_limit(123)  # a default nobody chose: the stored one wins
    again = optimize(_request(tmp_path, space=other, resume_stored=True), on_notice=notices.append)
    assert notices[0] == "resuming study s (2 trials, adding 2)"
    assert again.trials == 4 and again.space == load_space()
    with pytest.raises(ConfigError, match="TTFT limit of"):  # one given: refused, not replaced
        OpenedRun.open(_request(tmp_path, space=other))


def test_each_stage_is_a_record_the_step_before_returns(tmp_path: Path) -> None:
    opened = OpenedRun.open(dataclasses.replace(_request(tmp_path), sampler="spectune"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        opened.space = load_space()  # type: ignore[misc]
    prepared = opened.prepare()
    assert not hasattr(opened, "start") and not hasattr(prepared, "prepare")
    assert optuna.study.get_all_study_names(f"sqlite:///{tmp_path / 's.db'}") == []
    run = prepared.start()  # the study stored, seeded with the warm start's configs
    waiting = run.study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert run.study.study_name == "s" and waiting
    assert run.space == prepared.space


def test_a_reopened_study_confirms_through_its_executor_and_adds_no_trial(tmp_path: Path) -> None:
    optimize(dataclasses.replace(_request(tmp_path), confirm_top=0))
    request = OptimizeRequest("s", None, "sim", 1, tmp_path, confirm_top=1, confirm_repeats=2)
    run = StudyRun.reopen(request)
    assert isinstance(run.executor, InProcess) and run.space == load_space()
    confirmed, _ = run.confirm(None)
    assert len(confirmed) == 1 and len(confirmed[0].runs) == 2
    assert len(run.study.trials) == 2  # confirmation runs are no trials
    with pytest.raises(ConfigError, match="holds simulated trials and --backend process"):
        StudyRun.reopen(dataclasses.replace(request, backend="process"))
    with pytest.raises(ConfigError, match="no study 'other'"):
        StudyRun.reopen(dataclasses.replace(request, study="other"))
