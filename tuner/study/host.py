"""The study's hardware on the GPUs NVML sees here, for a run that names none."""

from __future__ import annotations

from collections.abc import Callable

from tuner.catalog.gpus import Hardware, NoGpu, find_gpu
from tuner.catalog.nvml import detect_gpus
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError

__all__ = ["check_host_hardware", "on_this_host"]


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
    measured = backend != "sim"
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
