"""The Docker Engine as a boundary: reaching it, losing it, and who owns a container.

Every engine call of the docker launcher goes through :func:`engine_calls`, which turns a lost
engine (``requests``' connection errors and time-outs, docker's own ``DockerException``) into
one :class:`~tuner.errors.EngineUnavailable` naming the engine and what spectune was doing.
The engine's refusals (``docker.errors.APIError``) pass through for the caller to judge.

A container's owner is the spectune run that created it: host name, process ID and that
process's start time (:class:`RunOwner`, stored as labels). A PID is trusted only together with
its start time, so a PID the kernel has since given to another process never passes for a live
run. A run inside a container (spectune's own image, the engine's socket mounted) has the
container's ID as its host name; it is alive while that container runs.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import docker
import docker.errors
import requests.exceptions

from tuner.errors import EngineUnavailable
from tuner.launch.runfiles import start_ticks

__all__ = [
    "LABEL_HOST",
    "LABEL_PID",
    "LABEL_STARTED",
    "RunOwner",
    "check_engine",
    "check_engine_stays",
    "engine_address",
    "engine_calls",
]

LABEL_HOST = "spectune.owner.host"
LABEL_PID = "spectune.owner.pid"
LABEL_STARTED = "spectune.owner.started"
_FIX = "start dockerd (or fix DOCKER_HOST); the next run removes what this one left"


def engine_address() -> str:
    """Where the engine is expected: ``DOCKER_HOST``, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@contextmanager
def engine_calls(what: str) -> Iterator[None]:
    """Translates a lost or unreachable engine into :class:`EngineUnavailable`.

    Args:
        what: what spectune was doing, for the message ("stopping container X").
    """
    try:
        yield
    except docker.errors.APIError:
        raise  # the engine answered: the caller knows what its refusal means
    except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise EngineUnavailable(
            f"lost the Docker Engine at {engine_address()} while {what} "
            f"({type(error).__name__}: {reason[:160]}): {_FIX}"
        ) from None


def check_engine(client: docker.DockerClient | None = None) -> docker.DockerClient:
    """The engine, asked once whether it answers; the client is returned for reuse.

    Raises:
        EngineUnavailable: no engine at :func:`engine_address` (nothing was created).
    """
    try:
        made = client or docker.from_env()
        made.ping()
        return made
    except (requests.exceptions.RequestException, docker.errors.DockerException) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise EngineUnavailable(
            f"cannot reach the Docker Engine at {engine_address()} ({reason[:160]}): start "
            "dockerd, or point DOCKER_HOST at a running engine (the socket mounted, when "
            "spectune runs in a container)"
        ) from None


def check_engine_stays(client: docker.DockerClient, what: str, seconds: float = 15.0) -> None:
    """Raises EngineUnavailable if the engine goes away within ``seconds``.

    Asked when a container was stopped from outside (exit 0, 143 or 137 without a memory
    kill): an engine shutting down stops its containers first and its API only moments later,
    and that is a lost engine, not the server's failure.
    """
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with engine_calls(what):
            client.ping()
        time.sleep(0.5)


@dataclass(frozen=True)
class RunOwner:
    """The spectune process that created a container."""

    host: str
    pid: int
    started: int  # clock ticks since boot, from /proc/PID/stat

    @classmethod
    def current(cls) -> RunOwner:
        """This process."""
        pid = os.getpid()
        return cls(socket.gethostname(), pid, start_ticks(pid) or 0)

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> RunOwner | None:
        """The owner a container's labels name; None for a container without them."""
        try:
            return cls(labels[LABEL_HOST], int(labels[LABEL_PID]), int(labels[LABEL_STARTED]))
        except (KeyError, ValueError):
            return None

    def labels(self) -> dict[str, str]:
        return {LABEL_HOST: self.host, LABEL_PID: str(self.pid), LABEL_STARTED: str(self.started)}

    def alive(self, client: docker.DockerClient) -> bool | None:
        """Whether the owner still runs: None when this host cannot tell (another machine)."""
        if self.host == socket.gethostname():
            return start_ticks(self.pid) == self.started
        if not re.fullmatch(r"[0-9a-f]{12}", self.host):
            return None
        try:  # spectune in a container of this engine: its host name is the container's ID
            with engine_calls(f"looking up the container of run {self.host}"):
                return client.containers.get(self.host).status == "running"
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError:
            return None

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"
