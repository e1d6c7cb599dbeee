"""``spectune optimize`` as a library call: open the study, run trials, confirm the best.

Writing ``best.yaml`` is the export layer's job (:func:`tuner.export.vllm.write_best`).
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner.analysis.confirmed import Confirmed
from tuner.analysis.k_table import KTableVerdict
from tuner.analysis.picks import Candidate, pareto_front, recommend
from tuner.config.bounds import MAX_SEED
from tuner.config.runner_report import v1_warning
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.results import Source
from tuner.search.plan import (
    Budget,
    SimulatedBudget,
    confirmation_runs,
    fit_confirmation,
    plan_study,
)
from tuner.search.strategy import warm_start
from tuner.study.cluster import (
    RayOptions,
    check_cluster,
    check_ray_options,
    ray_backend_factory,
    run_on_ray,
)
from tuner.study.confirm import OnRun, confirm, confirm_k_table
from tuner.study.paths import StudyPaths, default_storage
from tuner.study.prefetch import prefetch_models
from tuner.study.storage import check_writable, open_storage
from tuner.study.study import (
    OnTrial,
    StudyOptions,
    check_resume,
    claim_source,
    extend_budget,
    make_sampler,
    open_study,
    run_trials,
    study_backend_options,
)
from tuner.study.twin_calibrate import seed_study
from tuner.study.workers import WorkerRequest, check_parallel_storage, gpu_slices, spawn_workers
from tuner.trial.backends import Backend, BackendOptions, backend_factory
from tuner.trial.backends.served import ServedBackend
from tuner.trial.record import TrialRecord

__all__ = ["OptimizeRequest", "OptimizeResult", "check_request", "optimize"]


@dataclass(frozen=True)
class OptimizeRequest:
    study: str
    space: SearchSpace | None  # None: resume with the stored space
    backend: str
    trials: int
    studies_dir: Path
    storage: str | None = None
    sampler: str = "spectune"
    seed: int = 0
    workers: int = 1
    gpus_per_trial: int | None = None  # default: the GPU count of the space's hardware
    confirm_top: int = 3  # configs measured again on fresh servers before export (0: none)
    confirm_repeats: int = 3
    # Backend settings beyond study, seed and GPUs (which optimize fills in per worker).
    backend_options: BackendOptions = field(default_factory=lambda: BackendOptions(study=""))
    ray: RayOptions | None = None  # trials on a Ray cluster's nodes instead of this host
    # Download the space's weights into the host's Hugging Face cache before the first start
    # (measured backends on this host); off where vLLM gets them itself, or needs none.
    prefetch: bool = True
    time_budget_s: float | None = None  # trials stop in time to confirm within it
    # Pairs in rounds against the incumbent, losing trials pruned (tuner.trial.rounds); one
    # worker on this host only: other workers measure the fixed count.
    rounds: bool = False


@dataclass(frozen=True)
class OptimizeResult:
    study: str
    storage: str
    space: SearchSpace
    trials: int  # trials in the study now, all runs together
    pareto: list[TrialRecord]  # the feasible Pareto front, fastest first
    recommended: Candidate | None  # with its confirmation, when it has one
    paths: StudyPaths
    handle: optuna.Study  # the opened study, for exports
    confirmed: list[Confirmed]  # the re-measured configs, best candidates first
    k_table: KTableVerdict | None = None  # the per-batch-size K table's own runs, if proposed
    budget_note: str | None = None  # why the time budget stopped the trials early


def check_request(request: OptimizeRequest) -> None:
    """Refuses bad arguments before anything runs (the CLI calls it before its live table).

    Raises:
        ConfigError: no trials or workers, an unknown sampler or backend, several workers on
            SQLite, or a studies folder that cannot be written.
    """
    if request.trials < 1:
        raise ConfigError(f"--trials {request.trials}: ask for at least 1 trial")
    if request.workers < 1:
        raise ConfigError(f"--workers {request.workers}: use at least 1 worker")
    highest = MAX_SEED - request.workers + 1  # worker i samples with seed + i
    if request.seed > highest:
        raise ConfigError(
            f"--seed {request.seed}: with {request.workers} workers the last one's seed passes "
            f"{MAX_SEED}, the largest Optuna takes; use a seed up to {highest}"
        )
    make_sampler(request.sampler, request.seed)
    backend_factory(request.backend)
    if request.ray is not None:
        check_ray_options(request.ray, request.workers)
    if request.time_budget_s is not None and (request.workers > 1 or request.ray is not None):
        raise ConfigError(
            "--time-budget runs trials in one worker on this host: drop --workers or --ray, "
            "or drop --time-budget"
        )
    storage_url = request.storage or default_storage(request.study, request.studies_dir)
    check_parallel_storage(storage_url, request.workers)
    check_writable(request.studies_dir)  # logs and exports go there whatever the storage
    if request.space is not None:  # a corrupt database or a changed space: before any table
        check_resume(request.study, open_storage(storage_url), request.space, request.backend)
        if request.backend == "process" and request.ray is None:  # Ray nodes have their own
            _check_program(request.backend_options.vllm_command)


def _check_program(argv: tuple[str, ...]) -> None:
    """The process backend's vLLM exists, before a study is stored whose every trial would
    fail to start it."""
    if argv and shutil.which(argv[0]) is None:
        raise ConfigError(
            f"--vllm-command {shlex.join(argv)}: {argv[0]} is no executable program (on PATH "
            "or as a path); install vLLM, or name it, e.g. --vllm-command /opt/vllm/bin/vllm"
        )


def _prepare(request: OptimizeRequest, backend: Backend | None, space: SearchSpace) -> None:
    """What must hold or be on this host before the study stores anything or any trial's clock
    starts: the backend's checks on a probe (an engine that answers, GPUs nobody else holds,
    the image, pulled if missing), then the weights (:func:`prefetch_models`)."""
    options = replace(request.backend_options, study=request.study, seed=request.seed)
    probe = backend or backend_factory(request.backend)(space, options)
    try:
        if isinstance(probe, ServedBackend):
            probe.prepare()
    finally:
        if backend is None:
            probe.close()
    if request.prefetch and probe.source is Source.MEASURED:
        prefetch_models(space, options.on_startup)


def optimize(  # noqa: C901  (the run, one step after another (a StudyRun would own them))
    request: OptimizeRequest,
    on_trial: OnTrial | None = None,
    backend: Backend | None = None,
    on_tick: Callable[[int], None] | None = None,
    on_confirm: OnRun | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> OptimizeResult:
    """Runs ``request.trials`` more trials (in ``request.workers`` workers) and exports the best.

    Args:
        request: what to run.
        on_trial: called after each trial of an in-process run (one worker).
        backend: a ready backend to use instead of building one (tests, benchmarks).
        on_tick: called about once a second while worker processes run, with the number of
            trials they have finished so far.
        on_confirm: called after each confirmation run.
        on_notice: called once, before the first trial, with a warning about the study's
            space where it has one (configs on vLLM's deprecated V1 model runner).
    """
    began = time.time()
    check_request(request)
    sampler = make_sampler(request.sampler, request.seed)
    build_backend = backend_factory(request.backend)
    if request.ray is not None:  # servers (confirmation's too) run on the cluster's nodes
        build_backend = ray_backend_factory(request.ray, request.backend)
    storage_url = request.storage or default_storage(request.study, request.studies_dir)
    if request.time_budget_s is not None and request.space is not None:
        request = _fit_confirmation(request, request.space)
    budget = None
    if request.time_budget_s is not None and request.space is not None:
        budget = _budget(request, request.space, began)  # too short for a trial: nothing stored
    storage = open_storage(storage_url)
    if request.space is not None and request.ray is None:  # checked before anything is stored
        _prepare(request, backend, request.space)
    if request.space is not None and request.ray is not None:  # no node has it: nothing stored
        check_cluster(request.ray, request.space.hardware)
    study, space = open_study(request.study, storage, request.space, sampler)
    if request.time_budget_s is not None and budget is None:  # a resume: the stored space
        request = _fit_confirmation(request, space)
        budget = _budget(request, space, began)
    claim_source(study, request.backend)  # before a resume fetches anything for the wrong kind
    if request.space is None and request.backend == "process" and request.ray is None:
        _check_program(request.backend_options.vllm_command)  # a resume: check_request could not
    if request.space is None and request.ray is None:  # a resume: opening it stored nothing
        _prepare(request, backend, space)
    per_trial = request.gpus_per_trial or space.hardware.count
    if per_trial != space.hardware.count:
        raise ConfigError(
            f"--gpus-per-trial {per_trial} does not match the study's hardware "
            f"{space.hardware.label}: use --gpus-per-trial {space.hardware.count}"
        )
    runners = v1_warning(space)
    if on_notice is not None and runners:
        on_notice(runners)
    paths = StudyPaths.of(request.studies_dir, request.study, storage_url)
    paths.folder.mkdir(parents=True, exist_ok=True)
    options = replace(request.backend_options, study=request.study, seed=request.seed)
    options = study_backend_options(study, options, paths)
    extend_budget(study, request.trials)
    if request.sampler == "spectune":  # before any worker starts, so they all share the queue
        source = Source.SIMULATED if request.backend == "sim" else Source.MEASURED
        seed_study(study, request.studies_dir, space, source)  # the host's calibration, if any
        warm_start(study, space, request.trials)
    if request.ray is not None:
        run_on_ray(study, space, request.ray, request.backend, options, request.seed, on_trial)
    elif request.workers == 1:
        if request.gpus_per_trial is not None and options.gpus is None:
            options = replace(options, gpus=gpu_slices(1, per_trial)[0])
        run_trials(
            study,
            space,
            backend or build_backend(space, options),
            StudyOptions(
                request.trials,
                request.seed,
                paths.logs,
                space.ttft_limit_ms,
                budget=budget,
                rounds=request.rounds,
            ),
            on_trial,
        )
    else:
        done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        before = len(study.get_trials(deepcopy=False, states=done))

        def tick() -> None:
            if on_tick:
                on_tick(len(study.get_trials(deepcopy=False, states=done)) - before)

        worker = WorkerRequest(
            request.study,
            storage_url,
            request.backend,
            request.studies_dir,
            options,
            request.sampler,
            prefetch=False,  # done above, before the study was stored
        )
        spawn_workers(worker, request.workers, per_trial, tick)
    confirmed: list[Confirmed] = []
    k_table = None
    feasible = recommend(study) is not None  # confirming changes no trial's feasibility
    if feasible and request.confirm_top > 0:
        # A fresh backend: run_trials closed its own, and each run needs a fresh server.
        fresh = backend or build_backend(space, options)
        try:
            confirmed = confirm(
                study,
                space,
                fresh,
                request.confirm_top,
                request.confirm_repeats,
                log_dir=paths.logs,
                seed=request.seed,
                on_run=on_confirm,
            )
            k_table = confirm_k_table(
                study, space, fresh, request.confirm_repeats, log_dir=paths.logs, seed=request.seed
            )
        finally:
            fresh.close()
    recommended = recommend(study)  # after confirmation: confirmed numbers first
    return OptimizeResult(
        study=request.study,
        storage=storage_url,
        space=space,
        trials=len(study.trials),
        pareto=pareto_front(study),
        recommended=recommended,
        paths=paths,
        handle=study,
        confirmed=confirmed,
        k_table=k_table,
        budget_note=None if budget is None else budget.note(),
    )


def _fit_confirmation(request: OptimizeRequest, space: SearchSpace) -> OptimizeRequest:
    """``request`` with as many confirmation runs as fit in a third of its time budget."""
    assert request.time_budget_s is not None
    plan = plan_study(space, request.trials, request.confirm_top, request.confirm_repeats)
    top, repeats = fit_confirmation(
        space,
        request.confirm_top,
        request.confirm_repeats,
        request.time_budget_s,
        plan.confirm_cost.total_s,
    )
    return replace(request, confirm_top=top, confirm_repeats=repeats)


def _budget(request: OptimizeRequest, space: SearchSpace, began: float) -> Budget:
    """The run's time budget, its prior from the plan; refused when one trial cannot fit."""
    assert request.time_budget_s is not None
    runs = confirmation_runs(space, request.confirm_top, request.confirm_repeats)
    plan = plan_study(space, request.trials, request.confirm_top, request.confirm_repeats)
    prior = plan.confirm_cost
    budget = (
        # A simulated trial takes what it takes here, not a GPU's time: the simulator's clock.
        SimulatedBudget(request.time_budget_s, prior, runs, space.workload.warmup, began)
        if request.backend == "sim"
        else Budget(request.time_budget_s, prior, runs, began)
    )
    budget.check_fits()
    return budget
