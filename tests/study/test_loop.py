"""The trial loop and the Ray driver end a stopped trial FAIL even when the signal landed
inside one of the study's own SQLite statements."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from tuner.config.space import load_space
from tuner.launch.exit_hooks import Terminated
from tuner.study.cluster.driver import _Loop
from tuner.study.cluster.pool import SlotPool
from tuner.study.loop import ask_tell_loop
from tuner.study.storage import open_storage


def test_a_trial_stopped_inside_its_own_statement_ends_fail(tmp_path: Path) -> None:
    """The signal lands just after a SELECT of the trial has run, its row not yet read: the
    open statement holds a lock on the file, so the FAIL could not be written until the loop
    finalized it (the thirty-signals test saw the trial left RUNNING)."""
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage)
    armed = _signal_after_select(storage)

    def measured(trial: optuna.Trial) -> Sequence[float]:
        armed.append(True)
        trial.set_user_attr("tok_s", 1.0)
        return [1.0]

    with pytest.raises(Terminated):
        ask_tell_loop(study, measured, 1, catch=(), stop=lambda: False)
    assert not armed, "the signal never landed in a statement"
    (trial,) = optuna.load_study(study_name=study.study_name, storage=storage).get_trials()
    assert trial.state is TrialState.FAIL


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # a bare ask, not Study.optimize
def test_the_ray_driver_stopped_inside_a_statement_ends_its_trials_fail(tmp_path: Path) -> None:
    """The driver's own statements run between its trials (asking, heartbeats): a stop inside
    one leaves its lock held until the driver releases it, before it ends its trials FAIL."""
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage)
    space = load_space(str(Path(__file__).with_name("small-space.yaml")))
    loop = _Loop(None, study, space, cast(SlotPool, None), 0, None, "sim", rounds=False)
    loop.runnable.append(study.ask())  # its config failed elsewhere: it waits for a slot
    armed = _signal_after_select(storage)
    armed.append(True)
    with pytest.raises(Terminated) as stopped:
        study.get_trials()
    loop.fail_running(stopped.value)
    (trial,) = optuna.load_study(study_name=study.study_name, storage=storage).get_trials()
    assert trial.state is TrialState.FAIL
    assert "the study was stopped" in trial.user_attrs["failure"]


def _signal_after_select(storage: Any) -> list[bool]:
    """Raises SIGHUP's error as the next SELECT on ``storage`` returns, once armed (the list
    holds True): Python runs a signal's handler at the next bytecode, so this is a real stop."""
    armed: list[bool] = []

    def signal_lands(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if armed and statement.lstrip().upper().startswith("SELECT"):
            armed.clear()
            raise Terminated(signal.SIGHUP)

    sqlalchemy.event.listen(storage.engine, "after_cursor_execute", signal_lands)
    return armed
