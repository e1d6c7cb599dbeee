"""Every use of Optuna's private API, in one module; ``tests/trial/test_optuna_private.py``
checks each.

spectune needs a few things Optuna 5's public API does not offer:

- the storage behind a study (``Study._storage``): the artifact functions need it for
  finished trials (:func:`storage_of`);
- the RDB storage behind Optuna's cache (``_CachedStorage._backend``): finished trials are
  cached, so an attribute written past Optuna is read past the cache too (:func:`rdb_of`);
- storage ids (``Study._study_id``, ``FrozenTrial._trial_id``): the dashboard's URLs and the
  storage API speak them (:func:`study_id`, :func:`trial_id`);
- writing a system attribute of a finished trial: Optuna refuses to change one, so the row goes
  straight into the RDB table ``trial_system_attributes`` (:func:`write_finished_trial_attr`);
- a hook where trials are born: Optuna's cache layer calls ``RDBStorage._create_new_trial``,
  not the public ``create_new_trial`` (:class:`NewTrialHook`);
- the names Optuna gives system attributes: ``constraints:<key>`` for keyed constraints,
  ``constraints`` for the legacy list, ``artifacts:<id>`` for artifact metadata, and
  ``fixed_params`` for an enqueued trial's parameters, which ``Trial`` reads from the very
  ``FrozenTrial`` the sampler's ``before_trial`` is handed, after that call
  (:data:`FIXED_PARAMS`, :func:`run_instead`).

An Optuna upgrade that moves one of these fails that test, naming what moved.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import optuna
import sqlalchemy
from optuna.artifacts._upload import ARTIFACTS_ATTR_PREFIX
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._rdb import models
from optuna.study._constrained_optimization import _CONSTRAINTS_KEY
from optuna.trial import FrozenTrial

__all__ = [
    "ARTIFACTS_PREFIX",
    "CONSTRAINTS_PREFIX",
    "FIXED_PARAMS",
    "LEGACY_CONSTRAINTS",
    "NewTrialHook",
    "rdb_of",
    "run_instead",
    "storage_of",
    "study_id",
    "trial_id",
    "without_attrs",
    "write_finished_trial_attr",
]

LEGACY_CONSTRAINTS = _CONSTRAINTS_KEY  # a list of values; what optuna-dashboard 0.21 reads
CONSTRAINTS_PREFIX = f"{_CONSTRAINTS_KEY}:"  # Optuna 5's keyed constraints
ARTIFACTS_PREFIX = ARTIFACTS_ATTR_PREFIX
FIXED_PARAMS = "fixed_params"  # where Study.enqueue_trial keeps a queued trial's parameters


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage ``study`` reads and writes through (Optuna's cache, for RDB storages)."""
    storage: BaseStorage = study._storage
    return storage


def rdb_of(study: optuna.Study) -> RDBStorage | None:
    """The RDB storage under Optuna's cache; None for other storages."""
    storage = storage_of(study)
    backend = getattr(storage, "_backend", storage)  # optuna.storages._CachedStorage
    return backend if isinstance(backend, RDBStorage) else None


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage (optuna-dashboard's URLs use it)."""
    return int(study._study_id)


def trial_id(trial: FrozenTrial | optuna.Trial) -> int:
    """The trial's id in its storage (not its number), of a finished or a running trial."""
    return int(trial._trial_id)


def write_finished_trial_attr(
    study: optuna.Study, trial: FrozenTrial, key: str, value: Any
) -> bool:
    """Writes (or replaces) a system attribute of a finished trial; False without an RDB.

    Optuna keeps finished trials immutable; this writes the same JSON row its storage would.
    """
    rdb = rdb_of(study)
    if rdb is None:
        return False
    table = models.TrialSystemAttributeModel.__table__
    match = (table.c.trial_id == trial_id(trial)) & (table.c.key == key)
    encoded = json.dumps(value)
    with rdb.engine.begin() as connection:
        found = connection.execute(sqlalchemy.select(table.c.trial_id).where(match)).first()
        if found:
            connection.execute(table.update().where(match).values(value_json=encoded))
        else:
            connection.execute(
                table.insert().values(trial_id=trial_id(trial), key=key, value_json=encoded)
            )
    return True


def without_attrs(
    trial: FrozenTrial, user: tuple[str, ...] = (), system_prefixes: tuple[str, ...] = ()
) -> FrozenTrial:
    """A copy of ``trial`` without the named user attributes and the system attributes whose
    keys start with one of ``system_prefixes`` (``constraints`` matches both the list and the
    keyed ``constraints:<key>``)."""
    copy = deepcopy(trial)
    copy.user_attrs = {k: v for k, v in trial.user_attrs.items() if k not in user}
    copy.system_attrs = {
        k: v for k, v in trial.system_attrs.items() if not k.startswith(system_prefixes)
    }
    return copy


class NewTrialHook(RDBStorage):
    """An RDBStorage whose sampled trials are created through :meth:`new_trial`.

    Optuna's cache layer (which wraps every RDBStorage a study opens) creates trials with the
    private ``_create_new_trial``, so that is where the hook must sit. Trials made from a
    template (enqueued configs, stale-trial retries) bypass the hook.
    """

    def _create_new_trial(
        self, study_id: int, template_trial: FrozenTrial | None = None
    ) -> FrozenTrial:
        def create() -> FrozenTrial:
            trial: FrozenTrial = super(NewTrialHook, self)._create_new_trial(
                study_id, template_trial
            )
            return trial

        return create() if template_trial is not None else self.new_trial(study_id, create)

    def new_trial(self, study_id: int, create: Callable[[], FrozenTrial]) -> FrozenTrial:
        """Creates a sampled trial of study ``study_id`` by calling ``create``; override it."""
        return create()


def run_instead(
    study: optuna.Study,
    trial: FrozenTrial,
    params: dict[str, Any],
    user_attrs: dict[str, Any],
) -> None:
    """Makes the trial a sampler's ``before_trial`` was handed run ``params`` (it was queued
    with others), with ``user_attrs`` written as its own ``Trial.set_user_attr`` would."""
    storage, number = study._storage, trial._trial_id
    for key, value in user_attrs.items():
        storage.set_trial_user_attr(number, key, value)
    storage.set_trial_system_attr(number, FIXED_PARAMS, params)
    trial.system_attrs[FIXED_PARAMS] = params
