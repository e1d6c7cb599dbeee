"""Each qualitative observation of BRIEF.md, asserted on the simulator's predictions."""

from __future__ import annotations

import itertools

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_version import parse_version
from tuner.config.workload import WorkloadSpec
from tuner.results import TrialResult
from tuner.sim.memory import estimate_memory
from tuner.sim.reference import (
    REFERENCE_DRAFT,
    REFERENCE_HARDWARE,
    REFERENCE_TARGET,
    REFERENCE_VERSION,
    REFERENCE_WORKLOADS,
    reference_server,
)
from tuner.sim.virtual_time import predict

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
TARGET = load_model(REFERENCE_TARGET)
DRAFT = load_model(REFERENCE_DRAFT)
CODE = REFERENCE_WORKLOADS["code"]


def _predict(
    server: ServerConfig,
    temperature: float = 0.2,
    workload: WorkloadSpec = CODE,
    concurrency: int = 1,
) -> TrialResult:
    draft = DRAFT if server.speculative and server.speculative.method == "draft_model" else None
    # The field notes' observations were made on vLLM 0.7.2's V0 engine.
    args = (HARDWARE, TARGET, draft, server, temperature, workload, concurrency)
    return predict(*args, version=REFERENCE_VERSION)


def test_best_k_is_three_to_five() -> None:
    speed = {k: _predict(reference_server(k)).output_tok_s for k in range(1, 9)}
    best = max(speed, key=speed.__getitem__)
    assert 3 <= best <= 5
    # K of 1-2 does not pay for the verification overhead; above 6 later positions are wasted.
    assert speed[1] < 0.85 * speed[best]
    assert speed[2] < 0.93 * speed[best]
    assert speed[8] < 0.93 * speed[best]
    assert speed[7] < speed[6] < speed[best]


def test_acceptance_of_later_positions_decays() -> None:
    result = _predict(reference_server(8))
    assert result.spec_decode is not None
    rates = result.spec_decode.per_position_rate
    assert len(rates) == 8
    assert all(a > b for a, b in itertools.pairwise(rates))
    assert result.mean_acceptance_length == pytest.approx(1 + sum(rates))


def test_low_temperature_gains_most_and_high_temperature_cuts_acceptance() -> None:
    base = _predict(reference_server(0)).output_tok_s
    temps = (0.0, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0)
    runs = {t: _predict(reference_server(4), temperature=t) for t in temps}
    gain = {t: r.output_tok_s / base for t, r in runs.items()}
    acceptance = {t: r.acceptance_rate or 0.0 for t, r in runs.items()}
    assert max(gain, key=gain.__getitem__) <= 0.3
    assert min(gain[t] for t in (0.0, 0.1, 0.2, 0.3)) > 1.9
    # Never rising with temperature (to within the step granularity of 256-token requests).
    assert all(gain[a] >= gain[b] - 0.01 for a, b in itertools.pairwise(temps))
    assert all(acceptance[a] > acceptance[b] for a, b in itertools.pairwise(temps))
    assert acceptance[0.8] < 0.6 * acceptance[0.2]
    assert gain[0.8] < 0.75 * gain[0.2]
    assert gain[1.0] < 1.1


@pytest.mark.parametrize("concurrency", [32, 64])
def test_speculation_loses_at_high_concurrency(concurrency: int) -> None:
    workload = WorkloadSpec("code", 384, 256, requests=2 * concurrency)
    plain = _predict(reference_server(0), workload=workload, concurrency=concurrency)
    spec = _predict(reference_server(4), workload=workload, concurrency=concurrency)
    assert spec.output_tok_s < plain.output_tok_s
    low = WorkloadSpec("code", 384, 256, requests=8)
    assert _predict(reference_server(4), workload=low, concurrency=4).output_tok_s > (
        1.5 * _predict(reference_server(0), workload=low, concurrency=4).output_tok_s
    )


def test_speculation_gain_shrinks_with_concurrency() -> None:
    ratios = []
    for concurrency in (1, 8, 32, 64):
        workload = WorkloadSpec("chat", 384, 256, requests=max(8, 2 * concurrency))
        plain = _predict(reference_server(0), workload=workload, concurrency=concurrency)
        spec = _predict(reference_server(4), workload=workload, concurrency=concurrency)
        ratios.append(spec.output_tok_s / plain.output_tok_s)
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[0] > 1.5 > 1.0 > ratios[-1]


def test_memory_utilization_098_runs_out_while_092_fits() -> None:
    field_notes = parse_version("0.7.2")  # the version the field notes were taken on
    fits = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.92), version=field_notes)
    oom = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.98), version=field_notes)
    assert fits.fits and fits.reason == ""
    # 0.92 leaves ~2 GB outside vLLM's budget for the CUDA context and bursts.
    assert fits.gpu_total_gib - fits.budget_gib == pytest.approx(1.9, abs=0.1)
    assert fits.peak_gib < fits.gpu_total_gib
    assert not oom.fits
    assert "CUDA out of memory" in oom.reason
    assert oom.peak_gib > oom.gpu_total_gib
    # 0.21-0.33 refuse it at start-up (free memory < 0.98 x total once context and NCCL are up).
    assert not estimate_memory(
        HARDWARE, TARGET, None, reference_server(0, 0.98), version=parse_version("0.32.0")
    ).fits


def test_low_memory_utilization_starves_the_kv_cache() -> None:
    good = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.92))
    low = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.5))
    assert not low.fits or low.kv_tokens < 0.2 * good.kv_tokens
    assert low.kv_tokens < 0.2 * good.kv_tokens
    assert "KV cache" in low.reason or "cache blocks" in low.reason
    lower = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.4))
    assert not lower.fits and "No available memory for the cache blocks" in lower.reason


def test_weights_match_field_notes() -> None:
    one = parse_hardware("4090x1")
    target = load_model("Qwen/Qwen2.5-14B-Instruct-AWQ")
    server = ServerConfig(
        target.hf_id,
        1,
        8192,
        0.92,
        2048,
        SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, REFERENCE_DRAFT),
    )
    estimate = estimate_memory(one, target, DRAFT, server)
    assert 8.8 <= estimate.weights_gib <= 9.4  # "AWQ 4-bit 14B weighs ~9.5 GB"
    assert 0.8 <= estimate.draft_gib <= 1.2  # "0.5B FP16 draft ~1.2 GB"
    assert estimate.fits
    assert estimate.kv_cache_gib > 8  # "the rest of a 24 GB card goes to the KV cache"


def test_preemptions_when_kv_cache_is_too_small_for_the_concurrency() -> None:
    workload = WorkloadSpec("chat", 1500, 1024, requests=64)
    tight = _predict(reference_server(4, 0.6), workload=workload, concurrency=32)
    roomy = _predict(reference_server(4, 0.92), workload=workload, concurrency=32)
    assert tight.preemptions and tight.preemptions > 0
    assert tight.kv_cache_usage == pytest.approx(1.0, abs=0.02)
    assert roomy.preemptions == 0
    assert roomy.kv_cache_usage is not None and roomy.kv_cache_usage < 1.0
    assert tight.output_tok_s < roomy.output_tok_s


def test_tensor_parallel_draft_pays_for_communication() -> None:
    split = reference_server(4)
    local = ServerConfig(
        split.model,
        2,
        8192,
        0.92,
        2048,
        split.speculative,
        extra_flags=(("speculative-draft-tensor-parallel-size", 1),),
    )
    assert _predict(local).output_tok_s > 1.1 * _predict(split).output_tok_s
    assert estimate_memory(HARDWARE, TARGET, DRAFT, local).draft_gib == pytest.approx(
        2 * estimate_memory(HARDWARE, TARGET, DRAFT, split).draft_gib
    )


def _long_context(server: ServerConfig, concurrency: int) -> TrialResult:
    workload = WorkloadSpec("long-context", 6000, 128, requests=2 * concurrency)
    return _predict(server, workload=workload, concurrency=concurrency)


def _ttft(result: TrialResult) -> float:
    value = result.ttft_ms(50)
    assert value is not None
    return value


def _server(batched: int, chunked: bool = True) -> ServerConfig:
    return ServerConfig(
        REFERENCE_TARGET, 2, 8192, 0.92, batched, None, enable_chunked_prefill=chunked
    )


def test_chunked_prefill_bounds_activation_memory_for_long_prompts() -> None:
    chunked = estimate_memory(HARDWARE, TARGET, None, _server(2048))
    unchunked = estimate_memory(HARDWARE, TARGET, None, _server(2048, chunked=False))
    assert unchunked.activation_gib > 2 * chunked.activation_gib
    assert unchunked.kv_tokens < chunked.kv_tokens


def test_chunked_prefill_smooths_latency_and_shapes_ttft() -> None:
    def worst_gap(result: TrialResult) -> float:
        return max(gap for r in result.requests for gap in r.itl)

    chunked = _long_context(_server(2048), 4)
    unchunked = _long_context(_server(2048, chunked=False), 4)
    # Decodes no longer stall behind whole 6k-token prefills.
    assert worst_gap(chunked) < 0.25 * worst_gap(unchunked)
    assert _ttft(chunked) < _ttft(unchunked)
    # Alone, a long prompt pays a step overhead per chunk: smaller chunks, later first token.
    assert _ttft(_long_context(_server(512), 1)) > _ttft(_long_context(_server(4096), 1))
