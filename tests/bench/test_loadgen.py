"""The load generator against the shipped fake server (a real streaming HTTP server), over the
transport measurement uses (:mod:`tuner.bench.transport`)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from tests.testbed.fake_server import RunningServer, StartServer
from tuner.bench.loadgen import Api, _Stream, build_payload, run_load
from tuner.bench.summary import level_summary
from tuner.bench.transport import AiohttpTransport
from tuner.config.prompts import ChatMessage
from tuner.config.workload import PromptRequest
from tuner.results import RequestRecord, Source, TrialResult

MODEL = "test-model"


def prompts(n: int, max_tokens: int = 10, text: str = "hello") -> list[PromptRequest]:
    return [PromptRequest.from_prompt(f"{text} {i}", max_tokens) for i in range(n)]


def load(
    base_url: str,
    requests: Sequence[PromptRequest],
    *,
    model: str = MODEL,
    **kwargs: Any,
) -> tuple[list[RequestRecord], float]:
    kwargs.setdefault("concurrency", 1)
    kwargs.setdefault("temperature", 0.0)

    async def go() -> tuple[list[RequestRecord], float]:
        limits = httpx.Limits(max_connections=64)
        transport = AiohttpTransport(limits)
        async with httpx.AsyncClient(transport=transport, limits=limits, timeout=10.0) as client:
            return await run_load(client, base_url, model, requests, **kwargs)

    return asyncio.run(go())


def most_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests open at one moment, from the client's own timestamps."""
    events = sorted(
        [(r.start, 1) for r in records] + [(r.end or r.start, -1) for r in records],
        key=lambda event: (event[0], event[1]),  # an end before a start at the same instant
    )
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_tokens_come_from_usage_although_chunks_carry_several(
    server: RunningServer, api: Api
) -> None:
    records, duration = load(server.base_url, prompts(2, max_tokens=32), api=api)
    assert len(records) == 2
    for record in records:
        assert record.ok, record.error
        assert record.completion_tokens == 32
        assert record.prompt_tokens is not None and record.prompt_tokens > 0
        assert 1 < len(record.chunk_times) < 32  # accepted drafts arrive together
        assert record.ttft is not None and record.ttft > 0
        assert len(record.itl) == len(record.chunk_times) - 1 and all(g >= 0 for g in record.itl)
        assert record.tpot is not None and record.tpot > 0
        assert record.e2e_latency is not None and record.e2e_latency >= record.ttft
    assert duration >= sum(r.e2e_latency or 0 for r in records) * 0.99  # sequential at 1


def test_payload_streams_with_usage_and_forces_length() -> None:
    request = prompts(1, max_tokens=3)[0]
    chat = build_payload("m", request, api="chat", temperature=0.3, ignore_eos=True)
    completion = build_payload("m", request, api="completions", temperature=0, ignore_eos=False)
    assert chat["messages"] == [{"role": "user", "content": "hello 0"}]
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["ignore_eos"] is True and chat["max_tokens"] == 3 and chat["temperature"] == 0.3
    assert completion["prompt"] == "hello 0" and "ignore_eos" not in completion
    assert chat["model"] == completion["model"] == "m"


def test_the_chat_template_is_the_servers_and_the_prompt_goes_unchanged() -> None:
    """Where the template is applied, on every release: chat sends the workload's turns as
    ``messages`` for the server to template; completions sends the prompt text as it is."""
    turns = (ChatMessage("system", "Be brief."), ChatMessage("user", "<|im_start|>hi  \n"))
    request = PromptRequest.from_messages(turns, 8)
    chat = build_payload("m", request, api="chat", temperature=0, ignore_eos=False)
    completion = build_payload("m", request, api="completions", temperature=0, ignore_eos=False)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "<|im_start|>hi  \n"},
    ]
    assert "prompt" not in chat and "messages" not in completion
    assert completion["prompt"] == request.prompt == "Be brief.\n\n<|im_start|>hi  \n"
    # Nothing asks the server to change how it templates or tokenizes, either.
    for payload in (chat, completion):
        assert not {"chat_template", "chat_template_kwargs", "add_generation_prompt"} & set(payload)
        assert "add_special_tokens" not in payload


def test_the_servers_own_metrics_are_read_from_the_usage_chunk() -> None:
    stream = _Stream()
    stream.feed('data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}', 1.0)
    usage = '"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}'
    metrics = '"metrics":{"time_to_first_token_ms":12.5,"queue_time_ms":250,"mean_itl_ms":3}'
    stream.feed(f'data: {{"choices":[],{usage},{metrics}}}', 1.1)
    record = stream.record(0.0, 1.2, None)
    assert record.server_ttft_s == pytest.approx(0.0125)
    assert record.server_queue_s == pytest.approx(0.25)
    assert record.ttft == 1.0  # the client's own, beside it
    for sent in ('{"queue_time_ms":null}', '"fast"', '{"queue_time_ms":true}', "null"):
        quiet = _Stream()
        quiet.feed(f'data: {{"choices":[],{usage},"metrics":{sent}}}', 1.0)
        assert quiet.record(0.0, 1.0, None).server_queue_s is None
        assert quiet.record(0.0, 1.0, None).server_ttft_s is None


def test_server_ttft_and_queue_recorded_where_the_release_sends_them(
    start_server: StartServer, server: RunningServer
) -> None:
    new = start_server("--sim-vllm-version", "0.34.0", "--enable-per-request-metrics")
    old = start_server("--sim-vllm-version", "0.32.0")  # the metrics' flag not given
    for api in ("chat", "completions"):
        records, duration = load(new.base_url, prompts(6, max_tokens=16), api=api, concurrency=3)
        for record in records:
            assert record.ok, record.error
            assert record.server_ttft_s is not None and record.server_queue_s is not None
            assert record.server_ttft_s > 0 and record.server_queue_s >= 0
            assert record.ttft is not None and record.server_ttft_s <= record.ttft
        summary = level_summary(TrialResult(Source.MEASURED, 3, duration, tuple(records)))
        assert summary["server_ttft_p50_ms"] > 0 and summary["server_queue_p95_ms"] >= 0
        assert summary["server_ttft_p50_ms"] <= summary["ttft_p50_ms"]
        for base_url in (old.base_url, server.base_url):  # neither sends metrics
            records, duration = load(base_url, prompts(2, max_tokens=8), api=api)
            assert all(
                r.ok and r.server_ttft_s is None and r.server_queue_s is None for r in records
            )
            summary = level_summary(TrialResult(Source.MEASURED, 1, duration, tuple(records)))
            assert summary["server_ttft_p95_ms"] is None and summary["server_queue_p50_ms"] is None


def test_closed_loop_keeps_exactly_n_in_flight(server: RunningServer) -> None:
    records, _ = load(server.base_url, prompts(12, max_tokens=32), concurrency=4)
    assert all(r.ok for r in records)
    assert most_in_flight(records) == 4


def test_closed_loop_with_fewer_requests_than_workers(server: RunningServer) -> None:
    records, _ = load(server.base_url, prompts(2), concurrency=8)
    assert len(records) == 2 and all(r.ok for r in records)


def test_open_loop_follows_seeded_poisson_arrivals(server: RunningServer) -> None:
    rate, n, seed = 40.0, 16, 5
    arrivals = random.Random(seed)
    expected_span = sum(arrivals.expovariate(rate) for _ in range(n - 1))
    records, _ = load(server.base_url, prompts(n, 64), concurrency=64, request_rate=rate, seed=seed)
    assert all(r.ok for r in records)
    starts = sorted(r.start for r in records)
    assert abs(starts[-1] - starts[0] - expected_span) < 0.25
    assert most_in_flight(records) > 1  # arrivals do not wait for earlier requests


def test_open_loop_respects_the_concurrency_cap(server: RunningServer) -> None:
    records, _ = load(server.base_url, prompts(10, 32), concurrency=2, request_rate=500.0)
    assert all(r.ok for r in records)
    assert most_in_flight(records) == 2


def test_duration_mode_cycles_prompts_until_the_deadline(server: RunningServer) -> None:
    # Long enough for a third request on a busy machine (a request takes milliseconds idle;
    # 0.3 s once saw only the first two under another run's vLLM).
    records, duration = load(server.base_url, prompts(2, 8), concurrency=2, duration_s=2.0)
    assert len(records) > 2 and all(r.ok for r in records)
    assert duration >= 2.0


def test_wrong_model_is_a_recorded_404(server: RunningServer) -> None:
    records, _ = load(server.base_url, prompts(2), model="other")
    assert [r.error for r in records] == ["HTTP 404: The model `other` does not exist."] * 2


def test_refused_connection_is_recorded(closed_port: int) -> None:
    records, _ = load(f"http://127.0.0.1:{closed_port}", prompts(3), concurrency=2)
    assert len(records) == 3
    for record in records:
        assert record.error is not None
        assert record.error.startswith(f"cannot connect to http://127.0.0.1:{closed_port}/v1/")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"request_rate": 0.0}, "request_rate"),
        ({"api": "embeddings"}, "api"),
    ],
)
def test_bad_arguments(closed_port: int, kwargs: dict[str, Any], message: str) -> None:
    url = f"http://127.0.0.1:{closed_port}"  # refused before anything is sent
    with pytest.raises(ValueError, match=message):
        load(url, prompts(1), **kwargs)
    with pytest.raises(ValueError, match="at least one request"):
        load(url, [])
