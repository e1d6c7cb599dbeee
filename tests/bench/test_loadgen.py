"""The load generator against the shipped fake server (a real streaming HTTP server), over the
transport measurement uses (:mod:`tuner.bench.transport`)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from tests.testbed.fake_server import RunningServer
from tuner.bench.loadgen import Api, build_payload, run_load
from tuner.bench.transport import AiohttpTransport
from tuner.config.workload import PromptRequest
from tuner.results import RequestRecord

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
