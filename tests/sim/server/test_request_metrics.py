"""vLLM's per-request ``metrics``: the fake server sends them only as vLLM would.

As in vLLM 0.32 to 0.34: ``--enable-per-request-metrics`` turns them on; streamed, they ride on
the final usage chunk with the unknown fields left out; plain answers carry ``"metrics": null``
when they are off. Older imitated releases (not read) know neither the flag nor the key.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.testbed.fake_server import TARGET, StartServer
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.sim.server.args import parse_serve_args
from tuner.sim.server.openai import request_metrics

ON_034 = ("--sim-vllm-version", "0.34.0", "--enable-per-request-metrics")
KEYS = {
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
}


def _usage_chunk(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", base_url + path, json=body, timeout=10) as response:
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    usage: dict[str, Any] = json.loads(lines[-2])
    assert usage["choices"] == []
    assert all("metrics" not in json.loads(line) for line in lines[:-2])  # only the last one
    return usage


def _requests() -> list[tuple[str, dict[str, Any]]]:
    chat = {"model": TARGET, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
    completion = {"model": TARGET, "prompt": "hi", "max_tokens": 6}
    return [("/v1/chat/completions", chat), ("/v1/completions", completion)]


def test_version_0_34_with_the_flag_sends_metrics(start_server: StartServer) -> None:
    server = start_server(*ON_034)
    assert httpx.get(f"{server.base_url}/version").json() == {"version": "0.34.0"}
    for path, body in _requests():
        metrics = _usage_chunk(server.base_url, path, body)["metrics"]
        assert set(metrics) == KEYS
        assert metrics["time_to_first_token_ms"] > 0 and metrics["queue_time_ms"] >= 0
        plain = httpx.post(server.base_url + path, json=body, timeout=10).json()
        assert set(plain["metrics"]) == KEYS
        assert plain["usage"]["completion_tokens"] == 6


def test_without_the_flag_or_before_0_34_no_metrics(start_server: StartServer) -> None:
    off = start_server("--sim-vllm-version", "0.34.0")
    old = start_server("--sim-vllm-version", "0.31.0")
    assert httpx.get(f"{old.base_url}/version").json() == {"version": "0.31.0"}
    for path, body in _requests():
        assert "metrics" not in _usage_chunk(off.base_url, path, body)
        assert "metrics" not in _usage_chunk(old.base_url, path, body)
        assert httpx.post(off.base_url + path, json=body, timeout=10).json()["metrics"] is None
        assert "metrics" not in httpx.post(old.base_url + path, json=body, timeout=10).json()


def test_the_flag_is_unknown_before_0_32(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = parse_serve_args([TARGET, *ON_034])
    assert args.per_request_metrics and str(args.sim.vllm_version) == "0.34.0"
    monkeypatch.delenv("SPECTUNE_SIM_VLLM_VERSION")  # the test bed's 0.32 (tests/conftest.py)
    assert parse_serve_args([TARGET]).sim.vllm_version == NEWEST_KNOWN
    assert parse_serve_args([TARGET, "--sim-vllm-version", "0.32.0", ON_034[2]]).per_request_metrics
    with pytest.raises(SystemExit) as exit_info:
        parse_serve_args([TARGET, "--sim-vllm-version", "0.31.0", "--enable-per-request-metrics"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --enable-per-request-metrics" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_serve_args([TARGET, "--sim-vllm-version", "not-a-release"])


def test_metrics_are_computed_as_vllm_0_34_computes_them() -> None:
    metrics = request_metrics(10.0, 10.5, 10.6, 11.6, tokens=11)
    assert metrics == pytest.approx(
        {
            "time_to_first_token_ms": 100.0,  # from scheduling: the queue is left out
            "generation_time_ms": 1000.0,
            "queue_time_ms": 500.0,
            "mean_itl_ms": 100.0,
            "tokens_per_second": 11 / 1.1,
        }
    )
    assert request_metrics(0.0, 0.0, 0.0, 0.0, tokens=1)["mean_itl_ms"] is None
    assert request_metrics(0.0, 0.0, 0.0, 0.0, tokens=1)["tokens_per_second"] is None
