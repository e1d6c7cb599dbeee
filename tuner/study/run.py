"""One ``spectune optimize`` in stages, each an immutable record the step before returns:
:class:`OpenedRun` (the request checked against its storage and this host, the time budget
priced; nothing stored, so the CLI opens it before its live table and every refusal comes
first), :class:`PreparedRun` (the hosts ready, the space judged by the vLLM that will serve it)
and :class:`StudyRun` (the study stored and seeded: the trials, the confirmation and
``best.yaml`` take it). :meth:`StudyRun.reopen` gives ``confirm`` and the workers a stored study
the same way, measured through the same executor.
"""

from __future__ import annotations

import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

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
from tuner.search.plan import StudyPlan, plan_study
from tuner.search.startup import StartupPrices
from tuner.search.strategy import warm_start
from tuner.study.budget import Budget, price_budget
from tuner.study.cluster.executor import OnRay
from tuner.study.confirm import OnRun, confirm, confirm_k_table
from tuner.study.executor import Executor, InProcess, OnTick
from tuner.study.host import held_elsewhere, leave_room, on_this_host
from tuner.study.judge import judged_space
from tuner.study.lifecycle import OnTrial
from tuner.study.listing import resuming
from tuner.study.paths import StudyPaths, write_whole
from tuner.study.power_limit import PowerLimits, check_power_request, prepare_power
from tuner.study.request import OptimizeRequest, check_request
from tuner.study.storage import open_if_present, open_storage, study_names
from tuner.study.study import (
    check_resume,
    check_source,
    claim_source,
    extend_budget,
    make_sampler,
    open_existing,
    open_study,
    study_backend_options,
)
from tuner.study.twin_calibrate import seed_study
from tuner.study.workers import LocalWorkers
from tuner.trial.backends import Backend, BackendFactory, BackendOptions, ProcessSettings
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.backends.served import ServedBackend
from tuner.trial.record import TrialRecord, records, stored_space

__all__ = [
    "OpenedRun",
    "OptimizeResult",
    "PreparedRun",
    "StudyRun",
    "plan_run",
    "stored_startups",
    "write_best",
]

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


@dataclass(frozen=True)
class _Setup:
    """What a run has read before it stores anything; each stage holds it whole."""

    request: OptimizeRequest  # with as many confirmation runs as fit its time budget
    space: SearchSpace  # the space asked for, or the stored one on a resume
    resume: bool  # the study exists and keeps its stored space
    storage: optuna.storages.BaseStorage
    paths: StudyPaths
    executor: Executor  # where the trials run: this process, worker processes, a Ray cluster
    build_backend: BackendFactory  # the chosen backend, where the executor runs servers
    options: BackendOptions  # its settings; the study's own are added when it starts
    budget: Budget | None
    backend: Backend | None = None  # a ready backend (tests, benchmarks)
    on_notice: Notice | None = None
    power: PowerLimits | None = None  # the hold on the power limit a space searches
    # Other processes' GPU memory, read when a new study is prepared; start() stores it.
    tenants: Tenants | None = None

    def notice(self, line: str | None) -> None:
        if line and self.on_notice is not None:
            self.on_notice(line)


@dataclass(frozen=True)
class OpenedRun(_Setup):
    """A run checked against its request, its storage and this host; nothing stored yet.
    :meth:`open` builds it, :meth:`prepare` takes it to the next stage."""

    @classmethod
    def open(
        cls,
        request: OptimizeRequest,
        backend: Backend | None = None,
        on_notice: Notice | None = None,
    ) -> OpenedRun:
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
                for one trial, a searched power limit spectune may not set
                (:mod:`tuner.study.power_limit`).
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
        allowed, on_ray = request.allow_power_limit, request.ray is not None
        check_power_request(space, request.backend, allowed, request.workers, on_ray)
        if exists and on_notice is not None:  # rerunning adds trials: said once it may resume
            on_notice(resuming(storage, request.study, request.trials))
        if request.backend == BackendKind.PROCESS and request.ray is None:  # Ray nodes: theirs
            _check_program(request.backend_options.settings_of(ProcessSettings).vllm_command)
        _check_gpus_per_trial(request.gpus_per_trial, space)
        request, budget = _priced(request, space, storage if exists else None, began)
        executor = _executor(request)
        options = replace(request.backend_options, study=request.study, seed=request.seed)
        return cls(
            request=request,
            space=space,
            resume=resume,
            storage=storage,
            paths=StudyPaths.of(request.studies_dir, request.study, url),
            executor=executor,
            build_backend=executor.backend_factory(request.backend),
            options=options,
            budget=budget,
            backend=backend,
            on_notice=on_notice,
            # A refusal before the live table too; nothing is changed yet.
            power=_power(request, options, backend, space, on_notice),
        )

    def prepare(self) -> PreparedRun:
        """What must hold or be on the trials' hosts before the study stores anything or any
        trial's clock starts (the executor's :meth:`~tuner.study.executor.Executor.prepare`),
        then, for a new study, the memory other processes hold (:func:`~tuner.study.host.
        leave_room`) and the pre-flight: the vLLM that will serve the trials judges the space,
        and what it refuses is taken out (:func:`~tuner.study.judge.judged_space`)."""
        self.executor.prepare(self)
        space, tenants = self.space, None
        if not self.resume and self.request.ray is None:  # Ray's images are on its nodes
            tenants = held_elsewhere(self.request.backend, self.options.gpus)
            space = leave_room(space, tenants, self.on_notice)
            verdict = self._preflight(space)
            if verdict is not None:
                space = judged_space(space, verdict, self.on_notice)
        return PreparedRun(**{**_fields(self), "space": space, "tenants": tenants})

    def _preflight(self, space: SearchSpace) -> Preflight | None:
        """The backend's pre-flight verdict on ``space``; None where it has none, or where the
        image holds no vLLM it can ask (said once: spectune's own rules then judged it)."""
        probe = self.backend or self.build_backend(space, self.options)
        try:
            return probe.judge(space) if isinstance(probe, ServedBackend) else None
        except (ConfigError, LaunchError) as why:
            if signal_raised() is not None:  # a library turned a signal's exception into this
                raise
            self.notice(
                f"WARNING: the pre-flight could not ask the image's vLLM ({why}); "
                "spectune's own rules judged the space"
            )
            return None
        finally:
            if self.backend is None:
                probe.close()


@dataclass(frozen=True)
class PreparedRun(_Setup):
    """An opened run whose hosts are ready and whose space the pre-flight judged."""

    def start(self) -> StudyRun:
        """Stores the study (or resumes it) with what this run adds: its trials, its kind of
        numbers, the backend settings every later run and worker gets back; then seeds the
        spectune sampler's queue (its warm start), before any worker starts, so all share it."""
        request = self.request
        sampler = make_sampler(request.sampler, request.seed)
        stored = None if self.resume else self.space
        study, space = open_study(request.study, self.storage, stored, sampler)
        claim_source(study, request.backend)
        if self.power is not None:  # the original limit, before any trial changes it
            self.power.record(study)
        if self.tenants is not None:  # the warm start and the twin start from it
            record_tenants(study, self.tenants)
        for notice in (space.newer_note, v1_warning(space), cap_warning(space)):
            self.notice(notice)
        self.paths.folder.mkdir(parents=True, exist_ok=True)
        options = study_backend_options(study, request.backend, self.options, self.paths)
        extend_budget(study, request.trials)
        if request.sampler == "spectune":
            source = BackendKind.parse(request.backend).source
            calibrated = seed_study(study, request.studies_dir, space, source)
            warm_start(study, space, request.trials, measured=calibrated)
        return StudyRun(
            request=request,
            study=study,
            space=space,
            resume=self.resume,
            paths=self.paths,
            executor=self.executor,
            build_backend=self.build_backend,
            options=options,
            budget=self.budget,
            backend=self.backend,
            power=self.power,
        )


@dataclass(frozen=True)
class StudyRun:
    """A stored study and how this run measures it: the trials, the confirmation and the
    export take it. :meth:`PreparedRun.start` makes one for a run that adds trials,
    :meth:`reopen` one for a command that works on a study as it is (``confirm``, a worker)."""

    request: OptimizeRequest
    study: optuna.Study
    space: SearchSpace  # the study's own
    resume: bool
    paths: StudyPaths
    executor: Executor
    build_backend: BackendFactory
    options: BackendOptions  # with the study's own settings (a docker study's environment)
    budget: Budget | None = None
    backend: Backend | None = None
    power: PowerLimits | None = None  # the hold on the power limit the space searches

    @classmethod
    def reopen(cls, request: OptimizeRequest) -> StudyRun:
        """The stored study ``request`` names, with its own space, measured where the request
        says (this host, or ``request.ray``'s cluster); adds nothing to it.

        Raises:
            ConfigError: bad arguments, no such study, or a backend of the other kind of
                numbers than the study holds.
        """
        check_request(request)
        url = request.storage_url
        sampler = make_sampler(request.sampler, request.seed)
        study, space = open_existing(request.study, url, sampler)
        check_source(study, request.backend)
        paths = StudyPaths.of(request.studies_dir, request.study, url)
        options = replace(request.backend_options, study=request.study, seed=request.seed)
        executor = _executor(request)
        return cls(
            request=request,
            study=study,
            space=space,
            resume=True,
            paths=paths,
            executor=executor,
            build_backend=executor.backend_factory(request.backend),
            options=study_backend_options(study, request.backend, options, paths),
        )

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
                power=self.power,
            )
            k_table = (
                confirm_k_table(
                    self.study,
                    self.space,
                    fresh,
                    repeats,
                    log_dir=logs,
                    seed=seed,
                    power=self.power,
                )
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


def _power(
    request: OptimizeRequest,
    options: BackendOptions,
    backend: Backend | None,
    space: SearchSpace,
    on_notice: Notice | None,
) -> PowerLimits | None:
    """A killed run's power limits restored; the hold on the limit a space searches."""
    if request.ray is not None:  # refused with a searched limit: nothing to restore
        return None
    gpus = options.gpus
    if gpus is None and request.gpus_per_trial is not None:
        gpus = tuple(range(request.gpus_per_trial))
    return prepare_power(backend, request.backend, gpus, space, request.study, on_notice)


def _fields(setup: _Setup) -> dict[str, Any]:
    """A stage's fields, for the next stage to take whole (a shallow copy: the storage and
    the executor are the same objects)."""
    return {f.name: getattr(setup, f.name) for f in fields(_Setup)}


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


def _priced(
    request: OptimizeRequest,
    space: SearchSpace,
    storage: optuna.storages.BaseStorage | None,
    began: float,
) -> tuple[OptimizeRequest, Budget | None]:
    """``request`` with the confirmation its time budget holds, and the budget (none without
    one), priced at the start-ups ``storage``'s study measured (none: a new study, the prior).

    Raises:
        ConfigError: the budget is too short for one trial (nothing is stored then).
    """
    if request.time_budget_s is None:
        return request, None
    startups = _startups(storage, request.study) if storage is not None else StartupPrices()
    simulated = not BackendKind.parse(request.backend).on_gpus
    fitted, budget = price_budget(
        space,
        request.time_budget_s,
        request.trials,
        request.confirmation,
        simulated,
        began,
        startups,
    )
    return request.confirming(fitted), budget
