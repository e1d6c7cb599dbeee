"""The trial loop: Optuna's ``Study.optimize``, with no place a signal can leave a trial RUNNING.

``Study.optimize`` only guards the objective. A signal that lands in ``ask`` once the trial
exists leaves it RUNNING (a heartbeat would fail it 40 s later, a SQLite study never); one that
lands in ``tell`` (a sampler's ``after_trial``, the storage write) makes Optuna's own cleanup
raise UnboundLocalError in its place, a traceback instead of "stopped by SIGTERM". This loop
asks and tells through Optuna's public ask-and-tell API with SIGINT, SIGTERM and SIGHUP held,
so a signal lands in the objective or between trials, and the trial it stops ends FAIL. An
objective that raises ``optuna.TrialPruned`` (a trial that cannot reach the incumbent) ends
its trial PRUNED, as in ``Study.optimize``.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence

import optuna
import sqlalchemy.exc
from optuna.storages import RDBStorage, fail_stale_trials
from optuna.trial import TrialState

from tuner.launch.exit_hooks import signals_held
from tuner.trial.optuna_private import rdb_of, trial_id

__all__ = ["ask_tell_loop"]

Objective = Callable[[optuna.Trial], Sequence[float]]


def ask_tell_loop(
    study: optuna.Study,
    objective: Objective,
    trials: int | None,
    *,
    catch: tuple[type[Exception], ...],
    stop: Callable[[], bool],
) -> None:
    """Runs ``trials`` trials (None: until ``ask`` raises), checking ``stop`` before each.

    An exception in ``catch`` fails its trial and the loop goes on; any other fails it and
    propagates, as in ``Study.optimize``.
    """
    done = 0
    while (trials is None or done < trials) and not stop():
        fail_stale_trials(study)  # a dead worker's trial fails and is retried, as in Study.optimize
        trial = None
        try:
            # A signal held here arrives as the block ends: with the trial asked for, inside try.
            with signals_held(), warnings.catch_warnings():
                # Optuna warns heartbeats are meant for Study.optimize; this loop beats as it does.
                warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
                trial = study.ask()
            with _heartbeat(study, trial):
                values = objective(trial)
        except optuna.TrialPruned:
            assert trial is not None  # only the objective prunes
            with signals_held():
                study.tell(trial, state=TrialState.PRUNED)
        except BaseException as exc:
            if trial is None:
                raise
            _tell_failed(study, trial)
            if not isinstance(exc, catch):
                raise
        else:
            with signals_held():
                study.tell(trial, list(values))
        done += 1


def _tell_failed(study: optuna.Study, trial: optuna.Trial) -> None:
    """Ends ``trial`` FAIL, even when the signal that stopped it landed inside one of its own
    SQLite statements: that connection can keep holding the file's lock, and the FAIL then
    meets "database is locked" (found by the thirty-signals test: the trial stayed RUNNING).
    On such an error the session and the pool's connections are dropped, which releases the
    lock, and the FAIL is written once more."""
    with signals_held():
        try:
            study.tell(trial, state=TrialState.FAIL)
        except (sqlalchemy.exc.OperationalError, optuna.exceptions.StorageInternalError):
            storage = rdb_of(study)
            if storage is None:
                raise
            storage.remove_session()
            storage.engine.dispose()
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


@contextlib.contextmanager
def _heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Records the trial's heartbeat every interval while it runs, where the storage has them."""
    storage = rdb_of(study)
    interval = storage.get_heartbeat_interval() if storage is not None else None
    if storage is None or interval is None:
        yield
        return
    stopped = threading.Event()
    beat = threading.Thread(
        target=_beat, args=(storage, trial_id(trial), interval, stopped), daemon=True
    )
    beat.start()
    try:
        yield
    finally:
        stopped.set()
        beat.join()


def _beat(storage: RDBStorage, trial: int, interval: int, stopped: threading.Event) -> None:
    while True:
        try:
            storage.record_heartbeat(trial)
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError):
            # The database went away: the trial's own next write meets the same error and
            # reports it in one line; the beat stops, and the next run fails the stale trial.
            return
        if stopped.wait(interval):
            return
