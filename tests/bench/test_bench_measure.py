"""measure_endpoint and check_model against a real streaming server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from openai_sse_server import (
    ACCEPTED_PER_POSITION,
    ACCEPTED_PER_REQUEST,
    DRAFT_TOKENS_PER_REQUEST,
    DRAFTS_PER_REQUEST,
    FakeOpenAIServer,
)

from tuner.bench.measure import check_model, measure_endpoint, measure_endpoint_async
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError, MeasurementError
from tuner.results import Endpoint, Source

WORKLOAD = WorkloadSpec(prompt_set="chat", input_tokens=64, output_tokens=8, requests=5, warmup=2)


def endpoint(server: FakeOpenAIServer, model: str | None = None) -> Endpoint:
    return Endpoint(base_url=server.base_url, model=model or server.model)


def test_warmup_is_left_out_of_records_and_metric_deltas() -> None:
    with FakeOpenAIServer(tokens_per_chunk=3) as server:
        result = measure_endpoint(endpoint(server), 0.2, WORKLOAD, 2, kv_sample_interval_s=0.001)
        streamed = [p for p in server.payloads if p.get("stream")]
    assert result.source is Source.MEASURED
    assert result.concurrency == 2
    assert len(result.requests) == 5 and result.errors == 0
    assert len(streamed) == 7  # 2 warm-up + 5 measured
    assert all(p["temperature"] == 0.2 for p in streamed)
    assert result.output_tokens == 5 * WORKLOAD.output_tokens  # requests x max_tokens
    assert result.duration_s > 0 and result.output_tok_s > 0
    assert result.notes == ()
    spec = result.spec_decode
    assert spec is not None
    assert spec.drafts == 5 * DRAFTS_PER_REQUEST
    assert spec.draft_tokens == 5 * DRAFT_TOKENS_PER_REQUEST
    assert spec.accepted_tokens == 5 * ACCEPTED_PER_REQUEST
    assert spec.accepted_per_position == tuple(5.0 * a for a in ACCEPTED_PER_POSITION)
    assert result.preemptions == 5.0
    assert result.kv_cache_usage is not None and 0.0 <= result.kv_cache_usage <= 1.0
    assert result.ttft_ms(50) is not None and result.itl_ms(50) is not None


def test_v0_metric_names() -> None:
    with FakeOpenAIServer(metrics="v0") as server:
        result = measure_endpoint(endpoint(server), 0.0, WORKLOAD, 1, api="completions")
    assert result.spec_decode is not None
    assert result.spec_decode.drafts == 5 * DRAFTS_PER_REQUEST  # emitted - accepted
    assert result.acceptance_rate == pytest.approx(ACCEPTED_PER_REQUEST / DRAFT_TOKENS_PER_REQUEST)
    assert result.kv_cache_usage is not None


def test_missing_metrics_leave_a_note() -> None:
    with FakeOpenAIServer(metrics="none") as server:
        result = measure_endpoint(endpoint(server), 0.0, WORKLOAD, 1)
    assert result.spec_decode is None and result.kv_cache_usage is None
    assert result.preemptions is None
    assert any("no /metrics" in note for note in result.notes)


def test_duration_workload() -> None:
    workload = WorkloadSpec(output_tokens=4, requests=2, warmup=0, duration_s=0.2)
    with FakeOpenAIServer(ttft_s=0.02) as server:
        result = measure_endpoint(endpoint(server), 0.0, workload, 2, check=False)
    assert len(result.requests) > 2 and result.duration_s >= 0.2
    assert result.notes == ()


def test_some_failed_requests_are_kept_and_noted(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": "FAULT:http500"}\n')
    workload = WorkloadSpec(prompt_set=str(path), output_tokens=4, requests=4, warmup=0)
    with FakeOpenAIServer() as server:
        result = measure_endpoint(endpoint(server), 0.0, workload, 2)
    assert len(result.requests) == 4 and result.errors == 2
    assert result.output_tokens == 2 * 4
    assert result.notes == ("2 of 4 requests failed; first: HTTP 500: injected failure",)


def test_no_successful_request_is_a_measurement_error() -> None:
    with FakeOpenAIServer(fault="http500") as server, pytest.raises(MeasurementError) as caught:
        measure_endpoint(endpoint(server), 0.0, WORKLOAD, 1, check=False)
    assert str(caught.value) == (
        f"no request succeeded against {server.base_url} (model 'test-model'); "
        "first error: HTTP 500: injected failure"
    )


def test_injected_client_is_used_and_left_open() -> None:
    paths: list[str] = []

    async def hook(request: httpx.Request) -> None:
        paths.append(request.url.path)

    workload = WorkloadSpec(output_tokens=4, requests=2, warmup=1)

    async def run(server: FakeOpenAIServer) -> None:
        async with httpx.AsyncClient(event_hooks={"request": [hook]}) as client:
            result = await measure_endpoint_async(
                endpoint(server), 0.0, workload, 1, client=client, check=False
            )
            assert not client.is_closed
            assert result.errors == 0

    with FakeOpenAIServer() as server:
        asyncio.run(run(server))
    assert paths.count("/v1/chat/completions") == 3
    assert "/metrics" in paths


def test_injected_transport_is_used() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(404)
        usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        body = (
            'data: {"choices": [{"index": 0, "delta": {"content": "a b c d"}}]}\n\n'
            f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            "data: [DONE]\n\n"
        )
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    workload = WorkloadSpec(output_tokens=4, requests=3, warmup=0)
    result = measure_endpoint(
        Endpoint("http://mock", "m"),
        0.0,
        workload,
        2,
        transport=httpx.MockTransport(handler),
        check=False,
    )
    assert result.errors == 0 and result.output_tokens == 12


def test_wrong_model_names_the_served_models(server: FakeOpenAIServer) -> None:
    with pytest.raises(MeasurementError) as caught:
        measure_endpoint(endpoint(server, "Qwen/Qwen2.5-14B"), 0.0, WORKLOAD, 1)
    message = str(caught.value)
    assert "'Qwen/Qwen2.5-14B' is not served at http://127.0.0.1" in message
    assert "it serves: test-model" in message and "\n" not in message


def test_wrong_model_without_the_check_still_fails_clearly(server: FakeOpenAIServer) -> None:
    with pytest.raises(MeasurementError, match=r"HTTP 404.*is 'nope' the served model name"):
        measure_endpoint(endpoint(server, "nope"), 0.0, WORKLOAD, 1, check=False)


def test_unreachable_server(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    with pytest.raises(MeasurementError, match=f"cannot reach {url}/v1/models"):
        measure_endpoint(Endpoint(url, "m"), 0.0, WORKLOAD, 1, check_timeout_s=2)
    with pytest.raises(MeasurementError, match=f"no request succeeded against {url}.*connect"):
        measure_endpoint(Endpoint(url, "m"), 0.0, WORKLOAD, 1, check=False)


def test_check_model_sends_a_real_request(server: FakeOpenAIServer) -> None:
    check_model(server.base_url, server.model, 5.0)
    check_model(server.base_url, server.model, 5.0, api="completions")
    plain = [p for p in server.payloads if not p.get("stream")]
    assert [p["max_tokens"] for p in plain] == [1, 1]
    assert "messages" in plain[0] and "prompt" in plain[1]


def test_check_model_reports_a_failing_answer() -> None:
    with FakeOpenAIServer(fault="http500") as server, pytest.raises(MeasurementError) as caught:
        check_model(server.base_url, server.model, 5.0)
    message = str(caught.value)
    assert message.startswith(f"model 'test-model' at {server.base_url} did not answer a 1-token")
    assert "HTTP 500" in message and "injected failure" in message


def test_bad_inputs() -> None:
    with pytest.raises(MeasurementError, match="simulator"):
        measure_endpoint(Endpoint("sim://", "m"), 0.0, WORKLOAD, 1)
    with FakeOpenAIServer() as server:
        with pytest.raises(ConfigError, match="concurrency"):
            measure_endpoint(endpoint(server), 0.0, WORKLOAD, 0)
        for fields, message in [
            ({"requests": 0}, r"workload\.requests = 0: must be"),
            ({"duration_s": 0.0}, r"workload\.duration_s = 0\.0: must be"),
            ({"request_rate": -1.0}, r"workload\.request_rate = -1\.0: must be"),
        ]:
            with pytest.raises(ConfigError, match=message):  # refused when built (the schema)
                WorkloadSpec(**fields)
        with pytest.raises(ConfigError, match="neither a built-in"):
            measure_endpoint(endpoint(server), 0.0, WorkloadSpec(prompt_set="missing.jsonl"), 1)


def test_kv_cache_peak_is_sampled_during_the_window() -> None:
    workload = WorkloadSpec(output_tokens=2, requests=3, warmup=0)
    with FakeOpenAIServer(ttft_s=0.3) as server:
        result = measure_endpoint(
            endpoint(server), 0.0, workload, 3, check=False, kv_sample_interval_s=0.02
        )
    # The gauge reads 0.1 per request in flight; before and after the window it reads 0.
    assert result.kv_cache_usage == pytest.approx(0.3)
