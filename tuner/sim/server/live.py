"""A request the fake server's scheduler works on, how its answer reaches the client, and which
stream faults hit it.

The step loop never waits on a client: it queues a stream's SSE events in the request's
outbox, and the request's own handler writes them out (:meth:`Live.answer`), one HTTP chunk
per event, as vLLM's server sends them. A slow reader so holds up only itself, as in vLLM;
under ``--sim-speed inf`` the scheduler waits for the readers that fell behind
(:meth:`Live.catch_up`), so that the client is the bottleneck.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from aiohttp import web

from tuner.sim.server.faults import Faults
from tuner.sim.server.openai import CompletionParams, StreamFormat

__all__ = ["Ending", "Live", "stream_faults"]

# A reader this far behind (bytes queued) holds up the scheduler under --sim-speed inf.
_BACKLOG_BYTES = 256 * 1024


class Ending(enum.Enum):
    """How the answer to a request ends."""

    COMPLETE = "complete"
    """The whole answer was queued; the connection may carry the next request."""
    CUT = "cut"
    """The connection is dropped: the client sees its answer break off (or never start)."""


@dataclass(eq=False)
class Live:
    """A request the scheduler is working on, and where its tokens go.

    Attributes:
        rid: the scheduler's request id.
        params: the request.
        request_id: the id the answer carries (``chatcmpl-...``, ``cmpl-...``).
        request: the HTTP request, to tell whether its client is still there.
        stream: the SSE events' format; None for an answer in one piece.
        sent: tokens generated for it so far.
        faults: the stream faults of this request, by :class:`Faults` field.
        arrived: when it was queued (the event loop's clock, seconds).
        scheduled: when the step that gave it its first token began; None before.
        first_token: when its first token was handed on; None before.
        last_token: when its latest token was handed on; None before the first.
    """

    rid: int
    params: CompletionParams
    request_id: str
    request: web.BaseRequest
    stream: StreamFormat | None = None
    sent: int = 0
    faults: frozenset[str] = frozenset()
    arrived: float = 0.0
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    _outbox: list[bytes | Ending] = field(default_factory=list, init=False)
    _backlog: int = field(default=0, init=False)  # bytes queued, not yet handed on
    _more: asyncio.Future[None] | None = field(default=None, init=False)
    _caught_up: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _answering: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        self._caught_up.set()

    def gone(self) -> bool:
        """Whether the client hung up (it sends nothing while it waits for the answer)."""
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def send(self, event: bytes) -> None:
        """Queues one SSE event of the stream."""
        self._queue(event)
        self._backlog += len(event)
        if self._backlog >= _BACKLOG_BYTES and self._answering:
            self._caught_up.clear()

    def end(self, ending: Ending) -> None:
        """Ends the answer once what is queued before has been written."""
        self._queue(ending)

    def _queue(self, item: bytes | Ending) -> None:
        self._outbox.append(item)
        if self._more is not None and not self._more.done():
            self._more.set_result(None)

    async def catch_up(self) -> None:
        """Returns once the client has read all but the last 256 KiB queued, or left."""
        await self._caught_up.wait()

    async def answer(self, response: web.StreamResponse | None) -> Ending:
        """Starts ``response`` (a stream's) and writes the queued events until the end.

        Returns:
            How the answer ended; a client that went away while being written to ends it as
            ``CUT`` (the scheduler finds it gone at its next step and drops the request).
        """
        try:
            if response is not None:
                await response.prepare(self.request)
            while True:
                if not self._outbox:
                    self._more = asyncio.get_running_loop().create_future()
                    await self._more
                items, self._outbox = self._outbox, []
                for item in items:
                    if isinstance(item, Ending):
                        return item
                    assert response is not None  # only streams queue events
                    await response.write(item)
                    self._backlog -= len(item)
                if self._backlog < _BACKLOG_BYTES:
                    self._caught_up.set()
        except ConnectionError:
            return Ending.CUT
        finally:
            self._answering = False
            self._caught_up.set()  # nobody writes any more: the scheduler must not wait for it


def stream_faults(faults: Faults, stream: int) -> frozenset[str]:
    """The stream faults that hit the ``stream``-th stream (counted from 1)."""
    fields = ("malformed_sse_every", "drop_every", "error_event_every", "no_usage_every")
    hit = set()
    for name in fields:
        every: int | None = getattr(faults, name)
        if every and stream % every == 0:
            hit.add(name)
    return frozenset(hit)
