"""The Optuna study: storage, sampler, objective, and what each trial records.

Storage defaults to ``sqlite:///studies/<name>.db``. The search space is stored with the study
the first time and read back on resume, so every run (and every worker) tunes the same space.
Trials that ran out of memory, predicted or observed, are COMPLETE with the ``oom`` constraint
set; only infrastructure faults (a crash, a hang, nothing measured) end as FAIL.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState

from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, server_to_dict
from tuner.errors import ConfigError, LaunchError, MeasurementError, SpectuneError, StartupFailure
from tuner.results import Source
from tuner.study.storage import (
    BUDGET_ATTR,
    COUNTED_STATES,
    HEARTBEAT_INTERVAL_S,
    BudgetExhausted,
    open_storage,
    safe_url,
    study_exists,
    study_names,
)
from tuner.trial.backends import Backend
from tuner.trial.record import SOURCE_ATTR, SPACE_ATTR, stored_space
from tuner.trial.runner import TrialOutcome, TrialRunner
from tuner.trial.scoring import CONSTRAINT_KEYS, DIRECTIONS, OBJECTIVE_NAMES, TrialStatus

__all__ = [
    "SAMPLERS",
    "StudyOptions",
    "claim_source",
    "extend_budget",
    "make_sampler",
    "open_existing",
    "open_study",
    "run_trials",
]

# FAIL trials do not use up the budget, so a setup where every launch fails would run for ever.
MAX_FAILURES_IN_A_ROW = 3
SAMPLERS = ("spectune", "tpe", "random", "gp", "nsga2")


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """Samplers by name. Optuna 5 samplers read the constraints set on each trial.

    ``spectune`` is TPE after a warm start from the simulator's predictions, which
    :func:`tuner.study.optimize.optimize` enqueues (see ``tuner/strategy.py``).
    """
    if name in ("spectune", "tpe"):
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=8
        )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ConfigError(f"unknown sampler {name!r}: choose one of {', '.join(SAMPLERS)}")


def open_study(
    name: str,
    storage: optuna.storages.BaseStorage,
    space: SearchSpace | None,
    sampler: optuna.samplers.BaseSampler,
) -> tuple[optuna.Study, SearchSpace]:
    """Creates the study or resumes it; returns it with the space it tunes.

    A new study needs ``space``; an existing one uses its stored space, and refuses a
    different one rather than mixing two spaces in one study.
    """
    exists = name in study_names(storage)
    if not exists and space is None:
        raise ConfigError(f"study {name!r} does not exist: create it with spectune optimize")
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=sampler,
        directions=list(DIRECTIONS),
        load_if_exists=True,
    )
    stored = stored_space(study)
    if stored is None:
        assert space is not None
        study.set_metric_names(list(OBJECTIVE_NAMES))
        study.set_user_attr(SPACE_ATTR, space.source)
        return study, space
    if space is not None and space != stored:
        raise ConfigError(
            f"study {name!r} was created with a different search space or hardware "
            f"({stored.name} on {stored.hardware.label}): resume it without --space/--hardware, "
            "or start a new study with --study NEW_NAME"
        )
    return study, stored


def claim_source(study: optuna.Study, backend: str) -> None:
    """Keeps simulated and measured trials apart: a study takes the kind its first run had."""
    source = (Source.SIMULATED if backend == "sim" else Source.MEASURED).value
    stored = study.user_attrs.get(SOURCE_ATTR)
    if stored is None:
        study.set_user_attr(SOURCE_ATTR, source)
    elif stored != source:
        hint = (
            "--backend sim" if stored == Source.SIMULATED.value else "--backend docker or process"
        )
        raise ConfigError(
            f"study {study.study_name!r} holds {stored} trials and --backend {backend} would add "
            f"{source} ones: resume it with {hint}, or start a new study with --study NEW_NAME"
        )


def extend_budget(study: optuna.Study, trials: int) -> int:
    """Lets the study run ``trials`` more trials (all workers together); returns the budget."""
    budget = len(study.get_trials(deepcopy=False, states=COUNTED_STATES)) + trials
    study.set_user_attr(BUDGET_ATTR, budget)
    return budget


def open_existing(
    name: str, url: str, sampler: optuna.samplers.BaseSampler | None = None
) -> tuple[optuna.Study, SearchSpace]:
    """Opens a study that must already exist (nothing is created), with its stored space."""
    if not study_exists(url, name):
        raise ConfigError(
            f"no study {name!r} in {safe_url(url)}: check the name or pass --storage "
            "(spectune optimize creates studies)"
        )
    return open_study(name, open_storage(url), None, sampler or optuna.samplers.RandomSampler())


@dataclass(frozen=True)
class StudyOptions:
    trials: int | None  # None: until the study's budget is used up
    seed: int
    log_dir: Path
    ttft_limit_ms: float
    worker: str = "0"  # recorded with each trial as host/worker


# Called after every trial: (trial number, outcome, None), or (number, None, note) for a trial
# that did not run: "failed: <why>" or "same as #N".
OnTrial = Callable[[int, TrialOutcome | None, str | None], None]


def run_trials(
    study: optuna.Study,
    space: SearchSpace,
    backend: Backend,
    options: StudyOptions,
    on_trial: OnTrial | None = None,
) -> None:
    """Runs ``options.trials`` more trials; the server is stopped however this ends."""
    runner = TrialRunner(backend, space.hardware, options.ttft_limit_ms)
    # Every trial's record and logs become dashboard artifacts as soon as it ends.
    listeners = [on_trial] if on_trial else []

    def notify(number: int, outcome: TrialOutcome | None, note: str | None) -> None:
        for listener in listeners:
            listener(number, outcome, note)

    failures_in_a_row = [0]

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        trial.set_user_attr("worker", f"{socket.gethostname()}/{options.worker}")
        config = space.suggest(trial)
        earlier = _earlier_same_config(study, trial)
        if earlier is not None:  # samplers repeat points of a discrete space: don't rerun
            values = _reuse(trial, earlier)
            notify(trial.number, None, f"same as #{earlier.number}")
            return values
        context = LaunchContext(study.study_name, trial.number, options.log_dir)
        try:
            outcome = runner.run(config, context, seed=options.seed * 100_003 + trial.number)
        except SpectuneError as exc:
            _record_failure(trial, exc)
            notify(trial.number, None, f"failed: {exc}")
            failures_in_a_row[0] += 1
            if failures_in_a_row[0] >= MAX_FAILURES_IN_A_ROW:  # a broken setup, not bad luck
                raise SpectuneError(
                    f"{MAX_FAILURES_IN_A_ROW} trials in a row failed, the last with: {exc}; "
                    f"stopping (check the image, model and flags; logs in {options.log_dir})"
                ) from None
            raise
        failures_in_a_row[0] = 0
        _record(trial, outcome, backend)
        notify(trial.number, outcome, None)
        return outcome.score.values

    try:
        while True:
            try:
                # A config error (no image, bad flag) stops the study; one trial's fault does not.
                study.optimize(
                    objective, n_trials=options.trials, catch=(LaunchError, MeasurementError)
                )
                return
            except BudgetExhausted:
                if not _await_unfinished(study):
                    return
    finally:
        runner.close()


def _await_unfinished(study: optuna.Study) -> bool:
    """Waits while other workers' trials run; True when a dead worker's trial is re-queued.

    The budget counts RUNNING trials, so a worker killed mid-trial holds a place until its
    heartbeat goes stale; someone must then fail it (which re-queues its config once) and run
    the retry. Live workers that finish last do that here.
    """
    while True:
        fail_stale_trials(study)
        states = {t.state for t in study.get_trials(deepcopy=False)}
        if TrialState.WAITING in states:
            return True
        if TrialState.RUNNING not in states:
            return False
        time.sleep(HEARTBEAT_INTERVAL_S)


def _record(trial: optuna.Trial, outcome: TrialOutcome, backend: Backend) -> None:
    config = outcome.config
    trial.set_user_attr("server", server_to_dict(config.server))
    trial.set_user_attr("temperature", config.client.temperature)
    trial.set_user_attr("status", outcome.status.value)
    trial.set_user_attr("restarted", outcome.restarted)
    trial.set_user_attr("memory", _finite(asdict(outcome.memory)))
    launched = outcome.status is not TrialStatus.OOM_PREDICTED
    trial.set_user_attr("source", (backend.source if launched else Source.PREDICTED).value)
    if outcome.results:
        trial.set_user_attr("summary", _finite(outcome.results[0].summary()))
        trial.set_user_attr("levels", [_finite(r.summary()) for r in outcome.results])
    if outcome.failure:
        trial.set_user_attr("failure", outcome.failure)
    if outcome.log_tail:
        trial.set_user_attr("log_tail", outcome.log_tail[-4000:])
    _set_constraints(trial, outcome.score.constraints)


def _set_constraints(trial: optuna.Trial, values: Sequence[float]) -> None:
    for key, value in zip(CONSTRAINT_KEYS, values, strict=True):
        trial.set_constraint(key, value)


def _earlier_same_config(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial | None:
    wanted = _rounded(trial.params)
    for done in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if done.number != trial.number and _rounded(done.params) == wanted:
            return done
    return None


def _rounded(params: dict[str, Any]) -> dict[str, Any]:
    """Stepped floats come back as 0.8600000000000001 from TPE and 0.86 from the queue."""
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in params.items()}


# What a reused result carries over; who ran it (worker), its logs and failures stay its own.
_RESULT_ATTRS = {"server", "temperature", "status", "source", "memory", "summary", "levels"}


def _reuse(trial: optuna.Trial, earlier: FrozenTrial) -> tuple[float, float]:
    """Records an earlier trial's result for the same config, marked as such; nothing runs."""
    for key in _RESULT_ATTRS & earlier.user_attrs.keys():
        trial.set_user_attr(key, earlier.user_attrs[key])
    trial.set_user_attr("duplicate_of", earlier.number)
    _set_constraints(trial, [earlier.constraints[key] for key in CONSTRAINT_KEYS])
    values = earlier.values
    return float(values[0]), float(values[1])


def _record_failure(trial: optuna.Trial, exc: SpectuneError) -> None:
    trial.set_user_attr("status", "failed")
    trial.set_user_attr("failure", str(exc))
    if isinstance(exc, StartupFailure):
        trial.set_user_attr("log_tail", exc.log_tail[-4000:])


def _finite(data: dict[str, Any]) -> dict[str, Any]:
    """JSON has no inf/nan; the database gets None instead."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in data.items()
    }
