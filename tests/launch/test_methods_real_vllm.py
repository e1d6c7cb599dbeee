"""EAGLE-3, suffix decoding and probabilistic draft sampling for real on the vLLM 0.32 CPU build:
three starts. (ngram_gpu cannot serve on a CPU build: its real start-up failure is a log under
tests/launch/logs, classified in tests/launch/test_served.py.)

The EAGLE-3 head is built in the fixture (``testbed/build_tiny_eagle3.py``: a tiny random Llama
target and a one-layer ``LlamaForCausalLMEagle3`` head); the argv is spectune's own
(``server_argv``). Acceptance is read from ``/metrics`` as a trial reads it. Suffix decoding
needs ``arctic-inference`` in vLLM's environment; where it is missing, the start-up refusal is a
real failure this tier holds to its classification.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.testbed import TinyModels, require_vllm, vllm_command, vllm_env, vllm_venv
from tuner.bench.metrics import parse_prometheus
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.verification import DraftSampling, Verification
from tuner.config.vllm_args import parse_version, server_argv
from tuner.errors import FailureKind
from tuner.launch.failures import classify_failure
from tuner.launch.served import read_served

pytestmark = pytest.mark.vllm

_BUILDER = Path(__file__).parents[1] / "testbed" / "build_tiny_eagle3.py"
_CPU_FLAGS = (("max-model-len", 512), ("enforce-eager", True), ("kv-cache-memory-bytes", "64M"))
_READY_S = 180


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    require_vllm()
    dest = tmp_path_factory.mktemp("tiny-eagle3")
    done = subprocess.run(
        [str(vllm_venv() / "bin" / "python"), str(_BUILDER), str(dest)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=_BUILDER.parent,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    paths: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return paths


def _serve(
    target: str, spec: SpeculativeConfig, run_dir: Path, cache_root: Path, port: int
) -> tuple[subprocess.Popen[str], Path]:
    server = ServerConfig(target, 1, 512, 0.9, 512, spec, extra_flags=_CPU_FLAGS[1:])
    argv = server_argv(server, parse_version("0.32.0"), host="127.0.0.1", port=port)
    log = run_dir / "vllm.log"
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [*vllm_command(), "serve", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **vllm_env(run_dir, cache_root)},
            text=True,
            start_new_session=True,
        )
    return process, log


def _wait_ready(process: subprocess.Popen[str], port: int) -> bool:
    deadline = time.monotonic() + _READY_S
    with httpx.Client(timeout=2, trust_env=False) as client:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(1)
    return False


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)


def _speculate(target: str, port: int, temperature: float = 0.0) -> dict[str, float]:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120, trust_env=False) as c:
        body = {
            "model": target,
            "prompt": "def add(a, b):",
            "max_tokens": 48,
            "temperature": temperature,
            "ignore_eos": True,
        }
        answer = c.post("/v1/completions", json=body)
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["usage"]["completion_tokens"] == 48
        samples = parse_prometheus(c.get("/metrics").text)
    totals: dict[str, float] = {}
    for sample in samples:
        totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_eagle3_head_serves_and_drafts(
    tiny_llama: dict[str, str], tmp_path: Path, vllm_cache_root: Path
) -> None:
    spec = SpeculativeConfig(SpecMethod.EAGLE3, 3, model=tiny_llama["head"])
    process, log = _serve(tiny_llama["target"], spec, tmp_path, vllm_cache_root, 8461)
    try:
        assert _wait_ready(process, 8461), log.read_text()[-3000:]
        counters = _speculate(tiny_llama["target"], 8461)
    finally:
        _stop(process)
    assert "Resolved architecture: LlamaForCausalLMEagle3" in log.read_text()
    drafts = counters["vllm:spec_decode_num_drafts_total"]
    assert drafts > 0
    assert counters["vllm:spec_decode_num_draft_tokens_total"] == 3 * drafts
    # A random head rarely guesses a random target's token; the counter exists and is read.
    assert counters["vllm:spec_decode_num_accepted_tokens_total"] >= 0


def test_suffix_decoding_serves_or_is_refused_as_a_bad_argument(
    tiny_llama: dict[str, str], tmp_path: Path, vllm_cache_root: Path
) -> None:
    spec = SpeculativeConfig(SpecMethod.SUFFIX, 8, suffix_decoding_max_tree_depth=24)
    process, log = _serve(tiny_llama["target"], spec, tmp_path, vllm_cache_root, 8462)
    installed = _has_arctic_inference()
    try:
        ready = _wait_ready(process, 8462)
        if installed:
            assert ready, log.read_text()[-3000:]
            counters = _speculate(tiny_llama["target"], 8462)
            # Greedy decoding of a random model repeats itself: suffix trees find the repeats.
            assert counters["vllm:spec_decode_num_drafts_total"] > 0
            assert counters["vllm:spec_decode_num_accepted_tokens_total"] > 0
            return
        assert not ready
    finally:
        _stop(process)
    text = log.read_text()
    assert "Arctic Inference is required for suffix decoding" in text
    assert classify_failure(process.returncode, text) is FailureKind.CRASH


def _has_arctic_inference() -> bool:
    done = subprocess.run(
        [str(vllm_venv() / "bin" / "python"), "-c", "import arctic_inference"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return done.returncode == 0


def test_probabilistic_draft_sampling_serves_with_a_draft_model(
    tiny_models: TinyModels, tmp_path: Path, vllm_cache_root: Path
) -> None:
    """Probabilistic draft sampling (block verification asked too) on the CPU build: vLLM runs
    it on the V1 runner, says so in its log, and drafts at temperature 0.8. V1 has no block
    path (vllm/v1/sample/rejection_sampler.py): that value is accepted and left unused here,
    which is why spectune refuses block wherever a config lands on V1."""
    spec = SpeculativeConfig(
        SpecMethod.DRAFT_MODEL,
        3,
        model=str(tiny_models.draft),
        draft_sample_method=DraftSampling.PROBABILISTIC,
        rejection_sample_method=Verification.BLOCK,
    )
    process, log = _serve(str(tiny_models.target), spec, tmp_path, vllm_cache_root, 8463)
    try:
        assert _wait_ready(process, 8463), log.read_text()[-3000:]
        counters = _speculate(str(tiny_models.target), 8463, temperature=0.8)
    finally:
        _stop(process)
    text = log.read_text()
    assert "'draft_sample_method': 'probabilistic'" in text  # vLLM's non-default args
    facts = read_served(text)
    assert facts is not None and facts.model_runner == "V1"
    assert facts.runner_reason == "Triton is not installed"
    drafts = counters["vllm:spec_decode_num_drafts_total"]
    assert drafts > 0 and counters["vllm:spec_decode_num_draft_tokens_total"] == 3 * drafts
    assert counters["vllm:spec_decode_num_accepted_tokens_total"] >= 0
