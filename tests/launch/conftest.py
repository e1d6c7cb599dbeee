"""Fixtures for the launcher tests: a steerable fake server, and real vLLM on the CPU.

The real-vLLM fixtures are plain wrappers around :mod:`testbed`, so ``tests/conftest.py`` can
adopt them later for other tiers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed import TinyModels, build_tiny_models, require_vllm, vllm_command, vllm_env

from tuner.launch.base import LaunchContext
from tuner.launch.process import ProcessLauncher
from tuner.vllm_args import VllmVersion, detect_version

FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")


@pytest.fixture
def fake_command() -> tuple[str, ...]:
    """Runs the steerable fake server with this interpreter."""
    return (sys.executable, str(FAKE_VLLM))


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="test", trial=7, log_dir=tmp_path / "logs")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The tiny target and draft, built once per session (skips without real vLLM)."""
    require_vllm()
    return build_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def vllm_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-cache")


@pytest.fixture(scope="session")
def real_vllm_version(
    vllm_cache_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> VllmVersion:
    """``vllm --version`` of the installed build, asked once (it imports vLLM: about 10 s)."""
    require_vllm()
    env = vllm_env(tmp_path_factory.mktemp("vllm-version"), vllm_cache_root)
    return detect_version(vllm_command(), env={**os.environ, **env})


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
