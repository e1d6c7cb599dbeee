"""The fake server reads what spectune writes for vLLM: flags, ``--config`` YAML, old dialects."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.testbed.fake_server import DRAFT, SERVER, TARGET
from tuner.config.trial import LaunchContext, ServerConfig, SpecMethod, SpeculativeConfig
from tuner.config.vllm_args import (
    NEWEST_KNOWN,
    config_file_argv,
    parse_version,
    server_argv,
    server_yaml,
)
from tuner.errors import ConfigError
from tuner.launch.process import ProcessLauncher
from tuner.sim.server.args import ConfigValidationError, parse_serve_args
from tuner.sim.server.faults import Faults, parse_faults

CONFIGS = [
    ServerConfig(TARGET, 1, 8192, 0.9, 2048),
    ServerConfig(
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        2,
        4096,
        0.92,
        1024,
        speculative=SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, DRAFT),
        quantization="awq_marlin",  # passed: not the checkpoint's own "awq" (vLLM detects that)
        enable_chunked_prefill=False,
        served_model_name="big",
        extra_flags=(("max-num-seqs", 64), ("enforce-eager", True)),
    ),
    ServerConfig(
        TARGET,
        1,
        8192,
        0.9,
        2048,
        speculative=SpeculativeConfig(SpecMethod.NGRAM, 3, None, prompt_lookup_max=4),
    ),
]
IDS = ["plain", "draft-tp2-no-chunked", "ngram"]


@pytest.mark.parametrize("server", CONFIGS, ids=IDS)
@pytest.mark.parametrize("version", ["0.7.2", "0.8.4", "0.9.2", "0.15.0", str(NEWEST_KNOWN)])
def test_flags_spectune_writes_read_back(server: ServerConfig, version: str) -> None:
    vllm = parse_version(version)
    drafts = server.speculative is not None and server.speculative.method == "draft_model"
    if drafts and (0, 10) <= (vllm.major, vllm.minor) < (0, 15):
        pytest.skip("no draft models on this vLLM")
    args = parse_serve_args(["serve", *server_argv(server, vllm, host="127.0.0.1", port=9)], {})
    assert args.server == server
    assert (args.host, args.port) == ("127.0.0.1", 9)


@pytest.mark.parametrize("server", CONFIGS, ids=IDS)
@pytest.mark.parametrize("version", ["0.8.3", "0.15.0", str(NEWEST_KNOWN)])
def test_config_files_spectune_writes_read_back(
    server: ServerConfig, version: str, tmp_path: Path
) -> None:
    config = server_yaml(server, parse_version(version))
    path = tmp_path / "trial.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    argv = [*config_file_argv(config, str(path), model=server.model), "--port", "9"]
    assert parse_serve_args(argv, {}).server == server


def test_command_line_wins_over_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"model: {TARGET}\nmax-model-len: 4096\nenforce-eager: false\n")
    args = parse_serve_args(["--config", str(path), "--max-model-len", "2048"], {})
    assert args.server.model == TARGET and args.server.max_model_len == 2048
    assert args.server.extra_flags == ()


def test_sim_settings_from_flags_or_environment() -> None:
    env = {"SPECTUNE_SIM_FAULT": "crash-after=5,http-500-every=3"}
    args = parse_serve_args([TARGET, "--sim-hardware", "4090x2", "--sim-speed", "inf"], env)
    assert args.sim.hardware.count == 2 and math.isinf(args.sim.speed)
    assert args.sim.faults == Faults(crash_after=5, http_500_every=3)
    flagged = parse_serve_args([TARGET, "--sim-fault", "hang", "--sim-seed", "7"], env)
    assert flagged.sim.faults == Faults(hang_after=0) and flagged.sim.seed == 7


def test_ignored_vllm_flags_are_accepted_and_reported() -> None:
    args = parse_serve_args(
        [TARGET, "--dtype", "half", "--trust-remote-code", "--kv-cache-memory-bytes", "64M"], {}
    )
    assert args.ignored == ("--dtype", "--trust-remote-code")
    assert args.kv_cache_memory_bytes == 64 * 2**20


@pytest.mark.parametrize(
    ("specs", "faults"),
    [
        (["oom-at-start"], Faults(oom_at_start=True)),
        (["malformed-sse"], Faults(malformed_sse_every=1)),
        (["slow-start=1.5", ""], Faults(slow_start_s=1.5)),
        (["hang-after=3", "malformed-sse-every=4"], Faults(hang_after=3, malformed_sse_every=4)),
        (["drop-mid-stream", "no-usage-every=2"], Faults(drop_every=1, no_usage_every=2)),
        (
            ["error-event-every=3", "alloc-at-start=64"],
            Faults(error_event_every=3, alloc_at_start_mib=64),
        ),
        (
            ["crash-at-start", "sigkill-at-start", "ignore-sigterm", "spawn-child"],
            Faults(
                crash_at_start=True, sigkill_at_start=True, ignore_sigterm=True, spawn_child=True
            ),
        ),
        (["log-env=HF_TOKEN", "log-env=HOME"], Faults(log_env=("HF_TOKEN", "HOME"))),
    ],
)
def test_parse_faults(specs: list[str], faults: Faults) -> None:
    assert parse_faults(specs) == faults


@pytest.mark.parametrize(
    "spec", ["explode", "crash-after=x", "hang=3", "slow-start=-1", "log-env", "no-usage=2"]
)
def test_bad_faults_name_the_known_ones(spec: str) -> None:
    with pytest.raises(ValueError, match=r"known faults: oom-at-start, crash-at-start, .*log-env"):
        parse_faults([spec])


def test_version_answers_like_vllm() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPECTUNE_SIM_VLLM_VERSION"}
    done = subprocess.run(
        [*SERVER, "--version"], capture_output=True, text=True, check=True, env=env
    )
    assert done.stdout.strip() == str(NEWEST_KNOWN)  # the release it imitates by default
    imitated = {**env, "SPECTUNE_SIM_VLLM_VERSION": "0.33.0"}
    done = subprocess.run(
        [*SERVER, "--version"], capture_output=True, text=True, check=True, env=imitated
    )
    assert done.stdout.strip() == "0.33.0"


def test_process_launcher_starts_it(context: LaunchContext) -> None:
    server = CONFIGS[2]
    launcher = ProcessLauncher(
        SERVER,
        env={"SPECTUNE_SIM_SPEED": "50", "SPECTUNE_SIM_VLLM_VERSION": "0.33.0"},
        poll_s=0.05,
        ready_timeout_s=15,
    )
    with launcher:
        assert launcher.version == parse_version("0.33.0")  # asked with --version
        endpoint = launcher.start(server, context)
        body = {"model": endpoint.model, "prompt": "```python\n", "max_tokens": 8}
        answer = httpx.post(f"{endpoint.base_url}/v1/completions", json=body, timeout=10)
        assert answer.json()["usage"]["completion_tokens"] == 8
        metrics = httpx.get(f"{endpoint.base_url}/metrics").text
        assert 'position="2"' in metrics  # ngram with K=3
    assert endpoint.log_path is not None
    log = endpoint.log_path.read_text()
    assert "SIMULATED vLLM server" in log


TABLE = ServerConfig(
    TARGET,
    1,
    8192,
    0.9,
    2048,
    speculative=SpeculativeConfig(
        SpecMethod.NGRAM, 4, None, k_by_batch_size=((1, 4, 4), (5, 64, 0))
    ),
)


def test_a_per_batch_size_k_table_reads_back_and_old_versions_refuse_it(tmp_path: Path) -> None:
    newest = server_argv(TABLE, NEWEST_KNOWN, host="127.0.0.1", port=9)
    assert parse_serve_args(["serve", *newest], {}).server == TABLE
    config = server_yaml(TABLE, NEWEST_KNOWN)
    assert config["speculative-config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 4, 4],
        [5, 64, 0],
    ]
    with pytest.raises(ConfigError, match="cannot switch K by batch size"):
        server_argv(TABLE, parse_version("0.23.0"), host="127.0.0.1", port=9)


@pytest.mark.parametrize(
    "table", [[[2, 4, 4]], [[1, 4, 4], [6, 8, 0]], [[1, 4, -1]], [[1, 4]], "1-4:4"]
)
def test_a_malformed_k_table_is_refused_like_vllm_refuses_it(table: object) -> None:
    spec = {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": table,
    }
    with pytest.raises(ConfigValidationError, match="num_speculative_tokens_per_batch_size"):
        parse_serve_args(["serve", TARGET, "--speculative-config", json.dumps(spec)], {})
