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
import gc
import threading
import traceback
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
            _tell_failed(study, trial, exc)
            if not isinstance(exc, catch):
                raise
        else:
            with signals_held():
                study.tell(trial, list(values))
        done += 1


def _tell_failed(study: optuna.Study, trial: optuna.Trial, stopped: BaseException) -> None:
    """Ends ``trial`` FAIL, after releasing what ``stopped`` left open in the database.

    A signal that lands inside one of the trial's own SQLite statements leaves that statement's
    cursor open in a finished frame of the exception's traceback, and an open statement keeps
    its lock on the file until it is finalized (closing its connection waits for it): the FAIL
    would meet "database is locked" and the trial stay RUNNING (the thirty-signals test found
    it; tests/study/test_loop.py makes it happen). Clearing those frames finalizes it.
    """
    release_statements(stopped)
    with signals_held():
        study.tell(trial, state=TrialState.FAIL)


def release_statements(stopped: BaseException) -> None:
    """Clears the finished frames of ``stopped``'s traceback and of the errors it chains to
    (a traceback keeps only file names and lines), and collects the cycles they were in."""
    seen: set[int] = set()
    error: BaseException | None = stopped
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__
    gc.collect()


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
