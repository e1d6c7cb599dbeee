"""One ``spectune optimize``, opened once: its storage, space, study folder, time budget and
backend settings, and the steps :func:`tuner.study.optimize.optimize` takes on them.

:meth:`StudyRun.open` reads the request, the storage and the host and stores nothing, so the
CLI opens it before its live table and every refusal comes before the table. The steps after
it write: :meth:`~StudyRun.start` stores (or resumes) the study, :meth:`~StudyRun.export`
writes ``best.yaml``.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import optuna

from tuner.analysis.confirmed import Confirmed
from tuner.analysis.k_table import KTableVerdict
from tuner.analysis.picks import Candidate, pareto_front, recommend
from tuner.catalog.tenants import Tenants, record_tenants
from tuner.config.runner_report import v1_warning
from tuner.config.running_cap import cap_warning
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError, LaunchError
from tuner.export.vllm import export
from tuner.launch.exit_hooks import signal_raised
from tuner.launch.preflight import Preflight
from tuner.search.plan import (
    Budget,
    SimulatedBudget,
    StudyPlan,
    fit_confirmation,
    plan_study,
)
from tuner.search.startup import StartupPrices
from tuner.search.strategy import warm_start
from tuner.study.cluster.executor import OnRay
from tuner.study.confirm import OnRun, confirm, confirm_k_table
from tuner.study.executor import Executor, InProcess, OnTick
from tuner.study.host import held_elsewhere, leave_room, on_this_host
from tuner.study.judge import judged_space
from tuner.study.lifecycle import OnTrial
from tuner.study.listing import resuming
from tuner.study.paths import StudyPaths, write_whole
from tuner.study.request import OptimizeRequest, check_request
from tuner.study.storage import open_if_present, open_storage, study_names
from tuner.study.study import (
    check_resume,
    claim_source,
    extend_budget,
    make_sampler,
    open_study,
    study_backend_options,
)
from tuner.study.twin_calibrate import seed_study
from tuner.study.workers import LocalWorkers
from tuner.trial.backends import Backend, BackendFactory, BackendOptions, ProcessSettings
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.backends.served import ServedBackend
from tuner.trial.record import TrialRecord, records, stored_space

__all__ = ["OptimizeResult", "StudyRun", "plan_run", "stored_startups", "write_best"]

Notice = Callable[[str], None]


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
    best_yaml: Path | None = None  # the recommended config, written; None: nothing feasible


@dataclass
class StudyRun:
    """A study run from its validated request to ``best.yaml``; :meth:`open` builds it."""

    request: OptimizeRequest  # with as many confirmation runs as fit its time budget
    space: SearchSpace  # the space asked for, or the stored one on a resume
    resume: bool  # the study exists and keeps its stored space
    storage: optuna.storages.BaseStorage
    paths: StudyPaths
    executor: Executor  # where the trials run: this process, worker processes, a Ray cluster
    build_backend: BackendFactory  # the chosen backend, where the executor runs servers
    options: BackendOptions  # its settings, the study's own added once it is started
    budget: Budget | None
    backend: Backend | None = None  # a ready backend (tests, benchmarks)
    on_notice: Notice | None = None
    _study: optuna.Study | None = field(default=None, init=False)  # start() stores it
    # Other processes' GPU memory, read by prepare() for a new study; start() stores it.
    tenants: Tenants | None = field(default=None, init=False)

    @classmethod
    def open(
        cls,
        request: OptimizeRequest,
        backend: Backend | None = None,
        on_notice: Notice | None = None,
    ) -> StudyRun:
        """Checks the request against its storage and this host; opens the storage once and
        stores nothing.

        Args:
            request: what to run.
            backend: a ready backend to use instead of building one (tests, benchmarks).
            on_notice: called with each line to show before the trials: that the study
                resumes, that this host's GPUs replace the space's, the space's warnings.

        Raises:
            ConfigError: bad arguments (:func:`check_request`), a space the study does not
                hold, a study of the other kind of numbers, no GPU for a measured backend, no
                vLLM program, a GPU count the hardware does not have, a time budget too short
                for one trial.
        """
        began = time.time()  # the time budget counts from here
        check_request(request)
        url = request.storage_url
        storage = open_if_present(url)  # a GPU refused below leaves no SQLite file behind
        exists = storage is not None and request.study in study_names(storage)
        resume = request.space is None or (request.resume_stored and exists)
        if resume:
            storage = storage or open_storage(url)
            space = _stored(request.study, storage)
        else:
            space = _asked(request, on_notice)  # this host's GPUs: before any file is made
            storage = storage or open_storage(url)
        check_resume(request.study, storage, space, request.backend)
        if exists and on_notice is not None:  # rerunning adds trials: said once it may resume
            on_notice(resuming(storage, request.study, request.trials))
        if (
            request.backend == BackendKind.PROCESS and request.ray is None
        ):  # Ray nodes have their own
            _check_program(request.backend_options.settings_of(ProcessSettings).vllm_command)
        _check_gpus_per_trial(request.gpus_per_trial, space)
        budget = None
        if request.time_budget_s is not None:  # too short for a trial: nothing stored
            startups = _startups(storage, request.study) if exists else StartupPrices()
            request, budget = _time_budget(request, space, began, startups)
        executor = _executor(request)
        return cls(
            request=request,
            space=space,
            resume=resume,
            storage=storage,
            paths=StudyPaths.of(request.studies_dir, request.study, url),
            executor=executor,
            build_backend=executor.backend_factory(request.backend),
            options=replace(request.backend_options, study=request.study, seed=request.seed),
            budget=budget,
            backend=backend,
            on_notice=on_notice,
        )

    @property
    def study(self) -> optuna.Study:
        assert self._study is not None, "StudyRun.start stores the study first"
        return self._study

    def prepare(self) -> None:
        """What must hold or be on the trials' hosts before the study stores anything or any
        trial's clock starts (the executor's :meth:`~tuner.study.executor.Executor.prepare`),
        then, for a new study, the memory other processes hold (:func:`~tuner.study.host.
        leave_room`) and the pre-flight: the vLLM that will serve the trials judges the space,
        and what it refuses is taken out (:func:`~tuner.study.judge.judged_space`)."""
        self.executor.prepare(self)
        if self.resume or self.request.ray is not None:  # Ray's images are on its nodes
            return
        self.tenants = held_elsewhere(self.request.backend, self.options.gpus)
        self.space = leave_room(self.space, self.tenants, self.on_notice)
        verdict = self._preflight()
        if verdict is not None:
            self.space = judged_space(self.space, verdict, self.on_notice)

    def _preflight(self) -> Preflight | None:
        """The backend's pre-flight verdict on the space; None where it has none, or where the
        image holds no vLLM it can ask (said once: spectune's own rules then judged it)."""
        probe = self.backend or self.build_backend(self.space, self.options)
        try:
            return probe.judge(self.space) if isinstance(probe, ServedBackend) else None
        except (ConfigError, LaunchError) as why:
            if signal_raised() is not None:  # a library turned a signal's exception into this
                raise
            if self.on_notice is not None:
                self.on_notice(
                    f"WARNING: the pre-flight could not ask the image's vLLM ({why}); "
                    "spectune's own rules judged the space"
                )
            return None
        finally:
            if self.backend is None:
                probe.close()

    def start(self) -> None:
        """Stores the study (or resumes it) with what this run adds: its trials, its kind of
        numbers, the backend settings every later run and worker gets back."""
        request = self.request
        sampler = make_sampler(request.sampler, request.seed)
        stored = None if self.resume else self.space
        self._study, self.space = open_study(request.study, self.storage, stored, sampler)
        claim_source(self.study, request.backend)
        if self.tenants is not None:  # the warm start and the twin start from it
            record_tenants(self.study, self.tenants)
        for notice in (self.space.newer_note, v1_warning(self.space), cap_warning(self.space)):
            if self.on_notice is not None and notice:
                self.on_notice(notice)
        self.paths.folder.mkdir(parents=True, exist_ok=True)
        self.options = study_backend_options(self.study, request.backend, self.options, self.paths)
        extend_budget(self.study, request.trials)

    def warm_start(self) -> None:
        """Seeds the spectune sampler's queue before any worker starts, so they all share it."""
        if self.request.sampler != "spectune":
            return
        source = BackendKind.parse(self.request.backend).source
        seed_study(self.study, self.request.studies_dir, self.space, source)  # host calibration
        warm_start(self.study, self.space, self.request.trials)

    def run_trials(self, on_trial: OnTrial | None, on_tick: OnTick | None = None) -> None:
        """The request's trials, where the executor runs them."""
        self.executor.run_trials(self, on_trial, on_tick)

    def confirm(self, on_confirm: OnRun | None) -> tuple[list[Confirmed], KTableVerdict | None]:
        """The best configs measured again on fresh servers, and the K table's own runs."""
        request = self.request
        if recommend(self.study) is None:  # nothing to confirm
            return [], None
        if self.budget is not None:  # the trials may have overrun: only what still fits
            left = self.budget.confirmation_left(self.study, self.space, request.confirmation)
            request = request.confirming(left)
        if request.confirm_top == 0:
            return [], None
        # A fresh backend: run_trials closed its own, and each run needs a fresh server.
        fresh = self.backend or self.build_backend(self.space, self.options)
        logs, seed, repeats = self.paths.logs, request.seed, request.confirm_repeats
        try:
            confirmed = confirm(
                self.study,
                self.space,
                fresh,
                request.confirm_top,
                repeats,
                log_dir=logs,
                seed=seed,
                on_run=on_confirm,
            )
            k_table = (
                confirm_k_table(self.study, self.space, fresh, repeats, log_dir=logs, seed=seed)
                if request.confirm_k_table
                else None
            )
        finally:
            fresh.close()
        return confirmed, k_table

    def export(self, confirmed: list[Confirmed], k_table: KTableVerdict | None) -> OptimizeResult:
        """Writes the recommendation (confirmed numbers first) as ``best.yaml``."""
        recommended = recommend(self.study)
        best_yaml = None
        if recommended is not None:
            best_yaml = write_best(self.study, self.space, self.paths)
        return OptimizeResult(
            study=self.request.study,
            storage=self.request.storage_url,
            space=self.space,
            trials=len(self.study.trials),
            pareto=pareto_front(self.study),
            recommended=recommended,
            paths=self.paths,
            handle=self.study,
            confirmed=confirmed,
            k_table=k_table,
            budget_note=None if self.budget is None else self.budget.note(),
            best_yaml=best_yaml,
        )


def write_best(study: optuna.Study, space: SearchSpace, paths: StudyPaths) -> Path:
    """Writes the recommended config as ``best.yaml`` in the study's folder; returns its path."""
    paths.folder.mkdir(parents=True, exist_ok=True)
    write_whole(paths.best_yaml, export(study, space, "vllm").text)
    return paths.best_yaml


def _executor(request: OptimizeRequest) -> Executor:
    """Where the trials run, chosen once: a Ray cluster, worker processes, or this process."""
    if request.ray is not None:  # servers (confirmation's too) run on the cluster's nodes
        return OnRay(request.ray)
    if request.workers > 1:
        return LocalWorkers(request.workers)
    return InProcess()


def _asked(request: OptimizeRequest, on_notice: Notice | None) -> SearchSpace:
    """The request's space, on this host's GPUs where it asks for them."""
    assert request.space is not None
    if not request.detect_hardware:
        return request.space
    options = request.backend_options
    return on_this_host(
        request.space,
        request.backend,
        options.gpus,
        request.gpus_per_trial,
        request.workers,
        on_notice,
    )


def _stored(name: str, storage: optuna.storages.BaseStorage) -> SearchSpace:
    """The space a resumed study was created with."""
    if name not in study_names(storage):
        raise ConfigError(f"study {name!r} does not exist: create it with spectune optimize")
    space = stored_space(optuna.load_study(study_name=name, storage=storage))
    if space is None:
        raise ConfigError(
            f"study {name!r} holds no search space (spectune did not create it): "
            "pass --space, or choose another --study"
        )
    return space


def _check_program(argv: tuple[str, ...]) -> None:
    """The process backend's vLLM exists, before a study is stored whose every trial would
    fail to start it."""
    if argv and shutil.which(argv[0]) is None:
        raise ConfigError(
            f"--vllm-command {shlex.join(argv)}: {argv[0]} is no executable program (on PATH "
            "or as a path); install vLLM, or name it, e.g. --vllm-command /opt/vllm/bin/vllm"
        )


def _check_gpus_per_trial(asked: int | None, space: SearchSpace) -> None:
    if asked is not None and asked != space.hardware.count:
        raise ConfigError(
            f"--gpus-per-trial {asked} does not match the study's hardware "
            f"{space.hardware.label}: use --gpus-per-trial {space.hardware.count}"
        )


def plan_run(request: OptimizeRequest) -> StudyPlan:
    """What ``request`` would cost, trial by trial (``--plan``): its arguments checked, its
    space as given (a resumed study's stored one may differ), start-ups at the prices the study
    it would resume measured. Opens no storage that is not there, and stores nothing.

    Raises:
        ConfigError: bad arguments (:func:`check_request`).
    """
    check_request(request)
    if request.space is None:
        raise ConfigError(f"study {request.study!r}: --plan needs the space to plan")
    startups = stored_startups(request)
    # What the run's start would read of other processes' GPU memory, and make of it.
    tenants = held_elsewhere(request.backend, request.backend_options.gpus)
    space, confirmation = leave_room(request.space, tenants, None), request.confirmation
    return plan_study(
        space, request.trials, confirmation, request.time_budget_s, startups, tenants.gib
    )


def stored_startups(request: OptimizeRequest) -> StartupPrices:
    """The start-up prices of the study ``request`` would resume: each config family's
    median of the start-ups it stored (none for a new study: the prior). Creates nothing."""
    storage = open_if_present(request.storage_url)
    if storage is None or request.study not in study_names(storage):
        return StartupPrices()
    return _startups(storage, request.study)


def _startups(storage: optuna.storages.BaseStorage, name: str) -> StartupPrices:
    study = optuna.load_study(study_name=name, storage=storage)
    return StartupPrices.of(records(study.get_trials(deepcopy=False)))


def _time_budget(
    request: OptimizeRequest, space: SearchSpace, began: float, startups: StartupPrices
) -> tuple[OptimizeRequest, Budget]:
    """``request`` with as many confirmation runs as fit in a third of its time budget, and
    the budget, its prior from the plan (start-ups at the prices the study measured, where
    it resumes); refused when one trial cannot fit."""
    seconds = request.time_budget_s
    assert seconds is not None
    # One plan: a confirmation run's cost does not depend on how many there are.
    prior = plan_study(space, request.trials, request.confirmation, startups=startups)
    cost = prior.confirm_cost
    fitted = fit_confirmation(space, request.confirmation, seconds, cost.total_s)
    request = request.confirming(fitted)
    runs = fitted.runs(space)
    budget = (
        # A simulated trial takes what it takes here, not a GPU's time: the simulator's clock.
        SimulatedBudget(seconds, cost, runs, space.workload.warmup, began)
        if not BackendKind.parse(request.backend).on_gpus
        else Budget(seconds, cost, runs, began)
    )
    budget.check_fits()
    return request, budget
