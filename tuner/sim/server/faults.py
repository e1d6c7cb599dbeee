"""Faults the fake server injects, so every failure path of a trial is quick to test.

============================  ================================================================
fault                         what happens
============================  ================================================================
``oom-at-start``              start-up fails with vLLM's CUDA out-of-memory lines, exit 1
``crash-at-start``            start-up fails with an error unrelated to memory, exit 1
``sigkill-at-start``          the server kills itself with SIGKILL during start-up, as the
                              kernel's OOM killer would
``alloc-at-start=MIB``        allocates (and touches) MIB MiB during start-up, then serves;
                              under a memory limit, the limit kills it
``slow-start=S``              S real seconds pass before the server listens
``crash-after=N``             the server dies after N tokens: log, connections drop, exit 1
``hang``                      the scheduler never steps: requests are accepted, get no tokens
``hang-after=N``              the same from the N-th token on; ``/health`` still answers
``http-500-every=N``          every N-th completion request gets HTTP 500, vLLM's error JSON
``malformed-sse[-every=N]``   every (N-th) stream has a broken ``data:`` line after its first
                              chunk
``drop-mid-stream[-every=N]``  every (N-th) stream's connection is cut after its first chunk
``error-event[-every=N]``     every (N-th) stream gets vLLM's error event after its first
                              chunk, then ``[DONE]``
``no-usage[-every=N]``        every (N-th) stream ends without its usage chunk
``ignore-sigterm``            SIGTERM is ignored (only SIGKILL ends the server), by the
                              child of ``spawn-child`` too
``spawn-child``               starts a child process that sleeps (as vLLM's engine core is a
                              child), logging ``spawned child process PID``
``log-env=VAR``               logs the value of environment variable VAR at start (a server
                              that prints its secrets)
``attention-fallback``        logs TRITON_ATTN as the attention backend, as vLLM does on a
                              driver too old for FlashAttention
============================  ================================================================

Counts run from start-up and include every client's requests and tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FAULT_NAMES", "Faults", "parse_faults"]

FAULT_NAMES = (
    "oom-at-start",
    "crash-at-start",
    "sigkill-at-start",
    "alloc-at-start=MIB",
    "slow-start=S",
    "crash-after=N",
    "hang",
    "hang-after=N",
    "http-500-every=N",
    "malformed-sse[-every=N]",
    "drop-mid-stream[-every=N]",
    "error-event[-every=N]",
    "no-usage[-every=N]",
    "ignore-sigterm",
    "spawn-child",
    "log-env=VAR",
    "attention-fallback",
)
# Stream faults: bare for every stream, "-every=N" for every N-th; name -> Faults field.
_STREAM_FAULTS = {
    "malformed-sse": "malformed_sse_every",
    "drop-mid-stream": "drop_every",
    "error-event": "error_event_every",
    "no-usage": "no_usage_every",
}
_FLAGS = {
    "oom-at-start": "oom_at_start",
    "crash-at-start": "crash_at_start",
    "sigkill-at-start": "sigkill_at_start",
    "ignore-sigterm": "ignore_sigterm",
    "spawn-child": "spawn_child",
    "attention-fallback": "attention_fallback",
}


@dataclass(frozen=True)
class Faults:
    """Faults to inject; token, request and stream counts are totals since start-up.

    Attributes:
        oom_at_start: fail start-up with vLLM's CUDA out-of-memory messages and exit status 1.
        crash_at_start: fail start-up with an error unrelated to memory, exit status 1.
        sigkill_at_start: die by SIGKILL during start-up.
        alloc_at_start_mib: MiB to allocate and touch during start-up.
        slow_start_s: real seconds to wait before listening (readiness timeouts).
        crash_after: the server dies (process exits 1, connections drop) once it has emitted
            this many tokens.
        hang_after: the scheduler stops stepping once it has emitted this many tokens (0: before
            the first); requests are accepted and then get no tokens.
        http_500_every: every N-th completion request is answered with HTTP 500.
        malformed_sse_every: every N-th stream carries a broken ``data:`` line after its first
            chunk.
        drop_every: every N-th stream's connection is cut after its first chunk.
        error_event_every: every N-th stream gets an error event after its first chunk.
        no_usage_every: every N-th stream ends without the usage chunk.
        ignore_sigterm: ignore SIGTERM.
        spawn_child: start a sleeping child process at start.
        log_env: environment variables whose values are logged at start.
    """

    oom_at_start: bool = False
    crash_at_start: bool = False
    sigkill_at_start: bool = False
    alloc_at_start_mib: int = 0
    slow_start_s: float = 0.0
    crash_after: int | None = None
    hang_after: int | None = None
    http_500_every: int | None = None
    malformed_sse_every: int | None = None
    drop_every: int | None = None
    error_event_every: int | None = None
    no_usage_every: int | None = None
    ignore_sigterm: bool = False
    spawn_child: bool = False
    log_env: tuple[str, ...] = ()
    attention_fallback: bool = False


def parse_faults(specs: Sequence[str]) -> Faults:  # noqa: C901  (one branch per fault name)
    """Parses fault specs such as ``crash-after=40``; empty items are skipped.

    Raises:
        ValueError: an unknown fault or a bad number, naming the known faults.
    """
    fields: dict[str, Any] = {}
    log_env: list[str] = []
    for spec in specs:
        name, _, value = spec.strip().partition("=")
        if not name:
            continue
        try:
            if name in _FLAGS and not value:
                fields[_FLAGS[name]] = True
            elif name == "hang" and not value:
                fields["hang_after"] = 0
            elif name in _STREAM_FAULTS and not value:
                fields[_STREAM_FAULTS[name]] = 1
            elif name.endswith("-every") and name.removesuffix("-every") in _STREAM_FAULTS:
                fields[_STREAM_FAULTS[name.removesuffix("-every")]] = max(1, int(value))
            elif name == "slow-start":
                fields["slow_start_s"] = _non_negative(float(value))
            elif name == "alloc-at-start":
                fields["alloc_at_start_mib"] = int(_non_negative(int(value)))
            elif name in ("crash-after", "hang-after"):
                fields[name.replace("-", "_")] = _non_negative(int(value))
            elif name == "http-500-every":
                fields["http_500_every"] = max(1, int(value))
            elif name == "log-env" and value:
                log_env.append(value)
            else:
                raise ValueError("unknown fault")
        except ValueError:
            raise ValueError(
                f"bad fault {spec!r}; known faults: {', '.join(FAULT_NAMES)}"
            ) from None
    return Faults(**fields, log_env=tuple(log_env))


def _non_negative(value: float) -> float:
    if value < 0 or math.isnan(value):
        raise ValueError("negative")
    return value
