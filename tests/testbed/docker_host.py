"""Docker test bed: an empty image and the bind mounts that make the host's Python run in it.

There is no registry here, so the test image is empty (``docker import`` of an empty tar) and
every container borrows the host's ``/usr``, ``/lib``, ``/lib64``, ``/bin``, ``/etc``, the
running interpreter's installation (``sys.prefix`` and ``sys.base_prefix``, wherever the venv
lives) and this repository through read-only bind mounts, plus a writable host folder at
``/tmp``. ``sys.executable -m tuner.sim.server`` then runs the fake server inside.

Without a Docker Engine the tests skip; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import gc
import io
import os
import sys
import tarfile
import warnings
from pathlib import Path

import docker
import docker.errors
import pytest

from tuner.config.vllm_args import NEWEST_KNOWN, VllmVersion
from tuner.launch.container_spec import VllmImage

__all__ = [
    "FAKE_SERVER",
    "PYTHON",
    "REPO",
    "TEST_IMAGE",
    "docker_or_skip",
    "empty_image",
    "fake_server_image",
    "host_volumes",
]

REPO = Path(__file__).resolve().parents[2]
TEST_IMAGE = "spectune-test-empty"
PYTHON = sys.executable  # a host path the containers see through the prefix mounts
FAKE_SERVER = (PYTHON, "-m", "tuner.sim.server")  # the shipped fake server, run as `vllm` is


def docker_or_skip() -> docker.DockerClient:
    """The real engine; a skip without one (a failure in CI)."""
    client = None
    try:
        client = docker.from_env()
        client.ping()
        return client
    except docker.errors.DockerException:
        if client is not None:
            client.close()  # its socket, left to the garbage collector, warns in a later test
    # docker.from_env() asks the engine for its API version and, when that fails, leaves the
    # attempt's socket open (docker-py 7): reap it here, once the exception that holds it is gone.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    what = "a Docker Engine (run .ci/services.sh)"
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} not available")


def empty_image(client: docker.DockerClient) -> str:
    """The empty image, imported once per host."""
    try:
        client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        empty = io.BytesIO()
        tarfile.open(fileobj=empty, mode="w").close()
        client.api.import_image_from_data(empty.getvalue(), repository=TEST_IMAGE)
    return TEST_IMAGE


def host_volumes(tmp: Path, *extra: Path) -> dict[str, str]:
    """Read-only host system, Python, repository (and ``extra``); ``tmp`` writable at /tmp."""
    tmp.mkdir(parents=True, exist_ok=True)
    paths = [Path(p) for p in ("/usr", "/lib", "/lib64", "/bin", "/etc")]
    paths += [Path(sys.prefix), Path(sys.base_prefix), REPO, *extra]
    volumes = {str(p): f"{p}:ro" for p in paths if p.exists()}
    volumes[str(tmp)] = "/tmp:rw"
    return volumes


def fake_server_image(name: str, version: VllmVersion | None = NEWEST_KNOWN) -> VllmImage:
    """The image ``name`` running ``python -m tuner.sim.server serve`` where vLLM would run;
    ``version``: the dialect it is spoken to in (None: from the tag, else asked of it)."""
    return VllmImage(name, entrypoint=FAKE_SERVER, subcommand=("serve",), version=version)
