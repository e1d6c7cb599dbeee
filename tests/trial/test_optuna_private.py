"""Optuna's private API as tuner/trial/optuna_private.py uses it: each piece still there.

An Optuna upgrade that renames, moves or reshapes one of them fails here, with the test id and
the message naming the piece, before a study or the dashboard breaks in a user's hands.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from tuner.trial import optuna_private
from tuner.trial.optuna_private import NewTrialHook

_VERSION = f"Optuna {optuna.__version__}"


def _study(tmp_path: Path, storage: RDBStorage | None = None) -> optuna.Study:
    return optuna.create_study(
        study_name="s",
        storage=storage or f"sqlite:///{tmp_path / 's.db'}",
        directions=["maximize", "minimize"],
    )


def _finished(study: optuna.Study) -> FrozenTrial:
    trial = study.ask()
    study.tell(trial, [1.0, 2.0])
    return study.trials[trial.number]


def _signature(function: Callable[..., object]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _check_storage_of_a_study(tmp_path: Path) -> None:
    study = _study(tmp_path)
    assert isinstance(study._storage, optuna.storages.BaseStorage), "Study._storage"
    assert optuna_private.storage_of(study) is study._storage


def _check_rdb_under_the_cache(tmp_path: Path) -> None:
    study = _study(tmp_path)
    assert isinstance(getattr(study._storage, "_backend", None), RDBStorage), (
        "_CachedStorage._backend (the RDBStorage a study's cache wraps)"
    )
    assert isinstance(optuna_private.rdb_of(study), RDBStorage)
    assert optuna_private.rdb_of(optuna.create_study()) is None  # in memory: no RDB


def _check_ids(tmp_path: Path) -> None:
    study = _study(tmp_path)
    trial = _finished(study)
    storage = study._storage
    assert optuna_private.study_id(study) == storage.get_study_id_from_name("s"), "Study._study_id"
    expected = storage.get_trial_id_from_study_id_trial_number(
        optuna_private.study_id(study), trial.number
    )
    assert optuna_private.trial_id(trial) == expected, "FrozenTrial._trial_id"


def _check_system_attribute_table(tmp_path: Path) -> None:
    from optuna.storages._rdb import models

    table = models.TrialSystemAttributeModel.__table__
    assert table.name == "trial_system_attributes", "models.TrialSystemAttributeModel table"
    assert {"trial_id", "key", "value_json"} <= set(table.c.keys()), "its columns"
    study = _study(tmp_path)
    trial = _finished(study)
    assert optuna_private.write_finished_trial_attr(study, trial, "k", [1.0])
    assert optuna_private.write_finished_trial_attr(study, trial, "k", [2.0])  # replaces
    reread = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    assert reread.trials[trial.number].system_attrs["k"] == [2.0]


def _check_attribute_names() -> None:
    from optuna.artifacts._upload import ARTIFACTS_ATTR_PREFIX
    from optuna.study._constrained_optimization import _CONSTRAINTS_KEY

    assert _CONSTRAINTS_KEY == "constraints", "_constrained_optimization._CONSTRAINTS_KEY"
    assert ARTIFACTS_ATTR_PREFIX == "artifacts:", "artifacts._upload.ARTIFACTS_ATTR_PREFIX"
    keyed = optuna.trial.create_trial(
        values=[1.0, 2.0], system_attrs={optuna_private.CONSTRAINTS_PREFIX + "oom": 1.0}
    )
    assert keyed.constraints == {"oom": 1.0}, "keyed constraints as constraints:<key>"


def _check_trial_creation_hook(tmp_path: Path) -> None:
    assert _signature(RDBStorage._create_new_trial) == ["self", "study_id", "template_trial"], (
        "RDBStorage._create_new_trial(study_id, template_trial)"
    )
    from optuna.storages._cached_storage import _CachedStorage

    assert "_backend._create_new_trial(" in inspect.getsource(_CachedStorage.create_new_trial), (
        "_CachedStorage.create_new_trial calls RDBStorage._create_new_trial"
    )
    calls: list[int] = []

    class Counting(NewTrialHook):
        def new_trial(self, study_id: int, create: Callable[[], FrozenTrial]) -> FrozenTrial:
            calls.append(study_id)
            return create()

    study = _study(tmp_path, Counting(f"sqlite:///{tmp_path / 'hook.db'}"))
    study.enqueue_trial({})
    study.ask()  # the enqueued trial: made from a template, past the hook
    study.ask()  # sampled: through the hook
    assert calls == [optuna_private.study_id(study)]
    assert [t.state for t in study.trials] == [TrialState.RUNNING, TrialState.RUNNING]


CHECKS: dict[str, Callable[..., None]] = {
    "Study._storage": _check_storage_of_a_study,
    "_CachedStorage._backend": _check_rdb_under_the_cache,
    "Study._study_id and FrozenTrial._trial_id": _check_ids,
    "the trial_system_attributes table": _check_system_attribute_table,
    "the constraints and artifacts attribute names": _check_attribute_names,
    "RDBStorage._create_new_trial": _check_trial_creation_hook,
}


@pytest.mark.parametrize("api", list(CHECKS))
def test_optuna_private_api_is_still_there(api: str, tmp_path: Path) -> None:
    check = CHECKS[api]
    try:
        check(tmp_path) if _signature(check) else check()
    except (AssertionError, AttributeError, ImportError, TypeError) as exc:
        pytest.fail(
            f"{_VERSION} changed {api}, which tuner/trial/optuna_private.py relies on: "
            f"{type(exc).__name__}: {exc}",
            pytrace=False,
        )


def test_every_private_use_goes_through_the_adapter() -> None:
    """Outside the adapter no tuner module reaches into Optuna's internals."""
    root = Path(optuna_private.__file__).parent.parent
    markers = ("._storage", "._trial_id", "._study_id", "_create_new_trial", "optuna.storages._")
    offenders = {
        str(path.relative_to(root)): marker
        for path in root.rglob("*.py")
        if path.name != "optuna_private.py"
        for marker in markers
        if marker in path.read_text()
    }
    assert offenders == {}


def test_before_trial_sees_the_queued_parameters_the_trial_then_uses(tmp_path: Path) -> None:
    """tuner/search/twin_steer.py re-plans a queued config in ``before_trial``."""

    class Replanning(optuna.samplers.RandomSampler):
        def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
            trial.system_attrs["fixed_params"] = {"x": 2.0}

    study = _study(tmp_path)
    study.sampler = Replanning()
    study.enqueue_trial({"x": 1.0})
    trial = study.ask()
    assert trial.suggest_float("x", 0.0, 5.0) == 2.0, _VERSION


def test_a_trial_taken_from_the_queue_runs_what_run_instead_gives_it(tmp_path: Path) -> None:
    """tuner/search/queue.py runs a held proposal in a queued trial's turn."""

    class Instead(optuna.samplers.RandomSampler):
        def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
            optuna_private.run_instead(study, trial, {"x": 3.0}, {"why": "held", "was": None})

    study = _study(tmp_path)
    study.sampler = Instead()
    study.enqueue_trial({"x": 1.0}, user_attrs={"was": "queued"})
    trial = study.ask()
    assert trial.suggest_float("x", 0.0, 5.0) == 3.0, _VERSION
    study.tell(trial, [1.0, 1.0])
    (stored,) = study.get_trials()
    assert stored.params == {"x": 3.0}
    assert stored.user_attrs == {"why": "held", "was": None}
