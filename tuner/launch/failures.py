"""Why a vLLM server ended: oom, bad-argument, timeout or crash, from one reading of its end.

Shared by every launcher (process, docker) and by start-up and measurement alike: a launcher
reads a server's end once into a :class:`ServerEnd` (exit status, whether the runtime saw a
memory kill, the log's last lines, the stage it died in) and :func:`end_failure` turns it into
one :class:`~tuner.errors.StartupFailure` whose message is a single line: the kind, the exit
status and the decisive log line. The patterns come from real vLLM logs (0.6 to 0.32, CUDA and
CPU).

The order matters. Memory comes first because an OOM is a constraint the search learns from,
while every other kind is a failed trial: an out-of-memory line anywhere in the log wins, even
over a timeout (a V0 engine can hang after a worker's CUDA OOM). Only a real memory kill (the
runtime says so: Docker's ``OOMKilled``, the kernel's OOM-kill counter) or vLLM's memory texts
are OOM: a SIGKILL alone (``docker kill``, ``kill -9``) is a crash, or the sampler would learn a
false memory limit.
"""

from __future__ import annotations

import enum
import re
import signal
from dataclasses import dataclass

from tuner.errors import FailureKind, StartupFailure

__all__ = [
    "ServerEnd",
    "Stage",
    "classify_failure",
    "decisive_line",
    "end_failure",
    "startup_failure",
    "tail",
]

_OOM_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"OutOfMemoryError",  # torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
        r"\bout of memory\b",  # "CUDA out of memory", "CUDA error: out of memory", HIP, XPU
        # vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory (0.32):
        r"No available memory for the cache blocks",
        r"larger than the available KV cache memory",  # V1: KV cache too small for max len
        r"maximum number of tokens that can be stored in KV cache",  # V0 wording of the same
        # vllm/v1/worker/utils.py request_memory (0.21+): start-up needs free >= util x total.
        # The INFO line "Free memory on device (...) on startup. Desired GPU memory utilization
        # is ..." of a successful start is informational and never matched.
        r"on startup is less than (desired GPU memory utilization|the engine's budget)",
        r"Externally held weights on device .* exceed the desired GPU memory utilization",
        # vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run: "CUDA out of memory occurred
        # when warming up sampler" (also caught by "out of memory" below; named for the reader).
        r"out of memory occurred when warming up sampler",
        r"not enough memory",  # torch CPU allocator
        r"Cannot allocate memory",  # ENOMEM
        r"std::bad_alloc",
        r"^MemoryError\b",
    )
]
_BAD_ARGUMENT_PATTERNS = [
    re.compile(p)
    for p in (
        r": error: (unrecognized arguments|argument |ambiguous option|invalid choice"
        r"|the following arguments are required)",
        r"^\S+: error: ",  # any other argparse complaint ("vllm serve: error: ...")
        r"\bvalidation error for \w+",  # pydantic rejects a vLLM config value (0.10+)
        r"^NotImplementedError\b",  # e.g. a draft model on the 0.10-0.14 V1 engine
        r"you should provide the model as a positional argument",
        r"No model specified!",
    )
]
# "ERROR 11-29 17:57:51 [core.py:1510] " and "(EngineCore pid=11094) " before the message.
_PROCESS_PREFIX = re.compile(r"^\((\w+) pid=\d+\)\s*")
_LEVEL_PREFIX = re.compile(
    r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? \[[^\]]*\]\s*"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b(:|$)")
_ARGPARSE_EXIT = 2
_MAX_LINE = 300


def tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of ``text`` (all of it when shorter)."""
    return "\n".join(text.splitlines()[-lines:])


def _message_lines(log_text: str) -> list[tuple[str, bool]]:
    """Each log line without ANSI colours and vLLM's prefixes, and whether it is INFO/WARNING.

    Informational lines are kept apart because vLLM's own hints quote error names (the ulimit
    warning mentions ``OSError: [Errno 24] Too many open files``) without anything having failed.
    """
    result = []
    for raw in log_text.splitlines():
        line = _PROCESS_PREFIX.sub("", _ANSI.sub("", raw).rstrip())
        level = _LEVEL_PREFIX.match(line)
        informational = level is not None and level.group(1) in ("DEBUG", "INFO", "WARNING")
        result.append((_LEVEL_PREFIX.sub("", line), informational))
    return result


def _first_match(lines: list[tuple[str, bool]], patterns: list[re.Pattern[str]]) -> int | None:
    for index, (line, informational) in enumerate(lines):
        if not informational and any(p.search(line.strip()) for p in patterns):
            return index
    return None


def classify_failure(
    exit_code: int | None, log_text: str, *, oom_killed: bool = False, timed_out: bool = False
) -> FailureKind:
    """Classifies a start-up failure.

    Args:
        exit_code: the exit status; negative for a signal (subprocess), None if still running.
        log_text: the server's log, or its last few hundred lines.
        oom_killed: the runtime saw the kernel's OOM killer end it (Docker ``OOMKilled``).
        timed_out: the server never became ready within the launcher's timeout.
    """
    lines = _message_lines(log_text)
    if oom_killed or _first_match(lines, _OOM_PATTERNS) is not None:
        return FailureKind.OOM
    if _first_match(lines, _BAD_ARGUMENT_PATTERNS) is not None or exit_code == _ARGPARSE_EXIT:
        return FailureKind.BAD_ARGUMENT
    if timed_out:
        return FailureKind.TIMEOUT
    return FailureKind.CRASH


def decisive_line(log_text: str, kind: FailureKind) -> str:
    """The log line that best explains a failure of ``kind``, prefixes stripped, at most 300 chars.

    OOM and bad-argument: the first line that matched (the root cause; later tracebacks wrap it).
    Crash: the first exception line, for the same reason. Timeout: the last line, which says
    what the server was doing when the launcher gave up. Otherwise the last line.
    """
    lines = _message_lines(log_text)
    patterns = {
        FailureKind.OOM: _OOM_PATTERNS,
        FailureKind.BAD_ARGUMENT: _BAD_ARGUMENT_PATTERNS,
        FailureKind.CRASH: [_EXCEPTION_LINE],
    }
    index = _first_match(lines, patterns[kind]) if kind in patterns else None
    if index is None:
        non_empty = [line.strip() for line, _ in lines if line.strip()]
        return _clip(non_empty[-1]) if non_empty else "(empty log)"
    line = lines[index][0].strip()
    # pydantic puts the reason on the next line ("  Value error, Model architectures [...]").
    if "validation error for" in line and index + 1 < len(lines):
        line = f"{line}: {lines[index + 1][0].strip()}"
    return _clip(line)


def _clip(line: str) -> str:
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 3] + "..."


def _describe_exit(exit_code: int | None, timeout_s: float | None) -> str:
    if exit_code is None:
        waited = f" after {timeout_s:g} s" if timeout_s is not None else ""
        return f"still not ready{waited}"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"killed by {name}"
    return f"exit status {exit_code}"


class Stage(enum.StrEnum):
    """Where in a server's life it ended."""

    STARTING = "start-up"
    MEASURING = "measurement"


@dataclass(frozen=True)
class ServerEnd:
    """One reading of how a server ended, the same for a process and a container.

    Attributes:
        exit_code: the exit status (negative for a signal, as subprocess spells it); None
            while it still runs (a server that was never ready).
        log_text: the log's last lines.
        oom_killed: the runtime saw a memory kill (Docker's ``OOMKilled``, the kernel's
            OOM-kill counter moving).
        stage: the stage it died in.
        timed_out: it never became ready within the launcher's timeout.
    """

    exit_code: int | None
    log_text: str
    oom_killed: bool = False
    stage: Stage = Stage.STARTING
    timed_out: bool = False

    @property
    def kind(self) -> FailureKind:
        return classify_failure(
            self.exit_code, self.log_text, oom_killed=self.oom_killed, timed_out=self.timed_out
        )


def end_failure(
    end: ServerEnd, *, timeout_s: float | None = None, lines: int = 40
) -> StartupFailure:
    """The classified :class:`StartupFailure` for ``end``, whatever the stage.

    The message is one line: ``vLLM did not start (oom, exit status 1): ValueError: ...`` or
    ``vLLM died during measurement (oom, exit status 137, OOM-killed): ...``. The last ``lines``
    lines of the log are kept as ``log_tail`` for the trial record.
    """
    kind = end.kind
    how = _describe_exit(end.exit_code, timeout_s)
    if end.oom_killed:
        how += ", OOM-killed"
    what = "did not start" if end.stage is Stage.STARTING else f"died during {end.stage.value}"
    message = f"vLLM {what} ({kind.value}, {how}): {decisive_line(end.log_text, kind)}"
    return StartupFailure(
        kind, message, exit_code=end.exit_code, log_tail=tail(end.log_text, lines)
    )


def startup_failure(
    exit_code: int | None,
    log_text: str,
    *,
    oom_killed: bool = False,
    timed_out: bool = False,
    timeout_s: float | None = None,
    lines: int = 40,
) -> StartupFailure:
    """:func:`end_failure` for a server that did not start."""
    end = ServerEnd(exit_code, log_text, oom_killed=oom_killed, timed_out=timed_out)
    return end_failure(end, timeout_s=timeout_s, lines=lines)
