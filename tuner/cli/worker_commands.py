"""``spectune worker``: join an existing study from any host (distributed mode, PostgreSQL)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli import options as opt
from tuner.cli.app import app, console, handle_errors
from tuner.study.paths import absolute_storage
from tuner.trial.backends.kinds import BackendKind

__all__ = ["child_worker_command", "worker_command"]


@app.command("worker")
@handle_errors
@opt.with_backend_flags
def worker_command(
    study: Annotated[str, typer.Option("--study", help="The study to join (must exist).")],
    storage: Annotated[
        str,
        typer.Option(
            "--storage",
            help="The study's database URL.",
            envvar="SPECTUNE_STORAGE",
            callback=absolute_storage,
        ),
    ],
    backend: opt.Backend = "docker",
    studies_dir: opt.StudiesDir = Path("studies"),
    gpus: opt.Gpus = None,
    hardware: opt.Hardware = None,
    gpu_spec: opt.GpuSpecFile = None,
    worker_id: Annotated[
        str, typer.Option("--worker-id", help="Names this worker's containers on this host.")
    ] = "0",
    sampler: opt.Sampler = "spectune",
    seed: opt.Seed = 0,
    flags: opt.BackendFlags = opt.DECLARED,
    prefetch: opt.Prefetch = True,
    rounds: opt.Rounds = True,
) -> None:
    """Join an existing study from this host and run trials until its budget is used up."""
    from tuner.catalog.gpus import parse_hardware
    from tuner.catalog.nvml import gpu_names
    from tuner.study.join import run_worker
    from tuner.study.workers import WorkerRequest

    options = replace(flags.options(backend, study, seed, gpus), worker=worker_id)
    request = WorkerRequest(
        study, storage, backend, studies_dir, options, sampler, prefetch, rounds
    )
    declared = None if hardware is None else parse_hardware(hardware)
    run_worker(
        request, declared, gpu_names(options.gpus) if BackendKind.parse(backend).on_gpus else None
    )
    console.print(f"worker {worker_id}: study {study} has used up its trial budget", markup=False)


@app.command("child-worker", hidden=True)
@handle_errors
def child_worker_command(
    worker_id: Annotated[
        str, typer.Option("--worker-id", help="The worker's name in its record (for ps).")
    ],
) -> None:
    """A worker of spectune optimize --workers: its whole record (tuner.study.workers.
    WorkerRequest, JSON) on standard input, written by the parent."""
    import sys

    from tuner.catalog.nvml import gpu_names
    from tuner.errors import ConfigError
    from tuner.study.join import run_worker
    from tuner.study.workers import read_worker_request

    request = read_worker_request(sys.stdin.buffer.read())
    if request.options.worker != worker_id:
        raise ConfigError(
            f"--worker-id {worker_id} but the record on standard input is worker "
            f"{request.options.worker}'s: hand each child its own record"
        )
    gpus = request.options.gpus
    run_worker(
        request, detected=gpu_names(gpus) if BackendKind.parse(request.backend).on_gpus else None
    )
    console.print(
        f"worker {worker_id}: study {request.study} has used up its trial budget", markup=False
    )
