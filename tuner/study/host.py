"""The study's hardware on the GPUs NVML sees here, for a run that names none, and the memory
other tenants of those GPUs hold when it starts.

Other tenants (a desktop, a notebook, a second model) hold memory that no server of the study
can use. :func:`held_elsewhere` reads it through NVML before the study's first server starts
(:mod:`tuner.catalog.tenants`); the study stores it, its warm start and twin start from it and
the trial runner's memory pre-screen counts it against every start-up. :func:`leave_room` says
it once and gives it to a new study on vLLM 0.34+, whose KV cache is sized from what is free at
start-up and grows into what a tenant frees or takes later: there the memory dimension searches
caps that leave the tenants their memory (``server.memory_headroom_gib``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tuner.catalog import nvml
from tuner.catalog.gpus import Hardware, NoGpu, find_gpu
from tuner.catalog.nvml import NvmlMonitor, detect_gpus
from tuner.catalog.tenants import Tenants, read_tenants
from tuner.config.space import SearchSpace
from tuner.config.vllm_args import measured_kv_cache
from tuner.errors import ConfigError
from tuner.trial.backends.kinds import BackendKind

__all__ = ["check_host_hardware", "held_elsewhere", "leave_room", "on_this_host"]


def on_this_host(
    space: SearchSpace,
    backend: str,
    gpus: tuple[int, ...] | None,
    per_trial: int | None,
    workers: int,
    on_notice: Callable[[str], None] | None = None,
) -> SearchSpace:
    """The space on the GPUs NVML sees here.

    Measured backends tune the GPUs they measure on: what is detected wins over what the space
    declares (one note line says so), and finding none is an error. The simulator keeps the
    declared rig when nothing here maps to the catalog: simulating GPUs the host lacks is its job.
    """
    if gpus == ():  # --gpus none: a CPU-only host, by the user's word; the space's GPUs stand
        return space
    measured = BackendKind.parse(backend).on_gpus
    detected = detect_gpus(gpus)
    if isinstance(detected, NoGpu):
        if measured:
            raise ConfigError(detected.message)
        return space
    try:
        host = detected.hardware()
    except ConfigError:
        if measured:
            raise
        return space
    # Each of several workers tunes its own slice of the host's GPUs.
    host = Hardware(host.gpu, per_trial or max(1, host.count // workers))
    if host == space.hardware:
        return space
    if measured and on_notice is not None:
        on_notice(
            f"note: this host has {host.label} (NVML) but the space declares "
            f"{space.hardware.label}: tuning {host.spec}; pass --hardware {space.hardware.spec} "
            "to keep the space's"
        )
    return space.with_hardware(host)


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


def held_elsewhere(backend: str, gpus: tuple[int, ...] | None) -> Tenants:
    """What other processes hold on the GPUs a measured backend's servers will use, read now
    (before they start); none for the simulator, without NVML, or below
    :data:`~tuner.catalog.tenants.TENANT_GIB`."""
    if not BackendKind.parse(backend).on_gpus or gpus == ():
        return Tenants()
    monitor = nvml.open_gpu_monitor(gpus)
    try:
        return read_tenants(monitor)
    finally:
        if isinstance(monitor, NvmlMonitor):
            monitor.close()


def leave_room(
    space: SearchSpace, tenants: Tenants, on_notice: Callable[[str], None] | None
) -> SearchSpace:
    """``space`` for GPUs on which other processes hold ``tenants``' memory, said once: on
    vLLM 0.34+ without a headroom of its own, one that leaves them that (rounded up to 0.5
    GiB); on earlier releases the same space, every start-up pre-screened with it taken."""
    held = tenants.gib
    if held <= 0.0:
        return space
    said = f"note: other processes hold {tenants.describe()} of a GPU this study uses (NVML): "
    if measured_kv_cache(space.version) and space.model.server.memory_headroom_gib is None:
        headroom = math.ceil(held * 2) / 2
        if on_notice is not None:
            on_notice(
                f"{said}vLLM {space.version} sizes its KV cache from what is free at start-up, "
                f"so the study searches gpu-memory-utilization caps that leave them "
                f"{headroom:g} GiB (server.memory_headroom_gib; set it to choose)"
            )
        return space.with_memory_headroom(headroom)
    if on_notice is not None:
        on_notice(
            f"{said}the warm start, the twin and every start-up's pre-screen count it as "
            "memory held outside vLLM"
        )
    return space
