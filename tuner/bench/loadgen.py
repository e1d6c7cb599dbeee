"""The load generator: streaming OpenAI-API requests over async httpx, one record per request.

Measurement hands it a client on :class:`~tuner.bench.transport.AiohttpTransport`; any httpx
client works.

Two loops:

- closed (``request_rate=None``): ``concurrency`` workers, each sending its next request as soon
  as the previous one ends, so exactly ``concurrency`` requests are in flight until the prompts
  (or the ``duration_s``) run out;
- open (``request_rate`` set): requests start at Poisson arrival times (exponential gaps drawn
  from ``seed``), at most ``concurrency`` in flight; a request held back by that cap starts, and
  is timed, when a slot frees.

Per request the stream's raw timeline is kept (:class:`~tuner.results.RequestRecord`): start,
the arrival of every chunk that carried text, the end. TTFT, gaps between chunks and TPOT are
derived from it. Token counts come only from the ``usage`` object the server sends last
(``stream_options.include_usage``): with speculative decoding one chunk can carry several tokens.
Where the server reports its own view of the request (vLLM started with
``--enable-per-request-metrics`` puts a ``metrics`` object on that last usage chunk; 0.32.0 to
0.34.0 were read to do so), its
``time_to_first_token_ms`` and ``queue_time_ms`` are kept beside the client's timeline
(``server_ttft_s``, ``server_queue_s``); other releases leave them None.

The prompts go out the same way whatever the release: ``api="chat"`` (the default) posts the
workload's ``messages`` to ``/v1/chat/completions`` and the server applies the model's chat
template; ``api="completions"`` posts the prompt text unchanged to ``/v1/completions``, with no
template at all. spectune never renders a chat template on the client, so unlike
``vllm bench serve`` (which stopped doing so for chat backends in 0.34) nothing here changes
between releases.

A failing request (HTTP error, timeout, refused connection, malformed SSE, a dropped stream)
becomes a record with a short ``error``; nothing is raised through the benchmark.

A request that times out before its first token means the server stopped answering: the run
stops there instead of waiting out every request's timeout. Requests in flight are cancelled
and the rest are not sent; each is recorded as failed with :data:`STALLED` in its error.

Replies end where the model ends them (capped by ``max_tokens``) unless ``ignore_eos`` forces
every reply to exactly ``max_tokens`` tokens, as capacity tests want.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx

from tuner.config.workload import PromptRequest
from tuner.results import RequestRecord

__all__ = ["STALLED", "Api", "build_payload", "run_load"]

Api = Literal["chat", "completions"]
_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_EXCERPT_CHARS = 200
STALLED = "server stopped answering"
"""In the error of every request a run gave up on after a request timed out with no token."""


def build_payload(
    model: str, request: PromptRequest, *, api: Api, temperature: float, ignore_eos: bool
) -> dict[str, Any]:
    """The JSON body of one streaming request.

    Args:
        model: the served model name.
        request: the prompt and its ``max_tokens``.
        api: ``"chat"`` sends ``messages``, ``"completions"`` sends ``prompt``.
        temperature: sampling temperature.
        ignore_eos: ask vLLM to generate exactly ``max_tokens`` tokens.

    Returns:
        A dict ready to be sent as JSON.
    """
    payload: dict[str, Any] = {"model": model}
    if api == "chat":
        payload["messages"] = request.chat_messages()
    else:
        payload["prompt"] = request.prompt
    payload.update(
        max_tokens=request.max_tokens,
        temperature=temperature,
        stream=True,
        stream_options={"include_usage": True},
    )
    if ignore_eos:
        payload["ignore_eos"] = True
    return payload


async def run_load(  # noqa: C901, PLR0913  (one keyword per load-generator setting, as bench passes them)
    client: httpx.AsyncClient,
    base_url: str,
    model: str,
    requests: Sequence[PromptRequest],
    *,
    concurrency: int,
    temperature: float,
    request_rate: float | None = None,
    duration_s: float | None = None,
    api: Api = "chat",
    request_timeout_s: float = 120.0,
    seed: int = 0,
    ignore_eos: bool = False,
) -> tuple[list[RequestRecord], float]:
    """Sends ``requests`` to an OpenAI-compatible server and records each one.

    Args:
        client: the HTTP client; its connection limit should allow ``concurrency`` connections.
        base_url: the server's ``http://host:port``.
        model: the served model name.
        requests: the prompts, sent in order; reused in a cycle when ``duration_s`` is set.
        concurrency: requests in flight (closed loop) or the cap on them (open loop).
        temperature: sampling temperature.
        request_rate: Poisson arrival rate in requests/s; None for a closed loop.
        duration_s: when set, keep starting requests until this many seconds have passed
            (requests in flight then still finish); otherwise send each request once.
        api: ``"chat"`` or ``"completions"``.
        request_timeout_s: limit on one request, from sending to the end of its stream.
        seed: seeds the arrival times of the open loop.
        ignore_eos: force completions to exactly ``max_tokens`` tokens (vLLM's ``ignore_eos``).

    Returns:
        The records in the order the requests were started (those left unsent after a stall
        included), and the wall time in seconds from the first start until every request had
        ended.

    Raises:
        ValueError: no requests, a concurrency below 1, a non-positive rate, or an unknown api.
    """
    if not requests:
        raise ValueError("run_load needs at least one request")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if request_rate is not None and request_rate <= 0:
        raise ValueError(f"request_rate must be > 0, got {request_rate}")
    if api not in _PATHS:
        raise ValueError(f"api must be 'chat' or 'completions', got {api!r}")
    url = base_url.rstrip("/") + _PATHS[api]
    begin = time.monotonic()
    source = _Source(requests, None if duration_s is None else begin + duration_s)
    results: dict[int, RequestRecord] = {}
    stall = _Stall()

    async def send(index: int, request: PromptRequest) -> None:
        payload = build_payload(
            model, request, api=api, temperature=temperature, ignore_eos=ignore_eos
        )
        results[index] = await stall.guard(_one_request(client, url, payload, request_timeout_s))

    async with asyncio.TaskGroup() as group:
        if request_rate is None:

            async def worker() -> None:
                while not stall.seen and (item := source.next()) is not None:
                    await send(*item)

            workers = concurrency if duration_s is not None else min(concurrency, len(requests))
            for _ in range(workers):
                group.create_task(worker())
        else:
            slots = asyncio.Semaphore(concurrency)
            arrivals = random.Random(seed)

            async def limited(index: int, request: PromptRequest) -> None:
                async with slots:
                    await send(index, request)

            next_arrival = begin
            while source.has_more() and not stall.seen:
                wake = (
                    next_arrival if source.deadline is None else min(next_arrival, source.deadline)
                )
                delay = wake - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                item = source.next()
                if item is None or stall.seen:
                    break
                group.create_task(limited(*item))
                next_arrival += arrivals.expovariate(request_rate)
    end = time.monotonic()
    if stall.seen and source.deadline is None:  # what was never sent failed too
        while (item := source.next()) is not None:
            results[item[0]] = RequestRecord(start=end, error=f"not sent: {STALLED}")
    return [results[i] for i in sorted(results)], end - begin


class _Stall:
    """Watches for a request that timed out with no token, then cancels those in flight."""

    def __init__(self) -> None:
        self.seen = False
        self._inflight: set[asyncio.Task[RequestRecord]] = set()

    async def guard(self, request: Coroutine[Any, Any, RequestRecord]) -> RequestRecord:
        started = time.monotonic()
        if self.seen:
            request.close()
            return RequestRecord(start=started, error=f"not sent: {STALLED}")
        task = asyncio.ensure_future(request)
        self._inflight.add(task)
        try:
            record = await task
        except asyncio.CancelledError:
            if not (self.seen and task.cancelled()):
                raise  # the run itself is being cancelled
            return RequestRecord(start=started, error=f"cancelled: {STALLED}")
        finally:
            self._inflight.discard(task)
        if record.first_token is None and (record.error or "").startswith("timed out"):
            self.seen = True
            for other in self._inflight:
                other.cancel()
            return replace(record, error=f"{record.error} with no token: {STALLED}")
        return record


@dataclass
class _Source:
    """Hands out (index, request) pairs: each once, or in a cycle until the deadline."""

    requests: Sequence[PromptRequest]
    deadline: float | None
    issued: int = 0

    def has_more(self) -> bool:
        if self.deadline is None:
            return self.issued < len(self.requests)
        return time.monotonic() < self.deadline

    def next(self) -> tuple[int, PromptRequest] | None:
        if not self.has_more():
            return None
        index = self.issued
        self.issued += 1
        return index, self.requests[index % len(self.requests)]


class _StreamError(Exception):
    """The stream said something a well-behaved server does not; ends the request."""


@dataclass
class _Stream:
    """What one SSE stream has told so far."""

    first_token: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    server_ttft_s: float | None = None
    server_queue_s: float | None = None
    done: bool = False

    def feed(self, line: str, now: float) -> None:
        """Takes one SSE line; ``data: [DONE]`` sets ``done``."""
        if not line.startswith("data:"):
            return  # blank separators, comments, event:/id:/retry: fields
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            raise _StreamError(f"malformed SSE data line: {data[:80]!r}") from None
        if not isinstance(event, dict):
            raise _StreamError(f"malformed SSE data line: {data[:80]!r}")
        if event.get("error") is not None or event.get("object") == "error":
            raise _StreamError(f"server error mid-stream: {_error_message(event)}")
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
            self.completion_tokens = _int_or_none(usage.get("completion_tokens"))
        metrics = event.get("metrics")
        if isinstance(metrics, dict):  # --enable-per-request-metrics: on the usage chunk, ms
            self.server_ttft_s = _seconds_or_none(metrics.get("time_to_first_token_ms"))
            self.server_queue_s = _seconds_or_none(metrics.get("queue_time_ms"))
        if any(_choice_text(choice) for choice in event.get("choices") or ()):
            self.chunk_times.append(now)
            if self.first_token is None:
                self.first_token = now

    def record(self, start: float, end: float | None, error: str | None) -> RequestRecord:
        return RequestRecord(
            start=start,
            first_token=self.first_token,
            end=end if error is None else None,
            chunk_times=tuple(self.chunk_times),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            error=error,
            server_ttft_s=self.server_ttft_s,
            server_queue_s=self.server_queue_s,
        )


def _choice_text(choice: Any) -> str:
    if not isinstance(choice, dict):
        return ""
    if isinstance(choice.get("text"), str):
        return str(choice["text"])
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return ""
    for key in ("content", "reasoning_content", "reasoning"):
        if isinstance(delta.get(key), str) and delta[key]:
            return str(delta[key])
    return ""


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds_or_none(milliseconds: Any) -> float | None:
    """A duration the server sent in ms, in seconds; None for anything but a finite number."""
    if not isinstance(milliseconds, int | float) or isinstance(milliseconds, bool):
        return None
    return milliseconds / 1000.0 if math.isfinite(milliseconds) else None


def _error_message(body: Any) -> str:
    """The message of an OpenAI/vLLM error object, else the body itself, shortened."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _excerpt(error["message"])
        if isinstance(error, str):
            return _excerpt(error)
    return _excerpt(json.dumps(body) if not isinstance(body, str) else body)


def _describe(exc: Exception) -> str:
    return _excerpt(str(exc)) or type(exc).__name__


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT_CHARS else flat[: _EXCERPT_CHARS - 3] + "..."


async def _http_error(response: httpx.Response) -> str:
    body = (await response.aread()).decode("utf-8", errors="replace")
    try:
        message = _error_message(json.loads(body))
    except json.JSONDecodeError:
        message = _excerpt(body) or response.reason_phrase
    return f"HTTP {response.status_code}: {message}"


async def _one_request(
    client: httpx.AsyncClient, url: str, payload: dict[str, Any], timeout_s: float
) -> RequestRecord:
    """Streams one request; every failure ends up in the record, never raised."""
    stream = _Stream()
    start = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=payload) as response:
                if response.status_code >= 400:
                    return stream.record(start, None, await _http_error(response))
                async for line in response.aiter_lines():
                    stream.feed(line, time.monotonic())
                    if stream.done:
                        break
        end = time.monotonic()
    except TimeoutError:
        return stream.record(start, None, f"timed out after {timeout_s:g} s")
    except _StreamError as exc:
        return stream.record(start, None, str(exc))
    except httpx.TimeoutException as exc:
        return stream.record(start, None, f"timed out ({type(exc).__name__}) on {url}")
    except httpx.ConnectError as exc:
        return stream.record(start, None, f"cannot connect to {url}: {_describe(exc)}")
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        where = "mid-stream" if stream.chunk_times else "before any output"
        return stream.record(start, None, f"connection dropped {where}: {_describe(exc)}")
    except httpx.HTTPError as exc:
        return stream.record(start, None, f"{type(exc).__name__} on {url}: {_describe(exc)}")
    if stream.completion_tokens is None:
        why = "no usage in the stream (does the server honour stream_options.include_usage?)"
        if not stream.done:
            why = "stream ended before [DONE] and without usage"
        return stream.record(start, None, why)
    return stream.record(start, end, None)
