"""The per-GPU memory budget: what it holds, and the vLLM-like reasons a config fails."""

from __future__ import annotations

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig
from tuner.errors import ConfigError
from tuner.sim.memory import BLOCK_TOKENS, estimate_memory
from tuner.sim.reference import (
    REFERENCE_DRAFT,
    REFERENCE_HARDWARE,
    REFERENCE_TARGET,
    reference_server,
)

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
TARGET = load_model(REFERENCE_TARGET)
DRAFT = load_model(REFERENCE_DRAFT)


def test_budget_adds_up() -> None:
    est = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4))
    assert est.budget_gib == pytest.approx(0.92 * HARDWARE.gpu.vram_gib)
    inside = est.weights_gib + est.draft_gib + est.activation_gib + est.kv_cache_gib
    assert inside < est.budget_gib < inside + est.overhead_gib
    assert est.peak_gib == pytest.approx(inside + est.overhead_gib)
    assert est.kv_tokens % BLOCK_TOKENS == 0
    assert 60_000 < est.kv_tokens < 120_000
    assert est.weights_gib == pytest.approx(TARGET.weight_bytes / 2 / 1024**3)


def test_draft_costs_weights_and_kv() -> None:
    alone = estimate_memory(HARDWARE, TARGET, None, reference_server(0))
    drafted = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4))
    ngram = estimate_memory(HARDWARE, TARGET, None, reference_server(4, method="ngram"))
    assert alone.draft_gib == 0 and ngram.draft_gib == 0
    assert drafted.draft_gib == pytest.approx(DRAFT.weight_bytes / 2 / 1024**3)
    assert drafted.kv_tokens < alone.kv_tokens
    assert ngram.kv_tokens == alone.kv_tokens
    # A draft handed over for a server that does not use it costs nothing.
    assert estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(0)) == alone


def test_batched_tokens_cost_activation_memory() -> None:
    small = estimate_memory(HARDWARE, TARGET, None, reference_server(0, 0.92, 1024))
    large = estimate_memory(HARDWARE, TARGET, None, reference_server(0, 0.92, 8192))
    assert large.activation_gib > small.activation_gib + 1.0
    assert large.kv_tokens < small.kv_tokens


def test_jitter_can_break_a_borderline_config_at_launch() -> None:
    server = reference_server(4, 0.95)
    assert estimate_memory(HARDWARE, TARGET, DRAFT, server).fits
    late = estimate_memory(HARDWARE, TARGET, DRAFT, server, jitter_gib=0.3)
    assert not late.fits
    assert "CUDA out of memory" in late.reason
    assert estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4), jitter_gib=0.3).fits


def test_weights_that_do_not_fit_at_all() -> None:
    one = parse_hardware("4090")
    full = load_model("Qwen/Qwen2.5-32B-Instruct")
    est = estimate_memory(one, full, None, ServerConfig(full.hf_id, 1, 8192, 0.92, 2048))
    assert not est.fits
    assert "CUDA out of memory" in est.reason and "weights" in est.reason


def test_cache_too_small_for_max_model_len() -> None:
    server = ServerConfig(REFERENCE_TARGET, 2, 32768, 0.5, 2048)
    est = estimate_memory(HARDWARE, TARGET, None, server)
    assert not est.fits
    assert est.kv_tokens < 32768
    assert "KV cache is needed, which is larger than the available KV cache memory" in est.reason


def test_no_memory_for_cache_blocks() -> None:
    est = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.3))
    assert not est.fits
    assert est.kv_cache_gib <= 0 and est.kv_tokens == 0
    assert "No available memory for the cache blocks" in est.reason


@pytest.mark.parametrize("tp", [0, 3, 4])
def test_impossible_tensor_parallelism_is_a_config_error(tp: int) -> None:
    hardware = parse_hardware("4090x4") if tp == 3 else HARDWARE
    server = ServerConfig(REFERENCE_TARGET, tp, 8192, 0.92, 2048)
    with pytest.raises(ConfigError):
        estimate_memory(hardware, TARGET, None, server)
