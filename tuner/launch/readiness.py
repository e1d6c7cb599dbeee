"""Waiting for a starting vLLM server: ready, dead (classified at once) or too slow (timeout).

Launcher-agnostic: the caller says how to ask "has the server died? → exit status" and how to
read the recent log, so a subprocess (``Popen.poll``) and a container (``docker inspect``) share
this loop and the classification in :mod:`tuner.launch.failures`.

While it waits, a :class:`StartupWatch` reads the start's phase from the log at each probe
(:func:`startup_phase`: loading weights, compiling, capturing graphs, ...) and reports it as a
:class:`~tuner.results.StartupEvent`; the log is read for this only when someone listens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tuner.errors import StartupFailure
from tuner.launch.failures import startup_failure
from tuner.results import OnStartup, StartupEvent

__all__ = ["READY", "STARTING", "StartupWatch", "startup_phase", "wait_until_ready"]

# One probe must not hold up noticing a dead server: a live-but-busy server (compiling,
# loading weights) may accept the connection and answer late.
_PROBE_TIMEOUT_S = 2.0

STARTING = "starting"
READY = "ready"
_SERVING = "starting API server"
# The line that begins each phase, as vLLM 0.32 logs it (files under vllm/ unless named);
# the marker that comes last in the log is the phase now.
_PHASE_MARKERS: tuple[tuple[str, str], ...] = (
    # v1/worker/gpu_model_runner.py and v1/worker/cpu_model_runner.py, load_model:
    # "Starting to load model %s..." (its end: "Loading weights took", default_loader.py)
    ("Starting to load model", "loading weights"),
    # compilation/monitor.py, monitor_torch_compile: "%sStarting torch.compile"
    ("Starting torch.compile", "compiling"),
    # compilation/backends.py: "%sDynamo bytecode transform time: %.2f s" (also where the
    # start line is not announced) and, on a cache hit, "Directly load the compiled graph(s)"
    ("Dynamo bytecode transform time", "compiling"),
    ("Directly load the compiled graph", "compiling"),
    # v1/worker/gpu_worker.py, determine_available_memory: "Available KV cache memory: %s GiB"
    ("Available KV cache memory", "allocating KV cache"),
    # v1/worker/gpu_model_runner.py, _capture_cudagraphs: tqdm's bar "Capturing CUDA graphs
    # (decode, FULL): 40%|..." on stderr, redrawn after "\r" (its end: "Graph capturing
    # finished in")
    ("Capturing CUDA graphs", "capturing graphs"),
    # v1/engine/core.py: "init engine (profile, create kv cache, warmup model) took %.2f s"
    ("init engine (profile, create kv cache, warmup model) took", _SERVING),
    # entrypoints/launchers/api_server/entry.py: "Starting vLLM server on %s"
    ("Starting vLLM server on", _SERVING),
    # uvicorn/lifespan/on.py (vLLM's API server runs on uvicorn): "Application startup complete."
    ("Application startup complete.", READY),
)


def startup_phase(log_text: str) -> str | None:
    """The phase a starting vLLM server is in, by the last phase marker in its log; None
    when the text holds none (not yet, or a log tail cut before it)."""
    for line in reversed(log_text.splitlines()):  # splitlines also splits tqdm's "\r" redraws
        for marker, phase in _PHASE_MARKERS:
            if marker in line:
                return phase
    return None


class StartupWatch:
    """Reports one start's phases to ``on_startup`` with the seconds since the start began.

    Made when the start begins (which reports ``"starting"``); :func:`wait_until_ready`
    reports the phase the log shows at each probe and ``"ready"`` at the end.
    """

    def __init__(self, on_startup: OnStartup | None) -> None:
        self._on_startup = on_startup
        self._began = time.monotonic()
        self.phase = STARTING
        self._report()

    def poll(self, log_text: Callable[[], str]) -> None:
        """Reads the phase from the log; reported at every probe so the clock moves on."""
        if self._on_startup is None:
            return  # nobody listens: the log is not read
        self.phase = startup_phase(log_text()) or self.phase
        self._report()

    def ready(self) -> None:
        self.phase = READY
        self._report()

    def _report(self) -> None:
        if self._on_startup is not None:
            self._on_startup(StartupEvent(self.phase, elapsed_s=time.monotonic() - self._began))


def _listed_models(response: httpx.Response) -> list[str]:
    try:
        payload: Any = response.json()
        return [str(entry["id"]) for entry in payload["data"]]
    except (ValueError, KeyError, TypeError):
        return []


def wait_until_ready(
    base_url: str,
    *,
    timeout_s: float,
    exited: Callable[[], int | None],
    log_tail: Callable[[], str],
    poll_s: float = 0.5,
    model: str | None = None,
    oom_killed: Callable[[], bool] | None = None,
    watch: StartupWatch | None = None,
) -> None:
    """Returns once ``GET /health`` answers 200 and ``GET /v1/models`` lists ``model``.

    The server's death is checked before every probe, so an early exit is reported within
    ``poll_s``, not at the timeout.

    Args:
        base_url: ``http://host:port`` of the server.
        timeout_s: how long start-up may take (tens of seconds to minutes for 14-32B models).
        exited: the exit status if the server has ended, else None.
        log_tail: the recent log text (a few hundred lines), read on failure and by ``watch``.
        poll_s: pause between probes.
        model: the served model name that must be listed; None accepts any.
        oom_killed: whether the runtime saw the OOM killer end it (Docker), if it can tell.
        watch: where the phases the log shows are reported; None: nowhere.

    Raises:
        StartupFailure: the server exited (kind from its exit status and log) or was not ready
            within ``timeout_s`` (kind ``timeout``, unless the log shows an OOM).
    """
    deadline = time.monotonic() + timeout_s
    last_problem = "no answer yet"
    # trust_env=False: an HTTP(S)_PROXY in the environment must not capture localhost probes.
    with httpx.Client(base_url=base_url, timeout=_PROBE_TIMEOUT_S, trust_env=False) as client:
        while True:
            code = exited()
            if code is not None:
                raise _failure(code, log_tail(), oom_killed)
            if watch is not None:
                watch.poll(log_tail)
            try:
                health = client.get("/health")
                if health.status_code != 200:
                    last_problem = f"/health answered {health.status_code}"
                else:
                    models = client.get("/v1/models")
                    listed = _listed_models(models)
                    if models.status_code == 200 and (model is None or model in listed):
                        if watch is not None:
                            watch.ready()
                        return
                    last_problem = f"/v1/models answered {models.status_code}, listing {listed}"
            except httpx.HTTPError as exc:
                last_problem = f"{type(exc).__name__} on {base_url}"
            if time.monotonic() >= deadline:
                break
            time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))
    # A death right at the deadline is an exit, not a timeout.
    code = exited()
    if code is not None:
        raise _failure(code, log_tail(), oom_killed)
    text = log_tail()
    failure = startup_failure(
        None, text, oom_killed=_ask(oom_killed), timed_out=True, timeout_s=timeout_s
    )
    raise StartupFailure(
        failure.kind,
        f"{failure} (last probe: {last_problem})",
        exit_code=None,
        log_tail=failure.log_tail,
    )


def _ask(oom_killed: Callable[[], bool] | None) -> bool:
    return oom_killed() if oom_killed is not None else False


def _failure(code: int, text: str, oom_killed: Callable[[], bool] | None) -> StartupFailure:
    return startup_failure(code, text, oom_killed=_ask(oom_killed))
