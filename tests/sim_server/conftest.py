"""Fixtures for the fake vLLM server tests (helpers live in ``fake_server_support``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_server_support import (
    SERVER,
    SPEED,
    TARGET,
    RunningServer,
    StartServer,
    free_port,
    wait_ready,
)

from tuner.config.trial import LaunchContext


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
        argv = [
            *SERVER,
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--sim-speed",
            SPEED,
            *flags,
        ]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )
        server = RunningServer(proc, port, log_path)
        started.append(server)
        if wait:
            wait_ready(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="sim-server", trial=1, log_dir=tmp_path / "logs")
