"""Fixtures for the fake vLLM server tests (helpers live in ``tests.testbed.fake_server``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.fake_server import TARGET, RunningServer, StartServer, start_fake_server
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
        log_path = tmp_path / f"server-{len(started)}.log"
        server = start_fake_server(*flags, log_path=log_path, model=model, env=env, wait=wait)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="sim-server", trial=1, log_dir=tmp_path / "logs")
