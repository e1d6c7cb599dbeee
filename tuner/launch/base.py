"""The launcher seam: the mechanics of running a vLLM server, as a process or a container.

Implementations (:mod:`tuner.launch.process`, :mod:`tuner.launch.docker`) raise
:class:`~tuner.errors.StartupFailure` when a server does not come up, with the kind classified
by the shared code in ``tuner.launch.failures``. A launcher runs at most one server at a time;
``stop`` is idempotent and must leave nothing behind. The backends of ``tuner.trial.backends``
compose a launcher with a way to measure what it started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

# Annotations only: the backends' settings read READY_TIMEOUT_S for `--help`.
if TYPE_CHECKING:
    from tuner.config.trial import LaunchContext, ServerConfig
    from tuner.config.vllm_args import VllmVersion
    from tuner.launch.failures import ServerEnd
    from tuner.results import Endpoint

__all__ = ["LOG_NOTE", "READY_TIMEOUT_S", "Launcher"]

# How long a server may take to become ready before its start is a timeout failure: the one
# default of every launcher, the backends' settings and ``--ready-timeout``. A cold start
# (weights from disk, CUDA graphs captured, a torch.compile) takes minutes on a large model.
READY_TIMEOUT_S = 900.0
# Starts a line a launcher adds to the server's saved log, e.g. why the server was killed.
LOG_NOTE = "spectune: "


class Launcher(Protocol):
    """Starts and stops one vLLM server at a time."""

    name: str

    @property
    def version(self) -> VllmVersion:
        """The vLLM version spoken to: given, or detected once (which may start something)."""
        ...

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        """Starts ``server`` and returns once it answers; raises StartupFailure otherwise."""
        ...

    def ended(self) -> ServerEnd | None:
        """How the running server ended, if it has (read after a measurement); else None."""
        ...

    def stop(self) -> None:
        """Stops the running server, if any, and waits until it is gone."""
        ...

    def close(self) -> None:
        """Stops everything this launcher started; called once when the worker is done."""
        ...
