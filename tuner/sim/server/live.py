"""A request the fake server's engine works on, and which stream faults hit it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tuner.sim.server.faults import Faults
from tuner.sim.server.openai import CompletionParams, StreamFormat

__all__ = ["Live", "stream_faults"]


@dataclass(eq=False)
class Live:
    """A request the engine is working on, and where its tokens go."""

    rid: int
    params: CompletionParams
    request_id: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    done: asyncio.Future[bool]  # True: ran to the end; False: aborted
    stream: StreamFormat | None = None
    sent: int = 0
    faults: frozenset[str] = frozenset()  # the stream faults of this request, by Faults field

    def gone(self) -> bool:
        """Whether the client hung up (it sends nothing while it waits for the answer)."""
        return self.reader.at_eof() or self.writer.transport.is_closing()


def stream_faults(faults: Faults, stream: int) -> frozenset[str]:
    """The stream faults that hit the ``stream``-th stream (counted from 1)."""
    fields = ("malformed_sse_every", "drop_every", "error_event_every", "no_usage_every")
    hit = set()
    for field in fields:
        every: int | None = getattr(faults, field)
        if every and stream % every == 0:
            hit.add(field)
    return frozenset(hit)
