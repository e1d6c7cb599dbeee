"""The study database: opening it, stale-trial recovery, and a trial budget shared by workers.

Several workers share a study through one database (PostgreSQL across hosts). Optuna's
heartbeats mark a trial whose worker died as FAIL, and the retry callback re-queues its
configuration once. The budget is enforced where trials are born: creating a new trial takes a
database lock, counts the study's live trials and refuses past the budget, so workers together
never run more trials than asked, however they race.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
import sqlalchemy.exc
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import ConfigError, SpectuneError
from tuner.trial.optuna_private import (
    ARTIFACTS_PREFIX,
    LEGACY_CONSTRAINTS,
    NewTrialHook,
    trial_id,
    without_attrs,
)
from tuner.trial.record import BUDGET_ATTR, COUNTED_STATES, RECORD_ATTRS

__all__ = [
    "BudgetExhausted",
    "BudgetedStorage",
    "RetryOwnRecord",
    "check_parallel_storage",
    "check_storage_url",
    "check_writable",
    "is_sqlite",
    "open_if_present",
    "open_storage",
    "safe_url",
    "study_exists",
]

_MALFORMED: dict[str, str] = {}
"""Variables below that held no whole number of seconds, refused when a storage opens (at
import, no command could say so in one line)."""


def _seconds(variable: str, default: int) -> int:
    text = os.environ.get(variable)
    if text is None:
        return default
    if text.strip().isdigit() and int(text) > 0:
        return int(text)
    _MALFORMED[variable] = text
    return default


# A worker's heartbeat every 10 s; silent for 40 s means dead. Tests shorten both.
HEARTBEAT_INTERVAL_S = _seconds("SPECTUNE_HEARTBEAT_S", 10)
GRACE_PERIOD_S = _seconds("SPECTUNE_GRACE_S", 40)


class BudgetExhausted(SpectuneError):
    """The study already has as many trials as its budget allows."""


class BudgetedStorage(NewTrialHook):
    """RDBStorage that refuses to create trials beyond the study's ``trial_budget`` attribute,
    and whose trials beat from the moment they run.

    Enqueued configs and retries (made from a template) replace counted work and pass freely.
    Optuna fails a stale trial only by its last heartbeat, and a trial that never beat is never
    stale: a worker that died, or a database that went away, between ``ask`` (which samples,
    and spectune's sampler refits its twin there, for seconds) and the trial loop's first beat
    would leave it RUNNING for good, holding a place in the budget. So the first beat is
    recorded as the trial becomes RUNNING, in the same call.
    """

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        changed = super().set_trial_state_values(trial_id, state, values)
        if changed and state == TrialState.RUNNING:  # an enqueued config taken by ask
            self._first_beat(trial_id)
        return changed

    def _first_beat(self, trial_id: int) -> None:
        if self.get_heartbeat_interval() is not None:
            self.record_heartbeat(trial_id)

    def new_trial(self, study_id: int, create: Callable[[], FrozenTrial]) -> FrozenTrial:
        with self.engine.connect() as lock:
            postgres = self.engine.dialect.name == "postgresql"
            if postgres:  # serialises count-then-insert across every worker of every host
                lock.execute(
                    sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": _lock_key(study_id)}
                )
            try:
                budget = self.get_study_user_attrs(study_id).get(BUDGET_ATTR)
                live = len(self.get_all_trials(study_id, deepcopy=False, states=COUNTED_STATES))
                if budget is not None and live >= int(budget):
                    raise BudgetExhausted(f"the study's budget of {budget} trials is used up")
                trial = create()
                self._first_beat(trial_id(trial))
                return trial
            finally:
                if postgres:
                    lock.execute(
                        sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": _lock_key(study_id)}
                    )
                    lock.commit()


class RetryOwnRecord(RetryHeartbeatStaleTrialCallback):
    """Optuna's retry of a stale trial, without what the dead run recorded.

    Optuna copies every attribute into the retry; the dead run's constraints would then stand
    for the retry (Optuna refuses to set a constraint twice, so the retry's own would be
    dropped), and its record and artifacts would read as the retry's. The retry keeps its
    config and Optuna's retry history only.
    """

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        own = without_attrs(trial, RECORD_ATTRS, (LEGACY_CONSTRAINTS, ARTIFACTS_PREFIX))
        super().__call__(study, own)


def _lock_key(study_id: int) -> int:
    return zlib.crc32(f"spectune-study-{study_id}".encode())


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def open_storage(
    url: str,
    *,
    heartbeat_interval_s: int = HEARTBEAT_INTERVAL_S,
    grace_period_s: int = GRACE_PERIOD_S,
) -> BudgetedStorage:
    """Opens (creating if needed) the study database, with heartbeats and one retry.

    Raises:
        ConfigError: the URL is malformed, the driver is unknown, the SQLite folder cannot be
            written, or the server cannot be reached.
    """
    parsed = check_storage_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        check_writable(Path(parsed.database).expanduser().resolve().parent)
    try:
        storage = BudgetedStorage(
            url,
            engine_kwargs=_engine_kwargs(parsed),
            heartbeat_interval=heartbeat_interval_s,
            grace_period=grace_period_s,
            heartbeat_stale_trial_callback=RetryOwnRecord(max_retry=1),
        )
        if parsed.get_backend_name() == "sqlite":
            _check_intact(storage, url)
        return storage
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError) as exc:
        text = str(exc).strip()
        reason = text.splitlines()[0] if text else type(exc).__name__
        hint = (
            "the file is not an Optuna database: move it away or choose another --storage path"
            if parsed.get_backend_name() == "sqlite"
            else "check the URL, that the database server runs and accepts this user"
        )
        raise ConfigError(f"cannot open storage {safe_url(url)}: {reason[:200]} ({hint})") from None


def check_storage_url(url: str) -> sqlalchemy.engine.URL:
    """The URL parsed, and the storage's settings from the environment well-formed; opens nothing.

    Raises:
        ConfigError: a malformed URL or ``SPECTUNE_HEARTBEAT_S``/``SPECTUNE_GRACE_S``.
    """
    if _MALFORMED:
        variable, text = next(iter(_MALFORMED.items()))
        raise ConfigError(
            f"{variable}={text!r}: must be a whole number of seconds > 0; fix or unset {variable}"
        )
    try:
        return sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise ConfigError(
            f"invalid storage URL {url!r}: use sqlite:///path/to.db or "
            "postgresql+psycopg://user:password@host/db"
        ) from None


def _check_intact(storage: BudgetedStorage, url: str) -> None:
    """A damaged SQLite file is refused as it opens, not mid-command in Optuna's traceback.

    ``PRAGMA quick_check`` reads every page (milliseconds for a study's few megabytes); an
    unreadable page fails the query itself, a damaged one answers something other than ok.
    """
    with storage.engine.connect() as connection:
        answer = connection.execute(sqlalchemy.text("PRAGMA quick_check")).scalar()
    if answer != "ok":
        raise ConfigError(
            f"storage {safe_url(url)} is damaged (SQLite's quick_check: {str(answer)[:120]}): "
            "restore it from a copy, or move it away to start anew"
        )


def _engine_kwargs(url: sqlalchemy.engine.URL) -> dict[str, Any]:
    if url.get_backend_name() == "postgresql":
        return {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    return {}


def check_writable(folder: Path, what: str = "studies folder", flag: str = "--studies-dir") -> None:
    """Creates ``folder`` if needed and proves it can be written; ConfigError otherwise.

    The probe file has a name of its own (runs and workers on one host share the folder: with
    one fixed name, one run's unlink made another's fail).
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".spectune-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{what} {folder} is not writable ({exc.strerror}): choose another with "
            f"{flag} or fix its permissions"
        ) from None


def safe_url(url: str) -> str:
    """The storage URL without its password, for messages."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def study_exists(url: str, name: str) -> bool:
    """Whether the database at ``url`` holds study ``name``; never creates an SQLite file."""
    storage = open_if_present(url)
    return storage is not None and name in study_names(storage)


def open_if_present(url: str) -> BudgetedStorage | None:
    """The storage at ``url``; None for an SQLite file not created yet (nor is it created)."""
    if is_sqlite(url) and not Path(url.split("///", 1)[-1]).exists():
        return None
    return open_storage(url)


def study_names(storage: optuna.storages.BaseStorage) -> set[str]:
    # Names only: the summaries would read every trial of every study in a shared database.
    return set(optuna.study.get_all_study_names(storage))


def check_parallel_storage(storage: str, workers: int) -> None:
    """SQLite takes one writer and no other hosts: several workers need PostgreSQL."""
    if workers > 1 and is_sqlite(storage):
        raise ConfigError(
            f"--workers {workers} needs PostgreSQL: pass --storage "
            "postgresql+psycopg://user:password@host/db (SQLite takes one worker)"
        )
