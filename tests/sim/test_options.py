"""vLLM 0.32's speculation options in the simulator: block drafters, parallel drafting, block
verification, sampled drafts, adaptive verification, and the model runner a config lands on."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.verification import DraftSampling, Verification
from tuner.config.vllm_version import parse_version
from tuner.config.workload import WorkloadSpec
from tuner.sim.acceptance import expected_accepted, shipped_rates
from tuner.sim.calibration import SHIPPED_STEPS
from tuner.sim.memory import estimate_memory
from tuner.sim.perfmodel import ForwardPass, PerfModel, StepShape
from tuner.sim.virtual_time import predict

H100 = parse_hardware("h100")
LLAMA8 = load_model("meta-llama/Llama-3.1-8B-Instruct")
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
NEW = parse_version("0.32.0")


def _server(k: int = 4, **options: Any) -> ServerConfig:
    spec = SpeculativeConfig(SpecMethod.EAGLE3, k, EAGLE3, **options)
    return ServerConfig(LLAMA8.hf_id, 1, 4096, 0.9, 2048, spec)


def _drafting_s(server: ServerConfig) -> float:
    perf = PerfModel(H100, LLAMA8, None, server, version=NEW)
    shape = StepShape(8, 8 * 1024, (), 0, graphed=True)
    target = perf.target_pass_s(ForwardPass(8 * (1 + server.k), 8, 8 * 1024, 0.0, True))
    return perf.step_s(shape) - target - perf.step_overhead_s(8, 8 * (1 + server.k), False)


def test_a_parallel_drafter_runs_one_pass_for_its_k_tokens() -> None:
    sequential = [_drafting_s(_server(k=k)) for k in (2, 4, 8)]
    parallel = [_drafting_s(_server(k=k, parallel_drafting=True)) for k in (2, 4, 8)]
    assert sequential[2] > 3 * sequential[0]  # K passes
    assert parallel[2] < 1.2 * parallel[0] < sequential[0] * 1.2  # one pass, a little wider


def test_parallel_drafting_accepts_later_positions_less_often() -> None:
    plain = shipped_rates(
        LLAMA8, None, SpecMethod.EAGLE3, "chat", 0.0, 5, speculative=_server().speculative
    )
    parallel = shipped_rates(
        LLAMA8,
        None,
        SpecMethod.EAGLE3,
        "chat",
        0.0,
        5,
        speculative=_server(parallel_drafting=True).speculative,
    )
    assert plain[0] == parallel[0] and plain[-1] > parallel[-1]


def test_block_verification_accepts_more_above_temperature_zero_only() -> None:
    standard = _server(k=3).speculative
    block = _server(k=3, rejection_sample_method=Verification.BLOCK).speculative
    for temperature, gains in ((0.0, False), (0.7, True)):
        rates = [
            sum(
                expected_accepted(
                    shipped_rates(
                        LLAMA8, None, SpecMethod.EAGLE3, "chat", temperature, 3, speculative=s
                    )
                )
            )
            for s in (standard, block)
        ]
        assert (rates[1] > rates[0]) is gains


def test_sampled_drafts_keep_acceptance_at_temperature_and_take_memory() -> None:
    greedy = _server(k=3)
    sampled = _server(k=3, draft_sample_method=DraftSampling.PROBABILISTIC)

    def accepted(server: ServerConfig) -> float:
        return sum(
            expected_accepted(
                shipped_rates(
                    LLAMA8, None, SpecMethod.EAGLE3, "chat", 1.0, 3, speculative=server.speculative
                )
            )
        )

    assert accepted(sampled) > 2 * accepted(greedy)
    kv = [estimate_memory(H100, LLAMA8, None, s).kv_cache_gib for s in (greedy, sampled)]
    # 256 sequences x K=3 x 128256 logits in 16 bits (vLLM 0.32's draft_logits buffer).
    assert kv[0] - kv[1] == pytest.approx(256 * 3 * 128256 * 2 / 1024**3, rel=1e-6)


def test_adaptive_verification_costs_a_little_at_low_load_and_drafts_less_at_high_load() -> None:
    fixed, adaptive = _server(k=7), _server(k=7, enable_adaptive_verification=True)
    perf = PerfModel(H100, LLAMA8, None, adaptive, version=NEW)
    reach = (0.7,) * 7
    assert perf.adaptive_k(1, 1024, reach, True) == 7
    assert perf.adaptive_k(1024, 1024 * 1024, reach, True) < 7
    # At two requests K=3 is this head's best: adaptive picks it too, and pays its own work.
    low = WorkloadSpec("chat", 256, 128, (2,), 4)
    servers = (_server(k=3), _server(k=3, enable_adaptive_verification=True))
    tok_s = [predict(H100, LLAMA8, None, s, 0.0, low, 2, version=NEW).output_tok_s for s in servers]
    assert 0.85 * tok_s[0] < tok_s[1] < tok_s[0]
    assert fixed.k == 7


def test_model_runner_v2_saves_step_time_where_vllm_runs_it() -> None:
    def overhead(server: ServerConfig, version: str) -> float:
        perf = PerfModel(H100, LLAMA8, None, server, version=parse_version(version))
        return perf.step_overhead_s(1, 0, False)

    eagle = _server(k=3)
    suffix = ServerConfig(LLAMA8.hf_id, 1, 4096, 0.9, 2048, SpeculativeConfig(SpecMethod.SUFFIX, 3))
    saving = SHIPPED_STEPS.v2_runner_saving_s
    assert overhead(eagle, "0.28.0") - overhead(eagle, "0.32.0") == pytest.approx(saving)
    # suffix decoding and P-EAGLE land on the V1 runner in 0.32 (vllm_runner.predict_runner)
    assert overhead(suffix, "0.32.0") == overhead(suffix, "0.28.0")
    p_eagle = _server(k=3, parallel_drafting=True)
    assert overhead(p_eagle, "0.32.0") == overhead(p_eagle, "0.28.0")


def test_a_block_drafter_is_simulated_with_or_without_its_own_model() -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    server = ServerConfig(v3.hf_id, 8, 4096, 0.9, 2048, SpeculativeConfig(SpecMethod.DSPARK, 7))
    result = predict(
        parse_hardware("h200x8"),
        v3,
        None,
        server,
        0.0,
        WorkloadSpec("chat", 256, 64, (1,), 2),
        1,
        version=NEW,
    )
    assert result.spec_decode is not None and result.mean_acceptance_length is not None
    assert result.mean_acceptance_length > 3  # a block drafter's positions hold up
