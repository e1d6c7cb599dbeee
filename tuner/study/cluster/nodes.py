"""Which nodes of the cluster have the study's GPUs, and where the next slot goes.

A study's pre-screen and twin are those of its hardware, so a trial may run only on a node
with those GPUs. Each node's GPUs are known one of two ways, read there: a Ray resource the
node declares (``ray start --num-gpus 2 --resources '{"spectune_gpu_4090": 2}'``; any name or
alias of the catalog after the prefix), or, where it declares none, the names NVML gives on
that node. A node whose GPUs neither names is left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tuner.catalog.gpus import GpuSpec, Hardware, find_gpu
from tuner.catalog.nvml import gpu_names
from tuner.errors import ConfigError

__all__ = [
    "DECLARED_PREFIX",
    "NodeGpus",
    "declared_resource",
    "node_options",
    "plan_slots",
    "read_nodes",
    "require_matching",
]

DECLARED_PREFIX = "spectune_gpu_"
_DETECT_TIMEOUT_S = 60.0

# NVML's names on one node, keyed by node id; None where NVML is unavailable there.
Detector = Callable[[list[str]], Mapping[str, list[str] | None]]


@dataclass(frozen=True)
class NodeGpus:
    """One live node as a study sees it."""

    node_id: str
    host: str
    gpus: int  # GPUs Ray may hand out on it
    model: GpuSpec | None  # None: not declared, and NVML could not name them
    how: str  # "declared", "nvml", or "unknown"

    @property
    def label(self) -> str:
        if self.gpus == 0:
            return f"{self.host}: no GPU"
        if self.model is None:
            return f"{self.host}: {self.gpus} GPUs of unknown model"
        return f"{self.host}: {self.gpus}x {self.model.name} ({self.how})"

    def slots(self, hardware: Hardware) -> int:
        """How many trials of ``hardware`` fit on this node at once."""
        return self.gpus // hardware.count if self.model == hardware.gpu else 0


def declared_resource(hardware: Hardware) -> str:
    """The Ray resource a node declares for these GPUs, e.g. ``spectune_gpu_4090``."""
    return DECLARED_PREFIX + hardware.gpu.aliases[0]


def _declared(resources: Mapping[str, float]) -> tuple[GpuSpec | None, int] | None:
    for key, amount in resources.items():
        if key.startswith(DECLARED_PREFIX):
            return find_gpu(key[len(DECLARED_PREFIX) :]), int(amount)
    return None


def read_nodes(nodes: Iterable[Mapping[str, Any]], detect: Detector) -> list[NodeGpus]:
    """The live nodes of ``ray.nodes()`` with their GPUs, declared or detected."""
    alive = [n for n in nodes if n.get("Alive")]
    undeclared = [
        str(n["NodeID"])
        for n in alive
        if n["Resources"].get("GPU", 0) >= 1 and _declared(n["Resources"]) is None
    ]
    detected = detect(undeclared) if undeclared else {}
    found = []
    for node in alive:
        node_id, resources = str(node["NodeID"]), node["Resources"]
        gpus = int(resources.get("GPU", 0))
        declared = _declared(resources)
        if declared is not None:
            model, count = declared
            found.append(NodeGpus(node_id, _host(node), min(gpus, count), model, "declared"))
            continue
        names = detected.get(node_id)
        models = {find_gpu(name) for name in names or ()}
        model = models.pop() if len(models) == 1 else None
        how = "nvml" if model is not None else "unknown"
        found.append(NodeGpus(node_id, _host(node), gpus, model, how))
    return sorted(found, key=lambda n: (n.host, n.node_id))


def _host(node: Mapping[str, Any]) -> str:
    return str(node.get("NodeManagerHostname") or node.get("NodeManagerAddress") or "?")


def detect_with_nvml(ray: Any) -> Detector:
    """A detector that asks NVML on each node, in a task pinned there."""

    def detect(node_ids: list[str]) -> Mapping[str, list[str] | None]:
        names = ray.remote(num_cpus=0, num_gpus=0)(gpu_names)
        refs = [names.options(**node_options(ray, n)).remote(None) for n in node_ids]
        try:
            return dict(zip(node_ids, ray.get(refs, timeout=_DETECT_TIMEOUT_S), strict=True))
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(
                f"the Ray cluster did not name its nodes' GPUs within {_DETECT_TIMEOUT_S:.0f} s: "
                "declare them on each node with ray start --resources "
                "'{\"spectune_gpu_<gpu>\": N}'"
            ) from None

    return detect


def node_options(ray: Any, node_id: str) -> dict[str, Any]:
    """Ray options that pin a task or actor to ``node_id`` (and nowhere else, ever)."""
    strategies = ray.util.scheduling_strategies
    return {"scheduling_strategy": strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)}


def require_matching(nodes: list[NodeGpus], hardware: Hardware, address: str) -> list[NodeGpus]:
    """The nodes a trial of ``hardware`` can run on.

    Raises:
        ConfigError: no node has them; the message lists what each node has.
    """
    matching = [n for n in nodes if n.slots(hardware) > 0]
    if matching:
        return matching
    have = "; ".join(n.label for n in nodes) or "no live node"
    raise ConfigError(
        f"no node of the Ray cluster at {address} has {hardware.label} for the study "
        f"({have}): run it on matching nodes, or declare a node's GPUs with ray start "
        f"--num-gpus N --resources '{{\"{declared_resource(hardware)}\": N}}'"
    )


def plan_slots(
    nodes: list[NodeGpus], hardware: Hardware, wanted: int, used: Counter[str]
) -> list[str]:
    """Node ids for up to ``wanted`` more slots, spread: the least used node first.

    ``used`` counts the slots each node holds already; it is not changed.
    """
    taken = Counter(used)
    planned: list[str] = []
    for _ in range(wanted):
        free = [n for n in nodes if taken[n.node_id] < n.slots(hardware)]
        if not free:
            break
        node = min(free, key=lambda n: (taken[n.node_id], n.host, n.node_id))
        taken[node.node_id] += 1
        planned.append(node.node_id)
    return planned
