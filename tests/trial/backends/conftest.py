"""Fixtures of the backend contract (the cases themselves live in ``contract_support``)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.testbed.docker_host import docker_or_skip
from tests.trial.backends.contract_support import Case, docker_case, process_case, sim_case
from tuner.config.trial import LaunchContext
from tuner.launch.containers import LABEL_STUDY


def _cases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    study = f"contract-{uuid.uuid4().hex[:8]}"
    client: docker.DockerClient | None = None
    if request.param == "sim":
        made = sim_case()
    elif request.param == "process":
        made = process_case(tmp_path)
    else:
        client = docker_or_skip()
        made = docker_case(tmp_path, client, study)
    yield made
    for backend in made.made:
        backend.close()
    if client is not None:
        for container in client.containers.list(
            all=True, ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
        ):
            container.remove(force=True)
        client.close()
    for leftover in made.leftovers():
        if leftover.startswith("pid "):
            os.kill(int(leftover.removeprefix("pid ")), signal.SIGKILL)


_DOCKER = pytest.param("docker", marks=pytest.mark.docker)


@pytest.fixture(params=["sim", "process", _DOCKER])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    """Each backend in turn; whatever a failing test leaves is removed afterwards."""
    yield from _cases(request, tmp_path)


@pytest.fixture(params=["process", _DOCKER])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    """The backends that run server processes (which can crash, hang and have children)."""
    yield from _cases(request, tmp_path)


@pytest.fixture
def context(tmp_path: Path) -> LaunchContext:
    return LaunchContext(study="contract", trial=1, log_dir=tmp_path / "logs")
