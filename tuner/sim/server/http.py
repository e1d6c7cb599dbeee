"""Just enough HTTP/1.1 for the fake server, on asyncio streams (no web framework needed).

Requests: a request line, headers, and a body of ``Content-Length`` bytes or chunked; keep-alive
unless the client says ``Connection: close``. Responses: whole bodies with ``Content-Length``, or
a chunked ``text/event-stream`` whose chunks are written as they are made (:func:`chunk`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LAST_CHUNK",
    "SSE_HEAD",
    "BadRequest",
    "HttpRequest",
    "chunk",
    "json_response",
    "read_request",
    "response",
]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    500: "Internal Server Error",
}
MAX_BODY_BYTES = 64 * 1024 * 1024  # long-context prompts are a few hundred KB at most

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
"""The head of a streamed response; the body follows as :func:`chunk` pieces."""

LAST_CHUNK = b"0\r\n\r\n"
"""Ends a chunked body; the connection can then carry the next request."""


class BadRequest(Exception):
    """The bytes on the wire are not an HTTP request we can read; answer 400 and close."""


@dataclass(frozen=True)
class HttpRequest:
    """One parsed request.

    Attributes:
        method: ``GET``, ``POST``, ...
        path: the path without the query string.
        headers: header names in lower case.
        body: the raw body.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        """Whether the client wants the connection kept open after the response."""
        return self.headers.get("connection", "").lower() != "close"


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """Reads one request; None when the client closed the connection between requests.

    Raises:
        BadRequest: a malformed request line, header or body.
        asyncio.IncompleteReadError: the connection closed in the middle of a request.
    """
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, _version = line.decode("latin-1").split()
    except ValueError:
        raise BadRequest(f"bad request line {line[:80]!r}") from None
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon:
            raise BadRequest(f"bad header line {raw[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise BadRequest(f"body of {length} bytes")
        body = await reader.readexactly(length)
    return HttpRequest(method.upper(), target.split("?", 1)[0], headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            length = int((await reader.readline()).split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if length == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        size += length
        if size > MAX_BODY_BYTES:
            raise BadRequest(f"body over {MAX_BODY_BYTES} bytes")
        parts.append(await reader.readexactly(length))
        await reader.readexactly(2)  # the CRLF after each chunk


def response(status: int, body: bytes, content_type: str, *, close: bool = False) -> bytes:
    """A whole response with ``Content-Length``."""
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"content-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n"
    )
    if close:
        head += "connection: close\r\n"
    return head.encode("latin-1") + b"\r\n" + body


def json_response(status: int, data: Any, *, close: bool = False) -> bytes:
    """A JSON response, compact like FastAPI's."""
    body = json.dumps(data, separators=(",", ":")).encode()
    return response(status, body, "application/json", close=close)


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body (never empty: an empty chunk ends the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data)
