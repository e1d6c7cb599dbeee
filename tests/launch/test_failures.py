"""Start-up failure classification on real vLLM log text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import FailureKind
from tuner.launch.failures import (
    ServerEnd,
    Stage,
    classify_failure,
    decisive_line,
    end_failure,
    startup_failure,
    tail,
)

LOGS = Path(__file__).with_name("logs")  # captured from real vLLM 0.32 (CPU) start-ups


def _log(name: str) -> str:
    return (LOGS / name).read_text()


@pytest.mark.parametrize(
    ("name", "exit_code", "kind", "decisive"),
    [
        (
            "kv-cache-too-small-0.32.log",
            1,
            FailureKind.OOM,
            "ValueError: To serve at least one request with the model's max seq len (2048), "
            "(0.0 GiB KV cache is needed, which is larger than the available KV cache memory",
        ),
        (
            "unrecognized-argument-0.32.log",
            2,
            FailureKind.BAD_ARGUMENT,
            "vllm: error: unrecognized arguments: --use-v2-block-manager",
        ),
        (
            "invalid-value-0.32.log",
            2,
            FailureKind.BAD_ARGUMENT,
            "vllm serve: error: argument --max-model-len: invalid human_readable_int_or_auto "
            "value: 'lots'",
        ),
        (
            "eagle-unsupported-0.32.log",
            1,
            FailureKind.BAD_ARGUMENT,
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            "SpeculativeConfig: Value error, Model architectures ['EagleQwen2ForCausalLM'] are "
            "not supported for now.",
        ),
        # Reconstructed from vLLM 0.32's source text inside the real log's framing:
        (
            "free-memory-below-utilization-0.32.log",
            1,
            FailureKind.OOM,
            "ValueError: Free memory on device cuda:0 (21.12/23.52 GiB) on startup is less than "
            "desired GPU memory utilization (0.96, 22.58 GiB).",
        ),
        (
            "no-cache-blocks-0.32.log",
            1,
            FailureKind.OOM,
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization`",
        ),
        (
            "sampler-warmup-oom-0.32.log",
            1,
            FailureKind.OOM,
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
            "requests.",
        ),
        (
            "torch-oom-graph-capture-0.32.log",
            1,
            FailureKind.OOM,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.16 GiB.",
        ),
        (
            "suffix-missing-package-0.32.log",
            1,
            FailureKind.CRASH,
            "ImportError: Arctic Inference is required for suffix decoding.",
        ),
    ],
)
def test_real_vllm_logs(name: str, exit_code: int, kind: FailureKind, decisive: str) -> None:
    text = _log(name)
    failure = startup_failure(exit_code, text)
    assert failure.kind is kind
    assert failure.exit_code == exit_code
    assert str(failure).startswith(f"vLLM did not start ({kind.value}, exit status {exit_code}): ")
    assert decisive in str(failure)
    assert "\n" not in str(failure)
    assert len(str(failure)) < 400
    assert failure.log_tail == tail(text, 40)


def test_the_startup_memory_report_of_a_good_start_is_not_an_oom() -> None:
    # vllm/v1/worker/gpu_worker.py logs this INFO line after every profiled start-up.
    text = (
        "(Worker pid=7) INFO 11-29 17:57:51 [gpu_worker.py:1034] Free memory on device "
        "(23.1/23.52 GiB) on startup. Desired GPU memory utilization is (0.92, 21.64 GiB). "
        "Actual usage is 9.5 GiB for consumed memory (weights + non-torch)\n"
        "Traceback (most recent call last):\nKeyError: 'model_type'\n"
    )
    assert classify_failure(1, text) is FailureKind.CRASH


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: Free memory on device cuda:0 (10.00/23.52 GiB) on startup is less than the "
        "engine's budget after excluding external process's weights (0.9, 11.2 GiB). Decrease "
        "GPU memory utilization or reduce GPU memory used by other processes.",
        "ValueError: Externally held weights on device cuda:0 (22.00/23.52 GiB) exceed the "
        "desired GPU memory utilization (0.9, 21.17 GiB). Increase GPU memory utilization or "
        "reduce GPU memory used by other processes.",
    ],
)
def test_other_startup_memory_checks_are_oom(line: str) -> None:
    text = f"(EngineCore pid=1) ERROR 11-29 17:57:51 [core.py:1510] {line}\n"
    assert classify_failure(1, text) is FailureKind.OOM


def test_the_ulimit_warning_quoting_oserror_is_not_the_cause() -> None:
    # Every vLLM 0.32 start logs "... `OSError: [Errno 24] Too many open files` ..." as a hint.
    text = _log("suffix-missing-package-0.32.log")
    assert "OSError: [Errno 24]" in text
    assert decisive_line(text, FailureKind.CRASH).startswith("ImportError: Arctic Inference")


@pytest.mark.parametrize(
    "line",
    [
        # BRIEF.md's start-up memory failures, as vLLM prints them (V0 and V1, CUDA and CPU).
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "ValueError: To serve at least one request with the model's max seq len (8192), "
        "(1.50 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(0.75 GiB).",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 23.65 GiB of which 1.12 GiB is free.",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB",
        "RuntimeError: CUDA error: out of memory",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
        "that can be stored in KV cache (20928). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: not "
        "enough memory: you tried to allocate 4294967296 bytes.",
        "OSError: [Errno 12] Cannot allocate memory",
        "MemoryError",
    ],
)
def test_memory_failures_are_oom(line: str) -> None:
    text = (
        "INFO 07-01 12:00:00 [core.py:58] Initializing a V1 LLM engine\n"
        f"(EngineCore_0 pid=4242) ERROR 07-01 12:00:09 [core.py:700] {line}\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    assert classify_failure(1, text) is FailureKind.OOM
    assert decisive_line(text, FailureKind.OOM) == line[:297] + ("..." if len(line) > 300 else "")


def test_oom_hints_in_info_and_warning_lines_are_not_failures() -> None:
    text = (
        "WARNING 07-01 12:00:00 [cache.py:1] Possibly too large swap space; this may cause an "
        "out of memory error\n"
        "Traceback (most recent call last):\n"
        "KeyError: 'model_type'\n"
    )
    assert classify_failure(1, text) is FailureKind.CRASH
    assert decisive_line(text, FailureKind.CRASH) == "KeyError: 'model_type'"


@pytest.mark.parametrize(
    ("exit_code", "kwargs", "kind"),
    [
        # A SIGKILL alone (docker kill, kill -9) is a crash; only a real memory kill is OOM.
        (137, {}, FailureKind.CRASH),  # Docker/shell: 128 + SIGKILL
        (-9, {}, FailureKind.CRASH),  # subprocess: killed by SIGKILL
        (137, {"oom_killed": True}, FailureKind.OOM),
        (-9, {"oom_killed": True}, FailureKind.OOM),
        (1, {"oom_killed": True}, FailureKind.OOM),
        (2, {}, FailureKind.BAD_ARGUMENT),  # argparse's exit status, whatever the log says
        (1, {}, FailureKind.CRASH),
        (-11, {}, FailureKind.CRASH),  # SIGSEGV
        (None, {"timed_out": True}, FailureKind.TIMEOUT),
    ],
)
def test_exit_status_and_runtime_flags(
    exit_code: int | None, kwargs: dict[str, bool], kind: FailureKind
) -> None:
    assert classify_failure(exit_code, "INFO loading weights\n", **kwargs) is kind


def test_an_oom_in_the_log_beats_a_timeout() -> None:
    text = "(VllmWorker rank=1 pid=77) ERROR torch.OutOfMemoryError: CUDA out of memory.\n"
    assert classify_failure(None, text, timed_out=True) is FailureKind.OOM


@pytest.mark.parametrize(
    "line",
    [
        "NotImplementedError: Speculative decoding with draft model is not supported yet. "
        "Please consider using other speculative decoding methods such as ngram, medusa, "
        "eagle, or mtp.",
        "ValueError: With `vllm serve`, you should provide the model as a positional argument "
        "instead of via the `--model` option.",
        "vllm serve: error: the following arguments are required: model_tag",
        "api_server.py: error: argument --dtype: invalid choice: 'fp4'",
    ],
)
def test_refused_arguments_are_bad_argument(line: str) -> None:
    assert classify_failure(1, f"Traceback (most recent call last):\n{line}\n") is (
        FailureKind.BAD_ARGUMENT
    )


def test_messages_name_signals_and_timeouts() -> None:
    killed = startup_failure(-9, "INFO: loading weights\n")
    assert str(killed) == "vLLM did not start (crash, killed by SIGKILL): INFO: loading weights"
    docker = startup_failure(137, "", oom_killed=True)
    assert str(docker) == "vLLM did not start (oom, exit status 137, OOM-killed): (empty log)"
    slow = startup_failure(
        None, "a\nINFO 07-01 12:00:00 [x.py:1] Loading weights\n\n", timed_out=True, timeout_s=600
    )
    assert str(slow) == "vLLM did not start (timeout, still not ready after 600 s): Loading weights"
    assert slow.exit_code is None


def test_colours_and_prefixes_are_stripped() -> None:
    text = "\x1b[1;31m(APIServer pid=1) ERROR 11-29 17:57:51 [core.py:1] KeyError: 'x'\x1b[0m\n"
    assert decisive_line(text, FailureKind.CRASH) == "KeyError: 'x'"


def test_tail() -> None:
    text = "\n".join(str(i) for i in range(100))
    assert tail(text, 3) == "97\n98\n99"
    assert tail("a\nb", 40) == "a\nb"
    assert tail("") == ""


def test_a_memory_kill_while_loading_is_oom_and_a_plain_kill_is_a_crash() -> None:
    text = _log("oom-killed-loading-0.32.log")  # killed mid-load: no memory text in the log
    killed = end_failure(ServerEnd(137, text, oom_killed=True))
    assert killed.kind is FailureKind.OOM
    assert str(killed).startswith("vLLM did not start (oom, exit status 137, OOM-killed): ")
    assert "Filesystem type for checkpoints: EXT4." in str(killed)  # what it was doing
    assert end_failure(ServerEnd(137, text)).kind is FailureKind.CRASH


def test_one_reading_of_an_end_classifies_start_up_and_measurement_alike() -> None:
    text = "INFO serving\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
    for stage in Stage:
        end = ServerEnd(1, text, stage=stage)
        assert end.kind is FailureKind.OOM
        assert "torch.OutOfMemoryError: CUDA out of memory" in str(end_failure(end))
    measuring = end_failure(ServerEnd(137, "INFO serving\n", True, Stage.MEASURING))
    assert str(measuring) == (
        "vLLM died during measurement (oom, exit status 137, OOM-killed): INFO serving"
    )
    crashed = end_failure(ServerEnd(1, "KeyError: 'x'\n", stage=Stage.MEASURING))
    assert str(crashed) == "vLLM died during measurement (crash, exit status 1): KeyError: 'x'"
