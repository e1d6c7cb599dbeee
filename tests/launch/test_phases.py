"""Start-up phases read from a vLLM log: the pure reader on log snippets, then a real start.

The GPU snippet is vLLM 0.32's own format strings filled in (the files are cited next to the
markers in :mod:`tuner.launch.readiness`); the CPU logs are real vLLM 0.32 CPU starts kept
in ``tests/launch/logs``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.testbed.fake_server import SERVER as FAKE_SERVER
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.launch.process import ProcessLauncher
from tuner.launch.readiness import StartupWatch, startup_phase
from tuner.results import StartupEvent

LOGS = Path(__file__).parent / "logs"
_W = "(Worker_TP0 pid=2211) INFO 12-01 10:00:"
_E = "(EngineCore_DP0 pid=2101) INFO 12-01 10:00:"
_A = "(APIServer pid=2001) INFO 12-01 10:00:"
GPU_START = [
    f"{_A}01 [utils.py:253] non-default args: {{'model': 'Qwen/Qwen2.5-14B-Instruct-AWQ'}}",
    f"{_E}05 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: model=...",
    f"{_W}09 [gpu_model_runner.py:5040] Starting to load model Qwen/Qwen2.5-14B-Instruct-AWQ...",
    f"{_W}31 [default_loader.py:502] Loading weights took 21.50 seconds",
    f"{_W}32 [gpu_model_runner.py:5150] Model loading took 9.41 GiB memory and 22.1 seconds",
    f"{_W}33 [monitor.py:41] Starting torch.compile",
    f"{_W}41 [backends.py:1167] Dynamo bytecode transform time: 7.92 s",
    f"{_W}58 [backends.py:399] Compiling a graph for compile range (1, 2048) takes 15.1 s",
    f"{_W}59 [monitor.py:58] torch.compile took 25.70 s in total",
    f"{_W}59 [gpu_worker.py:760] Available KV cache memory: 10.21 GiB",
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  20%|██        | 13/67 [00:01]"
    "\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:05]",
    f"{_W}11 [gpu_model_runner.py:6582] Graph capturing finished in 11 secs, took 0.52 GiB",
    f"{_E}12 [core.py:386] init engine (profile, create kv cache, warmup model) took 41.77 s",
    f"{_A}14 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000",
    f"{_A}15 [launcher.py:46] Route: /health, Methods: GET",
    "(APIServer pid=2001) INFO:     Waiting for application startup.",
    "(APIServer pid=2001) INFO:     Application startup complete.",
]


@pytest.mark.parametrize(
    ("lines", "phase"),
    [
        (2, None),  # nothing but configuration yet
        (3, "loading weights"),
        (5, "loading weights"),  # loaded, not yet compiling
        (6, "compiling"),
        (9, "compiling"),
        (10, "allocating KV cache"),
        (11, "capturing graphs"),  # a tqdm bar, redrawn after "\r"
        (12, "capturing graphs"),
        (13, "starting API server"),
        (16, "starting API server"),
        (17, "ready"),
    ],
)
def test_the_last_marker_in_a_gpu_start_is_the_phase(lines: int, phase: str | None) -> None:
    assert startup_phase("\n".join(GPU_START[:lines])) == phase


def test_compiling_from_a_compile_cache_hit() -> None:
    line = f"{_W}35 [backends.py:296] Directly load the compiled graph(s) for compile range ..."
    assert startup_phase("\n".join([*GPU_START[:5], line])) == "compiling"


def test_eager_mode_naming_torch_compile_is_no_compile() -> None:
    eager = (
        f"{_A}02 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, and "
        "JIT kernel warmup."
    )
    assert startup_phase(eager) is None


@pytest.mark.parametrize(
    "log", ["kv-cache-too-small-0.32.log", "free-memory-below-utilization-0.32.log"]
)
def test_a_real_cpu_start_that_died_after_loading_weights(log: str) -> None:
    text = (LOGS / log).read_text(encoding="utf-8")
    assert "Loading weights took" in text
    assert startup_phase(text) == "loading weights"


def test_a_watch_without_a_listener_never_reads_the_log() -> None:
    def unread() -> str:
        raise AssertionError("read")

    watch = StartupWatch(None)
    watch.poll(unread)
    watch.ready()


def test_a_watch_keeps_the_phase_when_the_tail_holds_no_marker() -> None:
    events: list[StartupEvent] = []
    watch = StartupWatch(events.append)
    watch.poll(lambda: GPU_START[2])
    watch.poll(lambda: "INFO a log tail cut after the marker")
    watch.ready()
    assert [e.phase for e in events] == ["starting", "loading weights", "loading weights", "ready"]
    elapsed = [e.elapsed_s for e in events]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0


def test_a_slow_fake_start_reports_its_phases_in_order(tmp_path: Path) -> None:
    """The fake server prints vLLM's phase lines over a 3 s start; the launcher reads them."""
    events: list[StartupEvent] = []
    launcher = ProcessLauncher(
        FAKE_SERVER,
        version=NEWEST_KNOWN,
        ready_timeout_s=60.0,
        poll_s=0.1,
        env={"SPECTUNE_SIM_SPEED": "50", "SPECTUNE_SIM_FAULT": "slow-start=3"},
        on_startup=events.append,
    )
    server = ServerConfig("Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048)
    with launcher:
        launcher.start(server, LaunchContext(study="test", trial=0, log_dir=tmp_path))
    phases = [e.phase for e in events]
    seen = list(dict.fromkeys(phases))  # first appearances, in order
    assert seen[0] == "starting" and phases[-1] == "ready"
    assert {"loading weights", "compiling", "capturing graphs"} <= set(seen)
    order = ["starting", "loading weights", "compiling", "capturing graphs", "ready"]
    assert [p for p in seen if p in order] == order
    assert events[-1].elapsed_s >= 3.0
    assert all(a.elapsed_s <= b.elapsed_s for a, b in itertools.pairwise(events))
