"""The fake server's HTTP side and step loop (its process: :mod:`tuner.sim.server.run`).

``python -m tuner.sim.server [serve] MODEL [vLLM flags]`` takes vLLM's own flags (see
:mod:`tuner.sim.server.args`), sizes memory with :func:`~tuner.sim.memory.estimate_memory` and
fails start-up with vLLM's messages and exit status 1 when the config would not fit, then
serves ``/health``, ``/v1/models``, ``/metrics`` (vLLM V1 names) and streaming or plain
``/v1/chat/completions`` and ``/v1/completions`` through ``aiohttp.web``
(:mod:`~tuner.sim.server.openai`, :mod:`~tuner.sim.server.live`). Every launcher and benchmark
failure path can be exercised in seconds with ``--sim-fault`` (:mod:`~tuner.sim.server.faults`);
the stream faults are applied here.

Timing: one step task drives the :class:`~tuner.sim.scheduler.Scheduler`. Each ``step()`` returns
the simulated duration of one vLLM iteration; the task sleeps until the step's end on a real-time
clock running ``--sim-speed`` times faster than simulated time (a deadline, so the server's own
overhead does not add up), then sends each request the tokens it got in that step as one SSE
chunk: one token per chunk without speculation, ``1 + accepted drafts`` with it. Requests that
arrive while a step runs join the next step, as in vLLM. ``--sim-speed inf`` never sleeps and
instead waits for slow readers, so the client is the bottleneck (load generator benchmarks).

SIGTERM or SIGINT stop it within milliseconds with exit status 0 (SIGTERM not with the
``ignore-sigterm`` fault); the requests in flight are cut, as a dying vLLM leaves them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tuner.config.trial import load_draft
from tuner.config.vllm_args import PER_REQUEST_METRICS_SINCE
from tuner.sim.answers import answer_text, lossy_share
from tuner.sim.power import power_model
from tuner.sim.scheduler import Scheduler, StepResult
from tuner.sim.server.args import ServeArgs
from tuner.sim.server.gpu import GpuTrace
from tuner.sim.server.live import Ending, Live, stream_faults
from tuner.sim.server.metrics import CONTENT_TYPE, ServerCounters, ServerMetrics
from tuner.sim.server.openai import (
    DONE_EVENT,
    CompletionParams,
    RequestError,
    StreamFormat,
    completion_body,
    error_body,
    parse_completion,
    request_metrics,
    token_words,
)
from tuner.sim.server.startup import SIMULATED_BANNER, crash, log

__all__ = ["SIMULATED_BANNER", "FakeServer"]

_MAX_BODY_BYTES = 64 * 1024 * 1024  # long-context prompts are a few hundred KB at most
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
# After a signal, how long the connections get to close once their requests are cut.
_SHUTDOWN_S = 1.0
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(status: int, data: Any) -> web.Response:
    """A JSON response, compact and without a charset, like FastAPI's."""
    body = json.dumps(data, separators=(",", ":")).encode()
    return web.Response(status=status, body=body, content_type="application/json")


@web.middleware
async def _fastapi_errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Unknown paths and methods answered as vLLM's FastAPI answers them."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _json(404, {"detail": "Not Found"})
    except web.HTTPMethodNotAllowed:
        return _json(405, {"detail": "Method Not Allowed"})


class FakeServer:
    """The HTTP server and the step loop behind it.

    Args:
        args: the parsed command line.
        scheduler: the scheduler built by :func:`start_scheduler`.
    """

    def __init__(self, args: ServeArgs, scheduler: Scheduler) -> None:
        self.args = args
        self.scheduler = scheduler
        self.faults = args.sim.faults
        self.counters = ServerCounters()
        power = power_model(args.sim.hardware.gpu)
        # What its GPUs draw, for the tests' NVML stand-in (None: no board power to model).
        self.gpu = None if power is None else GpuTrace(power, time.monotonic())
        self.metrics = ServerMetrics(args.served_names[0], scheduler, self.counters, self.gpu)
        self.live: dict[int, Live] = {}
        self._ids = itertools.count()
        self._completions = 0  # completion requests seen, for http-500-every
        self._streams = 0  # streams started, for the stream faults' -every=N
        self._loose: dict[str, float] = {}  # prompt set -> share of lossy tokens (fly)
        self._hung = self.faults.hang_after == 0
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()

    async def serve(self) -> int:
        """Listens until SIGTERM/SIGINT; returns the exit status (1 when the port is taken)."""
        loop = asyncio.get_running_loop()
        ignored = (signal.SIGTERM,) if self.faults.ignore_sigterm else ()
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signum not in ignored:
                loop.add_signal_handler(signum, self._stop.set)
        runner = web.AppRunner(
            self._app(), handle_signals=False, access_log=None, shutdown_timeout=_SHUTDOWN_S
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, self.args.host, self.args.port).start()
        except OSError as exc:
            log("ERROR", str(exc))  # "[Errno 98] ... address already in use": launchers retry
            await runner.cleanup()
            return 1
        log(
            "INFO",
            f"Starting vLLM API server 0 on http://{self.args.host or '0.0.0.0'}:{self.args.port}",
        )
        log("INFO", "Application startup complete.")
        step_task = asyncio.create_task(self._step_loop())
        await self._stop.wait()
        log("INFO", "Shutting down (signal received)")
        step_task.cancel()
        await asyncio.gather(step_task, return_exceptions=True)
        for live in list(self.live.values()):
            self._abort(live, Ending.CUT)  # no scheduler, no answers
        await runner.cleanup()
        return 0

    # -- HTTP -------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(
            middlewares=[_fastapi_errors, self._authorize], client_max_size=_MAX_BODY_BYTES
        )
        # As in vLLM, no HEAD routes: HEAD is a method the server does not allow.
        app.router.add_get("/health", self._health, allow_head=False)
        app.router.add_get("/ping", self._health, allow_head=False)
        app.router.add_get("/version", self._version, allow_head=False)
        app.router.add_get("/metrics", self._metrics, allow_head=False)
        app.router.add_get("/v1/models", self._models, allow_head=False)
        app.router.add_post("/v1/chat/completions", self._completion)
        app.router.add_post("/v1/completions", self._completion)
        return app

    @web.middleware
    async def _authorize(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """As in vLLM, only the ``/v1`` routes need the API key."""
        key = self.args.api_key
        if (
            key
            and request.path.startswith("/v1/")
            and request.match_info.http_exception is None  # unknown paths stay 404
            and request.headers.get("Authorization") != f"Bearer {key}"
        ):
            return _json(401, {"error": "Unauthorized"})
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(body=b"", content_type="application/json")

    async def _version(self, request: web.Request) -> web.Response:
        return _json(200, {"version": str(self.args.sim.vllm_version)})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def _models(self, request: web.Request) -> web.Response:
        created = int(time.time())
        server = self.args.server
        listing = {
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
        return _json(200, listing)

    def _admit(self, body: bytes, chat: bool) -> tuple[int, CompletionParams]:
        """Validates a completion request and queues it in the scheduler.

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
            self.scheduler.add_request(
                rid, params.prompt_tokens, max_tokens, params.temperature, params.prompt_set
            )
        except ValueError as exc:  # longer than max_model_len
            raise RequestError(400, "BadRequestError", str(exc)) from None
        self.counters.prompt_tokens += params.prompt_tokens
        return rid, params

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        chat = request.path == "/v1/chat/completions"
        try:
            rid, params = self._admit(await request.read(), chat)
        except RequestError as exc:
            return _json(exc.status, error_body(exc.status, exc.kind, str(exc), exc.param))
        request_id = f"{'chatcmpl' if chat else 'cmpl'}-sim{rid:06d}"
        model = params.model or self.args.served_names[0]
        live = Live(rid, params, request_id, request, arrived=asyncio.get_running_loop().time())
        response = None
        if params.stream:
            self._streams += 1
            live.faults = stream_faults(self.faults, self._streams)
            live.stream = StreamFormat(params, request_id, model)
            response = web.StreamResponse(headers=_SSE_HEADERS)
        self.live[rid] = live
        self._wake.set()
        ending = await live.answer(response)
        if ending is Ending.CUT:
            if request.transport is not None:
                request.transport.abort()  # without the chunked body's end, or any answer
            # aiohttp's attempt to finish the response meets the closed connection, and stops.
            return response or web.Response()
        if response is not None:
            return response
        body = completion_body(
            params,
            request_id,
            model,
            live.sent,
            self._text(params, 0, live.sent),
            self._request_metrics(live),
            with_metrics_key=self.args.sim.vllm_version >= PER_REQUEST_METRICS_SINCE,
        )
        return _json(200, body)

    def _text(self, params: CompletionParams, start: int, count: int) -> str:
        """Tokens ``start`` onwards of the answer, a lossy verifier's changes included."""
        loose = self._loose.get(params.prompt_set)
        if loose is None:
            server = self.scheduler.server
            loose = lossy_share(
                self.scheduler.target, load_draft(server), server, params.prompt_set
            )
            self._loose[params.prompt_set] = loose
        return answer_text(params.prompt, start, token_words(start, count), loose)

    def _request_metrics(self, live: Live) -> dict[str, float | None] | None:
        """The ``metrics`` vLLM would put in the answer; None where it would put none.

        The clock is the server's own (real seconds, as vLLM's), so under ``--sim-speed`` other
        than 1 the durations are the sped-up ones the client sees too. A request counts as
        scheduled when the step that gave it its first token began: a prompt prefilled over
        several steps counts the earlier ones as queue.
        """
        if not self.args.per_request_metrics or live.scheduled is None:
            return None
        first = live.first_token if live.first_token is not None else live.scheduled
        last = live.last_token if live.last_token is not None else first
        return request_metrics(live.arrived, live.scheduled, first, last, live.sent)

    # -- the step loop ----------------------------------------------------------------------

    async def _step_loop(self) -> None:
        try:
            await self._step_forever()
        except Exception as exc:  # a dead scheduler must not leave a server that only hangs
            crash(f"{type(exc).__name__}: {exc}")

    async def _step_forever(self) -> None:
        loop = asyncio.get_running_loop()
        speed = self.args.sim.speed
        clock = loop.time()
        while True:
            if self._hung or not self.scheduler.has_work:
                if self.gpu is not None:
                    self.gpu.idle(loop.time())
                self._wake.clear()
                await self._wake.wait()
                clock = loop.time()  # an idle scheduler starts the next step at once
                continue
            began = loop.time()
            result = self.scheduler.step()
            if not math.isinf(speed):
                began = max(began, clock)  # the step starts when the previous one ended
                clock += result.duration_s / speed
                await asyncio.sleep(max(0.0, clock - loop.time()))
            if self.gpu is not None and result.shape is not None:
                work = self.scheduler.model.step_work(result.shape)
                self.gpu.step(work, result.duration_s, began, loop.time())
            self._deliver(result, began)
            # The answers go out, and new requests come in, before the next step is worked out.
            await asyncio.sleep(0)
            if math.isinf(speed):
                await self._wait_for_readers()

    def _deliver(self, result: StepResult, began: float | None = None) -> None:
        """Sends each request the tokens of one step (which began at ``began`` on the event
        loop's clock; None: now); finishes and aborts requests."""
        now = asyncio.get_running_loop().time()
        finished = set(result.finished)
        for rid, count in result.emitted.items():
            live = self.live.get(rid)
            if live is None:
                continue
            if live.scheduled is None:
                live.scheduled = min(now, began) if began is not None else now
                live.first_token = now
            live.last_token = now
            if live.stream is not None:
                if live.gone():
                    self._abort(live, Ending.CUT)
                    continue
                self._send(live, live.stream, count, rid in finished)
            else:
                live.sent += count
            self.counters.generation_tokens += count
        for rid in result.finished:
            done = self.live.pop(rid, None)
            if done is not None:
                self.counters.finished += 1
                done.end(Ending.COMPLETE)
        self._check_token_faults()

    def _send(self, live: Live, stream: StreamFormat, count: int, last: bool) -> None:
        events = []
        first = live.sent == 0
        if first and stream.chat:
            events.append(stream.role_event())
        events.append(stream.token_event(self._text(live.params, live.sent, count), last))
        live.sent += count
        self.counters.stream_chunks += 1
        if first and "malformed_sse_every" in live.faults:
            events.append(stream.malformed_event())
        if first and "error_event_every" in live.faults:  # vLLM's answer to a failed request
            events += [stream.error_event("EngineCore encountered an issue"), DONE_EVENT]
        elif last:
            if live.params.include_usage and "no_usage_every" not in live.faults:
                metrics = self._request_metrics(live)
                events.append(stream.usage_event(live.params.prompt_tokens, live.sent, metrics))
            events.append(DONE_EVENT)
        for event in events:
            live.send(event)
        if first and "error_event_every" in live.faults:
            self._abort(live, Ending.COMPLETE)
        elif first and not last and "drop_every" in live.faults:
            self._abort(live, Ending.CUT)  # mid-stream

    def _abort(self, live: Live, ending: Ending) -> None:
        """Drops ``live`` from the scheduler; its answer ends as ``ending`` says."""
        self.live.pop(live.rid, None)
        self.scheduler.abort_request(live.rid)
        live.end(ending)

    async def _wait_for_readers(self) -> None:
        """Under ``--sim-speed inf``: let readers that fell behind catch up before stepping."""
        for live in list(self.live.values()):
            await live.catch_up()

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
            log("WARNING", f"simulated fault --sim-fault hang-after={hang}: the scheduler hangs")
