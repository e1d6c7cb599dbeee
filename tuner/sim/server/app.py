"""The fake server's HTTP side and engine loop (its process: :mod:`tuner.sim.server.run`).

``python -m tuner.sim.server [serve] MODEL [vLLM flags]`` takes vLLM's own flags (see
:mod:`tuner.sim.server.args`), sizes memory with :func:`~tuner.sim.memory.estimate_memory` and
fails start-up with vLLM's messages and exit status 1 when the config would not fit, then
serves ``/health``, ``/v1/models``, ``/metrics`` (vLLM V1 names) and streaming or plain
``/v1/chat/completions`` and ``/v1/completions`` over asyncio (:mod:`~tuner.sim.server.http`,
:mod:`~tuner.sim.server.openai`). Every launcher and benchmark failure path can be exercised in
seconds with ``--sim-fault`` (:mod:`~tuner.sim.server.faults`); the stream faults are applied
here.

Timing: one engine task drives the :class:`~tuner.sim.scheduler.Engine`. Each ``step()`` returns
the simulated duration of one vLLM iteration; the task sleeps until the step's end on a real-time
clock running ``--sim-speed`` times faster than simulated time (a deadline, so the server's own
overhead does not add up), then sends each request the tokens it got in that step as one SSE
chunk: one token per chunk without speculation, ``1 + accepted drafts`` with it. Requests that
arrive while a step runs join the next step, as in vLLM. ``--sim-speed inf`` never sleeps and
instead waits for slow readers, so the client is the bottleneck (load generator benchmarks).

SIGTERM or SIGINT stop it within milliseconds with exit status 0 (SIGTERM not with the
``ignore-sigterm`` fault).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import signal
import time

from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.sim.scheduler import Engine, StepResult
from tuner.sim.server.args import ServeArgs
from tuner.sim.server.http import (
    LAST_CHUNK,
    SSE_HEAD,
    BadRequest,
    HttpRequest,
    chunk,
    json_response,
    read_request,
    response,
)
from tuner.sim.server.live import Live, stream_faults
from tuner.sim.server.metrics import ServerCounters, render_metrics
from tuner.sim.server.openai import (
    DONE_EVENT,
    CompletionParams,
    RequestError,
    StreamFormat,
    completion_body,
    error_body,
    parse_completion,
    token_text,
)
from tuner.sim.server.startup import crash, log

__all__ = ["SIMULATED_BANNER", "FakeServer"]

SIMULATED_BANNER = "SIMULATED vLLM server (spectune tuner.sim.server): no GPU, no model weights"
# A reader this far behind (bytes queued) holds up the engine under --sim-speed inf.
_BACKLOG_BYTES = 256 * 1024
# Path -> method; as in vLLM, only the /v1 paths need the API key.
_ROUTES = {
    "/health": "GET",
    "/ping": "GET",
    "/version": "GET",
    "/metrics": "GET",
    "/v1/models": "GET",
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
}


class FakeServer:
    """The HTTP server and the engine loop behind it.

    Args:
        args: the parsed command line.
        engine: the engine built by :func:`start_engine`.
    """

    def __init__(self, args: ServeArgs, engine: Engine) -> None:
        self.args = args
        self.engine = engine
        self.faults = args.sim.faults
        self.counters = ServerCounters()
        self.live: dict[int, Live] = {}
        self._ids = itertools.count()
        self._completions = 0  # completion requests seen, for http-500-every
        self._streams = 0  # streams started, for the stream faults' -every=N
        self._hung = self.faults.hang_after == 0
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._connections: set[asyncio.Task[None]] = set()

    async def serve(self) -> int:
        """Listens until SIGTERM/SIGINT; returns the exit status (1 when the port is taken)."""
        loop = asyncio.get_running_loop()
        ignored = (signal.SIGTERM,) if self.faults.ignore_sigterm else ()
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signum not in ignored:
                loop.add_signal_handler(signum, self._stop.set)
        try:
            server = await asyncio.start_server(self._connection, self.args.host, self.args.port)
        except OSError as exc:
            log("ERROR", str(exc))  # "[Errno 98] ... address already in use": launchers retry
            return 1
        log(
            "INFO",
            f"Starting vLLM API server 0 on http://{self.args.host or '0.0.0.0'}:{self.args.port}",
        )
        log("INFO", "Application startup complete.")
        engine_task = asyncio.create_task(self._engine_loop())
        await self._stop.wait()
        log("INFO", "Shutting down (signal received)")
        server.close()
        engine_task.cancel()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(engine_task, *self._connections, return_exceptions=True)
        return 0

    # -- HTTP -------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                try:
                    request = await read_request(reader)
                except BadRequest as exc:
                    body = error_body(400, "BadRequestError", str(exc))
                    writer.write(json_response(400, body, close=True))
                    break
                if request is None:
                    break
                keep = await self._route(request, reader, writer)
                await writer.drain()
                if not (keep and request.keep_alive):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            self._connections.discard(task)
            writer.close()

    async def _route(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answers one request; returns whether the connection may carry another."""
        path, method = request.path, request.method
        if path not in _ROUTES:
            writer.write(json_response(404, {"detail": "Not Found"}))
            return True
        if _ROUTES[path] != method:
            writer.write(json_response(405, {"detail": "Method Not Allowed"}))
            return True
        key = self.args.api_key
        if (
            key
            and path.startswith("/v1/")
            and request.headers.get("authorization") != (f"Bearer {key}")
        ):
            writer.write(json_response(401, {"error": "Unauthorized"}))
            return True
        if path in ("/health", "/ping"):
            writer.write(response(200, b"", "application/json"))
        elif path == "/version":
            writer.write(json_response(200, {"version": str(NEWEST_KNOWN)}))
        elif path == "/metrics":
            writer.write(
                response(
                    200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8"
                )
            )
        elif path == "/v1/models":
            writer.write(json_response(200, self._models()))
        else:
            return await self._completion(request, reader, writer)
        return True

    def _models(self) -> dict[str, object]:
        created = int(time.time())
        server = self.args.server
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": server.model,
                    "parent": None,
                    "max_model_len": server.max_model_len,
                    "permission": [],
                }
                for name in self.args.served_names
            ],
        }

    def metrics_text(self) -> str:
        """The current ``/metrics`` body."""
        engine = self.engine
        return render_metrics(
            self.args.served_names[0],
            running=len(engine.running),
            waiting=len(engine.waiting),
            kv_usage=engine.kv_usage,
            preemptions=engine.preemptions,
            counters=self.counters,
            spec=engine.spec_stats(),
        )

    def _admit(self, body: bytes, chat: bool) -> tuple[int, CompletionParams]:
        """Validates a completion request and queues it in the engine.

        Raises:
            RequestError: what vLLM answers instead (400, 404; 500 for the injected fault).
        """
        params = parse_completion(body, chat)
        if params.model is not None and params.model not in self.args.served_names:
            raise RequestError(
                404, "NotFoundError", f"The model `{params.model}` does not exist.", "model"
            )
        self._completions += 1
        every = self.faults.http_500_every
        if every and self._completions % every == 0:
            raise RequestError(
                500, "InternalServerError", f"simulated fault (--sim-fault http-500-every={every})"
            )
        limit = self.args.server.max_model_len
        max_tokens = params.max_tokens or max(1, limit - params.prompt_tokens)
        rid = next(self._ids)
        try:
            self.engine.add_request(
                rid, params.prompt_tokens, max_tokens, params.temperature, params.prompt_set
            )
        except ValueError as exc:  # longer than max_model_len
            raise RequestError(400, "BadRequestError", str(exc)) from None
        self.counters.prompt_tokens += params.prompt_tokens
        return rid, params

    async def _completion(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        chat = request.path == "/v1/chat/completions"
        try:
            rid, params = self._admit(request.body, chat)
        except RequestError as exc:
            writer.write(
                json_response(exc.status, error_body(exc.status, exc.kind, str(exc), exc.param))
            )
            return True
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-sim{rid:06d}"
        model = params.model or self.args.served_names[0]
        live = Live(
            rid, params, request_id, reader, writer, asyncio.get_running_loop().create_future()
        )
        if params.stream:
            self._streams += 1
            live.faults = stream_faults(self.faults, self._streams)
            live.stream = StreamFormat(params, request_id, model)
            writer.write(SSE_HEAD)
        self.live[rid] = live
        self._wake.set()
        finished = await live.done
        if finished and live.stream is None:
            body = completion_body(params, request_id, model, live.sent)
            writer.write(json_response(200, body))
        return finished

    # -- the engine -------------------------------------------------------------------------

    async def _engine_loop(self) -> None:
        try:
            await self._step_forever()
        except Exception as exc:  # a dead engine must not leave a server that only hangs
            crash(f"{type(exc).__name__}: {exc}")

    async def _step_forever(self) -> None:
        loop = asyncio.get_running_loop()
        speed = self.args.sim.speed
        clock = loop.time()
        while True:
            if self._hung or not self.engine.has_work:
                self._wake.clear()
                await self._wake.wait()
                clock = loop.time()  # an idle engine starts the next step at once
                continue
            result = self.engine.step()
            if math.isinf(speed):
                await asyncio.sleep(0)  # let the connections run
            else:
                clock += result.duration_s / speed
                await asyncio.sleep(max(0.0, clock - loop.time()))
            self._deliver(result)
            if math.isinf(speed):
                await self._wait_for_readers()

    def _deliver(self, result: StepResult) -> None:
        """Sends each request the tokens of one step; finishes and aborts requests."""
        finished = set(result.finished)
        for rid, count in result.emitted.items():
            live = self.live.get(rid)
            if live is None:
                continue
            if live.stream is not None:
                if live.gone():
                    self._abort(live)
                    continue
                self._send(live, live.stream, count, rid in finished)
            else:
                live.sent += count
            self.counters.generation_tokens += count
        for rid in result.finished:
            done = self.live.pop(rid, None)
            if done is not None:
                self.counters.finished += 1
                if not done.done.done():
                    done.done.set_result(True)
        self._check_token_faults()

    def _send(self, live: Live, stream: StreamFormat, count: int, last: bool) -> None:
        events = []
        first = live.sent == 0
        if first and stream.chat:
            events.append(stream.role_event())
        events.append(stream.token_event(token_text(live.sent, count), last))
        live.sent += count
        self.counters.stream_chunks += 1
        if first and "malformed_sse_every" in live.faults:
            events.append(stream.malformed_event())
        if first and "error_event_every" in live.faults:  # vLLM's answer to a failed request
            events += [stream.error_event("EngineCore encountered an issue"), DONE_EVENT]
            last = True
            self._abort(live, finished=True)
        elif last:
            if live.params.include_usage and "no_usage_every" not in live.faults:
                events.append(stream.usage_event(live.params.prompt_tokens, live.sent))
            events.append(DONE_EVENT)
        data = b"".join(chunk(event) for event in events)
        live.writer.write(data + LAST_CHUNK if last else data)
        if first and not last and "drop_every" in live.faults:
            live.writer.transport.abort()  # mid-stream, without the chunked body's end
            self._abort(live)

    def _abort(self, live: Live, *, finished: bool = False) -> None:
        """Drops ``live`` from the engine; ``finished``: its answer is complete nonetheless."""
        self.live.pop(live.rid, None)
        self.engine.abort_request(live.rid)
        if not live.done.done():
            live.done.set_result(finished)

    async def _wait_for_readers(self) -> None:
        """Under ``--sim-speed inf``: let readers that fell behind catch up before stepping."""
        for live in list(self.live.values()):
            transport = live.writer.transport
            if transport.is_closing() or transport.get_write_buffer_size() < _BACKLOG_BYTES:
                continue
            with contextlib.suppress(ConnectionError):
                await live.writer.drain()

    def _check_token_faults(self) -> None:
        sent = self.counters.generation_tokens
        crash_after, hang = self.faults.crash_after, self.faults.hang_after
        if crash_after is not None and sent >= crash_after:
            crash(
                "RuntimeError: CUDA error: an illegal memory access was encountered "
                f"(simulated fault --sim-fault crash-after={crash_after})"
            )
        if hang is not None and sent >= hang and not self._hung:
            self._hung = True
            log("WARNING", f"simulated fault --sim-fault hang-after={hang}: the engine hangs")
