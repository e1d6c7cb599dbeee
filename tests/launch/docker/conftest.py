"""Fixtures for the docker tests: a real Docker Engine and the registry-free test image.

The image is empty; containers borrow the host's system, Python and this repository through
read-only bind mounts (:mod:`tests.testbed.docker_host`). Inside runs the shipped fake server
(``python -m tuner.sim.server``, steered by ``--sim-fault`` names) or real ``vllm serve`` from
the vLLM CPU venv.

Without a Docker Engine the tests skip; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.testbed.docker_host import (
    PYTHON,
    docker_or_skip,
    empty_image,
    fake_server_image,
    host_volumes,
)
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import NEWEST_KNOWN, VllmVersion
from tuner.launch.container_spec import ContainerResources, ContainerTiming
from tuner.launch.docker import LABEL_STUDY, DockerLauncher
from tuner.launch.mounts import ContainerFiles

LauncherFactory = Callable[..., DockerLauncher]


@pytest.fixture(autouse=True)
def private_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Hugging Face cache a study creates and mounts is the test's, never the user's."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The real engine, or a skip (a failure in CI)."""
    client = docker_or_skip()
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_image(docker_client: docker.DockerClient) -> str:
    """An empty image, imported once; the host provides everything through bind mounts."""
    return empty_image(docker_client)


@pytest.fixture
def study(docker_client: docker.DockerClient) -> Iterator[str]:
    """A study name of its own; any container a failing test leaves is removed afterwards."""
    name = f"pytest-{uuid.uuid4().hex[:8]}"
    yield name
    for container in docker_client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"{LABEL_STUDY}={name}"}
    ):
        container.remove(force=True)


@pytest.fixture
def context(tmp_path: Path, study: str) -> LaunchContext:
    return LaunchContext(study=study, trial=3, log_dir=tmp_path / "studies" / study)


@pytest.fixture
def fake_server() -> ServerConfig:
    """A config the fake server starts (the simulator's default 4090x1 fits it)."""
    return ServerConfig(
        model="Qwen/Qwen2.5-14B-Instruct-AWQ",
        tensor_parallel_size=1,
        max_model_len=8192,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=2048,
        served_model_name="tiny",
    )


@pytest.fixture
def project_python() -> str:
    """The running interpreter (a host path the containers see through the prefix mounts)."""
    return PYTHON


@pytest.fixture(name="host_volumes")
def host_volumes_fixture() -> Callable[..., dict[str, str]]:
    """``host_volumes(tmp, *extra)``: the bind mounts that make the empty image runnable."""
    return host_volumes


def _fake_launcher_kwargs(tmp: Path, *faults: str, **env: str) -> dict[str, Any]:
    """The records a :class:`DockerLauncher` needs, beside its image, to run the fake server in
    the empty image (:func:`~testbed.docker_host.fake_server_image`): no GPU, the host mounts,
    the faults and speed in the environment, short waits."""
    return {
        "resources": ContainerResources(gpus=()),
        "files": ContainerFiles(
            hf_cache=tmp / "no-hf-cache",
            volumes=host_volumes(tmp / "container-tmp"),
            environment={
                "SPECTUNE_SIM_SPEED": "50",
                "SPECTUNE_SIM_FAULT": ",".join(faults),
                **env,
            },
        ),
        "timing": ContainerTiming(ready_timeout_s=60, stop_timeout_s=10, poll_s=0.2),
    }


@pytest.fixture
def fake_launcher_kwargs() -> Callable[..., dict[str, Any]]:
    """``fake_launcher_kwargs(tmp, *faults, **env)``: the fake server's launcher records."""
    return _fake_launcher_kwargs


@pytest.fixture
def fake_launcher(
    docker_client: docker.DockerClient, test_image: str, study: str, tmp_path: Path
) -> Iterator[LauncherFactory]:
    """``make(*faults, image=..., version=..., env={...}, **launcher_kwargs)``: the fake server
    in ``image`` (default the empty test image) spoken to in ``version``; a launcher keyword
    (``resources=``, ``files=``, ``host_ports=``) replaces the fake's. All closed after."""
    made: list[DockerLauncher] = []

    def make(
        *faults: str,
        image: str = test_image,
        version: VllmVersion | None = NEWEST_KNOWN,
        env: dict[str, str] | None = None,
        **overrides: Any,
    ) -> DockerLauncher:
        kwargs = {**_fake_launcher_kwargs(tmp_path, *faults, **(env or {})), **overrides}
        launcher = DockerLauncher(
            fake_server_image(image, version), study=study, client=docker_client, **kwargs
        )
        made.append(launcher)
        return launcher

    yield make
    for launcher in made:
        launcher.close()
