"""A worker joins a stored study and runs its trials until the budget is used up: ``spectune
worker`` on any host, and each child of ``spectune optimize --workers N``."""

from __future__ import annotations

from tuner.catalog.gpus import Hardware
from tuner.study.host import check_host_hardware, held_elsewhere
from tuner.study.prefetch import prefetch_models
from tuner.study.request import OptimizeRequest
from tuner.study.run import StudyRun
from tuner.study.study import StudyOptions, claim_source, run_trials
from tuner.study.workers import WorkerRequest
from tuner.trial.backends.kinds import BackendKind

__all__ = ["run_worker"]


def run_worker(
    request: WorkerRequest, hardware: Hardware | None = None, detected: list[str] | None = None
) -> None:
    """Joins ``request.study`` and runs trials until its budget is used up.

    Args:
        request: which study, where, and how this worker runs servers.
        hardware: what this host has, when the user says so (``--hardware``).
        detected: NVML's names of the GPUs this worker may use; None when NVML is unavailable.

    Raises:
        ConfigError: the study does not exist, or this host's GPUs differ from the study's.
    """
    options = request.options
    run = StudyRun.reopen(
        OptimizeRequest(
            request.study,
            None,
            request.backend,
            1,  # a worker adds no trials: it runs until the study's budget is used up
            request.studies_dir,
            storage=request.storage,
            sampler=request.sampler,
            seed=options.seed,
            backend_options=options,
            prefetch=request.prefetch,
            rounds=request.rounds,
        )
    )
    check_host_hardware(request.study, run.space.hardware, hardware, detected)
    if request.prefetch and BackendKind.parse(request.backend).on_gpus:
        prefetch_models(run.space, options.on_startup)
    claim_source(run.study, request.backend)
    settings = StudyOptions(
        None,
        options.seed,
        run.paths.logs,
        run.space.ttft_limit_ms,
        worker=options.worker,
        rounds=request.rounds,
        held_gib=held_elsewhere(request.backend, options.gpus).gib,  # this worker's slice
    )
    run_trials(run.study, run.space, run.build_backend(run.space, run.options), settings)
