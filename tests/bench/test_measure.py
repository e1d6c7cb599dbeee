"""measure_endpoint and check_model against the shipped fake server."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

from tests.testbed.fake_server import RunningServer, StartServer
from tuner.bench.measure import measure_endpoint, measure_endpoint_async
from tuner.bench.model_check import check_model
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError, MeasurementError
from tuner.results import Endpoint, Source

MODEL = "test-model"
WORKLOAD = WorkloadSpec(prompt_set="chat", input_tokens=64, output_tokens=8, requests=5, warmup=2)
_GENERATED = re.compile(r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$", re.MULTILINE)
_DRAFTED = re.compile(r"^vllm:spec_decode_num_draft_tokens_total\{[^}]*\} (\S+)$", re.MULTILINE)
_KV_USAGE = re.compile(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$", re.MULTILINE)
_HTTP_500 = "HTTP 500: simulated fault (--sim-fault http-500-every=1)"


def endpoint(server: RunningServer, model: str = MODEL) -> Endpoint:
    return Endpoint(base_url=server.base_url, model=model)


def _counter(server: RunningServer, pattern: re.Pattern[str]) -> float:
    match = pattern.search(httpx.get(f"{server.base_url}/metrics", trust_env=False).text)
    assert match, pattern.pattern
    return float(match.group(1))


class HiddenMetrics(httpx.AsyncBaseTransport):
    """Passes requests to the real server, except ``/metrics`` (a server without them)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(404)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_warmup_is_left_out_of_records_and_metric_deltas(server: RunningServer) -> None:
    generated, drafted = _counter(server, _GENERATED), _counter(server, _DRAFTED)

    result = measure_endpoint(endpoint(server), 0.2, WORKLOAD, 2)

    assert result.source is Source.MEASURED
    assert result.concurrency == 2
    assert len(result.requests) == 5 and result.errors == 0
    assert result.output_tokens == 5 * WORKLOAD.output_tokens  # requests x max_tokens
    # The server generated the 1-token check and 2 warm-up requests too; the result has not.
    assert _counter(server, _GENERATED) - generated == 1 + 7 * WORKLOAD.output_tokens
    assert result.duration_s > 0 and result.output_tok_s > 0
    assert result.notes == ()
    spec = result.spec_decode
    assert spec is not None and spec.drafts > 0
    assert 0 < spec.accepted_tokens <= spec.draft_tokens < _counter(server, _DRAFTED) - drafted
    assert len(spec.accepted_per_position) == 4  # K = 4
    assert result.preemptions == 0.0
    assert result.ttft_ms(50) is not None and result.itl_ms(50) is not None


def test_kv_cache_usage_is_sampled_while_requests_run(server: RunningServer) -> None:
    # The gauge reads 0 before and after the window: only a sample taken while requests run
    # sees it move. Long requests (about a second each) keep the window open far past one
    # scrape's round trip, however busy the machine; 44 ms windows were once missed in CI.
    long = WorkloadSpec(prompt_set="chat", input_tokens=64, output_tokens=800, requests=2)
    result = measure_endpoint(endpoint(server), 0.0, long, 2, kv_sample_interval_s=0.001)
    assert result.errors == 0
    assert result.kv_cache_usage is not None and 0.0 < result.kv_cache_usage <= 1.0


def test_missing_metrics_leave_a_note(server: RunningServer) -> None:
    result = measure_endpoint(endpoint(server), 0.0, WORKLOAD, 1, transport=HiddenMetrics())
    assert result.errors == 0
    assert result.spec_decode is None and result.kv_cache_usage is None
    assert result.preemptions is None
    assert any("no /metrics" in note for note in result.notes)


def test_duration_workload(server: RunningServer) -> None:
    workload = WorkloadSpec(output_tokens=4, requests=2, warmup=0, duration_s=0.2)
    result = measure_endpoint(endpoint(server), 0.0, workload, 2, check=False)
    assert len(result.requests) > 2 and result.duration_s >= 0.2
    assert result.notes == ()


def test_some_failed_requests_are_kept_and_noted(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "http-500-every=2")
    workload = WorkloadSpec(output_tokens=4, requests=4, warmup=0)
    result = measure_endpoint(endpoint(server), 0.0, workload, 1, check=False)
    assert len(result.requests) == 4 and result.errors == 2
    assert result.output_tokens == 2 * 4
    assert result.notes == (
        "2 of 4 requests failed; first: HTTP 500: simulated fault (--sim-fault http-500-every=2)",
    )


def test_no_successful_request_is_a_measurement_error(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "http-500-every=1")
    with pytest.raises(MeasurementError) as caught:
        measure_endpoint(endpoint(server), 0.0, WORKLOAD, 1, check=False)
    assert str(caught.value) == (
        f"no request succeeded against {server.base_url} (model '{MODEL}'); "
        f"first error: {_HTTP_500}"
    )


def test_injected_client_is_used_and_left_open(server: RunningServer) -> None:
    paths: list[str] = []

    async def hook(request: httpx.Request) -> None:
        paths.append(request.url.path)

    workload = WorkloadSpec(output_tokens=4, requests=2, warmup=1)

    async def run() -> None:
        async with httpx.AsyncClient(event_hooks={"request": [hook]}) as client:
            result = await measure_endpoint_async(
                endpoint(server), 0.0, workload, 1, client=client, check=False
            )
            assert not client.is_closed
            assert result.errors == 0

    asyncio.run(run())
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


def test_wrong_model_names_the_served_models(server: RunningServer) -> None:
    with pytest.raises(MeasurementError) as caught:
        measure_endpoint(endpoint(server, "Qwen/Qwen2.5-14B"), 0.0, WORKLOAD, 1)
    message = str(caught.value)
    assert "'Qwen/Qwen2.5-14B' is not served at http://127.0.0.1" in message
    assert f"it serves: {MODEL}" in message and "\n" not in message


def test_wrong_model_without_the_check_still_fails_clearly(server: RunningServer) -> None:
    with pytest.raises(MeasurementError, match=r"HTTP 404.*is 'nope' the served model name"):
        measure_endpoint(endpoint(server, "nope"), 0.0, WORKLOAD, 1, check=False)


def test_unreachable_server(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    with pytest.raises(MeasurementError, match=f"cannot reach {url}/v1/models"):
        measure_endpoint(Endpoint(url, "m"), 0.0, WORKLOAD, 1, check_timeout_s=2)
    with pytest.raises(MeasurementError, match=f"no request succeeded against {url}.*connect"):
        measure_endpoint(Endpoint(url, "m"), 0.0, WORKLOAD, 1, check=False)


def test_check_model_sends_a_real_request(server: RunningServer) -> None:
    generated = _counter(server, _GENERATED)
    check_model(server.base_url, MODEL, 5.0)
    check_model(server.base_url, MODEL, 5.0, api="completions")
    assert _counter(server, _GENERATED) - generated == 2  # one token each


def test_check_model_reports_a_failing_answer(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "http-500-every=1")
    with pytest.raises(MeasurementError) as caught:
        check_model(server.base_url, MODEL, 5.0)
    message = str(caught.value)
    assert message.startswith(f"model '{MODEL}' at {server.base_url} did not answer a 1-token")
    assert "HTTP 500" in message and "simulated fault" in message


def test_bad_inputs(server: RunningServer) -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        measure_endpoint(endpoint(server), 0.0, WORKLOAD, 0)
    for fields, message in [
        ({"requests": 0}, r"workload\.requests = 0: must be"),
        ({"duration_s": 0.0}, r"workload\.duration_s = 0\.0: must be"),
        ({"request_rate": -1.0}, r"workload\.request_rate = -1\.0: must be"),
    ]:
        with pytest.raises(ConfigError, match=message):  # refused when built (the schema)
            WorkloadSpec(**fields)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="neither a built-in"):
        measure_endpoint(endpoint(server), 0.0, WorkloadSpec(prompt_set="missing.jsonl"), 1)


def test_kv_cache_peak_is_sampled_during_the_window(server: RunningServer) -> None:
    # A window of about a second, so samples 10 ms apart land while requests hold KV cache
    # however busy the host: 3 requests of 64 tokens (0.17 s) once ended on a loaded CI
    # machine between the first sample (taken before any request was admitted) and the next.
    workload = WorkloadSpec(output_tokens=512, requests=12, warmup=0)
    result = measure_endpoint(
        endpoint(server), 0.0, workload, 3, check=False, kv_sample_interval_s=0.01
    )
    # The gauge reads 0 on the idle server before and after the window: a peak above 0 was
    # sampled while the requests held KV cache.
    assert _counter(server, _KV_USAGE) == 0.0
    assert result.kv_cache_usage is not None and result.kv_cache_usage > 0.0


def test_a_prompt_file_workload(server: RunningServer, tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "def f(x):"}\n{"prompt": "Tell me a story."}\n')
    workload = WorkloadSpec(prompt_set=str(path), output_tokens=4, requests=4, warmup=0)
    result = measure_endpoint(endpoint(server), 0.0, workload, 2, check=False)
    assert len(result.requests) == 4 and result.errors == 0
    assert result.output_tokens == 4 * 4
