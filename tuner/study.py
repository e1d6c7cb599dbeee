"""The Optuna study: storage, sampler, objective, and what each trial records.

Storage defaults to ``sqlite:///studies/<name>.db``. The search space is stored with the study
the first time and read back on resume, so every run (and every worker) tunes the same space.
Trials that ran out of memory, predicted or observed, are COMPLETE with the ``oom`` constraint
set; only infrastructure faults (a crash, a hang, nothing measured) end as FAIL.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.backends import Backend
from tuner.errors import ConfigError, SpectuneError, StartupFailure
from tuner.launch.base import LaunchContext
from tuner.results import Source
from tuner.runner import TrialOutcome, TrialRunner
from tuner.scoring import CONSTRAINT_KEYS, DIRECTIONS, OBJECTIVE_NAMES, TrialStatus
from tuner.space import SearchSpace, space_from_dict
from tuner.storage import BUDGET_ATTR, COUNTED_STATES, BudgetExhausted, study_names
from tuner.trial_config import server_to_dict

__all__ = [
    "SAMPLERS",
    "StudyOptions",
    "make_sampler",
    "open_study",
    "extend_budget",
    "run_trials",
    "stored_space",
]

SAMPLERS = ("tpe", "random", "gp", "nsga2")
_SPACE_ATTR = "space"


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """Samplers by name. Optuna 5 samplers read the constraints set on each trial."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=8)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ConfigError(f"unknown sampler {name!r}: choose one of {', '.join(SAMPLERS)}")


def stored_space(study: optuna.Study) -> SearchSpace | None:
    raw = study.user_attrs.get(_SPACE_ATTR)
    return None if raw is None else space_from_dict(raw, origin=f"study {study.study_name}")


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
        study.set_user_attr(_SPACE_ATTR, space.source)
        return study, space
    if space is not None and space != stored:
        raise ConfigError(
            f"study {name!r} was created with a different search space or hardware "
            f"({stored.name} on {stored.hardware.label}): resume it without --space/--hardware, "
            "or start a new study with --study NEW_NAME"
        )
    return study, stored


def extend_budget(study: optuna.Study, trials: int) -> int:
    """Lets the study run ``trials`` more trials (all workers together); returns the budget."""
    budget = len(study.get_trials(deepcopy=False, states=COUNTED_STATES)) + trials
    study.set_user_attr(BUDGET_ATTR, budget)
    return budget


@dataclass(frozen=True)
class StudyOptions:
    trials: int | None  # None: until the study's budget is used up
    seed: int
    log_dir: Path
    ttft_limit_ms: float


# Called after every trial: (trial number, outcome or None, failure message or None).
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

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        config = space.suggest(trial)
        context = LaunchContext(study.study_name, trial.number, options.log_dir)
        try:
            outcome = runner.run(config, context, seed=options.seed * 100_003 + trial.number)
        except SpectuneError as exc:
            _record_failure(trial, exc)
            if on_trial:
                on_trial(trial.number, None, str(exc))
            raise
        _record(trial, outcome, backend)
        if on_trial:
            on_trial(trial.number, outcome, None)
        return outcome.score.values

    try:
        study.optimize(objective, n_trials=options.trials, catch=(SpectuneError,))
    except BudgetExhausted:
        pass  # other workers used up the study's budget: this worker is done
    finally:
        runner.close()


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
    for key, value in zip(CONSTRAINT_KEYS, outcome.score.constraints, strict=True):
        trial.set_constraint(key, value)
    # optuna-dashboard 0.21 reads only the legacy list; keep it equal to the keyed values.
    trial.storage.set_trial_system_attr(
        trial._trial_id, "constraints", list(outcome.score.constraints)
    )


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


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
