"""Every failure path of the fake server, seen the way spectune sees real vLLM fail."""

from __future__ import annotations

import socket
import subprocess

import httpx
import pytest

from tests.testbed.fake_server import SERVER, TARGET, StartServer, free_port
from tuner.bench.measure import measure_endpoint
from tuner.bench.metrics import MetricsSnapshot
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.config.workload import WorkloadSpec
from tuner.errors import FailureKind, StartupFailure
from tuner.launch.failures import classify_failure, decisive_line
from tuner.launch.process import ProcessLauncher
from tuner.results import Endpoint

FITS = ServerConfig(TARGET, 1, 8192, 0.9, 2048)
SMALL = WorkloadSpec(prompt_set="chat", input_tokens=32, output_tokens=16, requests=6, warmup=0)


def _launcher(env: dict[str, str], ready_timeout_s: float = 15.0) -> ProcessLauncher:
    return ProcessLauncher(
        SERVER,
        version=NEWEST_KNOWN,
        env={"SPECTUNE_SIM_SPEED": "50", **env},
        ready_timeout_s=ready_timeout_s,
        stop_timeout_s=5,
        poll_s=0.05,
    )


def _run(*flags: str, model: str = TARGET) -> subprocess.CompletedProcess[str]:
    """Runs a server that is expected to fail at start-up; returns its exit and output."""
    argv = [*SERVER, "serve", model, "--port", str(free_port()), *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_oom_fault_is_an_oom_startup_failure(context: LaunchContext) -> None:
    launcher = _launcher({"SPECTUNE_SIM_FAULT": "oom-at-start"})
    with launcher, pytest.raises(StartupFailure) as caught:
        launcher.start(FITS, context)
    failure = caught.value
    assert failure.kind is FailureKind.OOM
    assert failure.exit_code == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in str(failure)
    assert "Engine core initialization failed" in failure.log_tail


@pytest.mark.parametrize(
    ("flags", "model", "cause"),
    [
        ((), "Qwen/Qwen2.5-32B-Instruct", "CUDA out of memory while loading the model weights"),
        (
            ("--gpu-memory-utilization", "0.4"),
            TARGET,
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
        ),
        (
            ("--max-model-len", "100000"),
            TARGET,
            "KV cache is needed, which is larger than the available KV cache memory",
        ),
        (
            ("--kv-cache-memory-bytes", "1000000", "--max-model-len", "2048"),
            TARGET,
            "KV cache is needed, which is larger than the available KV cache memory",
        ),
        (  # vLLM 0.21+: context and NCCL leave less free memory than 0.98 asks
            # 0.21-0.33 check free memory at start-up (0.34 sizes its cache from it instead)
            (
                "--gpu-memory-utilization",
                "0.98",
                "-tp",
                "2",
                "--sim-hardware",
                "4090x2",
                "--sim-vllm-version",
                "0.32.0",
            ),
            TARGET,
            "on startup is less than desired GPU memory utilization (0.98",
        ),
    ],
    ids=["weights", "no-cache-blocks", "kv-too-small", "kv-cache-bytes", "free-memory"],
)
def test_configs_that_do_not_fit_fail_like_vllm(
    flags: tuple[str, ...], model: str, cause: str
) -> None:
    done = _run(*flags, model=model)
    log = done.stdout + done.stderr
    assert done.returncode == 1
    assert cause in log
    assert "RuntimeError: Engine core initialization failed. See root cause above." in log
    assert classify_failure(done.returncode, log) is FailureKind.OOM
    assert cause in decisive_line(log, FailureKind.OOM)


@pytest.mark.parametrize(
    ("flags", "model", "cause"),
    [
        ((), "no/such-model", "validation error for ModelConfig"),
        (("--tensor-parallel-size", "2"), TARGET, "validation error for ParallelConfig"),
        (
            ("--speculative-config", '{"method": "medusa", "num_speculative_tokens": 2}'),
            TARGET,
            "validation error for SpeculativeConfig",
        ),
        (("--sim-fault", "explode"), TARGET, "bad fault 'explode'"),
        (("--speculative-config", "{not json"), TARGET, "argument --speculative-config"),
    ],
    ids=["unknown-model", "tp-over-hardware", "unknown-method", "unknown-fault", "bad-json"],
)
def test_invalid_values_are_bad_arguments(flags: tuple[str, ...], model: str, cause: str) -> None:
    done = _run(*flags, model=model)
    log = done.stdout + done.stderr
    assert done.returncode in (1, 2)
    assert cause in log
    assert classify_failure(done.returncode, log) is FailureKind.BAD_ARGUMENT


def test_crash_mid_run_drops_connections(start_server: StartServer) -> None:
    # 16-token requests, four in flight: the first finishes by token 64, and token 88 (not a
    # multiple of 16) always falls in the middle of some request's stream.
    server = start_server("--sim-fault", "crash-after=88")
    workload = WorkloadSpec(
        prompt_set="chat", input_tokens=32, output_tokens=16, requests=12, warmup=0
    )
    result = measure_endpoint(
        Endpoint(server.base_url, TARGET), 0.0, workload, 4, check=False, request_timeout_s=5
    )
    errors = [r.error for r in result.requests if r.error]
    assert 1 <= sum(r.ok for r in result.requests) < 12
    assert any("connection dropped mid-stream" in e for e in errors), errors
    assert server.proc.wait(timeout=5) == 1
    assert "EngineDeadError" in server.log()


def test_hang_leaves_requests_to_time_out(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "hang-after=40")
    result = measure_endpoint(
        Endpoint(server.base_url, TARGET), 0.0, SMALL, 1, check=False, request_timeout_s=0.3
    )
    errors = [r.error for r in result.requests if r.error]
    # Two requests make 32 tokens; the third hangs at token 40; the fourth gets no token, so
    # the load generator stops there (the server stopped answering) and sends no more.
    assert sum(r.ok for r in result.requests) == 2
    stalled = "server stopped answering"
    assert errors == [
        "timed out after 0.3 s",
        f"timed out after 0.3 s with no token: {stalled}",
        f"not sent: {stalled}",
        f"not sent: {stalled}",
    ]
    assert httpx.get(f"{server.base_url}/health").status_code == 200
    # The hung engine still holds the requests the clients gave up on: the one it was running
    # (with its KV blocks) and the one that arrived after it stopped stepping.
    metrics = MetricsSnapshot.from_text(httpx.get(f"{server.base_url}/metrics").text)
    assert metrics.total("vllm:num_requests_running") == 1.0
    assert metrics.total("vllm:num_requests_waiting") == 1.0
    assert metrics.kv_cache_usage is not None and metrics.kv_cache_usage > 0.0
    assert server.stop() < 2.0 and server.proc.returncode == 0


def test_hang_from_the_start(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "hang")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{server.base_url}/v1/completions", json={"model": TARGET, "prompt": "hi"}, timeout=0.3
        )


def test_every_other_request_fails_with_http_500(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "http-500-every=2")
    result = measure_endpoint(Endpoint(server.base_url, TARGET), 0.0, SMALL, 1, check=False)
    errors = [r.error for r in result.requests]
    assert errors[0::2] == [None] * 3
    assert all(e is not None and e.startswith("HTTP 500: simulated fault") for e in errors[1::2])


def test_malformed_sse_fails_requests(start_server: StartServer) -> None:
    server = start_server("--sim-fault", "malformed-sse-every=2")
    result = measure_endpoint(Endpoint(server.base_url, TARGET), 0.0, SMALL, 1, check=False)
    errors = [r.error for r in result.requests]
    assert errors[0::2] == [None] * 3
    assert all(e is not None and "malformed SSE data line" in e for e in errors[1::2])
    assert result.output_tokens == 3 * 16


def test_port_in_use_exits_1_with_the_errno_launchers_retry_on() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [*SERVER, "serve", TARGET, "--host", "127.0.0.1", "--port", str(port)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1
    assert "[Errno 98]" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("drop-mid-stream-every=2", "connection dropped mid-stream"),
        ("error-event-every=2", "server error mid-stream: EngineCore encountered an issue"),
        ("no-usage-every=2", "no usage in the stream"),
    ],
)
def test_stream_faults_fail_every_other_request_and_keep_its_timeline(
    start_server: StartServer, fault: str, error: str
) -> None:
    server = start_server("--sim-fault", fault)
    result = measure_endpoint(Endpoint(server.base_url, TARGET), 0.0, SMALL, 1, check=False)
    records = result.requests
    assert [r.error for r in records[0::2]] == [None] * 3
    for record in records[1::2]:
        assert record.error is not None and record.error.startswith(error), record.error
        assert record.end is None and record.first_token is not None  # partial timelines kept
    assert result.output_tokens == 3 * 16
    assert server.proc.poll() is None  # one broken stream does not take the server down
