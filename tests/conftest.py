"""Shared fixtures: the real services the marked test tiers need.

Locally a missing service skips its tier. In CI (``CI`` set) a missing service fails the test
instead: a tier that silently skips there would be a tier that does not exist.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from tests.testbed import (
    TinyModels,
    VllmOracle,
    build_tiny_models,
    require_vllm,
    vllm_command,
    vllm_env,
)
from tuner.config.vllm_args import VllmVersion, detect_version

# The result tests' simulated study and headless Chromium: their tests are spread over
# tests/analysis, cli, export, report and study, so the fixtures live beside their helpers.
pytest_plugins = ["tests.testbed.results_fixtures"]

# Models outside the built-in catalog are looked up through huggingface_hub: tests never reach
# the network, and see only the Hugging Face caches they lay out themselves.
os.environ["HF_HUB_OFFLINE"] = "1"
# An xdist worker starts with COLUMNS=80, and a Rich console created then (the CLI's, at
# import) keeps that width for good: tests that ask for a wide table set COLUMNS themselves.
os.environ.pop("COLUMNS", None)
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="spectune-test-hf-")
# The fake vLLM server (``python -m tuner.sim.server``) imitates the release the real tier
# runs, vLLM 0.32's CPU build, and which the test spaces pin: a process backend asks it for its
# version. A test about another release passes --sim-vllm-version itself.
os.environ["SPECTUNE_SIM_VLLM_VERSION"] = "0.32.0"
# A shell without job control starts a background command (`.ci/run &`, nohup) with SIGINT
# ignored, and every process below inherits that: the spectune runs the tests interrupt would
# never see their Ctrl-C. Tests about signals need the disposition a terminal gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# nohup ignores SIGHUP the same way, and spectune rightly keeps running when its user asked for
# that: every SIGHUP test (eleven, and a leaked child after them) would fail under `nohup .ci/run`.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def require(condition: bool, what: str) -> None:
    """Skips (locally) or fails (in CI) when a real component is missing."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} not available")


# Tiers that start real servers, containers or clusters: one at a time, on one xdist worker.
# Two real vLLM starts at once would share two cores, and their start-up timeouts with them.
_HEAVY_MARKERS = ("docker", "vllm", "ray", "postgres", "userpath")
_HEAVY_FIXTURES = ("tiny_models", "vllm_oracle")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if any(item.get_closest_marker(m) for m in _HEAVY_MARKERS) or any(
            f in fixtures for f in _HEAVY_FIXTURES
        ):
            item.add_marker(pytest.mark.xdist_group("heavy"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The ``ray`` tier needs Ray installed (``pip install -e '.[ray]'``).

    A hook, not an autouse fixture: the tier's module-scoped cluster is set up before any
    function-scoped fixture, so the skip has to come before fixtures run at all.
    """
    if item.get_closest_marker("ray") is not None:
        require(importlib.util.find_spec("ray") is not None, "Ray (pip install -e '.[ray]')")


# Real vLLM on the CPU: built once per session and shared by every tier that needs it.


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The tiny target and draft, built once per session (skips without real vLLM)."""
    require_vllm()
    return build_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def vllm_oracle(
    tmp_path_factory: pytest.TempPathFactory, vllm_cache_root: Path
) -> Iterator[VllmOracle]:
    """vLLM's own parser and config classes, one process for the session (skips without vLLM)."""
    require_vllm()
    root = tmp_path_factory.mktemp("vllm-oracle")
    (root / "hub").mkdir()
    oracle = VllmOracle(root / "hub", root / "oracle.log", vllm_cache_root)
    yield oracle
    oracle.close()


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


# A real PostgreSQL server for the postgres tier (``.ci/services.sh`` starts one).

DEFAULT_URL = "postgresql+psycopg://spectune:spectune@127.0.0.1:5432/spectune"


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get("SPECTUNE_TEST_PG_URL", DEFAULT_URL)
    try:
        engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect():
            pass
        engine.dispose()
    except Exception as exc:  # any reason the server is not usable
        if os.environ.get("CI"):
            pytest.fail(
                f"PostgreSQL is required in CI but not reachable at {url}: {exc}", pytrace=False
            )
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    return url
