"""The OOM pre-screen: which configs are worth a launch, learned from the study's own start-ups.

The memory model (:mod:`tuner.sim.memory`) is a model: a start-up uses a few hundred MiB more
or less than it says (allocator fragmentation, library workspaces, another vLLM's rules), so a
config it puts a little short of fitting may well start. Skipping it would hide a good config
for the whole study (the best configs sit next to the memory limit: most KV cache, largest
prefill chunks). So the screen errs towards trying:

- a config is skipped only when the model puts it short by more than the model's own error
  (:data:`MODEL_ERROR_GIB`);
- every start-up the study sees moves that boundary: one that ran out of memory with ``h`` GiB
  to spare under the model says that no config with ``h`` or less will start, whatever its
  method (a draft model, an EAGLE head, MTP layers and a block drafter are all weights, KV cache
  and activations inside the same budget, and the model's error is in the budget, not the
  method). Evidence that contradicts itself (a start-up that ran with less to spare than one
  that did not) is read in favour of trying.

Memory to spare is measured in GiB by :func:`memory_slacks`: how much more the start-up may use
outside vLLM's budget, and inside it (from the KV cache), before it fails; negative where the
model says it fails, by how much.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.trial import ServerConfig
from tuner.config.vllm_version import VllmVersion
from tuner.sim.memory import estimate_memory

__all__ = ["MODEL_ERROR_GIB", "OomScreen", "headroom", "memory_slacks"]

# The memory model's error allowance (GiB): the start-up variation no model sees (the simulated
# launcher's jitter reaches 0.5 GiB) plus two standard deviations of the memory outside vLLM's
# budget (0.125 GiB) -- the same allowance the twin's prior keeps (tuner.sim.twin.fit).
MODEL_ERROR_GIB = 0.75
# The search range (GiB) and resolution of :func:`memory_slacks`' bisections.
_PROBE_GIB = 64.0
_BISECTIONS = 24


def memory_slacks(
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    version: VllmVersion | None = None,
) -> tuple[float, float]:
    """(outside, inside) GiB a start-up of ``server`` may use beyond the memory model before
    it fails; negative: the model says it fails, short by that much.

    Outside is memory held outside vLLM's budget (the CUDA context, other processes); inside
    is memory taken from the KV cache. Each is found by bisection with the other relieved.
    """

    def fits(outside: float, inside: float) -> bool:
        return estimate_memory(
            hardware, target, draft, server, outside, version=version, inside_gib=inside
        ).fits

    return (
        _largest(lambda x: fits(x, -_PROBE_GIB)),
        _largest(lambda x: fits(-_PROBE_GIB, x)),
    )


def headroom(
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    version: VllmVersion | None = None,
) -> float:
    """The least of :func:`memory_slacks`: GiB to spare (negative: short)."""
    return min(memory_slacks(hardware, target, draft, server, version))


def _largest(fits: Callable[[float], bool]) -> float:
    """The largest x in [-_PROBE_GIB, _PROBE_GIB] with ``fits(x)`` (fits is monotone)."""
    low, high = -_PROBE_GIB, _PROBE_GIB
    if not fits(low):
        return low
    if fits(high):
        return high
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


@dataclass
class OomScreen:
    """The study's pre-screen: skips a config only where the model and the evidence agree.

    Attributes:
        tolerance_gib: how far short of fitting (under the model) a config may be and still be
            launched: the model's error.
        ooms: headroom (GiB, under the model) of each start-up that ran out of memory.
        started: headroom of each start-up that did not.
    """

    tolerance_gib: float = MODEL_ERROR_GIB
    ooms: list[float] = field(default_factory=list)
    started: list[float] = field(default_factory=list)

    @property
    def boundary_gib(self) -> float:
        """Configs with this much headroom or less are skipped (strictly less without OOMs).

        The most any start-up that ran out of memory had to spare, among those with less than
        every start-up that ran; else the model's error below zero.
        """
        ran = min(self.started, default=math.inf)
        learned = [h for h in self.ooms if h < ran]
        return max([-self.tolerance_gib, *learned])

    def launches(self, headroom_gib: float) -> bool:
        """Whether a config with ``headroom_gib`` to spare (under the model) is launched."""
        learned = any(h < min(self.started, default=math.inf) for h in self.ooms)
        if learned:
            return headroom_gib > self.boundary_gib
        return headroom_gib >= self.boundary_gib

    def record(self, headroom_gib: float, oom: bool) -> None:
        """Books one start-up: ran out of memory or not, with its headroom under the model."""
        (self.ooms if oom else self.started).append(headroom_gib)

    def why_skipped(self, headroom_gib: float) -> str:
        """The line an OOM-predicted trial carries: the model's verdict or the evidence's."""
        learned = [h for h in self.ooms if h < min(self.started, default=math.inf)]
        if learned and headroom_gib <= max(learned):
            return (
                f"predicted to run out of memory: {headroom_gib:+.2f} GiB to spare under the "
                f"memory model, and a start-up in this study with {max(learned):+.2f} GiB did"
            )
        return (
            f"predicted to run out of memory: {-headroom_gib:.2f} GiB short under the memory "
            f"model, more than its error ({self.tolerance_gib:.2f} GiB)"
        )
