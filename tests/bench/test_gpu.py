"""The GPUs through NVML (a stand-in ``pynvml``): memory and state, the sampler, the baseline."""

from __future__ import annotations

import logging
import sys
import time
import types
from collections.abc import Iterator

import pytest

from tuner.catalog.gpu_state import GpuState
from tuner.catalog.nvml import (
    GpuSampler,
    NoGpuMonitor,
    NvmlMonitor,
    open_gpu_monitor,
    wait_for_baseline,
)
from tuner.catalog.power import PowerLimit, PowerLimitDenied
from tuner.results import Throttle

GIB = 1024**3


class FakeNvml(types.ModuleType):
    """Just enough of ``pynvml``: three GPUs with settable used bytes, and failure switches."""

    class NVMLError(Exception):
        pass

    def __init__(self, used_gib: list[float], *, init_fails: bool = False) -> None:
        super().__init__("pynvml")
        self.used_gib = used_gib
        self.init_fails = init_fails
        self.read_fails = False
        self.shutdowns = 0
        self.privileged = True  # setting a power limit needs root
        self.limits_mw: dict[int, int] = {}  # the limits set, per handle

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.used_gib)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.used_gib):
            raise self.NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> types.SimpleNamespace:
        if self.read_fails:
            raise self.NVMLError("GPU is lost")
        return types.SimpleNamespace(used=int(self.used_gib[handle] * GIB))

    # The state of GPU 0 is a Hopper's; GPUs 1 and 2 are older boards without an energy
    # counter, and GPU 2 lists no processes (as inside some containers).
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 250_500 + handle  # milliwatts

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if handle:
            raise self.NVMLError("Not Supported")
        return 7_000_000  # millijoules

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 2619}[clock]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 71

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return 400_000

    # Power management as on a 4090: 150-450 W, default 450 W; setting needs root.

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return self.limits_mw.get(handle, 450_000)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return 450_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: int) -> list[int]:
        return [150_000, 450_000]

    def nvmlDeviceSetPowerManagementLimit(self, handle: int, limit: int) -> None:
        if not self.privileged:
            raise self.NVMLError("Insufficient Permissions")  # NVML_ERROR_NO_PERMISSION
        self.limits_mw = {**self.limits_mw, handle: limit}

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return 0x4 | 0x40 | 0x1  # power cap, HW thermal slowdown, and idle (not a throttle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[types.SimpleNamespace]:
        if handle == 2:
            raise self.NVMLError("Not Supported")
        return [types.SimpleNamespace(pid=10, usedGpuMemory=2 * GIB)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[types.SimpleNamespace]:
        return [
            types.SimpleNamespace(pid=10, usedGpuMemory=2 * GIB),  # listed twice: counted once
            types.SimpleNamespace(pid=11, usedGpuMemory=GIB // 2),
        ]


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    fake = FakeNvml([1.0, 2.0, 3.0])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield fake


def test_nvml_monitor_reads_the_gpus_in_use_in_gib(nvml: FakeNvml) -> None:
    monitor = open_gpu_monitor([2, 0])
    assert isinstance(monitor, NvmlMonitor)
    assert monitor.memory_used_gib() == [3.0, 1.0]
    assert open_gpu_monitor(None).memory_used_gib() == [1.0, 2.0, 3.0]
    monitor.close()
    assert nvml.shutdowns == 1
    assert monitor.memory_used_gib() is None


def test_nvml_monitor_reads_each_gpu_s_state_and_what_a_gpu_lacks_is_none(
    nvml: FakeNvml,
) -> None:
    monitor = open_gpu_monitor([0, 2])
    states = monitor.state()
    assert states is not None
    hopper, older = states
    assert (hopper.gpu, older.gpu) == (0, 2)
    assert hopper.power_w == 250.5
    assert hopper.energy_j == 7000.0
    assert older.energy_j is None  # power x time stands in for it (tuner.catalog.gpu_state)
    assert (hopper.sm_clock_mhz, hopper.memory_clock_mhz) == (1980, 2619)
    assert hopper.temperature_c == 71
    assert hopper.power_limit_w == 400.0
    assert hopper.throttle == {Throttle.POWER_CAP, Throttle.THERMAL}
    assert hopper.processes == ((10, 2.0), (11, 0.5))
    assert older.processes is None
    assert hopper.memory_used_gib == 1.0


def test_nvml_monitor_reads_and_sets_the_power_limit_in_milliwatts(nvml: FakeNvml) -> None:
    monitor = open_gpu_monitor([2, 0])
    assert isinstance(monitor, NvmlMonitor)
    monitor.set_power_limit(0, 300.0)
    assert nvml.limits_mw == {0: 300_000}
    assert monitor.power_limits() == [
        PowerLimit(gpu=2, in_force_w=450.0, default_w=450.0, low_w=150.0, high_w=450.0),
        PowerLimit(gpu=0, in_force_w=300.0, default_w=450.0, low_w=150.0, high_w=450.0),
    ]


def test_nvml_refusing_a_power_limit_says_why(nvml: FakeNvml) -> None:
    monitor = open_gpu_monitor([0])
    assert isinstance(monitor, NvmlMonitor)
    nvml.privileged = False
    with pytest.raises(PowerLimitDenied, match="Insufficient Permissions"):
        monitor.set_power_limit(0, 300.0)
    monitor.close()
    with pytest.raises(PowerLimitDenied, match="closed"):
        monitor.power_limits()


class OlderNvml(FakeNvml):
    """An nvidia-ml-py from before the clocks-event call: only the throttle-reasons one."""

    nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return 0x8  # HW slowdown


def test_an_older_library_s_throttle_reasons_call_is_read_instead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", OlderNvml([1.0]))
    states = open_gpu_monitor([0]).state()
    assert states is not None
    assert states[0].throttle == {Throttle.HW_SLOWDOWN}


def test_without_nvml_the_fallback_is_used_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], init_fails=True))
    monkeypatch.setattr("tuner.catalog.nvml._said", {"unavailable": False})  # a fresh run
    with caplog.at_level(logging.WARNING):
        monitor = open_gpu_monitor([0])
    assert isinstance(monitor, NoGpuMonitor)
    assert monitor.memory_used_gib() is None
    assert monitor.state() is None
    assert [r.getMessage() for r in caplog.records] == [
        "NVML not available (NVML Shared Library Not Found): GPU memory is not measured"
    ]


def test_an_invalid_gpu_index_falls_back_and_releases_nvml(nvml: FakeNvml) -> None:
    assert isinstance(open_gpu_monitor([7]), NoGpuMonitor)
    assert nvml.shutdowns == 1


def test_nvml_failing_later_turns_the_monitor_off_with_one_warning(
    nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = open_gpu_monitor([0])
    nvml.read_fails = True
    with caplog.at_level(logging.WARNING):
        assert monitor.memory_used_gib() is None
        nvml.read_fails = False
        assert monitor.memory_used_gib() is None
    assert len(caplog.records) == 1


class ScriptedMonitor:
    """Returns the readings in order, then repeats the last one."""

    def __init__(self, *readings: list[float] | None) -> None:
        self.readings = list(readings)

    def memory_used_gib(self) -> list[float] | None:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]

    def state(self) -> list[GpuState] | None:
        used = self.memory_used_gib()
        now = time.monotonic()
        return None if used is None else [GpuState(now, i, gib) for i, gib in enumerate(used)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_wait_for_baseline_returns_once_memory_is_back_within_tolerance() -> None:
    clock = FakeClock()
    monitor = ScriptedMonitor([9.0, 2.0], [4.0, 1.4], [1.4, 1.4])
    assert wait_for_baseline(monitor, [1.0, 1.0], 0.5, 60, sleep=clock.sleep, clock=clock)
    assert clock.now == 1.0  # two pauses of 0.5 s: the third reading was near enough


def test_wait_for_baseline_is_bounded_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    with caplog.at_level(logging.WARNING):
        done = wait_for_baseline(
            ScriptedMonitor([20.0]), [1.0], timeout_s=5, sleep=clock.sleep, clock=clock
        )
    assert not done
    assert clock.now == 5.0
    assert "still above its baseline after 5 s" in caplog.text


@pytest.mark.parametrize(
    ("monitor", "baseline"), [(ScriptedMonitor([9.0]), None), (NoGpuMonitor(), [1.0])]
)
def test_nothing_to_wait_for_without_a_baseline_or_readings(
    monitor: ScriptedMonitor | NoGpuMonitor, baseline: list[float] | None
) -> None:
    clock = FakeClock()
    assert wait_for_baseline(monitor, baseline, sleep=clock.sleep, clock=clock)
    assert clock.now == 0.0


def test_gpu_sampler_keeps_the_maximum_per_gpu_and_every_reading_per_window() -> None:
    monitor = ScriptedMonitor([1.0, 5.0], [4.0, 2.0], [0.5, 0.5])
    sampler = GpuSampler(monitor, interval_s=3600)  # only the explicit samples count
    sampler.start()  # samples [1, 5]
    taken = sampler.take()  # samples [4, 2] first
    assert taken.peaks == (4.0, 5.0)
    assert [(s.gpu, s.memory_used_gib) for s in taken.states] == [
        (0, 1.0),
        (1, 5.0),
        (0, 4.0),
        (1, 2.0),
    ]
    assert sampler.stop().peaks == (0.5, 0.5)


def test_gpu_sampler_samples_in_the_background() -> None:
    monitor = ScriptedMonitor([1.0], [1.0], [7.0], [2.0])
    sampler = GpuSampler(monitor, interval_s=0.01)
    sampler.start()
    deadline = time.monotonic() + 10
    while monitor.readings != [[2.0]]:  # until the thread has read up to the last reading
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert sampler.stop().peaks == (7.0,)


def test_gpu_sampler_without_readings_reports_nothing() -> None:
    sampler = GpuSampler(NoGpuMonitor(), interval_s=0.01)
    sampler.start()
    assert sampler.take().peaks == ()
    assert sampler.stop().states == ()
