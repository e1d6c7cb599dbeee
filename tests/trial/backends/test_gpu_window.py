"""A served backend records what the GPUs did through each measured window (NVML stand-in).

The process backend runs the shipped fake server; :class:`~tests.testbed.gpus.FakeGpus` stands
in for NVML, its energy counter integrating its power over real time.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.analysis.test_energy import RECORD
from tests.testbed.docker_host import FAKE_SERVER
from tests.testbed.gpus import FakeGpus
from tests.trial.backends.contract_support import CONFIG, FITS, HARDWARE, SMALL
from tuner.bench.summary import gpu_summary
from tuner.cli.render import record_row
from tuner.config.trial import LaunchContext
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.launch.process import ProcessLauncher
from tuner.results import GpuWindow, Throttle
from tuner.sim.power import power_model
from tuner.trial.backends.process import ProcessBackend

# Long enough for a dozen readings at the test's interval.
WORKLOAD = replace(SMALL, output_tokens=64, requests=8, warmup=2)


@pytest.fixture
def gpus() -> FakeGpus:
    return FakeGpus(power_w=300.0)


@pytest.fixture
def backend(tmp_path: Path, gpus: FakeGpus) -> Iterator[ProcessBackend]:
    launcher = ProcessLauncher(
        FAKE_SERVER,
        version=NEWEST_KNOWN,
        env={"SPECTUNE_SIM_SPEED": "10", "SPECTUNE_GPU_TEST": uuid.uuid4().hex},
        ready_timeout_s=30,
        poll_s=0.05,
        run_dir=tmp_path / "run-files",
    )
    made = ProcessBackend(launcher, request_timeout_s=30, gpu_monitor=gpus, sample_interval_s=0.02)
    yield made
    made.close()


def test_each_measurement_carries_its_window_s_energy_clocks_and_tenants(
    backend: ProcessBackend, gpus: FakeGpus, context: LaunchContext
) -> None:
    backend.start(FITS, context)
    assert backend.launcher.pid is not None
    gpus.tenants = [(backend.launcher.pid, 18.0), (os.getpid(), 1.5)]  # the server, a notebook
    config = replace(CONFIG, client=replace(CONFIG.client, workload=WORKLOAD))
    result = backend.measure(config, 2, seed=0)

    window = result.gpu
    assert window is not None
    assert window.seconds == pytest.approx(result.duration_s)
    assert window.samples >= 3
    assert window.energy_from == "counter"
    assert window.mean_power_w == pytest.approx(300.0, rel=0.05)
    assert window.energy_j == pytest.approx(300.0 * result.duration_s, rel=0.05)
    per_token = result.joules_per_token
    assert per_token == pytest.approx((window.energy_j or 0.0) / result.output_tokens)
    assert window.sm_clock_mhz == 2520.0
    assert window.power_limit_w == (450.0,)
    assert window.throttled_s == {}
    assert window.others_memory_gib == 1.5  # the server's own memory is not another tenant's
    summary = result.summary()
    assert summary["tokens_per_joule"] == pytest.approx(1 / (per_token or 1.0))
    assert summary["gpu_mean_power_w"] == window.mean_power_w


def test_a_pair_throttled_midway_is_measured_again_once_the_gpu_has_cooled(
    backend: ProcessBackend, gpus: FakeGpus, context: LaunchContext
) -> None:
    backend.start(FITS, context)
    config = replace(CONFIG, client=replace(CONFIG.client, workload=WORKLOAD))
    started = gpus.reads

    def hot_spell(fake: FakeGpus) -> None:
        if fake.reads == started + 5:  # from the warm-up well into the measured window
            fake.throttle_for(1.0, Throttle.THERMAL)

    gpus.script = hot_spell
    result = backend.measure(config, 2, seed=0)
    assert result.gpu is not None and not result.gpu.throttled  # the re-measure, cool
    assert result.gpu.throttled_s == {}
    (note,) = [n for n in result.notes if "throttled" in n]
    assert note.startswith("measured while throttled (thermal ")
    assert "measured again after" in note and "throttled again" not in note


def test_a_pair_that_throttles_again_is_kept_marked(
    backend: ProcessBackend, gpus: FakeGpus, context: LaunchContext
) -> None:
    backend.cool_down_s = 0.2  # the GPU never cools: the wait is bounded
    backend.start(FITS, context)
    config = replace(CONFIG, client=replace(CONFIG.client, workload=WORKLOAD))
    gpus.throttle(Throttle.HW_SLOWDOWN)
    result = backend.measure(config, 2, seed=0)
    assert result.gpu is not None and result.gpu.throttled
    assert result.gpu.throttled_s["hw_slowdown"] == pytest.approx(result.duration_s, rel=0.1)
    assert result.gpu.max_temperature_c == 91.0
    assert result.summary()["gpu_throttled"] is True
    assert any("throttled again (hw_slowdown" in n for n in result.notes)


def test_a_power_cap_is_the_study_s_condition_and_is_not_measured_again(
    backend: ProcessBackend, gpus: FakeGpus, context: LaunchContext
) -> None:
    backend.start(FITS, context)
    config = replace(CONFIG, client=replace(CONFIG.client, workload=WORKLOAD))
    gpus.reasons = frozenset({Throttle.POWER_CAP})
    result = backend.measure(config, 2, seed=0)
    assert result.gpu is not None and not result.gpu.throttled
    assert result.gpu.throttled_s["power_cap"] > 0
    assert not [n for n in result.notes if "throttled" in n]


def test_a_tenant_that_grows_mid_measurement_marks_the_pair_and_the_trial(
    backend: ProcessBackend, gpus: FakeGpus, context: LaunchContext
) -> None:
    backend.start(FITS, context)
    assert backend.launcher.pid is not None
    server = (backend.launcher.pid, 18.0)
    gpus.tenants = [server, (os.getpid(), 1.5)]
    config = replace(CONFIG, client=replace(CONFIG.client, workload=WORKLOAD))
    loaded = [1.5]

    def notebook_loads_a_model(fake: FakeGpus) -> None:
        # 0.1 GiB a reading, all through the pair: whatever its warm-up takes, its measured
        # window (a dozen readings or more) sees the notebook grow by well over the mark.
        loaded[0] += 0.1
        fake.tenants = [server, (os.getpid(), loaded[0])]

    gpus.script = notebook_loads_a_model
    result = backend.measure(config, 2, seed=0)
    window = result.gpu
    assert window is not None and window.tenants_moved
    assert window.others_memory_change_gib is not None and window.others_memory_gib is not None
    assert window.others_memory_change_gib >= 1.0 and window.others_memory_gib > 2.5
    assert not window.throttled  # marked, not measured again: the tenant may stay
    (note,) = [n for n in result.notes if "other processes" in n]
    assert note == (
        f"other processes' GPU memory moved by {window.others_memory_change_gib:.1f} GiB while "
        f"measured (up to {window.others_memory_gib:.1f} GiB held)"
    )

    gpus.script = None  # the notebook keeps what it loaded: the next pair is not marked
    steady = backend.measure(config, 1, seed=0)  # the notebook keeps its memory: no mark
    assert steady.gpu is not None and not steady.gpu.tenants_moved
    stored = gpu_summary([result, steady])
    assert stored is not None and stored["tenants_moved_pairs"] == 1
    record = replace(RECORD, gpu=stored)
    assert record.tenants_moved and record_row(record)[-1] == "ok tenants"
    assert not replace(RECORD, gpu=gpu_summary([steady])).tenants_moved


def test_memory_that_barely_moves_is_no_mark() -> None:
    window = GpuWindow(seconds=4.0, samples=8, others_memory_gib=1.7, others_memory_change_gib=0.2)
    assert not window.tenants_moved
    assert replace(window, others_memory_change_gib=0.5).tenants_moved
    assert not replace(window, others_memory_gib=None, others_memory_change_gib=None).tenants_moved


def test_the_stand_in_follows_the_fake_server_s_work_and_still_throttles_on_command(
    backend: ProcessBackend, gpus: FakeGpus, context: LaunchContext
) -> None:
    """Power, energy and clocks from the simulated GPU's work (tuner.sim.server.gpu)."""
    endpoint = backend.start(FITS, context)
    gpus.follow(endpoint.base_url)
    (idle,) = {s.power_w for s in gpus.state() or []}  # the server waits: its GPU idles
    model = power_model(HARDWARE.gpu)
    assert model is not None and idle == pytest.approx(model.idle_w)
    config = replace(CONFIG, client=replace(CONFIG.client, workload=WORKLOAD))
    result = backend.measure(config, 2, seed=0)
    window = result.gpu
    assert window is not None and window.energy_from == "counter"
    assert model.idle_w + 20 < (window.mean_power_w or 0) <= model.limit_w  # it worked
    assert (window.sm_clock_mhz or 0) > 210.0  # boost clocks while it works
    before = gpus.state() or []
    time.sleep(0.3)
    after = gpus.state() or []
    assert after[0].power_w == pytest.approx(model.idle_w) and after[0].sm_clock_mhz == 210.0
    # The counter moves at the idle draw while the server waits.
    drawn = (after[0].energy_j or 0) - (before[0].energy_j or 0)
    assert drawn == pytest.approx(model.idle_w * (after[0].at - before[0].at), rel=0.2)

    gpus.throttle(Throttle.THERMAL)
    throttled = backend.measure(config, 2, seed=1)
    assert throttled.gpu is not None and throttled.gpu.throttled
    assert throttled.gpu.sm_clock_mhz == 1200.0  # held down while the work goes on
