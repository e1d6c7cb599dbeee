"""The per-GPU memory budget: what it holds, and the vLLM-like reasons a config fails."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod
from tuner.config.vllm_args import server_argv
from tuner.config.vllm_version import parse_version
from tuner.errors import ConfigError
from tuner.sim.memory import BLOCK_TOKENS, estimate_memory, kv_cache_bytes_per_value, memory_rules
from tuner.sim.reference import (
    REFERENCE_DRAFT,
    REFERENCE_HARDWARE,
    REFERENCE_TARGET,
    reference_server,
)
from tuner.sim.server.args import parse_serve_args
from tuner.sim.server.startup import StartFailure, start_scheduler

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
TARGET = load_model(REFERENCE_TARGET)
DRAFT = load_model(REFERENCE_DRAFT)
NEW = parse_version("0.32.0")
OLD = parse_version("0.9.2")


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
    ngram = estimate_memory(HARDWARE, TARGET, None, reference_server(4, method=SpecMethod.NGRAM))
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
    assert estimate_memory(HARDWARE, TARGET, DRAFT, server, version=NEW).fits
    late = estimate_memory(HARDWARE, TARGET, DRAFT, server, jitter_gib=0.6, version=NEW)
    assert not late.fits
    assert "Free memory on device cuda:0" in late.reason  # 0.21+: checked at start-up
    old = estimate_memory(HARDWARE, TARGET, DRAFT, server, jitter_gib=0.3, version=OLD)
    assert not old.fits and "CUDA out of memory" in old.reason  # 0.6-0.20: graph capture
    assert estimate_memory(
        HARDWARE, TARGET, DRAFT, reference_server(4), jitter_gib=0.3, version=NEW
    ).fits


def test_0_96_follows_each_versions_rules() -> None:
    """Issue 10: 0.96 for 32B + 0.5B on 4090x2 fails only under the old graph rules."""
    server = reference_server(4, 0.96)
    new = estimate_memory(HARDWARE, TARGET, DRAFT, server, version=NEW)
    assert new.fits and new.rules == "0.21+"
    old = estimate_memory(HARDWARE, TARGET, DRAFT, server, version=OLD)
    assert not old.fits and old.rules == "0.6-0.20"
    assert "while capturing CUDA graphs" in old.reason
    # From 0.21 the graphs come out of the KV cache, NCCL's buffers go outside the budget.
    assert new.kv_cache_gib < old.kv_cache_gib
    assert new.overhead_gib == pytest.approx(old.overhead_gib)
    # 0.98 leaves less free memory than the budget asks once context and NCCL are up.
    full = estimate_memory(HARDWARE, TARGET, DRAFT, reference_server(4, 0.98), version=NEW)
    assert not full.fits
    assert full.reason.startswith("ValueError: Free memory on device cuda:0 (23.32/23.99 GiB)")
    assert "less than desired GPU memory utilization (0.98, 23.51 GiB)" in full.reason


def test_nvml_free_memory_counts_other_processes() -> None:
    server = reference_server(4, 0.92)
    total = HARDWARE.gpu.vram_gib
    assert estimate_memory(HARDWARE, TARGET, DRAFT, server, free_gib=total, version=NEW).fits
    crowded = estimate_memory(HARDWARE, TARGET, DRAFT, server, free_gib=total - 2.0, version=NEW)
    assert not crowded.fits and "on startup is less than desired" in crowded.reason
    # Before 0.21 the budget is taken regardless; the other process's memory then lies outside.
    old = estimate_memory(HARDWARE, TARGET, DRAFT, server, free_gib=total - 2.0, version=OLD)
    assert not old.fits and "while capturing CUDA graphs" in old.reason


def test_kv_cache_dtype_halves_the_bytes_per_token() -> None:
    server = reference_server(4)
    fp8 = replace(server, extra_flags=(("kv-cache-dtype", "fp8"),))
    assert kv_cache_bytes_per_value(server) == 2.0 and kv_cache_bytes_per_value(fp8) == 1.0
    plain = estimate_memory(HARDWARE, TARGET, DRAFT, server)
    small = estimate_memory(HARDWARE, TARGET, DRAFT, fp8)
    assert small.kv_cache_gib == pytest.approx(plain.kv_cache_gib)
    assert small.kv_tokens == pytest.approx(2 * plain.kv_tokens, abs=2 * BLOCK_TOKENS)


def test_memory_rules_name_their_versions() -> None:
    assert memory_rules(parse_version("0.20.2")).versions == "0.6-0.20"
    rules = memory_rules(parse_version("0.21.0"))
    assert rules.graphs_in_budget and rules.free_memory_check and not rules.nccl_in_budget
    assert memory_rules(parse_version("0.33.0")) == rules  # 0.34 measures instead
    assert memory_rules(None) == memory_rules(parse_version("0.34.0"))


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


@pytest.mark.parametrize("version", ["0.9.2", "0.32.0"])
def test_fake_server_starts_exactly_when_the_pre_screen_says_so(version: str) -> None:
    """The fake server's start-up decision, next to the pre-screen's, under each version's rules."""
    vllm = parse_version(version)
    decisions = set()
    for util, draft, batched in itertools.product(
        (0.3, 0.8, 0.92, 0.95, 0.96, 0.98), (0, 4), (1024, 8192)
    ):
        server = reference_server(draft, util, batched)
        predicted = estimate_memory(
            HARDWARE, TARGET, DRAFT if draft else None, server, version=vllm
        )
        argv = server_argv(server, vllm, host="127.0.0.1", port=9)
        args = parse_serve_args(["serve", *argv, "--sim-hardware", REFERENCE_HARDWARE], {})
        try:
            start_scheduler(args, version=vllm)
            started, why = True, ""
        except StartFailure as failure:
            started, why = False, str(failure)
        assert (started, why) == (predicted.fits, predicted.reason), (util, draft, batched)
        decisions.add(started)
    assert decisions == {True, False}  # the grid crosses the boundary under both rule sets
