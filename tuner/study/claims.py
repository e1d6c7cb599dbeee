"""One config is measured once, however many workers share the study.

Samplers repeat points of a discrete space, the twin proposes from every worker's results, and a
re-planned queue moves configs onto settings another worker holds: two workers can be handed the
same config at the same moment, and each would start a server for it. A repeat of a config that
already ended reuses its result ("same as #N"); one that is still running must wait for it.

Who runs and who waits is decided on the trials themselves, so it holds on any storage (SQLite,
PostgreSQL) without a lock. Each trial marks its claim before it looks at the others:

- ``claiming``: its config is stored and it is deciding;
- ``launched``: it runs the config; anyone else with that config waits for its result;
- ``deferred``: it waits for a trial that runs the config.

A deciding trial defers to a launched one and to a lower-numbered one that is deciding; it waits
(briefly) for a higher-numbered one to decide. Since each trial writes its claim before it reads,
of two that decide at once at least one sees the other, so both cannot launch; and waits only ever
point from a lower number to a higher one, so they end. A claimant that dies stops RUNNING when
its heartbeat goes stale (``fail_stale_trials``), and the others go on without it.
"""

from __future__ import annotations

import time
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.trial.record import TrialRecord

__all__ = ["CLAIM_ATTR", "claim_or_reuse", "ended_same_config", "same_params"]

CLAIM_ATTR = "claim"
_CLAIMING, _LAUNCHED, _DEFERRED = "claiming", "launched", "deferred"
# A deciding trial reads the study a few times: its decision is one read away.
_DECIDING_POLL_S = 0.1
_ENDED = (TrialState.COMPLETE, TrialState.PRUNED)


def claim_or_reuse(study: optuna.Study, trial: optuna.Trial, poll_s: float) -> TrialRecord | None:
    """None when ``trial`` is to run its config; else the record of the trial that ran it.

    Blocks while another worker runs the same config (``poll_s`` between looks), so that its
    result is reused rather than measured twice.
    """
    trial.set_user_attr(CLAIM_ATTR, _CLAIMING)
    while True:
        same = _same_config(study.get_trials(deepcopy=False), trial)
        if (record := _ended(same)) is not None:
            return record
        running = [t for t in same if t.state is TrialState.RUNNING]
        holder = _holder(running, trial.number)
        if holder is not None:
            trial.set_user_attr(CLAIM_ATTR, _DEFERRED)
            _await_end(study, holder, poll_s)
            trial.set_user_attr(CLAIM_ATTR, _CLAIMING)  # it ended: reuse it, or claim again
            continue
        if any(t.user_attrs.get(CLAIM_ATTR) == _CLAIMING for t in running):
            # A higher-numbered trial is deciding: it defers to us, unless its worker died.
            optuna.storages.fail_stale_trials(study)
            time.sleep(_DECIDING_POLL_S)
            continue
        trial.set_user_attr(CLAIM_ATTR, _LAUNCHED)
        return None


def ended_same_config(study: optuna.Study, trial: optuna.Trial) -> TrialRecord | None:
    """The record of a trial that ended (COMPLETE or PRUNED) with ``trial``'s config, if any.

    Enough where one process hands out every trial (the Ray driver): it sees what its own
    slots run, and holds a repeat of a running config back itself.
    """
    ended = study.get_trials(deepcopy=False, states=_ENDED)
    return _ended(_same_config(ended, trial))


def same_params(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two trials' parameters name one config."""
    return _rounded(a) == _rounded(b)


def _same_config(trials: list[FrozenTrial], trial: optuna.Trial) -> list[FrozenTrial]:
    return [t for t in trials if t.number != trial.number and same_params(t.params, trial.params)]


def _ended(same: list[FrozenTrial]) -> TrialRecord | None:
    for done in same:
        if done.state in _ENDED and (record := TrialRecord.from_trial(done)) is not None:
            return record
    return None


def _holder(running: list[FrozenTrial], number: int) -> int | None:
    """The trial to wait for: one that launched, else a lower-numbered one deciding."""
    for other in running:
        claim = other.user_attrs.get(CLAIM_ATTR)
        if claim == _LAUNCHED or (claim == _CLAIMING and other.number < number):
            return other.number
    return None


def _await_end(study: optuna.Study, number: int, poll_s: float) -> None:
    while True:
        optuna.storages.fail_stale_trials(study)  # a dead worker's trial stops blocking us
        if study.get_trials(deepcopy=False)[number].state is not TrialState.RUNNING:
            return
        time.sleep(poll_s)


def _rounded(params: dict[str, Any]) -> dict[str, Any]:
    """Stepped floats come back as 0.8600000000000001 from TPE and 0.86 from the queue."""
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in params.items()}
