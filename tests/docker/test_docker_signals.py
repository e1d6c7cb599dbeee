"""Ctrl-C and SIGTERM, during a start and while serving: no container of the study survives.

The study runs in a separate process (signal_driver.py) so it can be signalled like a real
``spectune optimize``; containers of anyone else, labelled or not, must be left alone.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from tuner.launch.docker import LABEL_STUDY

pytestmark = pytest.mark.docker

DRIVER = Path(__file__).with_name("signal_driver.py")
REPO = Path(__file__).resolve().parents[2]


def _study_containers(
    client: docker.DockerClient, study: str, status: str | None = None
) -> list[Container]:
    filters: dict[str, Any] = {"label": f"{LABEL_STUDY}={study}"}
    if status:
        filters["status"] = status
    return client.containers.list(all=True, filters=filters)


@pytest.fixture
def bystanders(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    host_volumes: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> Iterator[list[str]]:
    """Two sleeping containers that are not this study's: one of another study, one unlabelled."""
    volumes = [f"{h}:{t}" for h, t in host_volumes(tmp_path / "bystander-tmp").items()]
    ids = []
    for labels in ({LABEL_STUDY: f"{study}-someone-else"}, {}):
        container = docker_client.containers.create(
            test_image, ["/bin/sleep", "300"], labels=labels, volumes=volumes, detach=True
        )
        container.start()
        ids.append(container.id or "")
    yield ids
    for container_id in ids:
        docker_client.containers.get(container_id).remove(force=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", ["starting", "running"])
def test_a_signal_leaves_no_container_of_the_study(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    tmp_path: Path,
    fake_launcher_kwargs: Callable[..., dict[str, Any]],
    bystanders: list[str],
    signum: signal.Signals,
    phase: str,
) -> None:
    faults = ("slow-start=300",) if phase == "starting" else ()
    kwargs = fake_launcher_kwargs(tmp_path, *faults)
    spec = {
        "image": test_image,
        "study": study,
        "log_dir": str(tmp_path / "logs"),
        "entrypoint": list(kwargs["entrypoint"]),
        "subcommand": list(kwargs["subcommand"]),
        "volumes": kwargs["volumes"],
        "environment": kwargs["environment"],
    }
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), json.dumps(spec)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if phase == "running":
            assert driver.stdout is not None
            assert driver.stdout.readline().strip() == "READY"
        else:  # the signal must land inside start(): the container runs, the server hangs
            deadline = time.monotonic() + 30
            while not _study_containers(docker_client, study, "running"):
                assert driver.poll() is None, driver.communicate()
                assert time.monotonic() < deadline, "the driver started no container"
                time.sleep(0.1)
            time.sleep(0.5)
        driver.send_signal(signum)
        _, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()

    assert driver.returncode != 0
    assert _study_containers(docker_client, study) == [], stderr
    alive = {c.id for c in docker_client.containers.list()}
    assert set(bystanders) <= alive
    assert (tmp_path / "logs" / "trial-1.log").exists()  # the log was kept
