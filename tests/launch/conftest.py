"""Fixtures for the launcher tests: a steerable fake server, and real vLLM on the CPU.

The real-vLLM fixtures are plain wrappers around :mod:`testbed`, so ``tests/conftest.py`` can
adopt them later for other tiers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed import vllm_command, vllm_env

from tuner.config.trial import LaunchContext
from tuner.config.vllm_args import VllmVersion
from tuner.launch.process import ProcessLauncher

FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")


@pytest.fixture
def fake_command() -> tuple[str, ...]:
    """Runs the steerable fake server with this interpreter."""
    return (sys.executable, str(FAKE_VLLM))


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
