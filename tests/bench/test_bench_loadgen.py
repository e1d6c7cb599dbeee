"""The load generator against a real streaming server."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from openai_sse_server import FakeOpenAIServer

from tuner.bench.loadgen import Api, build_payload, run_load
from tuner.config.workload import PromptRequest
from tuner.results import RequestRecord


def prompts(n: int, max_tokens: int = 10, text: str = "hello") -> list[PromptRequest]:
    return [PromptRequest.from_prompt(f"{text} {i}", max_tokens) for i in range(n)]


def load(
    base_url: str,
    requests: Sequence[PromptRequest],
    *,
    model: str = "test-model",
    **kwargs: Any,
) -> tuple[list[RequestRecord], float]:
    kwargs.setdefault("concurrency", 1)
    kwargs.setdefault("temperature", 0.0)

    async def go() -> tuple[list[RequestRecord], float]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(limits=limits, timeout=10.0) as client:
            return await run_load(client, base_url, model, requests, **kwargs)

    return asyncio.run(go())


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_tokens_come_from_usage_even_with_several_tokens_per_chunk(api: Api) -> None:
    with FakeOpenAIServer(tokens_per_chunk=4, ttft_s=0.02, chunk_delay_s=0.01) as server:
        records, duration = load(server.base_url, prompts(2), api=api)
    assert len(records) == 2
    for record in records:
        assert record.ok, record.error
        assert record.completion_tokens == 10  # 3 chunks of 4 + 4 + 2 tokens
        assert record.prompt_tokens is not None and record.prompt_tokens > 0
        assert len(record.chunk_times) == 3
        assert record.ttft is not None and record.ttft >= 0.02
        assert len(record.itl) == 2 and all(gap > 0 for gap in record.itl)
        assert record.tpot is not None and record.tpot > 0
        assert record.e2e_latency is not None and record.e2e_latency >= record.ttft
    assert duration >= sum(r.e2e_latency or 0 for r in records) * 0.99  # sequential at 1


def test_payload_streams_with_usage_and_forces_length(server: FakeOpenAIServer) -> None:
    load(server.base_url, prompts(1, max_tokens=3), temperature=0.3)
    load(server.base_url, prompts(1, max_tokens=3), api="completions", ignore_eos=False)
    chat, completion = server.payloads
    assert chat["messages"] == [{"role": "user", "content": "hello 0"}]
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["ignore_eos"] is True and chat["max_tokens"] == 3 and chat["temperature"] == 0.3
    assert completion["prompt"] == "hello 0" and "ignore_eos" not in completion
    assert (
        build_payload("m", prompts(1)[0], api="completions", temperature=0, ignore_eos=True)[
            "model"
        ]
        == "m"
    )


def test_closed_loop_keeps_exactly_n_in_flight() -> None:
    with FakeOpenAIServer(ttft_s=0.03) as server:
        records, _ = load(server.base_url, prompts(12, max_tokens=3), concurrency=4)
    assert all(r.ok for r in records)
    assert server.max_in_flight == 4
    assert len(server.arrivals) == 12


def test_closed_loop_with_fewer_requests_than_workers(server: FakeOpenAIServer) -> None:
    records, _ = load(server.base_url, prompts(2), concurrency=8)
    assert len(records) == 2 and all(r.ok for r in records)


def test_open_loop_follows_seeded_poisson_arrivals() -> None:
    rate, n, seed = 40.0, 16, 5
    arrivals = random.Random(seed)
    expected_span = sum(arrivals.expovariate(rate) for _ in range(n - 1))
    with FakeOpenAIServer(ttft_s=0.15) as server:
        records, _ = load(
            server.base_url, prompts(n, 3), concurrency=64, request_rate=rate, seed=seed
        )
    assert all(r.ok for r in records)
    span = server.arrivals[-1] - server.arrivals[0]
    assert abs(span - expected_span) < 0.25
    assert server.max_in_flight > 1  # arrivals do not wait for earlier requests


def test_open_loop_respects_the_concurrency_cap() -> None:
    with FakeOpenAIServer(ttft_s=0.05) as server:
        records, _ = load(server.base_url, prompts(10, 3), concurrency=2, request_rate=500.0)
    assert all(r.ok for r in records)
    assert server.max_in_flight == 2


def test_duration_mode_cycles_prompts_until_the_deadline() -> None:
    with FakeOpenAIServer(ttft_s=0.02) as server:
        records, duration = load(server.base_url, prompts(2, 3), concurrency=2, duration_s=0.3)
    assert len(records) > 2 and all(r.ok for r in records)
    assert duration >= 0.3
    assert {p["messages"][0]["content"] for p in server.payloads} == {"hello 0", "hello 1"}


def test_each_failure_is_recorded_per_request() -> None:
    faults = ["http500", "malformed", "drop", "error_event", "no_usage", "hang"]
    requests = [*prompts(1, text="fine"), *(prompts(1, 6, f"FAULT:{f}")[0] for f in faults)]
    with FakeOpenAIServer() as server:
        records, _ = load(server.base_url, requests, concurrency=7, request_timeout_s=0.5)
    ok, *failed = records
    assert ok.ok and ok.completion_tokens == 10
    errors = dict(zip(faults, (r.error or "" for r in failed), strict=True))
    assert errors["http500"] == "HTTP 500: injected failure"
    assert errors["malformed"].startswith("malformed SSE data line: '{not json'")
    assert errors["drop"].startswith("connection dropped mid-stream")
    assert errors["error_event"] == "server error mid-stream: engine core died"
    assert errors["no_usage"].startswith("no usage in the stream")
    assert errors["hang"] == "timed out after 0.5 s"
    for record in failed:
        assert not record.ok and record.end is None
    assert failed[1].first_token is not None  # partial timelines are kept


def test_wrong_model_is_a_recorded_404(server: FakeOpenAIServer) -> None:
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
def test_bad_arguments(server: FakeOpenAIServer, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load(server.base_url, prompts(1), **kwargs)
    with pytest.raises(ValueError, match="at least one request"):
        load(server.base_url, [])
