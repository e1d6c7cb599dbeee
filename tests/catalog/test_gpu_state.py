"""A measured window's GPU readings summed up: energy, power, clocks, throttling, tenants."""

from __future__ import annotations

import pytest

from tuner.catalog.gpu_state import GpuState, combined, summarise
from tuner.results import GpuWindow, Throttle


def _reading(at: float, gpu: int = 0, **fields: object) -> GpuState:
    return GpuState(at=at, gpu=gpu, memory_used_gib=20.0, **fields)  # type: ignore[arg-type]


def test_only_readings_inside_the_window_count_and_energy_comes_from_the_counter() -> None:
    readings = [
        _reading(0.0, power_w=450.0, energy_j=0.0),  # warm-up: hot and left out
        _reading(10.0, power_w=200.0, energy_j=1000.0, sm_clock_mhz=2500.0),
        _reading(12.0, power_w=260.0, energy_j=1500.0, sm_clock_mhz=2300.0),
        _reading(14.0, power_w=240.0, energy_j=2000.0, sm_clock_mhz=2400.0),
        _reading(30.0, power_w=50.0, energy_j=9000.0),  # after the window
    ]
    window = summarise(readings, (10.0, 14.5), owns=None)
    assert window is not None
    assert window.samples == 3
    assert window.energy_from == "counter"
    assert window.mean_power_w == pytest.approx(250.0)  # 1000 J over 4 s between readings
    assert window.energy_j == pytest.approx(250.0 * 4.5)  # scaled to the whole window
    assert window.sm_clock_mhz == pytest.approx(2400.0)
    assert window.others_memory_gib is None  # no owner known: no tenant figure


def test_without_a_counter_energy_is_mean_power_times_time_summed_over_gpus() -> None:
    readings = [
        _reading(at, gpu, power_w=power, power_limit_w=300.0)
        for at, power in ((1.0, 100.0), (2.0, 140.0))
        for gpu in (0, 1)
    ]
    window = summarise(readings, (1.0, 3.0), owns=None)
    assert window is not None
    assert window.energy_from == "power"
    assert window.mean_power_w == pytest.approx(240.0)  # 120 W on each of two GPUs
    assert window.energy_j == pytest.approx(480.0)
    assert window.power_limit_w == (300.0, 300.0)


def test_throttling_is_timed_per_reason_until_the_next_reading() -> None:
    hot = frozenset({Throttle.THERMAL})
    readings = [
        _reading(0.0, throttle=frozenset({Throttle.POWER_CAP}), temperature_c=70.0),
        _reading(1.0, throttle=hot, temperature_c=88.0),
        _reading(2.5, throttle=hot, temperature_c=90.0),
        _reading(3.0, temperature_c=80.0),
    ]
    window = summarise(readings, (0.0, 4.0), owns=None)
    assert window is not None
    assert window.throttled_s == {"power_cap": 1.0, "thermal": 2.0}
    assert window.distorted_s == 2.0  # a power cap is the study's condition, not a fault
    assert window.max_temperature_c == 90.0


def test_other_tenants_are_the_processes_the_server_does_not_own() -> None:
    server, desktop = 4242, 1000
    readings = [
        _reading(0.0, processes=((server, 18.0), (desktop, 1.0))),
        _reading(1.0, processes=((server, 18.5), (desktop, 3.0))),
    ]
    window = summarise(readings, (0.0, 1.0), owns=lambda pid: pid == server)
    assert window is not None
    assert window.others_memory_gib == 3.0
    assert window.others_memory_change_gib == 2.0


def test_no_reading_in_the_window_is_no_window() -> None:
    assert summarise([_reading(0.0, power_w=1.0)], (5.0, 6.0), owns=None) is None


def test_rounds_combine_into_one_window() -> None:
    first = GpuWindow(2.0, 4, 400.0, "counter", 200.0, 2500.0, 10000.0, 70.0, (450.0,))
    second = GpuWindow(
        6.0, 12, 1800.0, "power", 300.0, 2100.0, 10000.0, 88.0, (450.0,), {"thermal": 3.0}
    )
    both = combined([first, second])
    assert both is not None
    assert both.seconds == 8.0
    assert both.energy_j == 2200.0
    assert both.energy_from == "power"
    assert both.mean_power_w == pytest.approx(275.0)
    assert both.sm_clock_mhz == pytest.approx(2200.0)  # weighted by time
    assert both.throttled_s == {"thermal": 3.0}
    assert combined([]) is None
