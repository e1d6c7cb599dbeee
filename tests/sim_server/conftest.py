"""Fixtures for the fake vLLM server tests: the server as a real subprocess on a free port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tuner.launch.base import LaunchContext

SERVER = (sys.executable, "-m", "tuner.sim.server")
TARGET = "Qwen/Qwen2.5-14B-Instruct-AWQ"
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
SPEC = json.dumps({"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 4})
# Fast enough that a 16-token request takes a few milliseconds, slow enough to stay real time.
SPEED = "50"
_READY_S = 15.0


def free_port() -> int:
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


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Starts ``python -m tuner.sim.server serve MODEL ...`` and waits until /health answers.

    Call it with extra flags (strings); ``model=`` picks the model, ``env=`` adds variables,
    ``wait=False`` returns without waiting (for servers meant to fail). Every server still
    running at the end is stopped.
    """
    started: list[RunningServer] = []

    def start(
        *flags: str, model: str = TARGET, env: dict[str, str] | None = None, wait: bool = True
    ) -> RunningServer:
        port = free_port()
        log_path = tmp_path / f"server-{len(started)}.log"
        argv = [*SERVER, "serve", model, "--host", "127.0.0.1", "--port", str(port),
                "--sim-speed", SPEED, *flags]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )
        server = RunningServer(proc, port, log_path)
        started.append(server)
        if wait:
            _wait_ready(server)
        return server

    yield start
    for server in started:
        server.stop()


def _wait_ready(server: RunningServer) -> None:
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


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="sim-server", trial=1, log_dir=tmp_path / "logs")
