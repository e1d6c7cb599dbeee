"""The vLLM image on this host: pulled, like ``docker run`` would, when it is missing.

:func:`ensure_image` answers at once for an image the host has; otherwise it pulls it through
the engine's streamed pull and reports the layers' aggregated progress as
:class:`~tuner.results.StartupEvent` ``"pulling image"`` events. A pull that cannot succeed is
one line naming the image and the fix: a missing tag, a registry that cannot be reached, a
registry that wants a login (:func:`pull_error`).

The engine reports a pull's failure in two ways: a refusal before the stream starts (an HTTP
404 or 500 that docker-py raises as ``APIError``, e.g. ``manifest unknown``, ``connection
refused``, ``no basic auth credentials``), or an ``{"error": ...}`` item inside the stream once
layers are moving (e.g. ``unknown blob``), which docker-py hands over like any other item.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
from docker.auth import resolve_repository_name
from docker.utils import parse_repository_tag

from tuner.errors import ConfigError, LaunchError
from tuner.launch.engine import engine_calls
from tuner.results import OnStartup, StartupEvent

__all__ = ["PULLING", "PullProgress", "ensure_image", "pull_error", "registry_of"]

PULLING = "pulling image"
# A multi-GB image streams thousands of progress items: the live table needs a few a second.
_REPORT_EVERY_S = 0.5
_MB = 1e6  # docker reports decimal units (kB, MB) in its own progress bars
_GB = 1e9

# The engine's words, matched lower-case. Login first: Docker Hub answers a private or missing
# repository with "pull access denied ... may require 'docker login'".
_LOGIN = (
    "unauthorized",
    "authentication required",
    "requested access to the resource is denied",
    "pull access denied",
    "no basic auth credentials",
    "incorrect username or password",
)
_UNREACHABLE = (
    "connection refused",
    "no such host",
    "timeout",
    "deadline exceeded",
    "network is unreachable",
    "no route to host",
    "server misbehaving",
    "connection reset",
)
_MISSING = ("manifest unknown", "not found", "does not exist")
_PLAIN_HTTP = "server gave http response to https client"
# Layer statuses after which its bytes are all here (extraction is local work).
_DOWNLOADED = ("verifying checksum", "download complete", "extracting", "pull complete")


@dataclass
class _Layer:
    done: int = 0
    total: int | None = None  # known once its download starts
    downloaded: bool = False


@dataclass
class PullProgress:
    """The layers of one pull, fed the engine's decoded progress items one at a time."""

    layers: dict[str, _Layer] = field(default_factory=dict)

    def update(self, item: Mapping[str, Any]) -> bool:
        """Takes one progress item; returns whether it changed what :meth:`event` reports.

        Items without a layer ``id`` (``Pulling from``, ``Digest``, ``Status``) and the
        ``Pulling from`` line, whose ``id`` is the tag, change nothing.
        """
        status = str(item.get("status", "")).lower()
        layer_id = item.get("id")
        if not layer_id or status.startswith("pulling from"):
            return False
        new = str(layer_id) not in self.layers  # one more layer in "a of b layers"
        layer = self.layers.setdefault(str(layer_id), _Layer())
        before = (layer.done, layer.total, layer.downloaded)
        detail = item.get("progressDetail") or {}
        if status == "downloading" and detail.get("total"):
            layer.total = int(detail["total"])
            layer.done = int(detail.get("current", 0))
        elif status == "already exists":
            layer.downloaded = True  # no bytes to fetch: it counts as a layer, not as bytes
        elif status.startswith(_DOWNLOADED):
            layer.downloaded = True
            if layer.total is not None:
                layer.done = layer.total
        return new or (layer.done, layer.total, layer.downloaded) != before

    @property
    def done_bytes(self) -> int:
        return sum(layer.done for layer in self.layers.values())

    @property
    def total_bytes(self) -> int:
        """The sizes known so far: it grows while layers begin their downloads."""
        return sum(layer.total or layer.done for layer in self.layers.values())

    def event(self, elapsed_s: float) -> StartupEvent:
        """``"X of Y MB, a of b layers"`` (GB from a gigabyte on), bytes as done and total."""
        done, total = self.done_bytes, self.total_bytes
        unit, name = (_GB, "GB") if total >= _GB else (_MB, "MB")
        downloaded = sum(layer.downloaded for layer in self.layers.values())
        detail = (
            f"{done / unit:.1f} of {total / unit:.1f} {name}, "
            f"{downloaded} of {len(self.layers)} layers"
        )
        return StartupEvent(PULLING, detail, done=done, total=total, elapsed_s=elapsed_s)


def registry_of(image: str) -> str:
    """The registry host an image reference names (``docker.io`` when it names none)."""
    repository, _ = parse_repository_tag(image)
    host, _ = resolve_repository_name(repository)
    return host


def pull_error(image: str, message: str) -> ConfigError | LaunchError:
    """The engine's pull failure as one line naming the image and the fix.

    A missing image, an unreachable registry and one that wants a login are the user's to
    fix (:class:`ConfigError`); anything else (a registry that lost a layer, a full disk) is
    a :class:`LaunchError` with the engine's words.
    """
    reason = " ".join(message.split())  # the engine's words may span lines; ours is one
    words = reason.lower()
    host = registry_of(image)
    if any(w in words for w in _LOGIN):
        return ConfigError(
            f"registry {host} wants a login to pull image {image} ({reason}): "
            f"docker login {host}, or check the image name"
        )
    if _PLAIN_HTTP in words:
        return ConfigError(
            f"registry {host} speaks plain HTTP, so docker will not pull image {image} from "
            f"it: add {host} to insecure-registries in /etc/docker/daemon.json, or serve TLS"
        )
    if any(w in words for w in _UNREACHABLE):
        return ConfigError(
            f"cannot reach registry {host} to pull image {image} ({reason}): start the "
            "registry or check the network, or pass --image with an image this host has "
            "(docker images)"
        )
    if any(w in words for w in _MISSING):
        return ConfigError(
            f"image {image} is not on registry {host} ({reason}): check the tag "
            "(and the repository name), or pass another --image"
        )
    return LaunchError(f"docker could not pull image {image}: {reason}")


def ensure_image(
    client: docker.DockerClient, image: str, on_startup: OnStartup | None = None
) -> bool:
    """Pulls ``image`` unless this host has it; returns whether it pulled.

    Args:
        client: the engine.
        image: the reference, e.g. ``vllm/vllm-openai:v0.8.5`` or ``host:5000/name@sha256:...``.
        on_startup: where ``"pulling image"`` progress goes (a few events a second).

    Raises:
        ConfigError: no such image, an unreachable registry, or one that wants a login.
        LaunchError: the engine could not inspect or pull it otherwise.
        EngineUnavailable: the engine went away.
    """
    try:
        with engine_calls(f"looking for image {image}"):
            client.images.get(image)
        return False
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as error:
        raise LaunchError(f"docker could not inspect image {image}: {error}") from error
    _pull(client, image, on_startup)
    return True


def _pull(client: docker.DockerClient, image: str, on_startup: OnStartup | None) -> None:
    # ``name@sha256:...`` arrives as a digest in ``tag``, which the engine takes like a tag.
    repository, tag = parse_repository_tag(image)
    progress = PullProgress()
    started = time.monotonic()
    reported = started - _REPORT_EVERY_S
    try:
        with engine_calls(f"pulling image {image}"):
            items = client.api.pull(repository, tag=tag or "latest", stream=True, decode=True)
            for item in items:
                if "error" in item:
                    raise pull_error(image, str(item["error"]))
                now = time.monotonic()
                if progress.update(item) and on_startup and now - reported >= _REPORT_EVERY_S:
                    on_startup(progress.event(now - started))
                    reported = now
    except docker.errors.APIError as error:
        raise pull_error(image, str(error.explanation or error)) from error
    if on_startup is not None:  # the last state, all layers in, however recent the last one
        on_startup(progress.event(time.monotonic() - started))
