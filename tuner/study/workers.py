"""Several workers on one study: Optuna's own distributed mode, no scheduler of ours.

Every worker opens the same database, reads the search space stored with the study, and runs
trials until the study's budget is used up (``tuner.study.storage`` enforces it where trials are
created). :class:`LocalWorkers`, the executor of ``--workers N``, starts N of them on this host,
each on its own GPUs; on other hosts ``spectune worker`` joins the same study.

A child worker gets its settings as one record, :class:`WorkerRequest` as JSON on its standard
input (the hidden ``spectune child-worker``), never rebuilt from flags: what the parent decided is
what the child reads, and the storage URL (with its password) shows in no ``ps`` listing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from optuna.trial import TrialState

from tuner.catalog.gpus import Hardware
from tuner.errors import SpectuneError
from tuner.study.executor import OnTick, TrialsRun, prepare_this_host
from tuner.study.handoff import dump_record, load_record
from tuner.study.host import check_host_hardware, held_elsewhere
from tuner.study.lifecycle import OnTrial
from tuner.study.paths import StudyPaths
from tuner.study.prefetch import prefetch_models
from tuner.study.storage import check_parallel_storage
from tuner.study.study import (
    StudyOptions,
    claim_source,
    make_sampler,
    open_existing,
    run_trials,
    study_backend_options,
)
from tuner.trial.backends import BackendFactory, BackendOptions, backend_factory
from tuner.trial.backends.kinds import BackendKind

__all__ = [
    "LocalWorkers",
    "WorkerRequest",
    "gpu_slices",
    "read_worker_request",
    "run_worker",
    "spawn_workers",
]


@dataclass(frozen=True)
class WorkerRequest:
    """Everything one worker needs: the record a parent hands its child, whole."""

    study: str
    storage: str
    backend: str
    studies_dir: Path
    options: BackendOptions  # this worker's own: its GPUs, name and seed
    sampler: str = "spectune"
    prefetch: bool = True  # the space's weights into this host's cache before the first trial
    rounds: bool = False  # each pair in rounds against the incumbent (tuner.trial.rounds)

    def to_json(self) -> bytes:
        """The record as JSON; the in-process progress callback stays behind."""
        return dump_record(replace(self, options=replace(self.options, on_startup=None)))


def read_worker_request(text: str | bytes) -> WorkerRequest:
    """The record :meth:`WorkerRequest.to_json` wrote.

    Raises:
        ConfigError: it is not such a record (not JSON, a field missing or of the wrong type).
    """
    return load_record(WorkerRequest, text, "the child worker's standard input")


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
    build_backend = backend_factory(request.backend)
    sampler = make_sampler(request.sampler, request.options.seed)
    study, space = open_existing(request.study, request.storage, sampler)
    check_host_hardware(request.study, space.hardware, hardware, detected)
    if request.prefetch and BackendKind.parse(request.backend).on_gpus:
        prefetch_models(space, request.options.on_startup)
    claim_source(study, request.backend)
    paths = StudyPaths.of(request.studies_dir, request.study, request.storage)
    options = StudyOptions(
        None,
        request.options.seed,
        paths.logs,
        space.ttft_limit_ms,
        worker=request.options.worker,
        rounds=request.rounds,
        held_gib=held_elsewhere(request.backend, request.options.gpus).gib,
    )
    backend_options = study_backend_options(study, request.backend, request.options, paths)
    run_trials(study, space, build_backend(space, backend_options), options)


class LocalWorkers:
    """``--workers N``: N worker processes on this host, on one PostgreSQL database."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def backend_factory(self, backend: str) -> BackendFactory:
        return backend_factory(backend)

    def prepare(self, run: TrialsRun) -> None:
        prepare_this_host(run, backend_factory(run.request.backend))

    def run_trials(self, run: TrialsRun, on_trial: OnTrial | None, on_tick: OnTick | None) -> None:
        del on_trial  # the trials end in other processes: on_tick counts them
        done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        before = len(run.study.get_trials(deepcopy=False, states=done))

        def tick() -> None:  # worker processes report through the database
            if on_tick:
                on_tick(len(run.study.get_trials(deepcopy=False, states=done)) - before)

        request = run.request
        worker = WorkerRequest(
            request.study,
            request.storage_url,
            request.backend,
            request.studies_dir,
            run.options,
            request.sampler,
            prefetch=False,  # prepare did it, before the study was stored
            rounds=request.rounds,
        )
        per_trial = request.gpus_per_trial or run.space.hardware.count
        spawn_workers(worker, self.workers, per_trial, tick)


def gpu_slices(workers: int, gpus_per_trial: int) -> list[tuple[int, ...]]:
    """GPU indices per worker: worker i gets [i*K, (i+1)*K)."""
    return [tuple(range(i * gpus_per_trial, (i + 1) * gpus_per_trial)) for i in range(workers)]


def worker_argv(worker: str) -> list[str]:
    """The command line of a child worker; its settings come on standard input. ``--worker-id``
    is only a label for ``ps`` (the child checks it against its record)."""
    return [sys.executable, "-m", "tuner", "child-worker", "--worker-id", worker]


def spawn_workers(
    base: WorkerRequest,
    workers: int,
    gpus_per_trial: int,
    on_tick: Callable[[], None] | None = None,
    poll_s: float = 1.0,
) -> None:
    """Runs ``workers`` worker processes on this host and waits for all of them.

    SQLite cannot take several writers reliably and has no server for workers on other hosts,
    so several workers need PostgreSQL (or another server database).

    Raises:
        ConfigError: several workers on SQLite.
        SpectuneError: a worker failed; its log file is named.
    """
    check_parallel_storage(base.storage, workers)
    logs = StudyPaths.of(base.studies_dir, base.study, base.storage).logs
    logs.mkdir(parents=True, exist_ok=True)
    children: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for index, gpus in enumerate(gpu_slices(workers, gpus_per_trial)):
            options = replace(
                base.options, gpus=gpus, worker=str(index), seed=base.options.seed + index
            )
            log = logs / f"worker-{index}.log"
            with log.open("wb") as out:
                child = subprocess.Popen(
                    worker_argv(options.worker),
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    # Own session: a Ctrl-C reaches only this parent, which then stops each
                    # worker with exactly one SIGTERM, so no second signal cuts its cleanup short.
                    start_new_session=True,
                    env={**os.environ, "COLUMNS": "160"},
                )
            children.append((child, log))
            _hand(child, replace(base, options=options))
        while any(child.poll() is None for child, _ in children):
            if on_tick:
                on_tick()
            time.sleep(poll_s)
    finally:
        _terminate([child for child, _ in children])
    failed = [(log, child.returncode) for child, log in children if child.returncode != 0]
    if failed:
        log, code = failed[0]
        last = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise SpectuneError(
            f"{len(failed)} of {workers} workers failed (exit {code}): "
            f"{last[-1] if last else 'no output'}; see {log}"
        )


def _terminate(children: Sequence[subprocess.Popen[bytes]], timeout_s: float = 90.0) -> None:
    """SIGTERM every live worker (they stop their servers), then SIGKILL stragglers."""
    live = [c for c in children if c.poll() is None]
    for child in live:
        child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for child in live:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _hand(child: subprocess.Popen[bytes], request: WorkerRequest) -> None:
    """Writes the child's record on its standard input and closes it (the record is small, far
    below a pipe's buffer, so this never waits on the child)."""
    assert child.stdin is not None
    try:
        child.stdin.write(request.to_json())
        child.stdin.close()
    except BrokenPipeError:  # the child died at once: its exit code and log say why
        pass
