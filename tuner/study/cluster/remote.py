"""A backend whose servers run in a slot on the cluster: confirmation runs there too.

:func:`tuner.study.confirm.confirm` measures the best configs again on fresh servers through
the Backend protocol; with ``--ray`` those servers must run on a node with the study's GPUs,
not on the driver. :class:`RemoteBackend` forwards each call to one slot's backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import ConfigError, LaunchError
from tuner.results import Endpoint, Source, TrialResult
from tuner.study.cluster.connect import connect
from tuner.study.cluster.driver import RayOptions, check_ray_options
from tuner.study.cluster.nodes import detect_with_nvml, read_nodes, require_matching
from tuner.study.cluster.pool import Slot, SlotPool
from tuner.study.cluster.slot import WireError
from tuner.trial.backends import Backend, BackendFactory, BackendOptions
from tuner.trial.backends.kinds import BackendKind
from tuner.trial.record import RunFacts

__all__ = ["RemoteBackend", "ray_backend_factory"]


class RemoteBackend:
    """The Backend protocol, served by one slot on a node of the cluster."""

    def __init__(self, pool: SlotPool, slot: Slot, name: str) -> None:
        self.pool = pool
        self.slot = slot
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def source(self) -> Source:
        return BackendKind.parse(self._name).source

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        endpoint: Endpoint = self._call("start", server, context)
        return endpoint

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        result: TrialResult = self._call("measure", config, concurrency, seed)
        return result

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        answers: tuple[str, ...] = self._call("answer", tuple(requests))
        return answers

    def stop(self) -> None:
        self._call("stop")

    def close(self) -> None:
        self.pool.close()

    def facts(self, space: SearchSpace) -> RunFacts:
        """What ran the slot's servers, read on its node (which holds the space too)."""
        del space
        facts: RunFacts = self._call("facts")
        return facts

    def _call(self, method: str, *args: Any) -> Any:
        ray = self.pool.ray
        try:
            answer = ray.get(getattr(self.slot.handle, method).remote(*args))
        except ray.exceptions.RayActorError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise LaunchError(f"Ray node {self.slot.host} was lost: {first}") from None
        if isinstance(answer, WireError):
            raise answer.error()
        return answer


def ray_backend_factory(ray_options: RayOptions, backend: str) -> BackendFactory:
    """Builds a :class:`RemoteBackend` on one new slot of the cluster at ``ray_options``."""
    check_ray_options(ray_options)

    def build(space: SearchSpace, options: BackendOptions) -> Backend:
        ray = connect(ray_options.address)
        nodes = read_nodes(ray.nodes(), detect_with_nvml(ray))
        matching = require_matching(nodes, space.hardware, ray_options.address)
        pool = SlotPool(ray, space, backend, options, matching, ray_options.start_timeout_s)
        slots = pool.grow(1)
        if not slots:
            raise ConfigError(
                f"no node with {space.hardware.label} had free GPUs within "
                f"{ray_options.start_timeout_s:.0f} s to confirm the best configs"
            )
        return RemoteBackend(pool, slots[0], backend)

    return build
