"""Real ``vllm serve`` (CPU build) through the process launcher: the paths a study takes.

Each start costs about 30 s on 2 cores, so there is one here: a draft model from a ``--config``
YAML. Ngram speculation from flags runs in the real-vLLM study (tests/e2e/); vLLM's own
KV-cache OOM text is classified on real vLLM in a container (tests/docker/test_docker_vllm.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml
from testbed import TinyModels, cpu_server_config

from tuner.config.trial import LaunchContext, SpeculativeConfig
from tuner.config.vllm_args import VllmVersion, parse_version
from tuner.launch.process import ProcessLauncher
from tuner.results import Endpoint

pytestmark = pytest.mark.vllm

_COUNTER = re.compile(r'^(vllm:spec_decode_num_\w+_total)\{[^}]*model_name="tiny"[^}]*\} (\S+)$')


def _spec_counters(client: httpx.Client) -> dict[str, float]:
    metrics = client.get("/metrics").text
    counters: dict[str, float] = {}
    for line in metrics.splitlines():
        match = _COUNTER.match(line)
        if match:
            counters[match.group(1)] = counters.get(match.group(1), 0.0) + float(match.group(2))
    return counters


def _stream_greedy(client: httpx.Client, endpoint: Endpoint, max_tokens: int) -> tuple[int, int]:
    """One greedy streamed completion; returns (SSE chunks with text, completion tokens)."""
    body = {
        "model": endpoint.model,
        "prompt": "def fibonacci(n):",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, tokens = 0, 0
    with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line.removeprefix("data: "))
            if event.get("choices") and event["choices"][0].get("text"):
                chunks += 1
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    return chunks, tokens


def test_detects_the_installed_version(real_vllm_version: VllmVersion) -> None:
    assert real_vllm_version == parse_version("0.32.0")
    assert "cpu" in str(real_vllm_version)


def test_draft_model_from_a_config_file(
    vllm_launcher: ProcessLauncher, tiny_models: TinyModels, tmp_path: Path
) -> None:
    vllm_launcher.use_config_file = True
    server = cpu_server_config(
        tiny_models.target,
        speculative=SpeculativeConfig(
            "draft_model", num_speculative_tokens=3, model=str(tiny_models.draft)
        ),
    )
    context = LaunchContext(study="vllm", trial=2, log_dir=tmp_path / "logs")
    endpoint = vllm_launcher.start(server, context)

    written = yaml.safe_load((tmp_path / "logs" / "trial-2.yaml").read_text())
    assert written["model"] == str(tiny_models.target)
    assert written["speculative-config"] == {
        "method": "draft_model",
        "model": str(tiny_models.draft),
        "num_speculative_tokens": 3,
    }
    log = (tmp_path / "logs" / "trial-2.log").read_text()
    assert log.splitlines()[0].endswith(
        f"serve --config {tmp_path / 'logs' / 'trial-2.yaml'} --host 127.0.0.1 "
        f"--port {endpoint.base_url.rsplit(':', 1)[1]}"
    )
    assert "method='draft_model'" in log
    with httpx.Client(base_url=endpoint.base_url, timeout=60, trust_env=False) as client:
        _, tokens = _stream_greedy(client, endpoint, max_tokens=16)
        counters = _spec_counters(client)
    assert tokens == 16
    assert counters["vllm:spec_decode_num_draft_tokens_total"] > 0
