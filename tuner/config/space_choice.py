"""The space as a user names it on the command line, resolved into a :class:`SearchSpace`
where the run opens (:class:`tuner.study.run.OpenedRun`)."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.catalog.gpus import parse_hardware
from tuner.config.preference import Preference
from tuner.config.space import SearchSpace, load_space
from tuner.config.vllm_version import check_release

__all__ = ["SpaceChoice"]


@dataclass(frozen=True)
class SpaceChoice:
    """A shipped space's name or a YAML path, and what the user overrode of it; None: not
    given. A choice with nothing given is the default nobody chose: a stored study of the
    run's name resumes with its own space instead, and the hardware is this host's GPUs."""

    space: str | None = None  # a shipped name or a YAML path (default: ``default``)
    hardware: str | None = None  # e.g. 4090x2
    ttft_limit_ms: float | None = None
    vllm_version: str | None = None
    prefer: str | None = None  # throughput, energy or both

    @property
    def explicit(self) -> bool:
        """Whether the user named anything of the space."""
        given = (self.space, self.hardware, self.ttft_limit_ms, self.vllm_version, self.prefer)
        return any(value is not None for value in given)

    def resolve(self) -> SearchSpace:
        """The space loaded, with each override applied.

        Raises:
            ConfigError: no such space, an unknown GPU or release, a bad limit.
        """
        loaded = load_space(self.space)
        if self.hardware is not None:
            loaded = loaded.with_hardware(parse_hardware(self.hardware))
        if self.ttft_limit_ms is not None:
            loaded = loaded.with_ttft_limit(self.ttft_limit_ms)
        if self.vllm_version is not None:
            check_release(self.vllm_version)
            loaded = loaded.with_vllm_version(self.vllm_version)
        if self.prefer is not None:
            loaded = loaded.with_prefer(Preference(self.prefer))
        return loaded
