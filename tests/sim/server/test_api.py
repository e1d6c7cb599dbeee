"""The fake vLLM server's OpenAI API, /metrics and timings, against a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.testbed.fake_server import DRAFT, SPEC, TARGET, StartServer
from tuner.bench.measure import measure_endpoint
from tuner.bench.metrics import MetricsSnapshot, spec_decode_delta
from tuner.catalog.gpus import parse_hardware
from tuner.catalog.models import load_model
from tuner.config.workload import WorkloadSpec
from tuner.results import Endpoint
from tuner.sim.reference import reference_server
from tuner.sim.virtual_time import predict


def _stream(base_url: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> list[Any]:
    """The decoded ``data:`` events of one streamed request ("[DONE]" kept as a string)."""
    events: list[Any] = []
    with httpx.stream("POST", base_url + path, json=body, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[6:]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _chat(max_tokens: int, content: str = "Tell me about tides.", **extra: Any) -> dict[str, Any]:
    return {
        "model": TARGET,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


def test_ready_and_lists_served_names(start_server: StartServer) -> None:
    server = start_server("--served-model-name", "coder", "alias")
    assert httpx.get(f"{server.base_url}/health").status_code == 200
    models = httpx.get(f"{server.base_url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["coder", "alias"]
    assert models["data"][0]["max_model_len"] == 32768  # Qwen2.5's context when not given
    assert "SIMULATED vLLM server" in server.log()
    assert server.stop() < 2.0
    assert server.proc.returncode == 0


def test_stream_chat_with_usage_then_done(start_server: StartServer) -> None:
    server = start_server()
    events = _stream(server.base_url, _chat(12, content="x" * 400))
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 100,  # 400 characters at 4 per token
        "completion_tokens": 12,
        "total_tokens": 112,
    }
    chunks = events[:-2]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert len(text.split()) == 12  # one word per token
    # Without speculation every chunk carries exactly one token.
    assert len([c for c in chunks if c["choices"][0]["delta"]["content"]]) == 12


def test_completions_plain_and_streamed(start_server: StartServer) -> None:
    server = start_server()
    plain = httpx.post(
        f"{server.base_url}/v1/completions", json={"model": TARGET, "prompt": "abcd" * 8}
    ).json()
    assert plain["object"] == "text_completion"
    assert plain["usage"]["completion_tokens"] == 16  # vLLM's default max_tokens
    assert plain["usage"]["prompt_tokens"] == 8
    body = {"model": TARGET, "prompt": "hello", "max_tokens": 5, "stream": True}
    events = _stream(server.base_url, body, "/v1/completions")
    assert events[-1] == "[DONE]"
    assert all("usage" not in e for e in events[:-1])  # no include_usage, no usage chunk
    assert "".join(e["choices"][0]["text"] for e in events[:-1]).count(" ") == 5


def test_errors_have_vllm_shapes(start_server: StartServer) -> None:
    server = start_server("--max-model-len", "1024", "--api-key", "sekrit")
    auth = {"Authorization": "Bearer sekrit"}
    assert httpx.get(f"{server.base_url}/v1/models").status_code == 401
    wrong = httpx.post(
        f"{server.base_url}/v1/chat/completions", headers=auth, json={**_chat(4), "model": "nope"}
    )
    assert wrong.status_code == 404
    assert wrong.json() == {
        "error": {
            "message": "The model `nope` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    too_long = httpx.post(
        f"{server.base_url}/v1/chat/completions", headers=auth, json=_chat(1000, content="y" * 400)
    )
    assert too_long.status_code == 400
    assert "maximum context length is 1024 tokens" in too_long.json()["error"]["message"]
    assert httpx.get(f"{server.base_url}/nowhere").status_code == 404
    # /health and /metrics stay open without the key, as in vLLM.
    assert httpx.get(f"{server.base_url}/metrics").status_code == 200


def test_speculation_puts_several_tokens_in_a_chunk(start_server: StartServer) -> None:
    server = start_server("--speculative-config", SPEC)
    events = _stream(server.base_url, _chat(64, content="```python\ndef f(x):"))
    assert events[-2]["usage"]["completion_tokens"] == 64
    texts = [c["choices"][0]["delta"]["content"] for c in events[:-2]]
    sizes = [len(t.split()) for t in texts if t]
    assert sum(sizes) == 64
    assert max(sizes) > 1 and len(sizes) < 64
    assert max(sizes) <= 5  # at most K accepted drafts plus the bonus token


def test_metrics_counters_move_and_parse(start_server: StartServer) -> None:
    server = start_server("--speculative-config", SPEC)
    before = MetricsSnapshot.from_text(httpx.get(f"{server.base_url}/metrics").text)
    assert before.total("vllm:generation_tokens_total") == 0.0
    for _ in range(3):
        _stream(server.base_url, _chat(32))
    after = MetricsSnapshot.from_text(httpx.get(f"{server.base_url}/metrics").text)
    spec = spec_decode_delta(before, after)
    assert spec is not None and spec.drafts > 0
    assert spec.acceptance_rate is not None and 0.0 < spec.acceptance_rate <= 1.0
    assert len(spec.accepted_per_position) == 4
    assert sum(spec.accepted_per_position) == spec.accepted_tokens
    # Every decode step drafts K tokens and emits its accepted drafts plus one; the prefill
    # step of each request emits one. A request's last step may accept more than it needs.
    assert spec.draft_tokens == 4 * spec.drafts
    assert 3 * 32 <= spec.accepted_tokens + spec.drafts + 3 <= 3 * 32 + 3 * 4
    assert after.total("vllm:generation_tokens_total") == 96.0
    assert after.total("vllm:request_success_total") == 3.0
    assert after.preemptions == 0.0
    assert after.kv_cache_usage == 0.0  # idle again
    sample = next(s for s in after.samples if s.name == "vllm:num_requests_running")
    assert sample.labels == (("engine", "0"), ("model_name", TARGET))


def test_measure_endpoint_counts_every_token(start_server: StartServer) -> None:
    server = start_server("--speculative-config", SPEC)
    workload = WorkloadSpec(
        prompt_set="code", input_tokens=128, output_tokens=24, requests=12, warmup=2
    )
    result = measure_endpoint(
        Endpoint(server.base_url, TARGET), 0.2, workload, 4, kv_sample_interval_s=0.01
    )
    assert result.errors == 0 and result.notes == ()
    assert result.output_tokens == 12 * 24  # requests x max_tokens
    assert result.spec_decode is not None
    assert result.acceptance_rate is not None and 0.5 < result.acceptance_rate <= 1.0
    assert result.kv_cache_usage is not None  # sampled; often 0 in a window this short
    chunks = sum(len(r.chunk_times) for r in result.requests)
    assert chunks < result.output_tokens  # speculation: fewer chunks than tokens


def test_timings_follow_the_engine(start_server: StartServer) -> None:
    """A lone request takes the simulated time divided by --sim-speed, in real time."""
    # 10x rather than the usual 50x: steps of about 2 ms leave room for a busy test machine.
    speed = 10.0
    server = start_server(
        "--speculative-config",
        SPEC,
        "--max-model-len",
        "8192",
        "--tensor-parallel-size",
        "2",
        "--gpu-memory-utilization",
        "0.92",
        "--sim-hardware",
        "4090x2",
        "--sim-speed",
        str(speed),
        model="Qwen/Qwen2.5-32B-Instruct-AWQ",
    )
    workload = WorkloadSpec(
        prompt_set="code", input_tokens=384, output_tokens=256, requests=2, warmup=1
    )
    result = measure_endpoint(
        Endpoint(server.base_url, "Qwen/Qwen2.5-32B-Instruct-AWQ"), 0.2, workload, 1
    )
    expected = predict(
        parse_hardware("4090x2"),
        load_model("Qwen/Qwen2.5-32B-Instruct-AWQ"),
        load_model(DRAFT),
        reference_server(),
        0.2,
        workload,
        1,
    )
    # The server sleeps each simulated step, so it is never faster than the simulation; a busy
    # machine (another test's vLLM beside it) only makes it slower, so the slow side is loose:
    # it still tells a paced server from one that ignores --sim-speed (10x off).
    paced = expected.output_tok_s * speed
    assert paced / 3 <= result.output_tok_s <= paced * 1.2
    ttft = result.ttft_ms(50)
    expected_ttft = expected.ttft_ms(50)
    assert ttft is not None and expected_ttft is not None
    # TTFT is a few simulated steps (about 22 ms at 10x), to which HTTP adds a little.
    assert 0.9 * expected_ttft / speed <= ttft <= 3 * expected_ttft / speed + 50.0


def test_serves_a_local_model_directory(start_server: StartServer, tmp_path: Path) -> None:
    config = {
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 256,
        "vocab_size": 2048,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    server = start_server(model=str(tmp_path))
    listed = httpx.get(f"{server.base_url}/v1/models").json()["data"][0]
    assert listed["id"] == str(tmp_path) and listed["max_model_len"] == 4096
    events = _stream(server.base_url, {**_chat(3), "model": str(tmp_path)})
    assert events[-2]["usage"]["completion_tokens"] == 3
