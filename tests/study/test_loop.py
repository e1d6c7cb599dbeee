"""The trial loop ends a stopped trial FAIL even when the signal landed inside one of the
trial's own SQLite statements."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
from optuna.trial import TrialState

from tuner.launch.exit_hooks import Terminated
from tuner.study.loop import ask_tell_loop
from tuner.study.storage import open_storage


def test_a_trial_stopped_inside_its_own_statement_ends_fail(tmp_path: Path) -> None:
    """The signal lands as a SELECT of the trial's has run, its row not yet read: the open
    statement holds a lock on the file, so the FAIL could not be written until the loop
    finalized it (the thirty-signals test saw the trial left RUNNING)."""
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage)
    armed: list[bool] = []

    def signal_lands(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if armed and statement.lstrip().upper().startswith("SELECT"):
            armed.clear()  # Python runs a handler at the next bytecode: here, as execute returns
            raise Terminated(signal.SIGHUP)

    sqlalchemy.event.listen(storage.engine, "after_cursor_execute", signal_lands)

    def measured(trial: optuna.Trial) -> Sequence[float]:
        armed.append(True)
        trial.set_user_attr("tok_s", 1.0)
        return [1.0]

    with pytest.raises(Terminated):
        ask_tell_loop(study, measured, 1, catch=(), stop=lambda: False)
    assert not armed, "the signal never landed in a statement"
    (trial,) = optuna.load_study(study_name=study.study_name, storage=storage).get_trials()
    assert trial.state is TrialState.FAIL
