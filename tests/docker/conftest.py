"""Fixtures for the docker launcher tests: a real Docker Engine and a registry-free test image.

There is no registry here, so the test image is empty (``docker import`` of an empty tar) and
every container borrows the host's ``/usr``, ``/lib``, ``/lib64``, ``/bin``, ``/etc``, Python
installation and this repository (with its venv) through read-only bind mounts, plus a
writable host folder at ``/tmp``. Commands inside are the fake server ``fake_vllm.py`` or real
``vllm serve`` from the vLLM CPU venv.

Without a Docker Engine the tests skip; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from tuner.config.trial import LaunchContext, ServerConfig
from tuner.config.vllm_args import parse_version
from tuner.launch.docker import LABEL_STUDY, DockerLauncher

REPO = Path(__file__).resolve().parents[2]
FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")
TEST_IMAGE = "spectune-test-empty"
PYTHON = str(REPO / ".venv" / "bin" / "python")
if not Path(PYTHON).exists():  # CI activates its own venv elsewhere
    PYTHON = sys.executable

LauncherFactory = Callable[..., DockerLauncher]


def _require(condition: bool, what: str) -> None:
    # tests/ is not a package, so the rule of tests/conftest.py is repeated here.
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The real engine, or a skip (a failure in CI)."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        client = None
    _require(client is not None, "a Docker Engine (run .ci/services.sh)")
    assert client is not None
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_image(docker_client: docker.DockerClient) -> str:
    """An empty image, imported once; the host provides everything through bind mounts."""
    try:
        docker_client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        empty = io.BytesIO()
        tarfile.open(fileobj=empty, mode="w").close()
        docker_client.api.import_image_from_data(empty.getvalue(), repository=TEST_IMAGE)
    return TEST_IMAGE


def _host_volumes(tmp: Path, *extra: Path) -> dict[str, str]:
    """Read-only host system, Python, repository (and ``extra``); ``tmp`` writable at /tmp."""
    tmp.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in ("/usr", "/lib", "/lib64", "/bin", "/etc")]
    paths += [Path(sys.base_prefix), REPO, *extra]
    volumes = {str(p): f"{p}:ro" for p in paths if p.exists()}
    volumes[str(tmp)] = "/tmp:rw"
    return volumes


@pytest.fixture
def study(docker_client: docker.DockerClient) -> Iterator[str]:
    """A study name of its own; any container a failing test leaves is removed afterwards."""
    name = f"pytest-{uuid.uuid4().hex[:8]}"
    yield name
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_STUDY}={name}"}
    ):
        container.remove(force=True)


@pytest.fixture
def context(tmp_path: Path, study: str) -> LaunchContext:
    return LaunchContext(study=study, trial=3, log_dir=tmp_path / "studies" / study)


@pytest.fixture
def fake_server() -> ServerConfig:
    return ServerConfig(
        model="tiny-fake",
        tensor_parallel_size=1,
        max_model_len=512,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=512,
        served_model_name="tiny",
    )


@pytest.fixture
def project_python() -> str:
    """The project's interpreter (a host path the containers see through the repository mount)."""
    return PYTHON


@pytest.fixture
def host_volumes() -> Callable[..., dict[str, str]]:
    """``host_volumes(tmp, *extra)``: the bind mounts that make the empty image runnable."""
    return _host_volumes


def _fake_launcher_kwargs(tmp: Path, mode: str = "serve", **env: str) -> dict[str, Any]:
    """What a :class:`DockerLauncher` needs to run ``fake_vllm.py`` in the empty image."""
    return {
        "gpus": (),
        "hf_cache": tmp / "no-hf-cache",
        "version": parse_version("0.32.0"),
        "entrypoint": (PYTHON, str(FAKE_VLLM)),
        "subcommand": (),
        "volumes": _host_volumes(tmp / "container-tmp"),
        "environment": {"FAKE_VLLM_MODE": mode, **env},
        "ready_timeout_s": 60,
        "stop_timeout_s": 10,
        "poll_s": 0.2,
    }


@pytest.fixture
def fake_launcher_kwargs() -> Callable[..., dict[str, Any]]:
    """``fake_launcher_kwargs(tmp, mode="serve", **env)``: launcher arguments for the fake."""
    return _fake_launcher_kwargs


@pytest.fixture
def fake_launcher(
    docker_client: docker.DockerClient, test_image: str, study: str, tmp_path: Path
) -> Iterator[LauncherFactory]:
    """``make(mode="serve", image=..., env={...}, **launcher_kwargs)``; all closed after.

    ``mode`` is the fake server's (see fake_vllm.py), ``env`` adds container environment.
    """
    made: list[DockerLauncher] = []

    def make(mode: str = "serve", **overrides: Any) -> DockerLauncher:
        env = overrides.pop("env", {})
        image = overrides.pop("image", test_image)
        kwargs = {**_fake_launcher_kwargs(tmp_path, mode, **env), **overrides}
        launcher = DockerLauncher(image, study=study, client=docker_client, **kwargs)
        made.append(launcher)
        return launcher

    yield make
    for launcher in made:
        launcher.close()
