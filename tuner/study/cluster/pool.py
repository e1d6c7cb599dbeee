"""The slots of one study on the cluster: placed on matching nodes, replaced when a node is lost.

Each slot asks Ray for as many GPUs as the study's tensor-parallel size and is pinned to a node
chosen here (:func:`~tuner.study.cluster.nodes.plan_slots`: matching nodes, least used first),
so ``--parallel 2`` on two nodes runs one trial on each. A node whose slot died is not used
again by this study: Ray may still list it as alive for a while.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.study.cluster.nodes import NodeGpus, node_options, plan_slots
from tuner.study.cluster.slot import SlotRequest, TrialSlot
from tuner.study.handoff import dump_record
from tuner.trial.backends import BackendOptions

__all__ = ["Slot", "SlotPool"]

_CLOSE_S = 90.0  # a slot's servers get this long to stop before Ray kills the slot


@dataclass(frozen=True)
class Slot:
    """A live slot: its actor and where it runs."""

    number: int
    handle: Any  # the Ray actor
    node_id: str
    host: str

    @property
    def worker(self) -> str:
        return f"{self.host}/ray-{self.number}"


class SlotPool:
    """Creates, replaces, cancels and closes a study's slots.

    Args:
        ray: the connected ``ray`` module.
        space: the study's search space (its hardware sizes each slot).
        backend: the backend each slot builds.
        options: backend options (GPUs and worker names are each slot's own).
        nodes: the nodes whose GPUs match the study.
        start_timeout_s: how long a slot may take to be placed and ready.
    """

    def __init__(
        self,
        ray: Any,
        space: SearchSpace,
        backend: str,
        options: BackendOptions,
        nodes: list[NodeGpus],
        start_timeout_s: float,
    ) -> None:
        self.ray = ray
        self.space = space
        self.record = dump_record(SlotRequest(backend, options))  # what every slot is handed
        self.nodes = nodes
        self.start_timeout_s = start_timeout_s
        self.slots: list[Slot] = []
        self.lost: set[str] = set()  # node ids
        self._numbers = 0
        # Two threads: one runs trials, the other can cancel them (tuner.study.cluster.slot).
        self._actor = ray.remote(max_concurrency=2, max_restarts=0, num_cpus=0)(TrialSlot)

    def grow(self, wanted: int) -> list[Slot]:
        """Up to ``wanted`` new slots on nodes with free matching GPUs; returns them ready.

        Raises:
            ConfigError: a slot could not start on its node (its GPUs are not the study's,
                its backend cannot be built there).
        """
        usable = [n for n in self.nodes if n.node_id not in self.lost]
        used = Counter(s.node_id for s in self.slots)
        planned = plan_slots(usable, self.space.hardware, wanted, used)
        hosts = {n.node_id: n.host for n in self.nodes}
        made = []
        for node_id in planned:
            handle = self._actor.options(
                num_gpus=self.space.hardware.count, **node_options(self.ray, node_id)
            ).remote(self.space, self.record, self._numbers)
            made.append(Slot(self._numbers, handle, node_id, hosts[node_id]))
            self._numbers += 1
        ready = self._wait_ready(made)
        self.slots += ready
        return ready

    def _wait_ready(self, made: list[Slot]) -> list[Slot]:
        if not made:
            return []
        refs = {slot.handle.where.remote(): slot for slot in made}
        done, pending = self.ray.wait(
            list(refs), num_returns=len(refs), timeout=self.start_timeout_s
        )
        for ref in pending:  # not placed in time: its node's GPUs are busy with other work
            self._kill(refs[ref])
        ready = []
        for ref in done:
            slot = refs[ref]
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayActorError as exc:
                self._kill(refs[ref])
                lines = [line for line in str(exc).splitlines() if line.strip()]
                raise ConfigError(
                    f"the trial slot on Ray node {slot.host} did not start: "
                    f"{lines[-1] if lines else type(exc).__name__}"
                ) from None
            ready.append(slot)
        return ready

    def lose(self, slot: Slot) -> None:
        """Forgets ``slot`` and never places another slot on its node."""
        self.lost.add(slot.node_id)
        self.slots = [s for s in self.slots if s.number != slot.number]
        self._kill(slot)

    def cancel(self) -> None:
        """Interrupts every slot's trial; each stops its servers before it is killed."""
        self._end("cancel")

    def close(self) -> None:
        """Stops every slot's servers, then ends the slots."""
        self._end("close")

    def _end(self, method: str) -> None:
        refs = [getattr(s.handle, method).remote() for s in self.slots]
        if refs:
            self.ray.wait(refs, num_returns=len(refs), timeout=_CLOSE_S)
        for slot in self.slots:
            self._kill(slot)
        self.slots = []

    def _kill(self, slot: Slot) -> None:
        # Already dead, or its node gone: nothing is left to end.
        with contextlib.suppress(Exception):
            self.ray.kill(slot.handle, no_restart=True)
