"""Several workers on one study: Optuna's own distributed mode, no scheduler of ours.

Every worker opens the same database, reads the search space stored with the study, and runs
trials until the study's budget is used up (``tuner.study.storage`` enforces it where trials are
created). ``spawn_workers`` starts N of them on one host, each on its own GPUs; on other hosts
``spectune worker`` joins the same study.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tuner.catalog.gpus import Hardware, find_gpu
from tuner.errors import ConfigError, SpectuneError
from tuner.study.paths import StudyPaths
from tuner.study.prefetch import prefetch_models
from tuner.study.storage import is_sqlite
from tuner.study.study import (
    StudyOptions,
    claim_source,
    make_sampler,
    open_existing,
    run_trials,
    study_backend_options,
)
from tuner.trial.backends import BackendOptions, backend_factory

__all__ = [
    "WorkerRequest",
    "check_host_hardware",
    "check_parallel_storage",
    "gpu_slices",
    "run_worker",
    "spawn_workers",
]


@dataclass(frozen=True)
class WorkerRequest:
    study: str
    storage: str
    backend: str
    studies_dir: Path
    options: BackendOptions
    sampler: str = "spectune"
    hardware: Hardware | None = None  # what this host has, when the user says so
    prefetch: bool = True  # the space's weights into this host's cache before the first trial


def run_worker(request: WorkerRequest, detected: list[str] | None = None) -> None:
    """Joins ``request.study`` and runs trials until its budget is used up.

    Args:
        request: which study, where, and how this worker runs servers.
        detected: NVML's names of the GPUs this worker may use; None when NVML is unavailable.

    Raises:
        ConfigError: the study does not exist, or this host's GPUs differ from the study's.
    """
    build_backend = backend_factory(request.backend)
    sampler = make_sampler(request.sampler, request.options.seed)
    study, space = open_existing(request.study, request.storage, sampler)
    check_host_hardware(request.study, space.hardware, request.hardware, detected)
    if request.prefetch and request.backend != "sim":
        prefetch_models(space, request.options.on_startup)
    claim_source(study, request.backend)
    paths = StudyPaths.of(request.studies_dir, request.study, request.storage)
    options = StudyOptions(
        None, request.options.seed, paths.logs, space.ttft_limit_ms, worker=request.options.worker
    )
    backend_options = study_backend_options(study, request.options, paths)
    run_trials(study, space, build_backend(space, backend_options), options)


def check_host_hardware(
    study: str, wanted: Hardware, declared: Hardware | None, detected: list[str] | None
) -> None:
    """Refuses a worker whose GPUs (declared with --hardware, or found by NVML) do not match."""
    have = declared
    if detected is not None and have is None:
        # The study's own GPU first: one described in its space is in no catalog here.
        models = {wanted.gpu if wanted.gpu.matches(name) else find_gpu(name) for name in detected}
        gpu = models.pop() if len(models) == 1 else None
        if gpu is None or gpu != wanted.gpu:
            raise ConfigError(
                f"this worker's GPUs are {', '.join(detected) or 'none'} but study {study!r} "
                f"tunes {wanted.label}: run the worker on matching GPUs (pick them with --gpus)"
            )
        have = Hardware(gpu, len(detected)) if len(detected) < wanted.count else wanted
    if have is not None and have != wanted:
        raise ConfigError(
            f"this worker has {have.label} but study {study!r} tunes {wanted.label}: run the "
            "worker on matching GPUs (pick them with --gpus)"
        )


def gpu_slices(workers: int, gpus_per_trial: int) -> list[tuple[int, ...]]:
    """GPU indices per worker: worker i gets [i*K, (i+1)*K)."""
    return [tuple(range(i * gpus_per_trial, (i + 1) * gpus_per_trial)) for i in range(workers)]


def worker_argv(request: WorkerRequest) -> list[str]:
    """The ``spectune worker`` command line that runs ``request`` in a child process."""
    o = request.options
    argv = [
        sys.executable,
        "-m",
        "tuner",
        "worker",
        "--study",
        request.study,
        "--backend",
        request.backend,
        "--studies-dir",
        str(request.studies_dir),
        "--sampler",
        request.sampler,
        "--seed",
        str(o.seed),
        "--worker-id",
        o.worker,
        "--vllm-command",
        shlex.join(o.vllm_command),
        "--docker-entrypoint",
        shlex.join(o.docker_entrypoint),
        "--ready-timeout",
        str(o.ready_timeout_s),
        "--request-timeout",
        str(o.request_timeout_s),
    ]
    if not request.prefetch:
        argv += ["--no-prefetch"]
    if o.gpus is not None:
        argv += ["--gpus", ",".join(str(g) for g in o.gpus)]
    if o.image:
        argv += ["--image", o.image]
    if o.sim_speed:
        argv += ["--sim-speed", str(o.sim_speed)]
    for host, container in o.docker_volumes:
        argv += ["--docker-volume", f"{host}:{container}"]
    for key, value in o.docker_env:
        argv += ["--docker-env", f"{key}={value}"]
    for key in o.docker_secrets:
        argv += ["--docker-env", key]
    return argv


def check_parallel_storage(storage: str, workers: int) -> None:
    """SQLite takes one writer and no other hosts: several workers need PostgreSQL."""
    if workers > 1 and is_sqlite(storage):
        raise ConfigError(
            f"--workers {workers} needs PostgreSQL: pass --storage "
            "postgresql+psycopg://user:password@host/db (SQLite takes one worker)"
        )


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
                    worker_argv(replace(base, options=options)),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    # Own session: a Ctrl-C reaches only this parent, which then stops each
                    # worker with exactly one SIGTERM, so no second signal cuts its cleanup short.
                    start_new_session=True,
                    # The URL (with its password) goes by environment: argv shows in `ps`.
                    env={**os.environ, "COLUMNS": "160", "SPECTUNE_STORAGE": base.storage},
                )
            children.append((child, log))
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
