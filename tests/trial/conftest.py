"""Fixtures for the trial tests (the traffic tests' helpers: ``tests.trial.traffic_support``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def fast_fake_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server in fast real time, with no faults unless a test sets some."""
    monkeypatch.setenv("SPECTUNE_SIM_SPEED", "50")
    monkeypatch.delenv("SPECTUNE_SIM_FAULT", raising=False)
