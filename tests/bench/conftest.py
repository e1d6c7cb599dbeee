"""Fixtures for the bench tests: the shipped fake server (``python -m tuner.sim.server``).

``server`` is one well-behaved fake server per module with a draft model, so an SSE chunk
carries several tokens as under real speculative decoding; ``start_server`` starts one with
its own faults or flags. All serve the model name ``test-model``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.fake_server import SPEC, RunningServer, StartServer, start_fake_server

MODEL = "test-model"  # the tests spell it out: conftest is not importable by name
SPEED = "20"  # a 16-token request takes some 20 ms: long enough to overlap, short to wait for


def _start(log_path: Path, *flags: str) -> RunningServer:
    return start_fake_server(
        "--served-model-name",
        MODEL,
        "--speculative-config",
        SPEC,
        *flags,
        log_path=log_path,
        speed=SPEED,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A well-behaved fake server shared by a module's tests."""
    running = _start(tmp_path_factory.mktemp("bench-server") / "server.log")
    yield running
    running.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """``start_server(*flags)``: a fake server of the test's own (e.g. ``--sim-fault ...``)."""
    started: list[RunningServer] = []

    def start(*flags: str) -> RunningServer:
        started.append(_start(tmp_path / f"server-{len(started)}.log", *flags))
        return started[-1]

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
