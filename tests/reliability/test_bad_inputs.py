"""The bad-input table: every key of a space at its type's edges and beyond, every flag, every
``SPECTUNE_*`` variable, the storage URL forms and a damaged database.

Each case must end in exit code 2 with exactly one line on stderr naming the input, no
traceback, and the study already in the folder untouched. In process through typer's
CliRunner (a handful through a real process, for what only a process shows).
"""

from __future__ import annotations

import copy
import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.space import builtin_spaces

runner = CliRunner()
SPACE = "qwen2.5-14b-awq-4090x1"  # 14B AWQ on one RTX 4090: a 32,768-token context
MODEL = "Qwen/Qwen2.5-14B-Instruct-AWQ"
BIG = 10**12


@dataclass(frozen=True)
class Case:
    """One bad input: the argv after ``spectune`` (``{dir}`` is the studies folder, ``{space}``
    the case's space file), the environment, and what the one line must say."""

    argv: tuple[str, ...]
    says: str
    env: dict[str, str] = field(default_factory=dict)
    space: dict[str, Any] | None = None  # keys set on the shipped space: "section.key": value
    raw: str | None = None  # the space file's whole text instead


def _key(path: str, value: Any, says: str | None = None) -> tuple[str, Case]:
    argv = ("optimize", "--backend", "sim", "--plan", "--space", "{space}", "--study", "keep")
    shown = repr(value) if len(repr(value)) < 30 else f"{type(value).__name__}-{len(repr(value))}"
    return f"space:{path}={shown}", Case(argv, says or path, space={path: value})


_SPACE_CASES = [
    _key("name", ""),
    _key("name", 7),
    _key("name", "x" * 5000),
    _key("hardware", "9090x2", "9090x2"),
    _key("hardware", "4090x0", "4090x0"),
    _key("hardware", ""),
    _key("hardware", {"gpu": "nope"}, "hardware.gpu"),
    _key("target", ""),
    _key("target", 42),
    _key("target", "x" * 5000),
    _key("target", "Qwen/Nope-7B-Instruct", "Qwen/Nope-7B-Instruct"),
    _key("target", ["a", "b"]),
    _key("server", "big"),
    _key("server.max_model_len", 0),
    _key("server.max_model_len", -1),
    _key("server.max_model_len", 1.5),
    _key("server.max_model_len", "long"),
    _key("server.max_model_len", True),
    _key("server.max_model_len", BIG),
    _key("server.max_model_len", 40960, "serves at most 32768"),
    _key("server.tensor_parallel_size", 0),
    _key("server.tensor_parallel_size", -2),
    _key("server.tensor_parallel_size", 4),
    _key("server.tensor_parallel_size", 1000),
    _key("server.quantization", ""),
    _key("server.extra_flags", "enforce-eager"),
    _key("server.extra_flags", {"served-model-name": "x"}, "--served-model-name"),
    _key("server.extra_flags", {"bad flag": 1}, "bad flag"),
    _key("server.extra_flags", {"api-key": "hunter2"}, "api-key"),
    _key("server.extra_flags", {"enforce-eager": [1, 2]}, "enforce-eager"),
    _key("server.tensor_paralel_size", 1, "tensor_parallel_size"),
    _key("vllm.image", ""),
    _key("vllm.version", 0.8),
    _key("vllm.version", "garbage", "garbage"),
    _key("slo.objective", "speed"),
    _key("slo.ttft_ms", 0),
    _key("slo.ttft_ms", -5),
    _key("slo.ttft_ms", "fast"),
    _key("slo.ttft_ms", float("nan")),
    _key("slo.ttft_ms", float("inf")),
    _key("slo.tpot_ms", 0),
    _key("slo.max_failed_requests", -0.1),
    _key("slo.max_failed_requests", 1.5),
    _key("slo.stream_gap_p99_ms", -1),
    _key("slo.objective", "goodput", "goodput"),
    _key("workload.prompt_set", "no-such-set"),
    _key("workload.prompt_set", ""),
    _key("workload.input_tokens", 0),
    _key("workload.input_tokens", -1),
    _key("workload.input_tokens", BIG),
    _key("workload.input_tokens", 40000, "workload.input_tokens + workload.output_tokens"),
    _key("workload.output_tokens", 0),
    _key("workload.output_tokens", BIG),
    _key("workload.output_tokens", 9000, "workload.input_tokens + workload.output_tokens"),
    _key("workload.concurrency", []),
    _key("workload.concurrency", [0]),
    _key("workload.concurrency", [10_000_000]),
    _key("workload.concurrency", [1, 1]),
    _key("workload.concurrency", "many"),
    _key("workload.concurrency", [{"level": 4, "weight": 0}]),
    _key("workload.temperature", 3),
    _key("workload.temperature", -1),
    _key("workload.temperature", []),
    _key("workload.temperature", [0.2, 0.2]),
    _key("workload.requests", 0),
    _key("workload.requests", BIG),
    _key("workload.requests", 1.5),
    _key("workload.requests", "many"),
    _key("workload.warmup", -1),
    _key("workload.warmup", BIG),
    _key("workload.request_rate", 0),
    _key("workload.request_rate", -1),
    _key("workload.request_rate", [2, 1]),
    _key("workload.seed", -1),
    _key("workload.seed", 2**40),
    _key("workload.concurency", [1], "workload.concurrency"),
    _key("search.num_speculative_tokens", {"low": 1, "high": 1_000_000_000}),
    _key("search.num_speculative_tokens", {"low": 0, "high": 4}),
    _key("search.num_speculative_tokens", {"low": 5, "high": 2}),
    _key("search.num_speculative_tokens", 0),
    _key("search.num_speculative_tokens", 65),
    _key("search.gpu_memory_utilization", 0),
    _key("search.gpu_memory_utilization", 1.5),
    _key("search.gpu_memory_utilization", {"low": 0.9, "high": 0.5}),
    _key("search.max_num_batched_tokens", [0]),
    _key("search.max_num_batched_tokens", []),
    _key("search.max_num_batched_tokens", [BIG]),
    _key("search.temperature", 5),
    _key("search.draft", []),
    _key("search.draft", ""),
    _key("search.methods", "fast"),
    _key("search.methods", [{"method": "telepathy"}]),
    _key("surprise", 1, "surprise"),
]


def _flag(command: str, *argv: str, says: str | None = None) -> tuple[str, Case]:
    full = (command, *argv)
    if command == "optimize":  # the case's own flags come last, and win
        full = (command, "--backend", "sim", "--plan", "--studies-dir", "{dir}", *argv)
    named = [a for a in argv if a.startswith("--") and a != "--studies-dir"]
    flag = named[-1] if named else command
    shown = " ".join(a if len(a) < 30 else f"<{len(a)} chars>" for a in argv)
    return f"flag:{command} {shown}", Case(full, says or flag)


_ESTIMATE = ("--hardware", "4090x1", "--model", MODEL)
# Not a plan: a missing vLLM matters only to a run, and stops it before a study is stored.
_NO_VLLM = (
    "optimize",
    *("--backend", "process", "--hardware", "4090x1", "--no-prefetch", "--study", "fresh"),
    *("--trials", "1", "--studies-dir", "{dir}", "--vllm-command", "/nonexistent/vllm"),
)
_BENCH = ("--url", "http://127.0.0.1:9")  # nothing listens: every case fails before it asks
_FLAG_CASES = [
    ("flag:optimize --vllm-command /nonexistent/vllm", Case(_NO_VLLM, "--vllm-command")),
    _flag("optimize", "--trials", "0"),
    # Calibration writes its fit after minutes of launches: the folder is checked first.
    _flag(
        "calibrate",
        *("--backend", "sim", "--hardware", "4090x1", "--studies-dir", "{dir}/keep.db/studies"),
        says="is not writable (Not a directory): choose another with --studies-dir",
    ),
    _flag("optimize", "--trials", "-1"),
    _flag("optimize", "--trials", "1000000000"),
    _flag("optimize", "--trials", "many"),
    _flag("optimize", "--seed", "-1"),
    _flag("optimize", "--seed", str(2**80)),
    _flag("optimize", "--seed", "x"),
    _flag("optimize", "--seed", "4294967295", "--workers", "2", says="--seed 4294967295"),
    _flag("optimize", "--workers", "0"),
    _flag("optimize", "--workers", "1000"),
    _flag("optimize", "--gpus-per-trial", "0"),
    _flag("optimize", "--confirm-top", "-1"),
    _flag("optimize", "--confirm-top", "1000000000"),
    _flag("optimize", "--confirm-repeats", "0"),
    _flag("optimize", "--confirm-repeats", "100000"),
    _flag("optimize", "--ready-timeout", "0"),
    _flag("optimize", "--ready-timeout", "-1"),
    _flag("optimize", "--ready-timeout", "1e300"),
    _flag("optimize", "--ready-timeout", "nan"),
    _flag("optimize", "--request-timeout", "0"),
    _flag("optimize", "--sim-speed", "0"),
    _flag("optimize", "--sim-speed", "-3"),
    _flag("optimize", "--backend", "cloud", says="cloud"),
    _flag("optimize", "--sampler", "magic", says="magic"),
    _flag("optimize", "--hardware", "9090x2", says="9090x2"),
    _flag("optimize", "--gpus", "a,b"),
    _flag("optimize", "--backend", "process", "--vllm-command", "vllm 'serve"),
    _flag("optimize", "--backend", "process", "--vllm-command", ""),
    _flag("optimize", "--docker-entrypoint", "vllm 'serve"),
    _flag("optimize", "--vllm-version", "garbage"),
    _flag("optimize", "--vllm-version", "99.0"),
    _flag("optimize", "--vllm-version", "0.1"),
    _flag("optimize", "--vllm-version", "0.8.5; rm -rf /"),
    _flag("optimize", "--slo-ttft-ms", "0", says="ttft_ms"),
    _flag("optimize", "--slo-ttft-ms", "-5", says="ttft_ms"),
    _flag("optimize", "--time-budget", "soon"),
    _flag("optimize", "--time-budget", "1s", "--workers", "2", says="--time-budget"),
    _flag("optimize", "--space", "/nonexistent/space.yaml", says="/nonexistent/space.yaml"),
    _flag("optimize", "--space", "x" * 5000, says="search space"),
    _flag("optimize", "--study", "../evil", says="../evil"),
    _flag("optimize", "--study", "x" * 200),
    _flag("optimize", "--docker-volume", "nocolon"),
    _flag("optimize", "--docker-env", "=x"),
    _flag("optimize", "--gpu-spec", "/nonexistent/gpus.yaml", says="/nonexistent/gpus.yaml"),
    _flag("optimize", "--workers", "2", says="--workers"),
    _flag("estimate", *_ESTIMATE, "--k", "0"),
    _flag("estimate", *_ESTIMATE, "--k", "65"),
    _flag("estimate", *_ESTIMATE, "--draft", "ngram", "--k", "1000000000", says="--k"),
    _flag("estimate", *_ESTIMATE, "--concurrency", "0"),
    _flag("estimate", *_ESTIMATE, "--concurrency", "10000000"),
    _flag("estimate", *_ESTIMATE, "--temperature", "3"),
    _flag("estimate", *_ESTIMATE, "--temperature", "-0.1"),
    _flag("estimate", *_ESTIMATE, "--gpu-memory-utilization", "0"),
    _flag("estimate", *_ESTIMATE, "--gpu-memory-utilization", "1.5"),
    _flag("estimate", *_ESTIMATE, "--max-num-batched-tokens", "0"),
    _flag("estimate", *_ESTIMATE, "--max-model-len", "0"),
    _flag("estimate", *_ESTIMATE, "--max-model-len", "1000000000"),
    _flag("estimate", *_ESTIMATE, "--max-model-len", "40960", says="serves at most 32768"),
    _flag("estimate", *_ESTIMATE, "--input-tokens", "0"),
    _flag("estimate", *_ESTIMATE, "--input-tokens", "9000", says="--input-tokens + --output"),
    _flag("estimate", *_ESTIMATE, "--output-tokens", "-1"),
    _flag("estimate", *_ESTIMATE, "--vllm-version", "garbage"),
    _flag("estimate", *_ESTIMATE, "--set", "noequals"),
    _flag("estimate", *_ESTIMATE, "--method", "telepathy", says="telepathy"),
    _flag("estimate", "--hardware", "9090x1", "--model", MODEL, says="9090x1"),
    _flag("estimate", "--hardware", "4090x1", "--model", "Qwen/Nope-7B", says="Qwen/Nope-7B"),
    _flag("estimate", "--model", MODEL, says="--hardware"),
    _flag("bench", *_BENCH, "--concurrency", "0"),
    _flag("bench", *_BENCH, "--concurrency", "10000000"),
    _flag("bench", *_BENCH, "--requests", "0"),
    _flag("bench", *_BENCH, "--requests", "1000000000"),
    _flag("bench", *_BENCH, "--warmup", "-1"),
    _flag("bench", *_BENCH, "--max-tokens", "0"),
    _flag("bench", *_BENCH, "--output-tokens", "0"),
    _flag("bench", *_BENCH, "--input-tokens", "0"),
    _flag("bench", *_BENCH, "--request-rate", "0"),
    _flag("bench", *_BENCH, "--request-rate", "-2"),
    _flag("bench", *_BENCH, "--temperature", "5"),
    _flag("dashboard", "keep", "--port", "0", "--studies-dir", "{dir}"),
    _flag("dashboard", "keep", "--port", "99999", "--studies-dir", "{dir}"),
    _flag("dashboard", "keep", "--port", "-1", "--studies-dir", "{dir}"),
    _flag("dashboard", "keep", "--port", "http", "--studies-dir", "{dir}"),
    _flag("dashboard", "nope", "--studies-dir", "{dir}", says="nope"),
    _flag("export", "nope", "--studies-dir", "{dir}", says="nope"),
    _flag("export", "keep", "--format", "bogus", "--studies-dir", "{dir}", says="bogus"),
    _flag("export", "keep", "--pick", "bogus", "--studies-dir", "{dir}", says="bogus"),
    _flag("export", "keep", "--pick", "999", "--studies-dir", "{dir}", says="999"),
    _flag("export", "keep", "--out", "{dir}/keep.db/x.yaml", "--studies-dir", "{dir}"),
    _flag("report", "nope", "--studies-dir", "{dir}", says="nope"),
    _flag("confirm", "keep", "--top", "-1", "--studies-dir", "{dir}"),
    _flag("confirm", "keep", "--repeats", "0", "--studies-dir", "{dir}"),
    _flag("confirm", "keep", "--repeats", "100000", "--studies-dir", "{dir}"),
    _flag("confirm", "nope", "--studies-dir", "{dir}", says="nope"),
    _flag("space", "check", "/nonexistent.yaml", says="/nonexistent.yaml"),
    _flag("hardware", "--gpu-spec", "/nonexistent/gpus.yaml", says="/nonexistent/gpus.yaml"),
    # A misspelt flag or command: the one line names it and the closest valid one.
    _flag("optimize", "--trails", "3", says="no option --trails; did you mean --trials?"),
    _flag("bench", *_BENCH, "--concurency", "8", says="did you mean --concurrency?"),
    _flag("export", "keep", "--fromat", "json", says="did you mean --format?"),
    _flag("optimze", says="Did you mean 'optimize'?"),
]

_OPTIMIZE = ("optimize", "--backend", "sim", "--plan", "--studies-dir", "{dir}")
_VARIABLE_CASES = [
    (f"env:{name}={value}", Case(argv, says, env={name: value}))
    for name, value, argv, says in [
        ("SPECTUNE_PREFETCH", "maybe", _OPTIMIZE, "SPECTUNE_PREFETCH"),
        ("SPECTUNE_PREFETCH", "2", _OPTIMIZE, "SPECTUNE_PREFETCH"),
        ("SPECTUNE_OPTIMIZE_TRIALS", "many", _OPTIMIZE, "SPECTUNE_OPTIMIZE_TRIALS"),
        ("SPECTUNE_OPTIMIZE_TRIALS", "0", _OPTIMIZE, "--trials 0"),
        ("SPECTUNE_OPTIMIZE_WORKERS", "abc", _OPTIMIZE, "SPECTUNE_OPTIMIZE_WORKERS"),
        ("SPECTUNE_OPTIMIZE_SEED", "x", _OPTIMIZE, "SPECTUNE_OPTIMIZE_SEED"),
        ("SPECTUNE_OPTIMIZE_SEED", str(2**64), _OPTIMIZE, "--seed"),
        ("SPECTUNE_OPTIMIZE_BACKEND", "cloud", _OPTIMIZE[:1], "cloud"),
        ("SPECTUNE_OPTIMIZE_READY_TIMEOUT", "soon", _OPTIMIZE, "SPECTUNE_OPTIMIZE_READY_TIMEOUT"),
        ("SPECTUNE_OPTIMIZE_CONFIRM_TOP", "-1", _OPTIMIZE, "--confirm-top"),
        ("SPECTUNE_OPTIMIZE_VLLM_VERSION", "junk", _OPTIMIZE, "junk"),
        ("SPECTUNE_STORAGE", "nonsense", _OPTIMIZE, "nonsense"),
        ("SPECTUNE_GPU_SPEC", "/nonexistent/gpus.yaml", _OPTIMIZE, "/nonexistent/gpus.yaml"),
        ("SPECTUNE_ESTIMATE_K", "abc", ("estimate", *_ESTIMATE), "SPECTUNE_ESTIMATE_K"),
        ("SPECTUNE_ESTIMATE_CONCURRENCY", "1e9", ("estimate", *_ESTIMATE), "CONCURRENCY"),
        ("SPECTUNE_BENCH_REQUESTS", "abc", ("bench", *_BENCH), "SPECTUNE_BENCH_REQUESTS"),
        ("SPECTUNE_DASHBOARD_PORT", "abc", ("dashboard", "keep"), "SPECTUNE_DASHBOARD_PORT"),
        ("SPECTUNE_CONFIRM_TOP", "-1", ("confirm", "keep", "--studies-dir", "{dir}"), "--top -1"),
    ]
]

_URL_CASES = [  # export opens the storage (optimize --plan only reads a study stored there)
    (f"url:{url}", Case(("export", "keep", "--studies-dir", "{dir}", "--storage", url), says))
    for url, says in [
        ("nonsense", "invalid storage URL"),
        ("sqlite:///{dir}/nope.db", "no study 'keep'"),
        ("mysql+nodriver://u@localhost/db", "storage"),
        ("http://example.com/db", "storage"),
        ("postgresql+psycopg://u:secret@127.0.0.1:1/db", "cannot open storage"),
        ("sqlite:////proc/spectune/x.db", "no study 'keep'"),
        ("sqlite:///{dir}", "cannot open storage"),
        ("sqlite:///{dir}/keep/../../../../../proc/x.db", "no study 'keep'"),
    ]
]

_RAW_CASES = [
    (f"file:{name}", Case(("space", "check", "{space}"), says, raw=raw))
    for name, raw, says in [
        ("not-yaml", "target: [oops\n", "not valid YAML"),
        ("a-list", "- 1\n- 2\n", "mapping"),
        ("empty", "", "target"),
        ("no-target", "name: x\n", "'target' must be set"),
        ("tabs", "target:\t\tx: y\n", "YAML"),
    ]
]

CASES = dict([*_SPACE_CASES, *_FLAG_CASES, *_VARIABLE_CASES, *_URL_CASES, *_RAW_CASES])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A studies folder holding study ``keep`` (one simulated trial) that no case may touch."""
    where = tmp_path_factory.mktemp("bad-inputs")
    argv = ["optimize", "--backend", "sim", "--space", SPACE, "--study", "keep"]
    made = runner.invoke(
        app, [*argv, "--trials", "1", "--confirm-top", "0", "--studies-dir", str(where)]
    )
    assert made.exit_code == 0, made.stderr
    return where


def _digest(folder: Path) -> str:
    return hashlib.sha256((folder / "keep.db").read_bytes()).hexdigest()


def _space_file(folder: Path, case: Case, name: str) -> Path:
    path = folder / f"case-{hashlib.sha256(name.encode()).hexdigest()[:12]}.yaml"
    if case.raw is not None:
        path.write_text(case.raw)
        return path
    raw = copy.deepcopy(yaml.safe_load(builtin_spaces()[SPACE].read_text()))
    for dotted, value in (case.space or {}).items():
        section, _, key = dotted.partition(".")
        if key:
            current = raw.get(section)
            raw[section] = {**(current if isinstance(current, dict) else {}), key: value}
        else:
            raw[section] = value
    path.write_text(yaml.safe_dump(raw))
    return path


def _argv(case: Case, folder: Path, space: Path) -> list[str]:
    return [a.replace("{dir}", str(folder)).replace("{space}", str(space)) for a in case.argv]


def test_the_table_has_at_least_150_cases() -> None:
    assert len(CASES) >= 150


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_exit_2(folder: Path, name: str) -> None:
    case = CASES[name]
    before = _digest(folder)
    space = _space_file(folder, case, name)
    env = {k: v.replace("{dir}", str(folder)) for k, v in case.env.items()}
    result = runner.invoke(app, _argv(case, folder, space), env=env)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit | None), result.exception
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert case.says.replace("{dir}", str(folder)) in lines[0], lines[0]
    assert _digest(folder) == before


@pytest.mark.parametrize("zeroed", [1, 3])
@pytest.mark.parametrize("command", ["optimize", "export"])
def test_a_damaged_database_is_one_line(folder: Path, command: str, zeroed: int) -> None:
    """One 16 KiB block of a copy of the study's database zeroed (a disk's lost write)."""
    data = bytearray((folder / "keep.db").read_bytes())
    block = 16 * 1024
    assert len(data) > (zeroed + 1) * block
    data[zeroed * block : (zeroed + 1) * block] = bytes(block)
    damaged = folder / f"damaged-{command}-{zeroed}.db"
    damaged.write_bytes(bytes(data))
    argv = {
        "optimize": ["optimize", "--backend", "sim", "--study", "keep", "--trials", "1"],
        "export": ["export", "keep"],
    }[command]
    url = f"sqlite:///{damaged}"
    result = runner.invoke(app, [*argv, "--storage", url, "--studies-dir", str(folder)])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.stderr
    assert len(lines) == 1 and str(damaged) in lines[0], result.stderr
    assert damaged.read_bytes() == bytes(data)  # read, never "repaired" by a write


# Through a real process: the console script's own exit code and stderr, nothing of the runner's.
_PROCESS_CASES = {
    "seed 2**80": (["optimize", "--seed", str(2**80)], {}, "--seed"),
    "port 99999": (["dashboard", "keep", "--port", "99999"], {}, "--port 99999"),
    "SPECTUNE_PREFETCH=maybe": (["optimize"], {"SPECTUNE_PREFETCH": "maybe"}, "SPECTUNE_PREFETCH"),
    # Read as spectune's modules load: only a fresh process sees them.
    "SPECTUNE_HEARTBEAT_S=soon": (
        ["export", "keep"],
        {"SPECTUNE_HEARTBEAT_S": "soon"},
        "HEARTBEAT",
    ),
    "SPECTUNE_GRACE_S=-5": (["export", "keep"], {"SPECTUNE_GRACE_S": "-5"}, "SPECTUNE_GRACE_S"),
}


@pytest.mark.parametrize("name", list(_PROCESS_CASES))
def test_bad_input_in_a_real_process(folder: Path, name: str) -> None:
    argv, env, says = _PROCESS_CASES[name]
    full = [sys.executable, "-m", "tuner", *argv, "--studies-dir", str(folder)]
    if argv[0] == "optimize":
        full += ["--backend", "sim", "--plan"]
    done = subprocess.run(
        full, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and says in lines[0], done.stderr
