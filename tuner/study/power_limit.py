"""The GPU power limit as a searched dimension: set per trial, put back on every way out.

A space that searches ``search.power_limit_w`` runs only where the user allows it
(``--allow-power-limit``) and the driver lets spectune set the limit; otherwise the study is
refused before anything is stored or changed (:func:`check_power_request`, and the privilege
probe of :meth:`PowerLimits.open`, which sets each GPU's limit to the one in force). The limit
is no server flag, so a trial that changes only it keeps the running server.

The limit outlives the process that set it, so the original is recorded before the first
change, twice: in the study (:data:`ORIGINAL_ATTR`, the condition the study ran under) and in
a record file on the host (:mod:`tuner.study.power_records`). It is put back when the study
ends, however it ends by an exception (Ctrl-C, SIGTERM and SIGHUP unwind as one:
:mod:`tuner.launch.exit_hooks`), and at interpreter exit.
SIGKILL runs nothing: the next run on the host finds the record of a dead owner and restores
the original from it, saying so in one line.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import optuna

from tuner.catalog.nvml import NvmlMonitor, open_gpu_monitor
from tuner.catalog.power import PowerControl, PowerLimit, PowerLimitDenied
from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.study.power_records import check_no_live_holder, records_dir, recover, write_record
from tuner.trial.backends import Backend
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.backends.served import ServedBackend

__all__ = [
    "ALLOW_FLAG",
    "ORIGINAL_ATTR",
    "PowerLimits",
    "check_power_request",
    "held",
    "power_control",
    "prepare_power",
]

_log = logging.getLogger(__name__)
ALLOW_FLAG = "--allow-power-limit"
ORIGINAL_ATTR = "power_limit_original_w"  # {NVML index: watts} before the study changed any
Notice = Callable[[str], None]


def check_power_request(
    space: SearchSpace, backend: str, allowed: bool, workers: int, on_ray: bool
) -> None:
    """Refuses a space that searches the power limit where spectune may not set it.

    Raises:
        ConfigError: no ``--allow-power-limit``; the simulator (it does not slow a capped GPU down);
            several workers or a Ray cluster (the limit is per GPU, set by one owner here).
    """
    if not space.power_limits_w:
        return
    watts = ", ".join(str(w) for w in space.power_limits_w)
    if not allowed:
        raise ConfigError(
            f"search.power_limit_w [{watts}]: setting the GPUs' power limit needs {ALLOW_FLAG} "
            "(spectune restores the original after the study); pass it, or drop "
            "search.power_limit_w"
        )
    if not BackendKind.parse(backend).on_gpus:
        raise ConfigError(
            f"search.power_limit_w with --backend {backend}: the simulator does not model how a "
            "capped GPU slows down, so it cannot rank limits; use --backend process or docker, "
            "or drop search.power_limit_w"
        )
    if workers > 1 or on_ray:
        raise ConfigError(
            "search.power_limit_w runs in one worker on this host (the limit is the GPU's, not "
            "the trial's): drop --workers and --ray, or drop search.power_limit_w"
        )


def power_control(backend: Backend | None, gpus: tuple[int, ...] | None) -> PowerControl | None:
    """Where the GPUs' power limit is read and set: a given backend's stand-in for NVML (tests),
    else NVML of its own on ``gpus`` (None: all; a backend closes its own NVML when its trials
    end, before the limit is restored); None where NVML is missing."""
    if isinstance(backend, ServedBackend):
        monitor = backend.gpu_monitor()
        if isinstance(monitor, PowerControl) and not isinstance(monitor, NvmlMonitor):
            return monitor
    opened = open_gpu_monitor(gpus)
    return opened if isinstance(opened, PowerControl) else None


def prepare_power(
    backend: Backend | None,
    kind: str,
    gpus: tuple[int, ...] | None,
    space: SearchSpace,
    study: str,
    on_notice: Notice | None,
) -> PowerLimits | None:
    """At a run's start on this host: the limits a killed run left restored (:func:`~tuner.
    study.power_records.recover`),
    then, where ``space`` searches the limit, the study's hold on it (:meth:`PowerLimits.open`).

    Raises:
        ConfigError: the space searches the limit and NVML, the range or the privilege is
            missing.
    """
    searched = bool(space.power_limits_w)
    if not BackendKind.parse(kind).on_gpus or gpus == ():
        return None
    if not searched and not any(records_dir().glob("*.json")):
        return None  # NVML is opened only for a limit to set or to restore
    control = power_control(backend, gpus)
    if control is None:
        if searched:
            raise ConfigError(
                "search.power_limit_w: NVML is not available here, so the power limit cannot "
                "be set; drop search.power_limit_w"
            )
        return None
    recover(control, on_notice)
    if searched:
        check_no_live_holder(control)
        return PowerLimits.open(control, space, study)
    if isinstance(control, NvmlMonitor):
        control.close()
    return None


class PowerLimits:
    """One study's hold on the GPUs' power limit: set per trial, restored once at its end.

    A context manager: leaving the block, however, restores the original limits.
    """

    def __init__(self, control: PowerControl, original: list[PowerLimit], study: str) -> None:
        self.control = control
        self.original = {limit.gpu: limit.in_force_w for limit in original}
        self.study = study
        self._record: Path | None = None
        self._in_force = dict(self.original)

    @classmethod
    def open(cls, control: PowerControl, space: SearchSpace, study: str) -> PowerLimits:
        """Checks that every GPU takes every limit of ``space`` and that the driver lets
        spectune set it (each GPU's limit set to the one in force: nothing changes).

        Raises:
            ConfigError: a limit outside a GPU's range, or no privilege to set one.
        """
        try:
            limits = control.power_limits()
        except PowerLimitDenied as why:
            raise ConfigError(f"search.power_limit_w: {why}") from None
        for limit in limits:
            outside = [w for w in space.power_limits_w if not limit.low_w <= w <= limit.high_w]
            if outside:
                raise ConfigError(
                    f"search.power_limit_w {outside[0]} W: GPU {limit.gpu} takes "
                    f"{limit.low_w:g}-{limit.high_w:g} W (default {limit.default_w:g} W); "
                    "choose limits in that range"
                )
        try:
            for limit in limits:
                control.set_power_limit(limit.gpu, limit.in_force_w)
        except PowerLimitDenied as why:
            raise ConfigError(
                f"search.power_limit_w: the driver refuses to set GPU {limit.gpu}'s power limit "
                f"({why}); run spectune as root (or with the administrator's grant), or drop "
                "search.power_limit_w"
            ) from None
        return cls(control, limits, study)

    def record(self, study: optuna.Study) -> None:
        """Stores the original limits with the study (the condition it ran under)."""
        study.set_user_attr(ORIGINAL_ATTR, {str(g): w for g, w in self.original.items()})

    def apply(self, watts: float) -> None:
        """Sets every GPU's limit to ``watts`` (the record of the original written first).

        Raises:
            ConfigError: the driver refused (its privilege was taken away mid-study).
        """
        if self._record is None:
            self._write_record()
        for gpu, now in self._in_force.items():
            if now == watts:
                continue
            try:
                self.control.set_power_limit(gpu, watts)
            except PowerLimitDenied as why:
                raise ConfigError(
                    f"GPU {gpu}: cannot set its power limit to {watts:g} W ({why})"
                ) from None
            self._in_force[gpu] = watts

    def restore(self) -> None:
        """Puts every GPU's original limit back and removes the record; a second call does
        nothing. A refusal leaves the record for the next run to restore from."""
        if self._record is not None:
            try:
                for gpu, watts in self.original.items():
                    if self._in_force[gpu] != watts:
                        self.control.set_power_limit(gpu, watts)
                        self._in_force[gpu] = watts
            except PowerLimitDenied as why:
                _log.warning(
                    "could not restore the GPUs' power limit (%s): the next run restores it "
                    "from %s",
                    why,
                    self._record,
                )
                return
            self._record.unlink(missing_ok=True)
            self._record = None
            atexit.unregister(self.restore)
        if isinstance(self.control, NvmlMonitor):  # opened for the study alone
            self.control.close()

    def _write_record(self) -> None:
        self._record = write_record(self.study, self.original)
        atexit.register(self.restore)

    def __enter__(self) -> PowerLimits:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.restore()


@contextlib.contextmanager
def held(limits: PowerLimits | None) -> Iterator[None]:
    """Restores ``limits`` when the block ends, however (nothing without one)."""
    if limits is None:
        yield
        return
    with limits:
        yield
