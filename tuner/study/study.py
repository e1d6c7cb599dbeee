"""The Optuna study: storage, sampler, and the local loop's objective (how each trial ends is
:mod:`tuner.study.lifecycle`'s).

Storage defaults to ``sqlite:///studies/<name>.db``. The search space is stored with the study
the first time and read back on resume, so every run (and every worker) tunes the same space.
Trials that ran out of memory, predicted or observed, are COMPLETE with the ``oom`` constraint
set; only infrastructure faults (a crash, a hang, nothing measured) end as FAIL. A trial that
races the incumbent (:mod:`tuner.study.incumbent`, the default) and cannot reach it ends
PRUNED, and a sampler's repeat of a pruned config is recorded pruned again without a rerun.
"""

from __future__ import annotations

import importlib.util
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import TrialState

from tuner import serde
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext
from tuner.errors import ConfigError, LaunchError, MeasurementError, SpectuneError
from tuner.results import Source
from tuner.search.twin_steer import TwinSampler
from tuner.study.budget import Budget
from tuner.study.claims import claim_or_reuse
from tuner.study.incumbent import race_for
from tuner.study.lifecycle import OnTrial, TrialEnds
from tuner.study.loop import ask_tell_loop
from tuner.study.paths import StudyPaths
from tuner.study.storage import (
    HEARTBEAT_INTERVAL_S,
    BudgetExhausted,
    open_storage,
    safe_url,
    study_exists,
    study_names,
)
from tuner.trial.backends import Backend, BackendOptions, DockerSettings
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.record import (
    BUDGET_ATTR,
    RUN_ATTR,
    SOURCE_ATTR,
    SPACE_ATTR,
    RunFacts,
    TrialRecord,
    stored_space,
)
from tuner.trial.runner import PowerSetter, TrialRunner
from tuner.trial.scoring import DIRECTIONS, Limits

__all__ = [
    "SAMPLERS",
    "StudyOptions",
    "check_resume",
    "check_source",
    "claim_source",
    "extend_budget",
    "make_sampler",
    "open_existing",
    "open_study",
    "record_run",
    "run_trials",
    "study_backend_options",
]

SAMPLERS = ("spectune", "tpe", "random", "gp", "nsga2")


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    """Samplers by name. Optuna 5 samplers read the constraints set on each trial.

    ``spectune`` is TPE after a warm start from the simulator's predictions, which
    :func:`tuner.study.optimize.optimize` enqueues (see ``tuner/strategy.py``).
    """
    if name in ("spectune", "tpe"):
        tpe = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=8
        )
        # spectune: the same TPE, steered by the study's digital twin (tuner.search.twin_steer).
        return TwinSampler(tpe) if name == "spectune" else tpe
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        # Optuna's GP sampler imports PyTorch only when it first fits, after ten trials.
        if importlib.util.find_spec("torch") is None:
            raise ConfigError(
                "--sampler gp needs PyTorch: install it with pip install 'spectune[gp]', or "
                "choose --sampler spectune"
            )
        return optuna.samplers.GPSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise ConfigError(f"unknown sampler {name!r}: choose one of {', '.join(SAMPLERS)}")


def check_resume(
    name: str, storage: optuna.storages.BaseStorage, space: SearchSpace, backend: str
) -> None:
    """Refuses, before anything runs or is fetched, a space that differs from the one the study
    holds, and a backend whose kind of numbers (simulated, measured) it does not hold."""
    if name not in study_names(storage):
        return
    study = optuna.load_study(study_name=name, storage=storage)
    if _never_ran(study) and _stored_differs(study, space):  # open_study replaces it
        return
    check_source(study, backend)
    stored = stored_space(study)
    if stored is not None and space != stored:
        raise ConfigError(f"study {name!r} was created with {_difference(stored, space)}")


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
    if exists and space is not None:
        _replace_if_never_ran(name, storage, space)
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
        study.set_metric_names(list(Limits.of(space).names))
        study.set_user_attr(SPACE_ATTR, space.source)
        return study, space
    if space is not None and space != stored:
        raise ConfigError(f"study {name!r} was created with {_difference(stored, space)}")
    return study, stored


def _never_ran(study: optuna.Study) -> bool:
    """A study stored but never run (its space failed after it was stored, in an earlier
    version, or the run stopped before its first trial), or whose every trial failed before it
    measured anything (a flag vLLM refused at start-up), holds nothing to keep."""
    return all(t.state is TrialState.FAIL for t in study.get_trials(deepcopy=False))


def _stored_differs(study: optuna.Study, space: SearchSpace) -> bool:
    try:
        return stored_space(study) != space
    except ConfigError:  # stored by a version that let a broken space through
        return True


def _replace_if_never_ran(
    name: str, storage: optuna.storages.BaseStorage, space: SearchSpace
) -> None:
    """Deletes study ``name`` when it never ran a trial and holds another space, so a fixed
    space takes its name instead of being refused as a different one. The same space is
    resumed: a second run of one command must not delete the first one's fresh study."""
    study = optuna.load_study(study_name=name, storage=storage)
    if _never_ran(study) and _stored_differs(study, space):
        optuna.delete_study(study_name=name, storage=storage)


def _difference(stored: SearchSpace, asked: SearchSpace) -> str:
    """What a resume asked to change, with the flag that changed it."""
    if replace(asked, ttft_limit_ms=stored.ttft_limit_ms) == stored:
        return (
            f"a TTFT limit of {stored.ttft_limit_ms:g} ms, not {asked.ttft_limit_ms:g}: resume "
            "it without --slo-ttft-ms, or start a new study with --study NEW_NAME"
        )
    if replace(asked, prefer=stored.prefer) == stored:
        return (
            f"slo.prefer {stored.prefer}, not {asked.prefer}: resume it without --objective "
            "(spectune export --pick min-energy or max-throughput takes another pick), or "
            "start a new study with --study NEW_NAME"
        )
    if replace(asked, vllm_version=stored.vllm_version) == stored:
        return (
            f"vLLM version {stored.vllm_version or 'from the image'}, not "
            f"{asked.vllm_version or 'from the image'}: resume it without --vllm-version, or "
            "start a new study with --study NEW_NAME"
        )
    return (
        f"a different search space or hardware ({stored.name} on {stored.hardware.label}): "
        "resume it without --space/--hardware, or start a new study with --study NEW_NAME"
    )


def claim_source(study: optuna.Study, backend: str) -> None:
    """Keeps simulated and measured trials apart: a study takes the kind its first run had."""
    check_source(study, backend)
    if study.user_attrs.get(SOURCE_ATTR) is None:
        study.set_user_attr(SOURCE_ATTR, _source(backend))


def _source(backend: str) -> str:
    return BackendKind.parse(backend).source.value


def check_source(study: optuna.Study, backend: str) -> None:
    source, stored = _source(backend), study.user_attrs.get(SOURCE_ATTR)
    if stored is not None and stored != source:
        hint = (
            "--backend sim" if stored == Source.SIMULATED.value else "--backend docker or process"
        )
        raise ConfigError(
            f"study {study.study_name!r} holds {stored} trials and --backend {backend} would add "
            f"{source} ones: resume it with {hint}, or start a new study with --study NEW_NAME"
        )


DOCKER_ENV_ATTR = "docker_env"


def study_backend_options(
    study: optuna.Study, backend: str, options: BackendOptions, paths: StudyPaths
) -> BackendOptions:
    """``options`` with what a docker study keeps for every run and worker: its vLLM cache
    folder, and the ``--docker-env`` of the run that gave one (stored on first use; later runs
    and workers that give none get it back). Secrets are stored by name only, never their
    values. The other backends keep nothing.
    """
    if backend != BackendKind.DOCKER:
        return options
    settings = options.settings_of(DockerSettings)
    given = bool(settings.env) or settings.secrets != DockerSettings().secrets
    stored = study.user_attrs.get(DOCKER_ENV_ATTR)
    if given:
        study.set_user_attr(
            DOCKER_ENV_ATTR, {"env": dict(settings.env), "by_name": list(settings.secrets)}
        )
    elif stored:
        settings = replace(
            settings, env=tuple(stored["env"].items()), secrets=tuple(stored["by_name"])
        )
    settings = replace(settings, vllm_cache=settings.vllm_cache or paths.vllm_cache)
    return replace(options, settings=settings)


def extend_budget(study: optuna.Study, trials: int) -> int:
    """Lets the study run ``trials`` more trials (all workers together); returns the budget.

    While another run is still working on the study (a trial RUNNING), its allowance stays and
    this run's trials are added to it: two runs of one study share the budget instead of the
    second cutting the first short. Configs already WAITING (enqueued by hand, or proposals a
    stopped run left) are among this run's trials, not extra ones.
    """
    started = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)
    live = len(study.get_trials(deepcopy=False, states=started))
    budget = study.user_attrs.get(BUDGET_ATTR)
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    base = max(int(budget), live) if running and budget is not None else live
    study.set_user_attr(BUDGET_ATTR, base + trials)
    return base + trials


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
    budget: Budget | None = None  # a time budget: no trial that would leave no time to confirm
    # Measure in rounds against the incumbent and prune (tuner.trial.rounds); False: every
    # pair at the workload's fixed count, as plain samplers are usually run.
    rounds: bool = False
    held_gib: float = 0.0  # per GPU, what other processes held when this run started (NVML)
    power: PowerSetter | None = None  # sets the power limit trials search (one worker here)


def run_trials(
    study: optuna.Study,
    space: SearchSpace,
    backend: Backend,
    options: StudyOptions,
    on_trial: OnTrial | None = None,
) -> None:
    """Runs ``options.trials`` more trials; the server is stopped however this ends."""
    runner = TrialRunner.for_space(
        backend, space, options.ttft_limit_ms, options.held_gib, power=options.power
    )
    ends = TrialEnds(study, on_trial, str(options.log_dir))
    ran = [False]

    def finish(trial: optuna.Trial, record: TrialRecord) -> None:
        record = ends.write(trial, record)
        if record.restarted and not ran[0]:  # a server started: its version is known now
            record_run(study, backend, space)
            ran[0] = True
        ends.tell(record)

    worker = f"{socket.gethostname()}/{options.worker}"

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        trial.set_user_attr("worker", worker)  # before anything runs: a stale trial says whose
        config = space.suggest(trial)
        earlier = claim_or_reuse(study, trial, HEARTBEAT_INTERVAL_S)
        if earlier is not None:  # another trial measured this config: don't rerun
            reused = earlier.reused_by(trial.number, worker)
            finish(trial, reused)
            return _objective(reused)
        context = LaunchContext(study.study_name, trial.number, options.log_dir)
        race = race_for(study, space, config, options.rounds)
        try:
            outcome = runner.run(config, context, options.seed * 100_003 + trial.number, race)
        except SpectuneError as exc:
            failed = TrialRecord.failed(trial.number, config, exc, backend.source, worker)
            finish(trial, failed)
            ends.count(failed)  # stops the study when the setup keeps failing
            raise
        record = TrialRecord.from_outcome(trial.number, outcome, backend.source, worker)
        finish(trial, record)
        ends.count(record)
        return _objective(record)

    budget = options.budget

    try:
        while True:
            try:
                # A config error (no image, bad flag) stops the study; one trial's fault does not.
                ask_tell_loop(
                    study,
                    objective,
                    options.trials,
                    catch=(LaunchError, MeasurementError),
                    stop=lambda: budget is not None and not budget.allows_another(study),
                )
                return
            except BudgetExhausted:
                if not _await_unfinished(study):
                    return
    finally:
        runner.close()


def _objective(record: TrialRecord) -> tuple[float, float]:
    """The values to tell Optuna; a pruned record raises ``TrialPruned`` (stored PRUNED)."""
    if record.state is TrialState.PRUNED:
        raise optuna.TrialPruned(record.pruned)
    return record.objective


def record_run(study: optuna.Study, backend: Backend, space: SearchSpace) -> RunFacts:
    """Stores what ran the study's servers (:class:`RunFacts`) once one has started."""
    facts = backend.facts(space)
    study.set_user_attr(RUN_ATTR, serde.dump(facts))
    return facts


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
