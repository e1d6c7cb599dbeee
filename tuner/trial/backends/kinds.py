"""The backends by name, and what a study asks of one besides running its servers."""

from __future__ import annotations

import enum

from tuner.errors import ConfigError
from tuner.results import Source

__all__ = ["BackendKind"]


class BackendKind(enum.StrEnum):
    """A backend, named as ``--backend`` names it (a ``str``: stored and compared as one)."""

    SIM = "sim"  # the simulator, in virtual time: nothing runs
    PROCESS = "process"  # `vllm serve` on this host
    DOCKER = "docker"  # the vllm/vllm-openai image on this host's Docker Engine

    @classmethod
    def parse(cls, name: str) -> BackendKind:
        """The backend called ``name``.

        Raises:
            ConfigError: an unknown name; the message lists the known ones.
        """
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(kind.value for kind in cls)
            raise ConfigError(f"unknown backend {name!r}: choose one of {known}") from None

    @property
    def source(self) -> Source:
        """Where its numbers come from."""
        return Source.SIMULATED if self is BackendKind.SIM else Source.MEASURED

    @property
    def on_gpus(self) -> bool:
        """Whether its servers run on this host's GPUs (every backend but the simulator): the
        GPUs it detects, the memory others hold on them and the models it loads matter."""
        return self is not BackendKind.SIM
