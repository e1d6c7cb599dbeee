"""Waiting for a starting vLLM server: ready, dead (classified at once) or too slow (timeout).

Launcher-agnostic: the caller says how to ask "has the server died? → exit status" and how to
read the recent log, so a subprocess (``Popen.poll``) and a container (``docker inspect``) share
this loop and the classification in :mod:`tuner.launch.failures`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tuner.errors import StartupFailure
from tuner.launch.failures import startup_failure

__all__ = ["wait_until_ready"]

# One probe must not hold up noticing a dead server: a live-but-busy server (compiling,
# loading weights) may accept the connection and answer late.
_PROBE_TIMEOUT_S = 2.0


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
) -> None:
    """Returns once ``GET /health`` answers 200 and ``GET /v1/models`` lists ``model``.

    The server's death is checked before every probe, so an early exit is reported within
    ``poll_s``, not at the timeout.

    Args:
        base_url: ``http://host:port`` of the server.
        timeout_s: how long start-up may take (tens of seconds to minutes for 14-32B models).
        exited: the exit status if the server has ended, else None.
        log_tail: the recent log text (a few hundred lines), read only on failure.
        poll_s: pause between probes.
        model: the served model name that must be listed; None accepts any.
        oom_killed: whether the runtime saw the OOM killer end it (Docker), if it can tell.

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
            try:
                health = client.get("/health")
                if health.status_code != 200:
                    last_problem = f"/health answered {health.status_code}"
                else:
                    models = client.get("/v1/models")
                    listed = _listed_models(models)
                    if models.status_code == 200 and (model is None or model in listed):
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
