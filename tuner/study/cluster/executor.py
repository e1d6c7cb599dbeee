"""``--ray``: the executor whose trials, and the confirmation's servers, run on a Ray cluster."""

from __future__ import annotations

from tuner.study.cluster.driver import RayOptions, check_cluster, run_on_ray
from tuner.study.cluster.remote import ray_backend_factory
from tuner.study.executor import OnTick, RunSetup, TrialsRun
from tuner.study.lifecycle import OnTrial
from tuner.trial.backends import BackendFactory

__all__ = ["OnRay"]


class OnRay:
    """Trials in slots on the cluster's GPU nodes; this process only writes the study."""

    def __init__(self, options: RayOptions) -> None:
        self.options = options

    def backend_factory(self, backend: str) -> BackendFactory:
        return ray_backend_factory(self.options, backend)

    def prepare(self, run: RunSetup) -> None:
        """Nodes with the study's GPUs; a resumed study's were checked when it was created.
        Each node checks its own backend and fetches its own weights."""
        if not run.resume:
            check_cluster(self.options, run.space.hardware)

    def run_trials(self, run: TrialsRun, on_trial: OnTrial | None, on_tick: OnTick | None) -> None:
        del on_tick  # the driver hears each trial: on_trial says it
        request = run.request
        run_on_ray(
            run.study,
            run.space,
            self.options,
            request.backend,
            run.options,
            request.seed,
            on_trial,
            rounds=request.rounds,
        )
