"""``--backend docker``: each server config in its own vLLM container, measured over HTTP.

The container mechanics live in :mod:`tuner.launch.docker`. This backend adds the GPU side,
composed from :mod:`tuner.catalog.nvml`: before the first start it reads the GPUs' used memory
(after removing a crashed run's containers, so their memory does not count); before each later
start it waits, bounded, until memory is back near that baseline (a removed container's memory
is freed asynchronously). The sampling from each start on is every served backend's
(:class:`~tuner.trial.backends.served.ServedBackend`).
"""

from __future__ import annotations

from dataclasses import replace

from tuner.catalog.nvml import GpuMonitor, wait_for_baseline
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.launch.container_spec import ContainerResources, ContainerTiming, VllmImage
from tuner.launch.docker import DockerLauncher
from tuner.launch.mounts import ContainerFiles
from tuner.launch.preflight import Preflight, space_candidates
from tuner.results import Endpoint
from tuner.trial.backends.base import BackendOptions, explicit_version
from tuner.trial.backends.served import ServedBackend
from tuner.trial.backends.settings import DockerSettings
from tuner.trial.run_facts import RunFacts

__all__ = ["DockerBackend"]


class DockerBackend(ServedBackend):
    """Runs each server config in a container, each start on GPUs freed by the one before.

    Args:
        launcher: runs the containers.
        gpu_monitor: where GPU memory is read; default NVML on the launcher's GPUs (without
            NVML, memory is not recorded, which is logged once).
        baseline_timeout_s: the bound on waiting for GPU memory to be freed before a start.
        request_timeout_s: limit on one benchmark request.
    """

    name = "docker"
    launcher: DockerLauncher

    def __init__(
        self,
        launcher: DockerLauncher,
        *,
        gpu_monitor: GpuMonitor | None = None,
        baseline_timeout_s: float = 60.0,
        request_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(
            launcher,
            request_timeout_s=request_timeout_s,
            gpu_monitor=gpu_monitor,
            gpus=launcher.gpus,
        )
        self.baseline_timeout_s = baseline_timeout_s
        self._baseline: list[float] | None = None
        self._started = False

    @classmethod
    def build(cls, space: SearchSpace, options: BackendOptions) -> DockerBackend:
        """The backend ``--backend docker`` runs: the image on the worker's GPUs."""
        settings = options.settings_of(DockerSettings)
        launcher = DockerLauncher(
            VllmImage(
                settings.image or space.vllm_image,
                entrypoint=settings.entrypoint,
                version=explicit_version(space),
            ),
            study=options.study,
            resources=ContainerResources(gpus=options.gpus),
            files=ContainerFiles(
                volumes=dict(settings.volumes),
                environment=dict(settings.env),
                secrets=settings.secrets,
                vllm_cache=settings.vllm_cache,
            ),
            timing=ContainerTiming(ready_timeout_s=settings.ready_timeout_s),
            on_startup=options.on_startup,
        )
        return cls(launcher, request_timeout_s=settings.request_timeout_s)

    def judge(self, space: SearchSpace) -> Preflight:
        """The pre-flight: the vLLM inside the image judges every config ``space`` can propose
        (:func:`tuner.launch.preflight.space_candidates`), before the first trial."""
        candidates = space_candidates(space, self.launcher.version)
        return self.launcher.judge(candidates, space.tensor_parallel_size)

    def facts(self, space: SearchSpace) -> RunFacts:
        return replace(super().facts(space), image=self.launcher.image.name)

    def prepare(self) -> None:
        """The engine answers, no live run holds our GPUs and the image is here (pulled if
        missing), before the study stores anything and before any trial's clock starts.

        Raises:
            EngineUnavailable: no engine answers.
            ConfigError: a live run's container runs on our GPUs (named), or the image cannot
                be pulled (missing, registry unreachable, login needed).
            LaunchError: the engine could not pull it otherwise.
        """
        self.launcher.check_conflicts()
        self.launcher.ensure_image()

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        self.stop()
        monitor = self.gpu_monitor()
        if not self._started:
            self.launcher.cleanup_stale()
            self._baseline = monitor.memory_used_gib()
            self._started = True
        else:
            wait_for_baseline(monitor, self._baseline, timeout_s=self.baseline_timeout_s)
        return super().start(server, context)

    def server_pid(self) -> int | None:
        return self.launcher.server_pid
