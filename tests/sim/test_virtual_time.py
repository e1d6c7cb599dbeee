"""The stepping scheduler and the virtual-time benchmark built on it."""

from __future__ import annotations

import itertools

import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_version import parse_version
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError, FailureKind, StartupFailure
from tuner.results import Source, TrialResult
from tuner.sim.reference import (
    REFERENCE_DRAFT,
    REFERENCE_HARDWARE,
    REFERENCE_TARGET,
    reference_server,
)
from tuner.sim.virtual_time import Scheduler, predict, simulate

HARDWARE = parse_hardware(REFERENCE_HARDWARE)
TARGET = load_model(REFERENCE_TARGET)
DRAFT = load_model(REFERENCE_DRAFT)
SMALL = WorkloadSpec("code", 384, 64, requests=6, warmup=2)


def _in_flight_max(result: TrialResult) -> int:
    events = sorted(
        [(r.start, 1) for r in result.requests] + [(r.end or r.start, -1) for r in result.requests],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def test_scheduler_steps_a_request_to_completion() -> None:
    scheduler = Scheduler(HARDWARE, TARGET, DRAFT, reference_server(4), kv_tokens=16_384, seed=None)
    scheduler.add_request(7, 300, 40, 0.0, "code")
    assert scheduler.has_work
    emitted, steps = 0, 0
    finished: list[int] = []
    while scheduler.has_work:
        step = scheduler.step()
        assert step.duration_s > 0
        assert 0 < step.kv_usage <= 1
        emitted += step.emitted.get(7, 0)
        finished += step.finished
        steps += 1
        if steps == 1:
            assert step.emitted == {7: 1}  # the prefill samples the first token
    assert emitted == 40 and finished == [7]
    assert steps < 20  # several tokens per step under speculation
    stats = scheduler.spec_stats()
    assert stats is not None and stats.draft_tokens == 4 * stats.drafts
    assert sum(stats.accepted_per_position) == pytest.approx(stats.accepted_tokens)
    assert scheduler.kv_usage == 0.0


def test_scheduler_abort_frees_blocks() -> None:
    scheduler = Scheduler(HARDWARE, TARGET, None, reference_server(0), kv_tokens=16_384)
    scheduler.add_request(1, 1000, 100, 0.0, "chat")
    scheduler.step()
    assert scheduler.kv_usage > 0
    assert scheduler.abort_request(1)
    assert not scheduler.abort_request(1)
    assert not scheduler.has_work and scheduler.kv_usage == 0.0


def test_scheduler_rejects_requests_longer_than_max_model_len() -> None:
    scheduler = Scheduler(HARDWARE, TARGET, None, reference_server(0), kv_tokens=16_384)
    with pytest.raises(ValueError, match="maximum context length is 8192"):
        scheduler.add_request(1, 8000, 500, 0.0, "chat")


def test_scheduler_rejects_unknown_methods_and_missing_drafts() -> None:
    with pytest.raises(ConfigError, match="unknown speculative method 'medusa'"):
        SpecMethod.parse("medusa")  # a name no config can carry: refused where it is read
    nothing = ServerConfig(
        REFERENCE_TARGET, 2, 8192, 0.92, 2048, SpeculativeConfig(SpecMethod.NONE, 4)
    )
    with pytest.raises(ConfigError, match="'none' is not simulated"):
        Scheduler(HARDWARE, TARGET, None, nothing, kv_tokens=16_384)
    with pytest.raises(ConfigError, match="no draft model"):
        Scheduler(HARDWARE, TARGET, None, reference_server(4), kv_tokens=16_384)


def test_simulated_records_look_like_measured_ones() -> None:
    result = simulate(HARDWARE, TARGET, DRAFT, reference_server(4), 0.2, SMALL, 2, seed=5)
    assert result.source is Source.SIMULATED
    assert result.concurrency == 2
    assert len(result.requests) == SMALL.requests  # warm-up left out
    assert result.errors == 0
    for record in result.requests:
        assert record.completion_tokens == SMALL.output_tokens
        assert record.prompt_tokens is not None
        assert abs(record.prompt_tokens - SMALL.input_tokens) <= 0.1 * SMALL.input_tokens
        assert record.start < record.chunk_times[0] == record.first_token
        assert list(record.chunk_times) == sorted(record.chunk_times)
        assert record.end == record.chunk_times[-1]
        # Speculation streams several tokens per chunk: chunks undercount tokens.
        assert len(record.chunk_times) < record.completion_tokens
    assert result.spec_decode is not None and result.spec_decode.drafts > 0
    assert len(result.spec_decode.accepted_per_position) == 4
    assert result.kv_cache_usage is not None and 0 < result.kv_cache_usage < 1
    assert result.preemptions == 0
    assert len(result.peak_memory_gib) == 2
    assert all(0 < gib < HARDWARE.gpu.vram_gib for gib in result.peak_memory_gib)


def test_without_speculation_one_token_per_chunk() -> None:
    result = predict(HARDWARE, TARGET, None, reference_server(0), 0.7, SMALL, 1)
    assert result.source is Source.PREDICTED
    assert result.spec_decode is None
    assert all(len(r.chunk_times) == r.completion_tokens for r in result.requests)
    assert all(r.prompt_tokens == SMALL.input_tokens for r in result.requests)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_keeps_concurrency_in_flight(concurrency: int) -> None:
    workload = WorkloadSpec("chat", 256, 32, requests=12, warmup=0)
    result = simulate(
        HARDWARE, TARGET, DRAFT, reference_server(4), 0.2, workload, concurrency, seed=1
    )
    assert _in_flight_max(result) == concurrency
    if concurrency == 1:
        # Back to back: the run lasts as long as its requests together.
        latencies = sum(r.e2e_latency or 0.0 for r in result.requests)
        assert result.duration_s == pytest.approx(latencies)


def test_open_loop_follows_the_arrival_rate() -> None:
    workload = WorkloadSpec("chat", 256, 32, requests=40, warmup=0, request_rate=4.0)
    result = simulate(HARDWARE, TARGET, None, reference_server(0), 0.2, workload, 16, seed=2)
    starts = [r.start for r in result.requests]
    assert starts == sorted(starts)
    mean_gap = (starts[-1] - starts[0]) / (len(starts) - 1)
    assert 0.15 < mean_gap < 0.4  # Poisson at 4 requests/s
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(set(round(g, 6) for g in gaps)) > 30  # random, not a fixed pace
    assert _in_flight_max(result) <= 16


def test_too_long_requests_fail_as_records() -> None:
    workload = WorkloadSpec("long-context", 8000, 512, requests=3, warmup=0)
    result = simulate(HARDWARE, TARGET, None, reference_server(0), 0.2, workload, 1, seed=0)
    assert result.errors == 3
    assert all(r.error and "maximum context length" in r.error for r in result.requests)
    assert result.output_tokens == 0


def test_servers_that_would_not_start_raise_oom() -> None:
    server = reference_server(4, 0.98)
    v032 = parse_version("0.32.0")
    with pytest.raises(StartupFailure) as caught:
        simulate(HARDWARE, TARGET, DRAFT, server, 0.2, SMALL, 1, seed=0, version=v032)
    assert caught.value.kind is FailureKind.OOM
    # vLLM 0.21-0.33 rules: the start-up free-memory check refuses 0.98.
    assert "less than desired GPU memory utilization" in str(caught.value)
    with pytest.raises(StartupFailure, match="less than desired GPU memory utilization"):
        predict(HARDWARE, TARGET, DRAFT, server, 0.2, SMALL, 1, version=v032)
    # 0.34 sizes the KV cache from what is free: no start-up check, 0.98 is only a cap.
    assert predict(HARDWARE, TARGET, DRAFT, server, 0.2, SMALL, 1).output_tok_s > 0


def test_ngram_needs_no_draft_and_follows_the_workload() -> None:
    server = reference_server(3, method=SpecMethod.NGRAM)
    code = predict(HARDWARE, TARGET, None, server, 0.0, WorkloadSpec("code", 384, 128), 1)
    story = predict(HARDWARE, TARGET, None, server, 0.0, WorkloadSpec("creative", 384, 128), 1)
    plain = predict(
        HARDWARE, TARGET, None, reference_server(0), 0.0, WorkloadSpec("code", 384, 128), 1
    )
    assert (code.acceptance_rate or 0) > 3 * (story.acceptance_rate or 0)
    assert code.output_tok_s > 1.3 * plain.output_tok_s
    assert story.output_tok_s < 1.1 * plain.output_tok_s


def test_warmup_absorbs_the_cold_start() -> None:
    cold = WorkloadSpec("code", 384, 64, requests=4, warmup=0)
    warm = WorkloadSpec("code", 384, 64, requests=4, warmup=1)
    first_cold = predict(HARDWARE, TARGET, None, reference_server(0), 0.2, cold, 1).requests[0]
    first_warm = predict(HARDWARE, TARGET, None, reference_server(0), 0.2, warm, 1).requests[0]
    assert (first_cold.ttft or 0) > (first_warm.ttft or 0) + 0.2


def test_a_per_batch_size_table_drafts_only_in_the_batches_it_names() -> None:
    fixed = reference_server(4)
    assert fixed.speculative is not None
    table = SpeculativeConfig(
        fixed.speculative.method,
        4,
        fixed.speculative.model,
        k_by_batch_size=((1, 2, 4), (3, 64, 0)),
    )
    server = ServerConfig(**{**fixed.__dict__, "speculative": table})
    scheduler = Scheduler(HARDWARE, TARGET, DRAFT, server, kv_tokens=65_536, seed=None)
    for rid, length in enumerate((8, 16, 48, 96)):  # they finish one after another
        scheduler.add_request(rid, 64, length, 0.0, "code")
    drafted_at: list[int] = []
    while scheduler.has_work:
        running = len(scheduler.running)
        before = scheduler.spec_stats()
        scheduler.step()
        after = scheduler.spec_stats()
        assert before is not None and after is not None
        if after.drafts > before.drafts:
            drafted_at.append(running)
            assert after.draft_tokens - before.draft_tokens == 4 * (after.drafts - before.drafts)
    # Four requests run at once: drafting starts once two of them have finished.
    assert drafted_at and max(drafted_at) == 2
    assert table.k_at(1) == 4 and table.k_at(3) == 0 and table.k_at(500) == 0
