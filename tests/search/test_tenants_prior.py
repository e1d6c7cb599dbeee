"""The memory other processes held when a study started, as the search's memory prior: the
twin starts with it held outside vLLM's budget, the memory guard keeps draws where it leaves
room, and on the benchmark's desktop world (2 GiB held, seen at study start as NVML shows it)
no launch runs out of memory."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest

from tuner.catalog.tenants import Tenants, read_tenants, record_tenants
from tuner.config.space import load_space
from tuner.search.memory_guard import guard
from tuner.search.strategy import warm_start
from tuner.search.twin_screen import twin_screen
from tuner.search.twin_steer import TwinSampler
from tuner.sim.twin.fit import FittedTwin
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.record import records
from tuner.trial.scoring import TrialStatus

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from worlds import WORLDS, WorldBackend

SPACE = load_space("qwen2.5-14b-awq-4090x1")  # vLLM 0.32: start-up needs share x total free
DESKTOP = next(w for w in WORLDS if w.name == "desktop on the GPU")


def _sampler(seed: int = 0) -> TwinSampler:
    return TwinSampler(
        optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)
    )


def _study(sampler: TwinSampler, tenants: Tenants) -> optuna.Study:
    study = open_study("t", optuna.storages.InMemoryStorage(), SPACE, sampler)[0]
    record_tenants(study, tenants)
    return study


def test_the_twin_starts_with_the_tenants_memory_held_outside_vllm() -> None:
    sampler = _sampler()
    twin = sampler.start(_study(sampler, Tenants(2.0, (1873,))))
    assert twin.params.outside_gib == pytest.approx(2.0)
    assert twin.margin_gib == pytest.approx(FittedTwin().margin_gib)  # on top, not eaten
    assert sampler.start(_study(sampler, Tenants())) == FittedTwin()


def test_the_guard_moves_a_share_the_tenants_leave_no_room_for() -> None:
    sampler = _sampler()
    twin = sampler.start(_study(sampler, Tenants(2.0)))
    screen = twin_screen(SPACE)
    drawn = {
        "draft": "ngram",
        "num_speculative_tokens": 2,
        "gpu_memory_utilization": 0.94,
        "max_num_batched_tokens": 8192,
    }
    assert guard(screen, FittedTwin(), drawn) == drawn  # safe on an empty GPU
    moved = guard(screen, twin, drawn)
    # 0.94 x 23.99 GiB is 22.6, more than the 22 free: vLLM 0.32 refuses to start.
    assert moved["gpu_memory_utilization"] * SPACE.hardware.gpu.vram_gib <= 23.99 - 2.0


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_on_the_desktop_world_read_at_study_start_no_launch_runs_out_of_memory(
    tmp_path: Path,
) -> None:
    backend = WorldBackend(SPACE.hardware, DESKTOP, 0, SPACE.version)
    tenants = read_tenants(backend.gpu_monitor())
    assert tenants.gib == pytest.approx(2.0) and tenants.pids  # as a real host shows it
    study = _study(_sampler(), tenants)
    assert warm_start(study, SPACE, 10) > 0
    options = StudyOptions(10, 0, tmp_path, SPACE.ttft_limit_ms, rounds=True, held_gib=tenants.gib)
    run_trials(study, SPACE, backend, options)
    done = records(study.get_trials(deepcopy=False))
    assert len(done) == 10 and any(r.feasible for r in done)
    assert not [r for r in done if r.status is TrialStatus.OOM]
