"""The shipped fake vLLM server (``python -m tuner.sim.server``) as a subprocess on a free port.

Shared by the fake server's own tests and the benchmark tests: :func:`start_fake_server`
starts one, :class:`RunningServer` reads its log and stops it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

SERVER = (sys.executable, "-m", "tuner.sim.server")
TARGET = "Qwen/Qwen2.5-14B-Instruct-AWQ"
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
SPEC = json.dumps({"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 4})
# Fast enough that a 16-token request takes a few milliseconds, slow enough to stay real time.
SPEED = "50"
_READY_S = 30.0  # a loaded 2-core machine imports slowly


def free_port() -> int:
    """A local port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class RunningServer:
    """A fake server subprocess; ``log`` reads what it printed so far."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> float:
        """SIGTERM; returns how long the server took to exit (0 when it had exited already)."""
        if self.proc.poll() is not None:
            return 0.0
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        return time.monotonic() - began


StartServer = Callable[..., RunningServer]


def start_fake_server(
    *flags: str,
    log_path: Path,
    model: str = TARGET,
    env: dict[str, str] | None = None,
    speed: str = SPEED,
    wait: bool = True,
) -> RunningServer:
    """Starts ``python -m tuner.sim.server serve MODEL ...`` on a free port of 127.0.0.1.

    Args:
        flags: more flags (vLLM's or ``--sim-*``).
        log_path: where its output goes.
        model: the catalog model it serves.
        env: variables set on top of this process's environment.
        speed: ``--sim-speed``.
        wait: return once ``/health`` answers (False: at once, for servers meant to fail).
    """
    for attempt in range(3):  # another process may take the free port before the server binds
        port = free_port()
        argv = [*SERVER, "serve", model, "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--sim-speed", speed, *flags]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )
        server = RunningServer(proc, port, log_path)
        if not wait:
            return server
        try:
            wait_ready(server)
        except AssertionError:
            server.stop()
            if attempt < 2 and proc.returncode == 1 and "[Errno 98]" in server.log():
                continue
            raise
        except BaseException:
            server.stop()
            raise
        return server
    raise AssertionError("unreachable")  # the loop returns or raises


def wait_ready(server: RunningServer) -> None:
    """Returns once ``/health`` answers 200; fails with the server's log if it dies first."""
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(f"server exited with {server.proc.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.base_url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"server not ready within {_READY_S} s:\n{server.log()}")
