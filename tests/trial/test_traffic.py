"""A temperature mix on a three-level traffic profile: every pair on one server, no advice.

Each server config is measured at every (concurrency, temperature) pair of the workload on the
server its trial started, scored on the traffic-weighted result, and exported without ever
advising a temperature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.trial.traffic_support import small_space
from tuner.catalog.gpus import Hardware
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.export.vllm import export
from tuner.results import Endpoint, TrialResult
from tuner.search.forecast import predicted_trial
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.trial.backends.sim import SimBackend
from tuner.trial.record import records
from tuner.trial.scoring import TrialStatus

PROFILE = {
    "concurrency": [
        {"level": 1, "weight": 0.5},
        {"level": 8, "weight": 0.3},
        {"level": 32, "weight": 0.2},
    ],
    "temperature": [{"value": 0.2, "weight": 0.7}, {"value": 0.8, "weight": 0.3}],
    "requests": 8,
}
PAIRS = [(c, t) for c in (1, 8, 32) for t in (0.2, 0.8)]


@dataclass
class CountingSim(SimBackend):
    """The simulator, counting starts and the (concurrency, temperature) of each measurement."""

    starts: list[ServerConfig] = field(default_factory=list)
    measured: list[list[tuple[int, float]]] = field(default_factory=list)

    def __init__(self, hardware: Hardware) -> None:
        super().__init__(hardware)
        self.starts, self.measured = [], []

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self.starts.append(server)
        self.measured.append([])
        return super().start(server, context)

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        self.measured[-1].append((concurrency, config.client.sampling_temperature))
        return super().measure(config, concurrency, seed)


def _space(tmp_path: Path) -> SearchSpace:
    return small_space(
        tmp_path,
        hardware="4090x2",
        target="Qwen/Qwen2.5-32B-Instruct-AWQ",
        slo={"ttft_ms": 60_000},
        workload=PROFILE,
        search={
            "draft": ["none", "Qwen/Qwen2.5-0.5B-Instruct"],
            "num_speculative_tokens": 4,
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [2048, 4096],
        },
    )


def test_every_pair_is_measured_on_one_server_start_and_scored_on_the_mix(
    tmp_path: Path,
) -> None:
    space = _space(tmp_path)
    backend = CountingSim(space.hardware)
    request = OptimizeRequest(
        study="mix",
        space=space,
        backend="sim",
        trials=3,
        studies_dir=tmp_path,
        sampler="random",
        confirm_top=0,
    )
    result = optimize(request, backend=backend)
    ran = [r for r in records(result.handle.get_trials()) if r.duplicate_of is None]
    assert len(ran) == len(backend.starts)  # one start per server config, none per pair
    for record, pairs in zip(ran, backend.measured, strict=True):
        assert pairs == PAIRS  # every (level, temperature), level by level, on that start
        assert record.status is TrialStatus.OK and record.restarted
        assert [(lv["concurrency"], lv["temperature"]) for lv in record.levels] == PAIRS
        weights = [lv["weight"] for lv in record.levels]
        assert weights == pytest.approx([0.35, 0.15, 0.21, 0.09, 0.14, 0.06])
        weighted = sum(w * lv["output_tok_s"] for w, lv in zip(weights, record.levels, strict=True))
        assert record.throughput == pytest.approx(weighted)  # the traffic-weighted score
        assert record.p95_ttft_ms == pytest.approx(max(lv["ttft_p95_ms"] for lv in record.levels))
        assert record.temperature_mix == ((0.2, 0.7), (0.8, 0.3))


def test_the_forecast_of_a_trial_takes_the_pairs_a_trial_measures(tmp_path: Path) -> None:
    # The warm start and the plan price a trial on the pairs it will measure (the test above:
    # every (level, temperature), level by level), with the shares it is scored by.
    space = _space(tmp_path)
    config = space.config(space.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.9, 2048, 0.2)
    predicted = predicted_trial(space, config)
    assert [(c.concurrency, c.sampling_temperature) for c, _ in predicted] == PAIRS
    assert [r.concurrency for _, r in predicted] == [c for c, _ in PAIRS]
    weights = [c.weight for c, _ in predicted]
    assert weights == pytest.approx([0.35, 0.15, 0.21, 0.09, 0.14, 0.06])


@pytest.mark.parametrize("fmt", ["vllm", "json", "compose"])
def test_the_export_describes_the_mix_and_advises_no_temperature(tmp_path: Path, fmt: str) -> None:
    space = _space(tmp_path)
    request = OptimizeRequest(
        study="mix",
        space=space,
        backend="sim",
        trials=2,
        studies_dir=tmp_path,
        sampler="random",
        confirm_top=0,
    )
    result = optimize(request)
    text = export(result.handle, result.space, fmt).text
    assert "send temperature" not in text and "--temperature" not in text
    if fmt != "json":  # the header every text format carries
        assert "temperatures 0.2 (70 %), 0.8 (30 %) as requests send them" in text
        assert "concurrency 1 (50 %), 8 (30 %), 32 (20 %)" in text
    else:
        data = json.loads(text)
        assert "request" not in data
        assert data["provenance"]["temperatures"] == [[0.2, 0.7], [0.8, 0.3]]
        assert data["provenance"]["temperature_tuned"] is False
