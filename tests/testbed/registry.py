"""A real container registry on loopback: Debian's ``docker-registry`` (distribution 2.8).

:func:`start_registry` serves one from a folder of the test's on a free port of 127.0.0.1
(the Docker Engine trusts loopback registries over plain HTTP); with ``login`` it wants a
login (a missing htpasswd file makes the registry provision one with a random password).
:func:`push_payload_image` pushes an image of its own there, with a random payload so that a
pull moves real bytes, and removes it from the host again.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest
import yaml

__all__ = [
    "Registry",
    "push_payload_image",
    "registry_or_skip",
    "remove_image",
    "start_registry",
]

_READY_S = 15.0
_PAYLOAD_BYTES = 2_000_000


@dataclass
class Registry:
    """A running registry: ``host`` is ``127.0.0.1:PORT``; ``root`` holds its storage."""

    proc: subprocess.Popen[bytes]
    host: str
    root: Path

    def stop(self) -> None:
        """Stops it by its PID; idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def blobs(self) -> list[Path]:
        """The blob folders of its storage (one per layer, config and manifest)."""
        return sorted(self.root.glob("docker/registry/v2/blobs/sha256/*/*"))


def registry_or_skip() -> str:
    """The ``docker-registry`` program; a skip without one (a failure in CI)."""
    program = shutil.which("docker-registry")
    if program is None:
        what = "Debian's docker-registry (apt-get install docker-registry)"
        if os.environ.get("CI"):
            pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
        pytest.skip(f"{what} not available")
    return program


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def start_registry(folder: Path, *, login: bool = False) -> Registry:
    """Serves a registry with its storage in ``folder``; returns once ``/v2/`` answers."""
    program = registry_or_skip()
    folder.mkdir(parents=True, exist_ok=True)
    host = f"127.0.0.1:{_free_port()}"
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
        "http": {"addr": host, "secret": uuid.uuid4().hex},
    }
    if login:
        config["auth"] = {"htpasswd": {"realm": "spectune-test", "path": str(folder / "htpasswd")}}
    (folder / "config.yml").write_text(yaml.safe_dump(config))
    with (folder / "registry.log").open("wb") as log:
        proc = subprocess.Popen(
            [program, "serve", str(folder / "config.yml")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    registry = Registry(proc, host, folder / "data")
    deadline = time.monotonic() + _READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if httpx.get(f"http://{host}/v2/", trust_env=False).status_code in (200, 401):
                return registry
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    registry.stop()
    log_text = (folder / "registry.log").read_text(errors="replace")
    raise RuntimeError(f"docker-registry did not answer on {host}: {log_text[-2000:]}")


def push_payload_image(client: docker.DockerClient, registry: Registry) -> str:
    """Pushes a one-layer image with a random payload to ``registry`` and removes it from
    this host; returns its reference, ``HOST/spectune-test:pull-<uuid>``."""
    repository = f"{registry.host}/spectune-test"
    tag = f"pull-{uuid.uuid4().hex[:8]}"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        payload = os.urandom(_PAYLOAD_BYTES)  # random: the layer is the test's alone
        entry = tarfile.TarInfo("spectune-pull-payload")
        entry.size = len(payload)
        tar.addfile(entry, io.BytesIO(payload))
    client.api.import_image_from_data(archive.getvalue(), repository=repository, tag=tag)
    for item in client.api.push(repository, tag=tag, stream=True, decode=True):
        if "error" in item:
            raise RuntimeError(f"push to {registry.host} failed: {item['error']}")
    image = f"{repository}:{tag}"
    remove_image(client, image)
    return image


def remove_image(client: docker.DockerClient, image: str) -> None:
    """Removes ``image`` from this host if it is there."""
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(image, force=True)
