"""The backend seam: one protocol for the simulator, local vLLM processes and containers.

A backend runs at most one server at a time, in a GuideLLM-style lifecycle::

    endpoint = backend.start(server, context)   # StartupFailure: classified oom/crash/...
    result = backend.measure(config, concurrency, seed)   # on that server; MeasurementError
    backend.stop()                              # idempotent; nothing left behind
    backend.close()                             # once, when the worker is done

The trial runner decides when to restart (only when the ServerConfig changes); a backend only
does what it is told. Every backend hands back the same :class:`~tuner.results.TrialResult`,
labelled with its :attr:`Backend.source`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Protocol, TypeVar

from pydantic import Field

from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.config.vllm_args import VllmVersion, parse_version
from tuner.errors import ConfigError
from tuner.results import Endpoint, OnStartup, Source, TrialResult
from tuner.trial.backends.settings import (
    BackendSettings,
    DockerSettings,
    ProcessSettings,
    SimSettings,
)
from tuner.trial.run_facts import RunFacts

__all__ = ["Backend", "BackendOptions", "explicit_version"]


class Backend(Protocol):
    """Starts one server config at a time, measures it, stops it."""

    @property
    def name(self) -> str:
        """The name it is chosen by: ``sim``, ``process``, ``docker``."""
        ...

    @property
    def source(self) -> Source:
        """How this backend's numbers are labelled (simulated or measured)."""
        ...

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        """Starts ``server`` (stopping the previous one) and returns once it is ready.

        Raises:
            StartupFailure: the server did not come up; nothing of it is left running.
            ConfigError: this backend can never run ``server`` (nothing was started).
        """
        ...

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        """Benchmarks the running server with ``config``'s request side at ``concurrency``.

        Raises:
            MeasurementError: no server runs, or no request succeeded.
        """
        ...

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        """The running server's greedy answer to each of ``requests`` (a lossy verifier's
        quality check, :mod:`tuner.bench.quality`).

        Raises:
            MeasurementError: no server runs, or a request failed.
        """
        ...

    def stop(self) -> None:
        """Stops the running server, if any, and waits until it is gone; idempotent."""
        ...

    def close(self) -> None:
        """Stops everything this backend started and releases what it holds; idempotent."""
        ...

    def facts(self, space: SearchSpace) -> RunFacts:
        """What it runs ``space``'s servers with (read after a start: the vLLM version may be
        detected then), as the study records it."""
        ...


S = TypeVar("S", SimSettings, ProcessSettings, DockerSettings)


@dataclass(frozen=True)
class BackendOptions:
    """Where one worker runs servers, and the chosen backend's own settings; the search space
    says what they run."""

    study: str
    seed: int = 0
    gpus: tuple[int, ...] | None = None  # GPU indices this worker may use (None: all)
    worker: str = "0"  # tells one study's workers on a host apart (container names, labels)
    # The chosen backend's settings (tuner.trial.backends.settings); None: its defaults.
    settings: Annotated[BackendSettings | None, Field(discriminator="backend")] = None
    # Where a start reports its phases (the CLI's live table); in-process runs only: a record
    # handed to another process leaves it behind.
    on_startup: Annotated[OnStartup | None, Field(exclude=True)] = field(
        default=None, compare=False, repr=False
    )

    def settings_of(self, kind: type[S]) -> S:
        """The settings, of the backend that builds from them (its defaults if none are set).

        Raises:
            ConfigError: they are another backend's.
        """
        if self.settings is None:
            return kind()
        if not isinstance(self.settings, kind):
            raise ConfigError(
                f"{self.settings.backend} backend settings given to the {kind().backend} "
                f"backend: pass --backend {self.settings.backend}, or that backend's flags"
            )
        return self.settings


def explicit_version(space: SearchSpace) -> VllmVersion | None:
    """The version the user gave; otherwise the launcher asks the image tag or `vllm --version`."""
    return parse_version(space.vllm_version) if space.vllm_version else None
