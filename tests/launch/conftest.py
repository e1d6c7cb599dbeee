"""Fixtures for the launcher tests: a private state folder, and real vLLM on the CPU.

The tests drive the shipped fake server (``testbed.fake_server.SERVER``), steered with
``--sim-fault`` through ``SPECTUNE_SIM_FAULT``. The real-vLLM fixtures wrap :mod:`testbed`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed import vllm_command, vllm_env

from tuner.config.trial import LaunchContext
from tuner.config.vllm_args import VllmVersion
from tuner.launch.process import ProcessLauncher


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run files go to the test's own folder, never the user's ``~/.local/state``."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state / "spectune" / "servers"


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="test", trial=7, log_dir=tmp_path / "logs")


@pytest.fixture
def vllm_launcher(
    tmp_path: Path, vllm_cache_root: Path, real_vllm_version: VllmVersion
) -> Iterator[ProcessLauncher]:
    """A launcher for real vLLM; whatever a test leaves running is stopped afterwards."""
    launcher = ProcessLauncher(
        vllm_command(),
        version=real_vllm_version,
        ready_timeout_s=240,
        env=vllm_env(tmp_path / "run", vllm_cache_root),
    )
    with launcher:
        yield launcher
