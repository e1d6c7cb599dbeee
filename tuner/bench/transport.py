"""The HTTP transport under the load generator: httpx's API, aiohttp's wire.

The load generator reads every streamed chunk of every request; at concurrency 16 and more,
httpx's own transport (httpcore over h11, pure Python) spends about twice the client CPU per
token that this one does, and 1.3-1.6x what ``vllm bench serve`` (aiohttp) spends
(``benchmarks/loadgen.py``). Swapping the transport keeps httpx everywhere else: the client,
its timeouts, event hooks, and ``httpx.MockTransport`` in tests.

aiohttp's errors are mapped onto httpx's by what they mean, so a failed request is told the
same way on either transport: refused (``ConnectError``), timed out connecting or reading,
or dropped (``RemoteProtocolError`` when the server closed the connection, ``ReadError`` when
a body was cut short or the socket failed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx

__all__ = ["AiohttpTransport"]


def _as_httpx(exc: aiohttp.ClientError) -> httpx.TransportError:
    # Most specific first: aiohttp's timeouts and refusals are also ClientConnectionErrors.
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(message)  # closed, or answered what is not HTTP
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientConnectionError):
        return httpx.ReadError(message)  # a body cut short, a reset, a socket that failed
    return httpx.TransportError(message)


class _Body(httpx.AsyncByteStream):
    """A response body, handed on in whatever pieces arrived (no waiting for a full buffer)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._response.content.iter_any():
                yield piece
        except aiohttp.ClientError as exc:
            raise _as_httpx(exc) from exc

    async def aclose(self) -> None:
        self._response.release()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends over one aiohttp session (HTTP/1.1, plain or TLS).

    Args:
        limits: ``max_connections`` caps the session's open connections, as httpx's would.
    """

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        try:
            response = await self._open().request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=await request.aread() or None,
                allow_redirects=False,  # httpx follows redirects itself, when asked
                timeout=aiohttp.ClientTimeout(
                    sock_connect=timeout.get("connect"), sock_read=timeout.get("read")
                ),
            )
        except aiohttp.ClientError as exc:
            raise _as_httpx(exc) from exc
        return httpx.Response(
            response.status,
            headers=list(response.raw_headers),
            stream=_Body(response),
            request=request,
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (response.reason or "").encode("ascii", "replace"),
            },
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the event loop that runs the requests.
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                # httpx's expiry (5 s), vLLM's own keep-alive: a connection the server is
                # about to close is not reused.
                keepalive_timeout=self._limits.keepalive_expiry,
                ssl=httpx.create_ssl_context(),  # the certificates httpx would trust
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                # httpx decodes bodies and applies the timeouts; aiohttp's own 5-minute total
                # would cut a long measuring window short.
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(),
                trust_env=True,  # HTTP(S)_PROXY and NO_PROXY, as httpx and the openai SDK
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx keeps the cookies
            )
        return self._session
