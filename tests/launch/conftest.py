"""Fixtures for the launcher tests: a private state folder, and real vLLM on the CPU.

The tests drive the shipped fake server (``tests.testbed.fake_server.SERVER``), steered with
``--sim-fault`` through ``SPECTUNE_SIM_FAULT``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config.trial import LaunchContext


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run files go to the test's own folder, never the user's ``~/.local/state``."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state / "spectune" / "servers"


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="test", trial=7, log_dir=tmp_path / "logs")
