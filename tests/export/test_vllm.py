"""The exports against real vLLM (CPU build): its own parser reads every format, and the
``vllm serve --config`` file starts a server that speculates per batch size.

One real server start (about 30-70 s on 2 cores); the parser check is one more import of vLLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from tests.testbed import (
    CPU_EXTRA_FLAGS,
    CPU_MAX_MODEL_LEN,
    TinyModels,
    VllmOracle,
    vllm_command,
    vllm_env,
)
from tests.testbed.results import StudyCopy, build_study, free_port, judge_table
from tuner.bench.metrics import MetricsSnapshot
from tuner.cli import app
from tuner.export.vllm import FORMATS, Exported, export

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def exports(
    tiny_models: TinyModels, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Exported]:
    """A simulated study of the tiny models, measured at 1, 4 and 16 requests, exported."""
    folder = tmp_path_factory.mktemp("tiny-study")
    space: dict[str, object] = {
        "name": "tiny",
        "hardware": "4090x1",
        "target": str(tiny_models.target),
        "server": {"max_model_len": CPU_MAX_MODEL_LEN, "extra_flags": dict(CPU_EXTRA_FLAGS)},
        "vllm": {"version": "0.32.0+cpu"},
        "slo": {"ttft_ms": 500},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 64,
            "output_tokens": 32,
            "requests": 16,
            "warmup": 1,
            # scored on one request at a time; 4 and 16 measured for the K table
            "concurrency": [
                {"level": 1, "weight": 0.998},
                {"level": 4, "weight": 0.001},
                {"level": 16, "weight": 0.001},
            ],
        },
        "search": {
            "draft": ["none", "ngram", str(tiny_models.draft)],
            "num_speculative_tokens": {"low": 1, "high": 6},
            "gpu_memory_utilization": {"low": 0.80, "high": 0.98, "step": 0.02},
            "max_num_batched_tokens": [CPU_MAX_MODEL_LEN],
            "temperature": {"low": 0.0, "high": 1.0, "step": 0.1},
        },
    }
    build_study(folder, space, trials=20)
    study, stored = StudyCopy(folder, "tiny").open()
    judge_table(study, stored, wins=True)  # what vLLM must accept is the table, run or not here
    return {fmt: export(study, stored, fmt) for fmt in FORMATS}


def _docker_run_argv(text: str, tmp_path: Path) -> list[str]:
    """What the exported script hands to docker, through a fake docker on PATH."""
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(
        "#!/bin/sh\nexec python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \"$@\"\n"
    )
    fake.chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(text)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, check=True)
    argv: list[str] = json.loads(done.stdout)
    return argv


def test_vllms_own_parser_reads_every_export(
    exports: dict[str, Exported], tiny_models: TinyModels, vllm_oracle: VllmOracle, tmp_path: Path
) -> None:
    table = [list(entry) for entry in exports["vllm"].batch_size_table]
    assert len(table) >= 2 and table[0][0] == 1 and table[-1][2] == 0  # off at high load
    config = tmp_path / "vllm.yaml"
    config.write_text(exports["vllm"].text)
    compose = yaml.safe_load(exports["compose"].text)["services"]["vllm"]
    assert (
        f"{tiny_models.target}:{tiny_models.target}:ro" in compose["volumes"]
    )  # local models mounted
    docker = _docker_run_argv(exports["docker-run"].text, tmp_path)
    served = docker[docker.index("serve") :]
    manifests = list(yaml.safe_load_all(exports["kubernetes"].text))
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argvs = [
        ["serve", "--config", str(config)],
        ["serve", *compose["command"]],
        served,
        json.loads(exports["json"].text)["argv"][1:],
        [*container["command"][1:], *container["args"]],  # Kubernetes: vllm serve ARGS
    ]
    parsed = vllm_oracle.parse(argvs)
    for result, argv in zip(parsed, argvs, strict=True):
        assert "exit" not in result, (argv, result)
        assert result["model"] == str(tiny_models.target)
        spec = result["speculative_config"]
        assert isinstance(spec, dict), result
        assert spec["num_speculative_tokens_per_batch_size"] == table
        assert spec["num_speculative_tokens"] == max(k for *_, k in table)
        assert result["enforce_eager"] is True
        assert result["max_model_len"] == CPU_MAX_MODEL_LEN


@pytest.fixture
def served(
    exports: dict[str, Exported], tmp_path: Path, vllm_cache_root: Path
) -> Iterator[tuple[str, Path]]:
    """Real ``vllm serve --config <exported file>``; stopped (its whole group) afterwards."""
    config = tmp_path / "vllm.yaml"
    config.write_text(exports["vllm"].text)
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, **vllm_env(tmp_path / "run", vllm_cache_root)}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                *vllm_command(),
                "serve",
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(1)
        yield base, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _complete(base: str, model: str) -> int:
    body = {
        "model": model,
        "prompt": "def fibonacci(n):",
        "max_tokens": 16,
        "temperature": 0,
        "ignore_eos": True,
    }
    return httpx.post(f"{base}/v1/completions", json=body, timeout=120, trust_env=False).status_code


def test_the_exported_config_starts_real_vllm(
    served: tuple[str, Path], tiny_models: TinyModels
) -> None:
    base, log = served
    text = log.read_text()
    assert "num_speculative_tokens_per_batch_size" in text  # vLLM took the table
    model = str(tiny_models.target)
    assert _complete(base, model) == 200  # one request: batch size 1, speculating
    with ThreadPoolExecutor(6) as pool:  # six at once: the table switches speculation off
        assert list(pool.map(lambda _: _complete(base, model), range(6))) == [200] * 6
    metrics = httpx.get(f"{base}/metrics", trust_env=False).text
    drafts = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("vllm:spec_decode_num_drafts_total{")
    ]
    assert drafts and sum(drafts) > 0
    _bench_reads_vllms_own_counters_with_natural_outputs(base, model)


def _counters(base: str) -> tuple[float, float]:
    snapshot = MetricsSnapshot.from_text(httpx.get(f"{base}/metrics", trust_env=False).text)
    return (
        snapshot.total("vllm:spec_decode_num_accepted_tokens_total") or 0.0,
        snapshot.total("vllm:spec_decode_num_draft_tokens_total") or 0.0,
    )


def _bench_reads_vllms_own_counters_with_natural_outputs(base: str, model: str) -> None:
    """``spectune bench`` on the same server: replies end naturally (no ignore_eos, capped),
    and the acceptance it reports is vLLM's own counters over its window."""
    before = _counters(base)
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            base,
            "--model",
            model,
            "--api",
            "completions",
            "--requests",
            "4",
            "--concurrency",
            "1",
            "--warmup",
            "0",
            "--input-tokens",
            "48",
            "--output-tokens",
            "24",
            "--temperature",
            "0",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    after = _counters(base)
    data = json.loads(result.stdout)
    assert data["errors"] == 0 and 0 < data["output_tokens"] <= 4 * 24  # usage, at most the cap
    assert not any("ignore_eos" in note for note in data["notes"])  # nothing forced
    accepted, drafted = after[0] - before[0], after[1] - before[1]
    assert drafted > 0 and data["acceptance_rate"] == pytest.approx(accepted / drafted)
