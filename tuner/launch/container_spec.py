"""What each container of a run is made of, beside its mounts: the image and the vLLM command
in it, the host's resources it may use, and how long the launcher waits on it.

Each record is one thing a caller already decides as a whole (``--backend docker`` builds them
from :class:`~tuner.trial.backends.settings.DockerSettings`; a test that runs the fake server
names its command once). The mounts and environment are
:class:`~tuner.launch.mounts.ContainerFiles`. Nothing here imports the docker SDK.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.config.vllm_args import VllmVersion
from tuner.launch.base import READY_TIMEOUT_S

__all__ = ["ContainerResources", "ContainerTiming", "VllmImage"]


@dataclass(frozen=True)
class VllmImage:
    """The image a container runs and the vLLM server in it.

    Attributes:
        name: the image, e.g. ``vllm/vllm-openai:v0.8.5`` (its tag also picks the dialect).
        entrypoint: the command in the image that runs vLLM (answering ``--version``).
        subcommand: between ``entrypoint`` and the server's argv; ``()`` for a server without
            one.
        version: the vLLM flag dialect; None: from the tag, else asked of the image once.
    """

    name: str
    entrypoint: tuple[str, ...] = ("vllm",)
    subcommand: tuple[str, ...] = ("serve",)
    version: VllmVersion | None = None


@dataclass(frozen=True)
class ContainerResources:
    """What each container may use of the host (``docker run --gpus/--memory/--shm-size``).

    Attributes:
        gpus: NVML indices the study may use (a container gets the first TP of them); None for
            all GPUs, ``()`` for none (CPU).
        mem_limit: memory limit, swap included (e.g. ``"8g"``); None: none.
        shm_size: a ``/dev/shm`` size instead of sharing the host's IPC namespace.
    """

    gpus: tuple[int, ...] | None = None
    mem_limit: str | None = None
    shm_size: str | None = None


@dataclass(frozen=True)
class ContainerTiming:
    """How long the launcher waits on a container.

    Attributes:
        ready_timeout_s: how long a start may take before it is a ``timeout`` failure.
        stop_timeout_s: grace between SIGTERM and SIGKILL on stop.
        poll_s: pause between readiness probes.
    """

    ready_timeout_s: float = READY_TIMEOUT_S
    stop_timeout_s: float = 30.0
    poll_s: float = 0.5
