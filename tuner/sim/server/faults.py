"""Faults the fake server injects, so every failure path of a trial is quick to test.

============================  ================================================================
fault                         what happens
============================  ================================================================
``oom-at-start``              start-up fails with vLLM's CUDA out-of-memory lines, exit 1
``crash-after=N``             the engine dies after N tokens: log, connections drop, exit 1
``hang``                      the engine never steps: requests are accepted, get no tokens
``hang-after=N``              the same from the N-th token on; ``/health`` still answers
``http-500-every=N``          every N-th completion request gets HTTP 500, vLLM's error JSON
``malformed-sse``             every stream has a broken ``data:`` line after its first chunk
``malformed-sse-every=N``     the same for every N-th stream
``slow-start=S``              S real seconds pass before the server listens
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
    "crash-after=N",
    "hang",
    "hang-after=N",
    "http-500-every=N",
    "malformed-sse",
    "malformed-sse-every=N",
    "slow-start=S",
)


@dataclass(frozen=True)
class Faults:
    """Faults to inject; token and request counts are totals since start-up.

    Attributes:
        oom_at_start: fail start-up with vLLM's CUDA out-of-memory messages and exit status 1.
        crash_after: the engine dies (process exits 1, connections drop) once it has emitted
            this many tokens.
        hang_after: the engine stops stepping once it has emitted this many tokens (0: before
            the first); requests are accepted and then get no tokens.
        http_500_every: every N-th completion request is answered with HTTP 500.
        malformed_sse_every: every N-th streaming response carries a broken ``data:`` line
            after its first chunk.
        slow_start_s: real seconds to wait before listening (readiness timeouts).
    """

    oom_at_start: bool = False
    crash_after: int | None = None
    hang_after: int | None = None
    http_500_every: int | None = None
    malformed_sse_every: int | None = None
    slow_start_s: float = 0.0


def parse_faults(specs: Sequence[str]) -> Faults:
    """Parses fault specs such as ``crash-after=40``; empty items are skipped.

    Raises:
        ValueError: an unknown fault or a bad number, naming the known faults.
    """
    fields: dict[str, Any] = {}
    for spec in specs:
        name, _, value = spec.strip().partition("=")
        if not name:
            continue
        try:
            if name == "oom-at-start" and not value:
                fields["oom_at_start"] = True
            elif name == "hang" and not value:
                fields["hang_after"] = 0
            elif name == "malformed-sse" and not value:
                fields["malformed_sse_every"] = 1
            elif name == "slow-start":
                fields["slow_start_s"] = _non_negative(float(value))
            elif name in ("crash-after", "hang-after"):
                fields[name.replace("-", "_")] = _non_negative(int(value))
            elif name in ("http-500-every", "malformed-sse-every"):
                fields[name.replace("-", "_")] = max(1, int(value))
            else:
                raise ValueError("unknown fault")
        except ValueError:
            raise ValueError(
                f"bad fault {spec!r}; known faults: {', '.join(FAULT_NAMES)}"
            ) from None
    return Faults(**fields)


def _non_negative(value: float) -> float:
    if value < 0 or math.isnan(value):
        raise ValueError("negative")
    return value
