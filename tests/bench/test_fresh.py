"""No cache bias, natural outputs: what the load generator sends to the server."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.testbed.fake_server import RunningServer
from tuner.bench.loadgen import build_payload
from tuner.bench.measure import fresh_prompts, measure_endpoint_async
from tuner.config.workload import PromptRequest, WorkloadSpec
from tuner.results import Endpoint

MODEL = "test-model"


def _sent_prompts(server: RunningServer, workload: WorkloadSpec, runs: int) -> list[str]:
    sent: list[str] = []

    async def capture(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            assert "ignore_eos" not in body  # replies end where the model ends them
            sent.append(body["messages"][0]["content"])

    async def measure() -> None:
        async with httpx.AsyncClient(event_hooks={"request": [capture]}, timeout=30) as client:
            for _ in range(runs):
                await measure_endpoint_async(
                    Endpoint(server.base_url, MODEL), 0.2, workload, 2, client=client, check=False
                )

    asyncio.run(measure())
    return sent


def test_no_request_reuses_a_prompt_the_server_saw(server: RunningServer) -> None:
    # The same workload twice on one server (a reused server, the same seed): every prompt,
    # warm-up included, still opens differently, so the prefix cache serves none of it.
    workload = WorkloadSpec(prompt_set="chat", input_tokens=32, output_tokens=4, requests=4)
    sent = _sent_prompts(server, workload, runs=2)
    assert len(sent) == 2 * (workload.warmup + workload.requests)
    assert len({text[:16] for text in sent}) == len(sent)


def test_fresh_prompts_keep_the_prompt_after_a_short_tag() -> None:
    plain = PromptRequest.from_prompt("def add(a, b):", 16)
    (fresh,) = fresh_prompts([plain])
    assert fresh.prompt.endswith(" def add(a, b):") and fresh.prompt != plain.prompt
    assert fresh.messages[0].content == fresh.prompt and fresh.max_tokens == 16
    assert len(fresh.prompt) - len(plain.prompt) == len("[0123456789ab] ")


def test_forced_lengths_only_when_asked() -> None:
    request = PromptRequest.from_prompt("hi", 8)
    natural = build_payload("m", request, api="chat", temperature=0.2, ignore_eos=False)
    forced = build_payload("m", request, api="chat", temperature=0.2, ignore_eos=True)
    assert "ignore_eos" not in natural and natural["max_tokens"] == 8
    assert forced["ignore_eos"] is True
