"""The trial loop ends a stopped trial FAIL even when the database refuses the first write."""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from tuner.launch.exit_hooks import Terminated
from tuner.study.loop import ask_tell_loop


def test_a_stopped_trial_ends_fail_when_its_first_fail_meets_a_locked_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal inside one of the trial's own SQLite statements can leave that connection
    holding the lock, so the FAIL meets "database is locked" (the thirty-signals test saw the
    trial left RUNNING): the loop drops the session and the pool, and writes it again."""
    storage = RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage)
    refused: list[TrialState] = []
    write = RDBStorage.set_trial_state_values

    def locked_once(
        self: RDBStorage, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        if state is TrialState.FAIL and not refused:
            refused.append(state)
            locked = sqlite3.OperationalError("database is locked")
            raise sqlalchemy.exc.OperationalError("UPDATE trials", {}, locked)
        return write(self, trial_id, state, values)

    monkeypatch.setattr(RDBStorage, "set_trial_state_values", locked_once)
    disposed: list[bool] = []
    dispose = storage.engine.dispose

    def counted_dispose() -> None:
        disposed.append(True)
        dispose()

    monkeypatch.setattr(storage.engine, "dispose", counted_dispose)

    def stopped(trial: optuna.Trial) -> Sequence[float]:
        raise Terminated(signal.SIGTERM)

    with pytest.raises(Terminated):
        ask_tell_loop(study, stopped, 1, catch=(), stop=lambda: False)
    (trial,) = optuna.load_study(study_name=study.study_name, storage=storage).get_trials()
    assert trial.state is TrialState.FAIL
    assert refused == [TrialState.FAIL] and disposed == [True]
