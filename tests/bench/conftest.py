"""Fixtures for the bench tests: a real streaming server on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from openai_sse_server import FakeOpenAIServer


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """A well-behaved server: one token per chunk, V1 metric names."""
    with FakeOpenAIServer() as running:
        yield running


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
