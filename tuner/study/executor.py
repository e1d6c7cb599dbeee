"""Where a study's trials run: one :class:`Executor` a run picks once when it opens
(:class:`~tuner.study.run.OpenedRun`).

Three implement it: :class:`InProcess` (this process, one backend), ``LocalWorkers``
(:mod:`tuner.study.workers`: ``spectune worker`` child processes sharing one PostgreSQL
database) and ``OnRay`` (:mod:`tuner.study.cluster.executor`: slots on a Ray cluster's nodes).
Each runs trials until the study's budget is used up and stores every trial's record; how
many run at once and where their servers live is its own business. Workers and Ray slots get
the run's settings as one serialised record (:mod:`tuner.study.handoff`), never as flags.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import optuna

from tuner.config.space import SearchSpace
from tuner.results import Source
from tuner.study.budget import Budget
from tuner.study.host import held_elsewhere
from tuner.study.lifecycle import OnTrial
from tuner.study.paths import StudyPaths
from tuner.study.prefetch import prefetch_models
from tuner.study.request import OptimizeRequest
from tuner.study.study import StudyOptions, run_trials
from tuner.trial.backends import Backend, BackendFactory, BackendOptions, backend_factory
from tuner.trial.backends.served import ServedBackend
from tuner.trial.runner import PowerSetter

__all__ = [
    "Executor",
    "InProcess",
    "OnTick",
    "RunSetup",
    "TrialsRun",
    "prepare_this_host",
]

OnTick = Callable[[int], None]  # trials finished so far by other processes, about once a second


class RunSetup(Protocol):
    """What an executor reads of a run before its study is stored
    (:class:`~tuner.study.run.OpenedRun`)."""

    @property
    def request(self) -> OptimizeRequest: ...

    @property
    def space(self) -> SearchSpace: ...

    @property
    def options(self) -> BackendOptions: ...

    @property
    def paths(self) -> StudyPaths: ...

    @property
    def backend(self) -> Backend | None: ...

    @property
    def resume(self) -> bool: ...

    @property
    def power(self) -> PowerSetter | None: ...


class TrialsRun(RunSetup, Protocol):
    """What an executor reads of the run whose trials it runs (:class:`~tuner.study.run.
    StudyRun`)."""

    @property
    def study(self) -> optuna.Study: ...

    @property
    def budget(self) -> Budget | None: ...


class Executor(Protocol):
    """Runs a study's trials somewhere until its budget is used up."""

    def backend_factory(self, backend: str) -> BackendFactory:
        """How this executor builds the backend called ``backend`` where its servers run (the
        confirmation's fresh servers come from it too)."""
        ...

    def prepare(self, run: RunSetup) -> None:
        """What must hold where the trials run before the study stores anything."""
        ...

    def run_trials(self, run: TrialsRun, on_trial: OnTrial | None, on_tick: OnTick | None) -> None:
        """Runs trials until the study's budget is used up; every one ends with its record
        stored. ``on_trial`` is called with each record where the trials run in this process,
        ``on_tick`` with the count of finished trials where they run elsewhere."""
        ...


def prepare_this_host(run: RunSetup, build: BackendFactory) -> None:
    """On this host: the backend's checks on a probe (a Docker Engine that answers, GPUs nobody else
    holds, the image, pulled if missing), then the weights (:func:`prefetch_models`)."""
    probe = run.backend or build(run.space, run.options)
    try:
        if isinstance(probe, ServedBackend):
            probe.prepare()
    finally:
        if run.backend is None:
            probe.close()
    if run.request.prefetch and probe.source is Source.MEASURED:
        prefetch_models(run.space, run.options.on_startup)


class InProcess:
    """The trials one after another in this process, on one backend."""

    def backend_factory(self, backend: str) -> BackendFactory:
        return backend_factory(backend)

    def prepare(self, run: RunSetup) -> None:
        prepare_this_host(run, backend_factory(run.request.backend))

    def run_trials(self, run: TrialsRun, on_trial: OnTrial | None, on_tick: OnTick | None) -> None:
        del on_tick  # on_trial says each trial as it ends
        request, options = run.request, run.options
        if request.gpus_per_trial is not None and options.gpus is None:
            options = replace(options, gpus=tuple(range(request.gpus_per_trial)))
        settings = StudyOptions(
            request.trials,
            request.seed,
            run.paths.logs,
            run.space.ttft_limit_ms,
            budget=run.budget,
            rounds=request.rounds,
            # Read again on the GPUs these trials get: --gpus-per-trial can narrow the ones
            # the run read at prepare.
            held_gib=held_elsewhere(request.backend, options.gpus).gib,
            power=run.power,
        )
        backend = run.backend or backend_factory(request.backend)(run.space, options)
        run_trials(run.study, run.space, backend, settings, on_trial)
