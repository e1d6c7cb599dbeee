"""NVIDIA GPUs through NVML, behind small interfaces that tests can stand in for.

Hardware detection (:func:`detect_gpus`, through one :class:`GpuProbe`) says which GPUs this
host has and how they are connected, so ``--hardware`` defaults to what is there. The launcher
waits (bounded) after stopping a server until each GPU's used memory is back near its baseline,
because a CUDA context not yet torn down makes the next start fail with a false out-of-memory;
and each trial records what the GPUs did, sampled in the background (:class:`GpuSampler`): the
peak memory used per GPU, and through each measured window the power and energy, the clocks,
the temperature, the clocks-event reasons (thermal, power cap, hardware slowdown), the power
limit in force and the memory other processes hold (:mod:`tuner.catalog.gpu_state`).

Without NVML (no NVIDIA driver, a CPU-only host, an NVML error) nothing is measured: detection
says why, the memory monitor warns once in the log, and everything goes on without.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from tuner.catalog.gpu_state import GpuState
from tuner.catalog.gpus import DetectedGpu, DetectedGpus, GpuLink, NoGpu
from tuner.catalog.power import PowerLimit, PowerLimitDenied
from tuner.results import Throttle

__all__ = [
    "GpuMonitor",
    "GpuProbe",
    "GpuSampler",
    "NoGpuMonitor",
    "NvmlMonitor",
    "NvmlProbe",
    "Sampled",
    "detect_gpus",
    "detected_environment",
    "gpu_names",
    "open_gpu_monitor",
    "open_probe",
    "wait_for_baseline",
]

_log = logging.getLogger(__name__)
_GIB = 1024**3
_said = {"unavailable": False}
_MW = 1000.0
# NVML's clocks-event reason bits (nvmlClocksEventReason*; the same bits under the older
# nvmlClocksThrottleReason* names), grouped as a study judges them.
_REASON_BITS = {
    Throttle.POWER_CAP: 0x4,  # SwPowerCap
    Throttle.HW_SLOWDOWN: 0x8 | 0x80,  # HwSlowdown, HwPowerBrakeSlowdown
    Throttle.THERMAL: 0x20 | 0x40,  # SwThermalSlowdown, HwThermalSlowdown
}


class GpuMonitor(Protocol):
    """Reads the GPUs a study may use: the memory in use, and their whole state."""

    def memory_used_gib(self) -> list[float] | None:
        """Used memory per GPU in GiB, in the order of the study's GPU indices.

        Returns:
            One value per GPU, or None when GPU memory cannot be read.
        """
        ...

    def state(self) -> list[GpuState] | None:
        """Every GPU's state now, in the order of the study's GPU indices.

        Returns:
            One reading per GPU (a field None where the GPU cannot say), or None when the
            GPUs cannot be read at all.
        """
        ...


class NoGpuMonitor:
    """The stand-in for hosts without NVML: nothing is ever available."""

    def memory_used_gib(self) -> list[float] | None:
        """Always None: there is nothing to read."""
        return None

    def state(self) -> list[GpuState] | None:
        """Always None: there is nothing to read."""
        return None


class NvmlMonitor:
    """Reads used memory per GPU through NVML (``pynvml`` from ``nvidia-ml-py``).

    NVML is initialised on construction; an NVML error there raises, so use
    :func:`open_gpu_monitor` to fall back to :class:`NoGpuMonitor`. An error on a later read
    (a GPU fell off the bus, the driver was reloaded) is logged once and the monitor reports
    "not available" from then on rather than failing a study over a measurement.
    """

    def __init__(self, indices: Sequence[int] | None = None) -> None:
        """Initialises NVML and resolves the device handles.

        Args:
            indices: NVML device indices to read (the same numbering ``docker --gpus`` uses);
                None reads every GPU.

        Raises:
            pynvml.NVMLError: NVML is missing or the driver cannot be reached.
        """
        self._nvml = _import_pynvml()
        self._nvml.nvmlInit()
        try:
            count = self._nvml.nvmlDeviceGetCount()
            self.indices = list(range(count)) if indices is None else list(indices)
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        except Exception:
            self._nvml.nvmlShutdown()
            raise
        self._failed = False
        self._unsupported: set[str] = set()

    def memory_used_gib(self) -> list[float] | None:
        """Used memory per GPU in GiB, or None once NVML has failed."""
        if self._failed:
            return None
        try:
            return [
                self._nvml.nvmlDeviceGetMemoryInfo(handle).used / _GIB for handle in self._handles
            ]
        except self._nvml.NVMLError as error:
            self._stopped(error)
            return None

    def state(self) -> list[GpuState] | None:
        """Every GPU's state now, or None once NVML has failed; a reading this GPU does not
        support (energy before Volta, processes in some containers) is None in it."""
        if self._failed:
            return None
        try:
            now = time.monotonic()
            return [
                self._state(index, handle, now)
                for index, handle in zip(self.indices, self._handles, strict=True)
            ]
        except self._nvml.NVMLError as error:
            self._stopped(error)
            return None

    def _state(self, index: int, handle: Any, now: float) -> GpuState:
        nvml, read = self._nvml, self._optional
        power = read("nvmlDeviceGetPowerUsage", handle)
        energy = read("nvmlDeviceGetTotalEnergyConsumption", handle)
        limit = read("nvmlDeviceGetEnforcedPowerLimit", handle)
        return GpuState(
            at=now,
            gpu=index,
            memory_used_gib=nvml.nvmlDeviceGetMemoryInfo(handle).used / _GIB,
            power_w=None if power is None else power / _MW,
            energy_j=None if energy is None else energy / _MW,
            sm_clock_mhz=read("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
            memory_clock_mhz=read("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_MEM),
            temperature_c=read("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
            power_limit_w=None if limit is None else limit / _MW,
            throttle=self._throttle(handle),
            processes=self._processes(handle),
        )

    def _optional(self, name: str, *args: Any) -> Any:
        """``pynvml.name(*args)``, or None where this GPU or driver lacks it (asked once)."""
        key = f"{name}{args[1:]}"  # the SM clock may answer where the memory clock does not
        call = getattr(self._nvml, name, None)  # older nvidia-ml-py releases lack newer calls
        if key in self._unsupported or call is None:
            return None
        try:
            return call(*args)
        except self._nvml.NVMLError:
            self._unsupported.add(key)
            return None

    def _throttle(self, handle: Any) -> frozenset[Throttle]:
        # The event-reasons call replaced the throttle-reasons one (drivers from 535 on).
        mask = self._optional("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask is None:
            mask = self._optional("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        if mask is None:
            return frozenset()
        return frozenset(reason for reason, bits in _REASON_BITS.items() if int(mask) & bits)

    def _processes(self, handle: Any) -> tuple[tuple[int, float], ...] | None:
        """(pid, GiB) of every compute and graphics process (a desktop is graphics); None
        where NVML cannot list them or cannot say their memory (some containers)."""
        held: dict[int, float] = {}
        for name in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            listed = self._optional(name, handle)
            if listed is None:
                return None
            for process in listed:
                if process.usedGpuMemory is None:
                    return None
                held[int(process.pid)] = max(
                    held.get(int(process.pid), 0.0), process.usedGpuMemory / _GIB
                )
        return tuple(sorted(held.items()))

    def power_limits(self) -> list[PowerLimit]:
        """Every GPU's power limit (:class:`~tuner.catalog.power.PowerControl`).

        Raises:
            PowerLimitDenied: NVML has stopped answering, or a board has no power management.
        """
        nvml = self._nvml
        if self._failed:
            raise PowerLimitDenied("NVML is closed or stopped answering")
        try:
            limits = []
            for index, handle in zip(self.indices, self._handles, strict=True):
                low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
                limits.append(
                    PowerLimit(
                        gpu=index,
                        in_force_w=nvml.nvmlDeviceGetPowerManagementLimit(handle) / _MW,
                        default_w=nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / _MW,
                        low_w=low / _MW,
                        high_w=high / _MW,
                    )
                )
        except nvml.NVMLError as error:
            raise PowerLimitDenied(f"NVML cannot read the power limit: {error}") from None
        return limits

    def set_power_limit(self, gpu: int, watts: float) -> None:
        """Sets GPU ``gpu``'s power limit (:class:`~tuner.catalog.power.PowerControl`).

        Raises:
            PowerLimitDenied: NVML refused (``Insufficient Permissions`` without root).
        """
        if self._failed:
            raise PowerLimitDenied("NVML is closed or stopped answering")
        handle = self._handles[self.indices.index(gpu)]
        try:
            self._nvml.nvmlDeviceSetPowerManagementLimit(handle, round(watts * _MW))
        except self._nvml.NVMLError as error:
            raise PowerLimitDenied(str(error)) from None

    def _stopped(self, error: Exception) -> None:
        self._failed = True
        _log.warning("NVML stopped answering (%s): GPU memory is no longer recorded", error)

    def close(self) -> None:
        """Releases NVML; reads after this report "not available"."""
        if not self._failed:
            self._failed = True
            self._nvml.nvmlShutdown()


def _import_pynvml() -> ModuleType:
    # Imported late: the package is always installed, but some hosts are better off never
    # loading it (and nvidia-ml-py ships no type information).
    import pynvml  # type: ignore[import-untyped]

    module: ModuleType = pynvml
    return module


class GpuProbe(Protocol):
    """What hardware detection reads from NVML, by NVML device index.

    ``cuda_driver_version`` is NVML's number (12040 is CUDA 12.4); ``nvlink_links`` counts the
    active NVLink links from ``a`` that reach ``b`` (directly or through an NVSwitch);
    ``topology_level`` is NVML's ``NVML_TOPOLOGY_*`` level of the PCIe path between them.
    """

    def device_count(self) -> int: ...
    def name(self, index: int) -> str: ...
    def memory_total_bytes(self, index: int) -> int: ...
    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...
    def nvlink_links(self, a: int, b: int) -> int: ...
    def topology_level(self, a: int, b: int) -> int: ...
    def close(self) -> None: ...


class NvmlProbe:
    """The :class:`GpuProbe` over ``pynvml``: construction opens NVML (raising without it)."""

    def __init__(self) -> None:
        self._nvml = _import_pynvml()
        self._nvml.nvmlInit()

    def _handle(self, index: int) -> Any:
        return self._nvml.nvmlDeviceGetHandleByIndex(index)

    def device_count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def name(self, index: int) -> str:
        return _text(self._nvml.nvmlDeviceGetName(self._handle(index)))

    def memory_total_bytes(self, index: int) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle(index)).total)

    def driver_version(self) -> str:
        return _text(self._nvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        return int(self._nvml.nvmlSystemGetCudaDriverVersion_v2())

    def nvlink_links(self, a: int, b: int) -> int:
        nvml, handle = self._nvml, self._handle(a)
        peer = _text(nvml.nvmlDeviceGetPciInfo(self._handle(b)).busId)
        links = 0
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except nvml.NVMLError:  # past the GPU's last link, or no NVLink at all (GeForce)
                break
            links += remote == peer or self._to_switch(handle, link)
        return links

    def _to_switch(self, handle: Any, link: int) -> bool:
        # On NVSwitch boards (HGX) every link ends at a switch that reaches every other GPU.
        try:
            kind = self._nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except self._nvml.NVMLError:  # older drivers cannot say
            return False
        return bool(kind == self._nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)

    def topology_level(self, a: int, b: int) -> int:
        return int(self._nvml.nvmlDeviceGetTopologyCommonAncestor(self._handle(a), self._handle(b)))

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def open_probe() -> GpuProbe:
    """The probe :func:`detect_gpus` opens (raising without NVML); tests replace this one."""
    return NvmlProbe()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect_gpus(
    indices: Sequence[int] | None = None, probe: GpuProbe | None = None
) -> DetectedGpus | NoGpu:
    """What NVML sees of the GPUs at ``indices`` (``--gpus``; None: all); never raises.

    ``probe`` None opens :func:`open_probe` and closes it again. Returns :class:`NoGpu` when
    NVML, the driver or the GPUs asked for are missing.
    """
    try:
        opened = probe or open_probe()
    except Exception as error:  # no library, no driver: nothing to detect
        return NoGpu(str(error) or type(error).__name__)
    try:
        return _read(opened, indices)
    except Exception as error:  # an NVML error mid-way (a GPU fell off the bus)
        return NoGpu(str(error) or type(error).__name__)
    finally:
        if probe is None:
            opened.close()


def _read(probe: GpuProbe, indices: Sequence[int] | None) -> DetectedGpus | NoGpu:
    count = probe.device_count()
    if count == 0:
        return NoGpu("the driver reports no GPU")
    wanted = list(range(count)) if indices is None else list(indices)
    missing = [i for i in wanted if not 0 <= i < count]
    if missing:
        return NoGpu(f"no GPU {missing[0]}: the host has {count}, numbered 0-{count - 1}")
    gpus = tuple(DetectedGpu(i, probe.name(i), probe.memory_total_bytes(i) / _GIB) for i in wanted)
    cuda = probe.cuda_driver_version()
    links = tuple(_link(probe, a, b) for a, b in itertools.combinations(wanted, 2))
    return DetectedGpus(gpus, probe.driver_version(), f"{cuda // 1000}.{cuda % 1000 // 10}", links)


def _link(probe: GpuProbe, a: int, b: int) -> GpuLink:
    try:
        links = probe.nvlink_links(a, b)
        return GpuLink((a, b), links, None if links else probe.topology_level(a, b))
    except Exception:  # some VMs hide the topology: the GPUs themselves still count
        return GpuLink((a, b), 0, None)


def detected_environment() -> dict[str, Any] | None:
    """GPU model, count, driver and CUDA version, as a study records where it ran; None
    without NVML."""
    detected = detect_gpus()
    return None if isinstance(detected, NoGpu) else detected.environment()


def gpu_names(indices: Sequence[int] | None) -> list[str] | None:
    """NVML's names of the GPUs at ``indices`` (all when None), or None without NVML."""
    detected = detect_gpus(indices)
    return None if isinstance(detected, NoGpu) else [gpu.name for gpu in detected.gpus]


def open_gpu_monitor(indices: Sequence[int] | None) -> GpuMonitor:
    """An NVML monitor for ``indices``, or a :class:`NoGpuMonitor` when NVML is unavailable.

    Args:
        indices: NVML device indices the study may use; None for all GPUs of the host.

    Returns:
        A monitor; on a host without NVML the fallback, after one warning in the log.
    """
    try:
        return NvmlMonitor(indices)
    except Exception as error:  # any NVMLError subclass, or an invalid index
        if not _said["unavailable"]:  # once per run: the trials' and the confirmation's
            _said["unavailable"] = True
            _log.warning("NVML not available (%s): GPU memory is not measured", error)
        return NoGpuMonitor()


def wait_for_baseline(
    monitor: GpuMonitor,
    baseline: Sequence[float] | None,
    tolerance_gib: float = 0.5,
    timeout_s: float = 60.0,
    *,
    poll_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Waits until every GPU's used memory is within ``tolerance_gib`` of ``baseline``.

    Args:
        monitor: where memory is read.
        baseline: used memory per GPU before the study started anything; None when unknown.
        tolerance_gib: how far above the baseline still counts as freed.
        timeout_s: the bound; a GPU that stays busy (someone else's job) must not stall the
            study forever.
        poll_s: time between reads.
        sleep: injected for tests.
        clock: injected for tests.

    Returns:
        True when memory is back (or cannot be read, so there is nothing to wait for);
        False when the timeout passed first, which is logged.
    """
    if baseline is None:
        return True
    deadline = clock() + timeout_s
    while True:
        used = monitor.memory_used_gib()
        if used is None or _near(used, baseline, tolerance_gib):
            return True
        if clock() >= deadline:
            _log.warning(
                "GPU memory still above its baseline after %.0f s (used %s GiB, baseline %s GiB);"
                " starting anyway",
                timeout_s,
                ", ".join(f"{u:.1f}" for u in used),
                ", ".join(f"{b:.1f}" for b in baseline),
            )
            return False
        sleep(poll_s)


def _near(used: Sequence[float], baseline: Sequence[float], tolerance_gib: float) -> bool:
    return all(u <= b + tolerance_gib for u, b in zip(used, baseline, strict=False))


@dataclass(frozen=True)
class Sampled:
    """What a :class:`GpuSampler` read over one window.

    Attributes:
        peaks: peak used memory per GPU in GiB; empty when memory was not available.
        states: every reading of every GPU, in the order taken (empty without NVML).
    """

    peaks: tuple[float, ...] = ()
    states: tuple[GpuState, ...] = ()


class GpuSampler:
    """Samples a monitor in a background thread: the peak memory per GPU, and every reading.

    Example:
        >>> sampler = GpuSampler(NoGpuMonitor(), interval_s=0.1)
        >>> sampler.start()
        >>> sampler.stop()
        Sampled(peaks=(), states=())
    """

    def __init__(self, monitor: GpuMonitor, interval_s: float = 0.5) -> None:
        """Prepares the sampler; nothing runs until :meth:`start`.

        Args:
            monitor: where the GPUs are read.
            interval_s: time between samples; peaks shorter than this can be missed.
        """
        self.monitor = monitor
        self.interval_s = interval_s
        self._peaks: list[float] = []
        self._states: list[GpuState] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Starts sampling (one sample at once, then every ``interval_s``)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def take(self) -> Sampled:
        """What was read since the start or the last ``take``, then begins a new window."""
        self._sample()  # the current value belongs to the window that ends now
        with self._lock:
            peaks, self._peaks = self._peaks, []
            states, self._states = self._states, []
        return Sampled(tuple(peaks), tuple(states))

    def stop(self) -> Sampled:
        """Stops sampling; returns what was read since the last ``take``."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self.take()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        states = self.monitor.state()
        if states is None:
            return
        used = [s.memory_used_gib for s in states]
        with self._lock:
            self._states.extend(states)
            if len(self._peaks) != len(used):
                self._peaks = list(used)
            else:
                self._peaks = [max(p, u) for p, u in zip(self._peaks, used, strict=True)]
