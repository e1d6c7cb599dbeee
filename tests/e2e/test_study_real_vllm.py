"""A real study against real ``vllm serve`` (CPU build), through the process backend.

Three trials (no speculation, ngram, a draft model) restart the server between them and read
the spec-decode counters from vLLM's own /metrics; a KV cache too small for max-model-len is
vLLM's own out-of-memory failure and must end as a COMPLETE trial with the oom constraint; the
exported best.yaml must start real vLLM through ``vllm serve --config``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest
import yaml
from optuna.trial import TrialState
from testbed import TinyModels, vllm_command, vllm_env
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.space import space_from_dict
from tuner.export.vllm import write_best
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.study import make_sampler, open_study
from tuner.trial.backends import BackendOptions

pytestmark = pytest.mark.vllm


def _space(models: TinyModels, **server: Any) -> dict[str, Any]:
    return {
        "name": "tiny",
        "hardware": "4090x1",  # the pre-screen sizes these tiny models against one 4090
        "target": str(models.target),
        "server": {
            "max_model_len": 512,
            "extra_flags": {"enforce-eager": True, "kv-cache-memory-bytes": "64M"},
            **server,
        },
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 60000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 48,
            "output_tokens": 24,
            "concurrency": [1],
            "requests": 3,
            "warmup": 1,
        },
        "search": {
            "draft": ["none", "ngram", str(models.draft)],
            "num_speculative_tokens": {"low": 3, "high": 3},
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [512],
            "temperature": 0.0,
        },
    }


def _request(tmp_path: Path, study: str, raw: dict[str, Any], trials: int) -> OptimizeRequest:
    options = BackendOptions(study="", vllm_command=vllm_command(), ready_timeout_s=300)
    # No confirmation runs: each would be one more real start (about 30 s on 2 cores); the
    # confirmation path itself is tested on the simulator and the fake server.
    return OptimizeRequest(
        study=study,
        space=space_from_dict(raw),
        backend="process",
        trials=trials,
        studies_dir=tmp_path,
        backend_options=options,
        confirm_top=0,
    )


@pytest.fixture
def real_vllm_env(tmp_path: Path, vllm_cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in vllm_env(tmp_path / "run", vllm_cache_root).items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("real_vllm_env")
def test_mini_study_on_real_vllm(tiny_models: TinyModels, tmp_path: Path) -> None:
    raw = _space(tiny_models)
    storage = open_storage(default_storage("tiny", tmp_path))
    study, _ = open_study("tiny", storage, space_from_dict(raw), make_sampler("tpe", 0))
    for draft in ("none", "ngram", str(tiny_models.draft)):
        params: dict[str, Any] = {"draft": draft}
        if draft != "none":
            params["num_speculative_tokens"] = 3
        study.enqueue_trial(params)
    result = optimize(_request(tmp_path, "tiny", raw, trials=3))

    trials = optuna.load_study(study_name="tiny", storage=storage).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert [t.user_attrs["restarted"] for t in trials] == [True, True, True]
    assert [t.user_attrs["source"] for t in trials] == ["measured"] * 3
    assert all(t.user_attrs["status"] == "ok" for t in trials)
    none, ngram, draft = (t.user_attrs["summary"] for t in trials)
    assert none["acceptance_rate"] is None
    assert ngram["acceptance_rate"] is not None and ngram["acceptance_rate"] > 0
    assert draft["acceptance_rate"] is not None
    for summary in (none, ngram, draft):
        assert summary["output_tokens"] == 3 * 24 and summary["errors"] == 0
    for t in trials:
        assert (tmp_path / "tiny" / "logs" / f"trial-{t.number}.log").exists()

    assert result.recommended is not None
    _serve_config(write_best(result.handle, result.space, result.paths))


def _bench(url: str, speculative: bool) -> None:
    """``spectune bench`` against the running real server: tokens from usage, exactly."""
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            url,
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--max-tokens",
            "16",
            "--input-tokens",
            "48",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["output_tokens"] == 4 * 16 and data["errors"] == 0
    assert (data["acceptance_rate"] is not None) == speculative  # read from the real /metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_config(config: Path) -> None:
    """Starts real vLLM with ``vllm serve --config`` on the exported file and waits for /health."""
    exported = yaml.safe_load(config.read_text())
    assert exported["enforce-eager"] is True
    port = _free_port()
    log = config.with_suffix(".log")
    with log.open("wb") as out:
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
            env=os.environ.copy(),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    _bench(f"http://127.0.0.1:{port}", "speculative-config" in exported)
                    return
            except httpx.TransportError:
                pass
            time.sleep(1)
        raise AssertionError("vllm serve --config never became ready")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(60)


@pytest.mark.usefixtures("real_vllm_env")
def test_real_kv_cache_failure_is_an_oom_constraint(
    tiny_models: TinyModels, tmp_path: Path
) -> None:
    raw = _space(
        tiny_models,
        max_model_len=2048,
        extra_flags={"enforce-eager": True, "kv-cache-memory-bytes": 1000000},
    )
    raw["search"]["draft"] = ["none"]
    optimize(_request(tmp_path, "oom", raw, trials=1))
    storage = open_storage(default_storage("oom", tmp_path))
    (trial,) = optuna.load_study(study_name="oom", storage=storage).get_trials()
    assert trial.state is TrialState.COMPLETE
    assert trial.user_attrs["status"] == "OOM"
    assert trial.constraints["oom"] == 1.0
    failure = trial.user_attrs["failure"]
    assert "larger than the available KV cache memory" in failure and "\n" not in failure
    assert "exit status 1" in failure
    assert "Engine core initialization failed" in trial.user_attrs["log_tail"]
    assert (tmp_path / "oom" / "logs" / "trial-0.log").stat().st_size > 0
