"""The launcher seam: every backend starts a server config and hands back an :class:`Endpoint`.

Implementations (docker, process, simulator) raise :class:`~tuner.errors.StartupFailure` when a
server does not come up, with the kind classified by the shared code in ``tuner.launch.failures``.
A launcher runs at most one server at a time; ``stop`` is idempotent and must leave nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tuner.trial_config import ServerConfig

__all__ = ["Endpoint", "LaunchContext", "Launcher"]


@dataclass(frozen=True)
class LaunchContext:
    """Who a server is started for: names containers, labels them, places logs."""

    study: str
    trial: int
    log_dir: Path


@dataclass(frozen=True)
class Endpoint:
    """A ready server: where to send requests and under which model name.

    ``base_url`` is ``http://host:port`` for real servers and ``sim://`` for the in-process
    simulator, which the measurement step runs in virtual time instead of over HTTP.
    """

    base_url: str
    model: str
    log_path: Path | None = None

    @property
    def simulated(self) -> bool:
        return self.base_url.startswith("sim://")


class Launcher(Protocol):
    """Starts and stops one vLLM server at a time."""

    name: str

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        """Starts ``server`` and returns once it answers; raises StartupFailure otherwise."""
        ...

    def stop(self) -> None:
        """Stops the running server, if any, and waits until it is gone."""
        ...

    def close(self) -> None:
        """Stops everything this launcher started; called once when the worker is done."""
        ...
