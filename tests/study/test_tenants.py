"""Other tenants of the study's GPUs: the memory they hold, read through NVML (stand-ins here)
before the first server starts, stored with the study, pre-screens every start-up, keeps the
warm start to configs the GPU can start and, on vLLM 0.34+, leaves them room in a new study's
memory dimension."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.testbed.gpus import FakeGpus
from tests.trial.traffic_support import fake_request, small_space
from tuner.catalog import nvml
from tuner.catalog.tenants import Tenants, stored_tenants
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import UNSET_MEMORY_SHARE
from tuner.search.twin_screen import trial_config
from tuner.study.host import held_elsewhere, leave_room
from tuner.study.optimize import optimize, plan_run
from tuner.study.run import OpenedRun
from tuner.trial.backends.sim import SimBackend
from tuner.trial.optuna_private import FIXED_PARAMS
from tuner.trial.record import records, stored_space
from tuner.trial.runner import TrialRunner, predict_memory
from tuner.trial.scoring import TrialStatus

RTX_4090 = "NVIDIA GeForce RTX 4090"
GIB = 1024**3


class One4090:
    """NVML's GpuProbe of a host with one RTX 4090 (hardware detection)."""

    def device_count(self) -> int:
        return 1

    def name(self, index: int) -> str:
        return RTX_4090

    def memory_total_bytes(self, index: int) -> int:
        return int(23.99 * GIB)

    def driver_version(self) -> str:
        return "580.105.06"

    def cuda_driver_version(self) -> int:
        return 13000

    def nvlink_links(self, a: int, b: int) -> int:
        return 0

    def topology_level(self, a: int, b: int) -> int:
        return 30

    def close(self) -> None:
        pass


DESKTOP = 4242  # a process that is no server of the study


def _host(monkeypatch: pytest.MonkeyPatch, held_gib: float) -> None:
    """One 4090 on which process DESKTOP holds ``held_gib`` (NVML's probe and monitor)."""
    monkeypatch.setattr(nvml, "open_probe", One4090)
    gpus = FakeGpus(server_gib=0.0, tenants=[(DESKTOP, held_gib)])
    monkeypatch.setattr(nvml, "open_gpu_monitor", lambda indices: gpus)


def test_memory_a_foreign_process_holds_counts_and_the_simulator_sees_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _host(monkeypatch, 2.1)
    held = held_elsewhere("docker", None)
    assert held.gib == pytest.approx(2.1) and held.pids == (DESKTOP,)
    assert held_elsewhere("sim", None) == Tenants()
    assert held_elsewhere("docker", ()) == Tenants()  # --gpus none
    _host(monkeypatch, 0.3)  # the driver's own, not a tenant
    assert held_elsewhere("process", (0,)) == Tenants()
    monkeypatch.setattr(nvml, "open_gpu_monitor", lambda indices: nvml.NoGpuMonitor())
    assert held_elsewhere("docker", None) == Tenants()


def test_on_0_34_a_new_study_searches_caps_that_leave_the_tenants_their_memory() -> None:
    space = load_space("qwen3-coder-30b-fp8-4090x2-2026")
    assert space.gpu_memory_utilization.high == UNSET_MEMORY_SHARE
    notes: list[str] = []
    room = leave_room(space, Tenants(2.1, (DESKTOP,)), notes.append)
    assert room.model.server.memory_headroom_gib == 2.5
    assert room.gpu_memory_utilization.high == pytest.approx(1 - 2.5 / 24, abs=1e-3)
    assert len(notes) == 1 and "2.1 GiB (pid 4242)" in notes[0]
    assert "leave them 2.5 GiB" in notes[0]
    assert leave_room(space, Tenants(), notes.append) is space and len(notes) == 1


def test_a_headroom_the_space_names_is_kept() -> None:
    space = load_space("qwen3-coder-30b-fp8-4090x2-2026").with_memory_headroom(4.0)
    assert leave_room(space, Tenants(2.1), None).model.server.memory_headroom_gib == 4.0


def _space_032(tmp_path: Path) -> SearchSpace:
    return small_space(tmp_path, search={"gpu_memory_utilization": 0.94, "draft": ["none"]})


def test_on_0_32_a_config_the_tenants_leave_no_room_for_is_never_launched(tmp_path: Path) -> None:
    # vLLM 0.32 refuses to start unless utilization x total is free: 0.94 x 24 GiB is 22.6,
    # and with 2 GiB held only 22 are.
    space = _space_032(tmp_path)
    notes: list[str] = []
    assert leave_room(space, Tenants(2.0), notes.append) is space
    assert "outside vLLM" in notes[0] and "pre-screen" in notes[0]
    config = space.config(None, 0.94, 2048, 0.2)
    outcomes = []
    for held in (0.0, 2.0):
        backend = SimBackend(space.hardware, version=space.version)
        runner = TrialRunner.for_space(backend, space, held_gib=held)
        outcomes.append(runner.run(config, LaunchContext("t", 0, tmp_path), seed=0))
    assert outcomes[0].status is TrialStatus.OK
    assert outcomes[1].status is TrialStatus.OOM_PREDICTED and not outcomes[1].restarted


def test_a_measured_study_on_0_34_stores_the_room_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, 2.1)
    monkeypatch.setenv("SPECTUNE_SIM_VLLM_VERSION", "0.34.0")
    space = small_space(
        tmp_path,
        vllm={"version": "0.34.0"},
        search={"draft": ["none"], "gpu_memory_utilization": {"low": 0.8, "high": 0.95}},
    )
    notes: list[str] = []
    result = optimize(fake_request(tmp_path, space, 2), on_notice=notes.append)
    stored = stored_space(result.handle)
    assert stored is not None and stored.model.server.memory_headroom_gib == 2.5
    tenants = stored_tenants(result.handle)
    assert tenants.gib == pytest.approx(2.1) and tenants.pids == (DESKTOP,)
    cap = 1 - 2.5 / 23.99
    shares = [r.server.gpu_memory_utilization for r in records(result.handle.get_trials())]
    assert shares and all(share <= cap + 1e-3 for share in shares)
    assert any("leave them 2.5 GiB" in note for note in notes)


def _queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, space: SearchSpace, held_gib: float
) -> tuple[SearchSpace, list[ServerConfig]]:
    """A new spectune study started on a host where DESKTOP holds ``held_gib``: its space, and
    the servers its warm start queued (none run)."""
    _host(monkeypatch, held_gib)
    request = dataclasses.replace(
        fake_request(tmp_path / f"held-{held_gib}", space, 8), sampler="spectune"
    )
    run = OpenedRun.open(request).prepare().start()
    queued = run.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert queued
    params = [t.system_attrs[FIXED_PARAMS] for t in queued]
    return run.space, [trial_config(run.space, p).server for p in params]


def test_on_0_32_the_warm_start_queues_only_what_the_tenants_leave_room_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The case: 32 requests in flight want the most KV cache a 4090 can give.
    space = load_space("qwen2.5-14b-awq-4090x1")
    _, free = _queued(tmp_path, monkeypatch, space, 0.0)
    # Without the reading, the warm start queues shares (0.94) that fail vLLM 0.32's start-up
    # check with 2 GiB held.
    assert any(not predict_memory(space.hardware, s, space.version, 2.0).fits for s in free)
    _, shared = _queued(tmp_path, monkeypatch, space, 2.0)
    # Each queued config starts with the tenant's 2 GiB and the start-up jitter (0.5) held.
    assert all(predict_memory(space.hardware, s, space.version, 2.5).fits for s in shared)
    assert {s.method for s in shared} == {s.method for s in free}  # every method still tried


def test_on_0_34_the_warm_start_stays_under_the_cap_that_leaves_the_tenants_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECTUNE_SIM_VLLM_VERSION", "0.34.0")
    search = {"draft": ["none", "ngram"], "gpu_memory_utilization": {"low": 0.8, "high": 0.96}}
    wide = small_space(tmp_path, vllm={"version": "0.34.0"}, search=search)
    space, queued = _queued(tmp_path, monkeypatch, wide, 2.0)
    assert space.model.server.memory_headroom_gib == 2.0
    cap = 1 - 2.0 / space.hardware.gpu.vram_gib
    assert all(s.gpu_memory_utilization <= cap + 1e-6 for s in queued)
    assert all(predict_memory(space.hardware, s, space.version, 2.5).fits for s in queued)


def test_the_plan_shows_the_warm_start_the_tenants_leave_room_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(monkeypatch, 2.0)
    request = fake_request(tmp_path, load_space("qwen2.5-14b-awq-4090x1"), 20)
    named = [what for what, _ in plan_run(request).trials if "gpu-mem" in what]
    assert named and not [what for what in named if "gpu-mem 0.94" in what]
