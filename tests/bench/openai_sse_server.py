"""A small, real OpenAI-compatible streaming server for the bench tests.

It runs an asyncio HTTP/1.1 server on 127.0.0.1 (port 0) in a background thread and speaks
enough of vLLM's API for the load generator: ``/health``, ``/v1/models``, ``/metrics`` (V1 or V0
names, or none) and streaming or plain ``/v1/chat/completions`` and ``/v1/completions`` with the
usage in the last chunk. Each chunk can carry several tokens, as with speculative decoding.

Faults are chosen per request by a ``FAULT:<name>`` marker in the prompt, or for every request
with ``fault=``: ``http500``, ``malformed``, ``drop`` (connection closed mid-stream), ``hang``,
``error_event`` (an error object mid-stream), ``no_usage``. A request for another model gets
vLLM's 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

# What each successful request adds to the speculative-decoding counters.
DRAFTS_PER_REQUEST = 10
DRAFT_TOKENS_PER_REQUEST = 30
ACCEPTED_PER_POSITION = (8, 6, 4)
ACCEPTED_PER_REQUEST = sum(ACCEPTED_PER_POSITION)
KV_PER_REQUEST_IN_FLIGHT = 0.1

_FAULT = re.compile(r"FAULT:(\w+)")
_REASONS = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}


@dataclass
class Counters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=lambda: [0] * len(ACCEPTED_PER_POSITION))
    preemptions: int = 0


class FakeOpenAIServer:
    """The server; use as a context manager, read ``base_url``."""

    def __init__(
        self,
        *,
        model: str = "test-model",
        tokens_per_chunk: int = 1,
        ttft_s: float = 0.005,
        chunk_delay_s: float = 0.001,
        metrics: str = "v1",
        fault: str | None = None,
    ) -> None:
        self.model = model
        self.tokens_per_chunk = tokens_per_chunk
        self.ttft_s = ttft_s
        self.chunk_delay_s = chunk_delay_s
        self.metrics = metrics  # "v1" | "v0" | "nospec" | "none"
        self.fault = fault
        self.counters = Counters()
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrivals: list[float] = []  # time.monotonic() of each streaming request
        self.payloads: list[dict[str, Any]] = []  # every completion request body
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        future.result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    break
                method, path, _ = request_line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    key, value = line.decode().split(":", 1)
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if not await self._route(method, path.split("?")[0], body, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str
    ) -> bool:
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        return True

    async def _json(self, writer: asyncio.StreamWriter, status: int, data: Any) -> bool:
        return await self._respond(writer, status, json.dumps(data).encode(), "application/json")

    async def _route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path == "/health":
            return await self._respond(writer, 200, b"", "text/plain")
        if method == "GET" and path == "/v1/models":
            data = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            return await self._json(writer, 200, data)
        if method == "GET" and path == "/metrics":
            if self.metrics == "none":
                return await self._json(writer, 404, {"detail": "Not Found"})
            return await self._respond(writer, 200, self.metrics_text().encode(), "text/plain")
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            payload = json.loads(body)
            self.payloads.append(payload)
            if payload.get("model") != self.model:
                message = f"The model `{payload.get('model')}` does not exist."
                error = {"message": message, "type": "NotFoundError", "code": 404}
                return await self._json(writer, 404, {"error": error})
            chat = path.endswith("chat/completions")
            if payload.get("stream"):
                return await self._stream(payload, chat, writer)
            return await self._plain(payload, chat, writer)
        return await self._json(writer, 404, {"detail": "Not Found"})

    def _fault_of(self, payload: dict[str, Any]) -> str | None:
        match = _FAULT.search(json.dumps(payload.get("messages") or payload.get("prompt")))
        return match.group(1) if match else self.fault

    async def _plain(
        self, payload: dict[str, Any], chat: bool, writer: asyncio.StreamWriter
    ) -> bool:
        if self._fault_of(payload) == "http500":
            return await self._json(writer, 500, {"error": {"message": "injected failure"}})
        n = int(payload.get("max_tokens") or 16)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": "tok " * n}
        else:
            choice["text"] = "tok " * n
        usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
        data = {
            "id": "cmpl-1",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [choice],
            "usage": usage,
        }
        return await self._json(writer, 200, data)

    async def _stream(
        self, payload: dict[str, Any], chat: bool, writer: asyncio.StreamWriter
    ) -> bool:
        fault = self._fault_of(payload)
        self.arrivals.append(time.monotonic())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        finished = False
        try:
            if fault == "http500":
                return await self._json(writer, 500, {"error": {"message": "injected failure"}})
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            await asyncio.sleep(self.ttft_s)
            prompt_tokens = len(json.dumps(payload.get("messages") or payload.get("prompt"))) // 4
            n = int(payload["max_tokens"])
            if chat:
                await self._event(writer, self._chunk(chat, "", role=True))
            sent = 0
            while sent < n:
                k = min(self.tokens_per_chunk, n - sent)
                await self._event(writer, self._chunk(chat, "tok " * k))
                sent += k
                if sent >= n // 2 and fault in ("drop", "malformed", "hang", "error_event"):
                    if fault == "drop":
                        writer.transport.abort()
                        return False
                    if fault == "malformed":
                        await self._write_chunk(writer, b"data: {not json\n\n")
                    if fault == "error_event":
                        error = {"error": {"message": "engine core died", "code": 500}}
                        await self._event(writer, error)
                    if fault == "hang":
                        await asyncio.sleep(3600)
                    fault = None
                await asyncio.sleep(self.chunk_delay_s)
            await self._event(writer, self._chunk(chat, "", finish="length"))
            finished = True
            self._count_success()
            if fault != "no_usage":
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": n,
                    "total_tokens": prompt_tokens + n,
                }
                await self._event(writer, {"id": "c", "choices": [], "usage": usage})
            await self._write_chunk(writer, b"data: [DONE]\n\n")
            await self._write_chunk(writer, b"")
            return True
        finally:
            if not finished:
                self.in_flight -= 1

    def _count_success(self) -> None:
        # Leave the in-flight count before the last bytes go out, so a closed-loop client
        # that starts its next request on [DONE] is never counted twice.
        self.in_flight -= 1
        c = self.counters
        c.drafts += DRAFTS_PER_REQUEST
        c.draft_tokens += DRAFT_TOKENS_PER_REQUEST
        c.accepted += ACCEPTED_PER_REQUEST
        c.per_position = [a + b for a, b in zip(c.per_position, ACCEPTED_PER_POSITION, strict=True)]
        c.preemptions += 1

    def _chunk(
        self, chat: bool, text: str, *, role: bool = False, finish: str | None = None
    ) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"content": text}
            if role:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        kind = "chat.completion.chunk" if chat else "text_completion"
        return {"id": "c", "object": kind, "model": self.model, "choices": [choice], "usage": None}

    async def _event(self, writer: asyncio.StreamWriter, data: dict[str, Any]) -> None:
        await self._write_chunk(writer, f"data: {json.dumps(data)}\n\n".encode())

    async def _write_chunk(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    def metrics_text(self) -> str:
        """The /metrics body for the configured name generation."""
        c = self.counters
        v1 = self.metrics == "v1"
        labels = f'engine="0",model_name="{self.model}"' if v1 else f'model_name="{self.model}"'
        kv = min(1.0, self.in_flight * KV_PER_REQUEST_IN_FLIGHT)
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {float(self.in_flight)}",
            "# TYPE vllm:num_preemptions counter",
            f"vllm:num_preemptions_total{{{labels}}} {float(c.preemptions)}",
            f"vllm:num_preemptions_created{{{labels}}} 1.7e+09",
            f"vllm:{'kv' if v1 else 'gpu'}_cache_usage_perc{{{labels}}} {kv}",
        ]
        if self.metrics == "v1":
            lines += [
                "# TYPE vllm:spec_decode_num_drafts counter",
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(c.drafts)}",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(c.draft_tokens)}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(c.accepted)}",
            ]
            for position, value in enumerate(c.per_position):
                lines.append(
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                    f'{{{labels},position="{position}"}} {float(value)}'
                )
        elif self.metrics == "v0":
            rate = c.accepted / c.draft_tokens if c.draft_tokens else 0.0
            lines += [
                f"vllm:spec_decode_draft_acceptance_rate{{{labels}}} {rate}",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(c.draft_tokens)}",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(c.accepted)}",
                "vllm:spec_decode_num_emitted_tokens_total"
                f"{{{labels}}} {float(c.accepted + c.drafts)}",
            ]
        return "\n".join(lines) + "\n"
