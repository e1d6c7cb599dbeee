"""``--backend process``: ``vllm serve`` as a child process of this host, measured over HTTP.

The mechanics (process group, port, readiness, a child that dies with spectune, the leftovers
of a killed run) live in :mod:`tuner.launch.process`.
"""

from __future__ import annotations

from tuner.catalog.nvml import GpuMonitor
from tuner.config.space import SearchSpace
from tuner.launch.process import ProcessLauncher
from tuner.trial.backends.base import BackendOptions, explicit_version
from tuner.trial.backends.served import ServedBackend
from tuner.trial.backends.settings import ProcessSettings

__all__ = ["ProcessBackend"]


class ProcessBackend(ServedBackend):
    """Runs each server config as a local ``vllm serve`` (or any command taking its flags)."""

    name = "process"
    launcher: ProcessLauncher

    def __init__(
        self,
        launcher: ProcessLauncher,
        *,
        request_timeout_s: float = 120.0,
        gpu_monitor: GpuMonitor | None = None,
        gpus: tuple[int, ...] | None = None,
        sample_interval_s: float = 0.5,
    ) -> None:
        super().__init__(
            launcher,
            request_timeout_s=request_timeout_s,
            gpu_monitor=gpu_monitor,
            gpus=gpus,
            sample_interval_s=sample_interval_s,
        )

    @classmethod
    def build(cls, space: SearchSpace, options: BackendOptions) -> ProcessBackend:
        """The backend ``--backend process`` runs: its vLLM command on the worker's GPUs."""
        settings = options.settings_of(ProcessSettings)
        env = (
            {}
            if options.gpus is None
            else {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in options.gpus)}
        )
        launcher = ProcessLauncher(
            settings.vllm_command,
            version=explicit_version(space),
            ready_timeout_s=settings.ready_timeout_s,
            env=env,
            on_startup=options.on_startup,
        )
        return cls(launcher, request_timeout_s=settings.request_timeout_s, gpus=options.gpus)

    def server_pid(self) -> int | None:
        return self.launcher.pid
