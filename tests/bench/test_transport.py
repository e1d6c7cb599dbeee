"""The aiohttp transport under httpx: what reaches the server, and how failures are told.

Each case runs a raw asyncio server on 127.0.0.1 that behaves one way, and sends through
``httpx.AsyncClient(transport=AiohttpTransport(...))`` as measurement does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import pytest

from tuner.bench.loadgen import run_load
from tuner.bench.transport import AiohttpTransport
from tuner.config.workload import PromptRequest
from tuner.results import RequestRecord

T = TypeVar("T")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return head, await reader.readexactly(length)


async def _with_server(handler: Handler, send: Callable[[str], Awaitable[T]]) -> T:
    """``send(base_url)`` against a server running ``handler``; every connection closed after."""
    handled: list[asyncio.Task[None]] = []

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handled.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await handler(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await send(f"http://127.0.0.1:{port}")
    finally:
        server.close()
        await asyncio.wait_for(asyncio.gather(*handled), timeout=10)
        await server.wait_closed()


def _client(on_aiohttp: bool = True, read_timeout_s: float = 5.0) -> httpx.AsyncClient:
    """A client on the transport measurement uses, or (``on_aiohttp`` False) httpx's own."""
    limits = httpx.Limits(max_connections=4)
    timeout = httpx.Timeout(5.0, read=read_timeout_s)
    transport = AiohttpTransport(limits) if on_aiohttp else None
    return httpx.AsyncClient(transport=transport, limits=limits, timeout=timeout)


def test_the_body_and_headers_reach_the_server_and_the_reply_streams_back() -> None:
    seen: dict[str, bytes] = {}

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen["head"], seen["body"] = await _read_request(reader)
        writer.write(b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"one\n", b"two\n"):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def send(base: str) -> tuple[int, str, list[str]]:
        async with _client() as client:
            headers = {"Authorization": "Bearer k"}
            async with client.stream("POST", base + "/x", json={"a": 1}, headers=headers) as r:
                lines = [line async for line in r.aiter_lines()]
                return r.status_code, r.reason_phrase, lines

    status, reason, lines = asyncio.run(_with_server(handler, send))
    assert (status, reason, lines) == (201, "Created", ["one", "two"])
    assert seen["head"].startswith(b"POST /x HTTP/1.1\r\n")
    assert b"\r\nauthorization: bearer k\r\n" in seen["head"].lower()
    assert json.loads(seen["body"]) == {"a": 1}


_TEXT_EVENT = b'data: {"choices": [{"text": "x"}]}\n\n'


@pytest.mark.parametrize("on_aiohttp", [True, False], ids=["aiohttp", "httpx"])
@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("close before replying", "connection dropped before any output"),
        ("answer what is not HTTP", "connection dropped before any output"),
        ("cut the body short", "connection dropped mid-stream"),
        ("stall after the headers", "timed out (ReadTimeout)"),
    ],
)
def test_failures_are_told_as_on_httpx_own_transport(
    on_aiohttp: bool, behaviour: str, error: str
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        if behaviour == "answer what is not HTTP":
            writer.write(b"hello there\r\n\r\n")
        elif behaviour != "close before replying":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            if behaviour == "cut the body short":  # one event, then the connection closes
                writer.write(b"%x\r\n%s\r\n" % (len(_TEXT_EVENT), _TEXT_EVENT))
                await writer.drain()
                return
            await writer.drain()
            await reader.read()  # until the client gives up and closes

    async def send(base: str) -> list[RequestRecord]:
        async with _client(on_aiohttp, read_timeout_s=0.3) as client:
            request = PromptRequest.from_prompt("hi", 4)
            records, _ = await run_load(
                client, base, "m", [request], concurrency=1, temperature=0.0, api="completions"
            )
            return records

    (record,) = asyncio.run(_with_server(handler, send))
    assert record.error is not None and record.error.startswith(error), record.error
