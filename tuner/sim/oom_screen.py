"""The OOM pre-screen: which configs are worth a launch, learned from the study's own start-ups.

The memory model (:mod:`tuner.sim.memory`) is a model: a start-up uses a few hundred MiB more
or less than it says (allocator fragmentation, library workspaces, another vLLM's rules), so a
config it puts a little short of fitting may well start. Skipping it would hide a good config
for the whole study (the best configs sit next to the memory limit: most KV cache, largest
prefill chunks). So the screen errs towards trying:

- a config is skipped only when the model puts it short by more than the model's own error
  (:data:`MODEL_ERROR_GIB`);
- every start-up the study sees moves that boundary: one that ran out of memory with ``o`` GiB
  to spare outside vLLM's budget and ``i`` inside says that no config with as little to spare
  on both sides will start, whatever its method (a draft model, an EAGLE head, MTP layers and a
  block drafter are all weights, KV cache and activations inside the same budget, and the
  model's error is in the budget, not the method). Evidence that contradicts itself (a
  start-up that ran with less to spare than one that did not) is read in favour of trying.

Memory to spare is measured in GiB by :func:`memory_slacks`: how much more the start-up may use
outside vLLM's budget, and inside it (from the KV cache), before it fails; negative where the
model says it fails, by how much.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.trial import ServerConfig
from tuner.config.vllm_version import VllmVersion
from tuner.sim.memory import estimate_memory

__all__ = [
    "INSIDE",
    "MODEL_ERROR_GIB",
    "OUTSIDE",
    "OomScreen",
    "Slacks",
    "headroom",
    "memory_slacks",
    "oom_side",
]

# The memory model's error (GiB): the start-up variation no model sees (allocator
# fragmentation, library workspaces; the simulated launcher's jitter reaches 0.5 GiB), the part
# of the margin the twin keeps that no measurement removes (tuner.sim.twin.fit). Nothing here
# measured it on a GPU. 0.98 of a 24 GB card under vLLM 0.7's rules, which the field notes saw
# run out of memory, is short by 0.67 GiB and stays skipped.
MODEL_ERROR_GIB = 0.5
OUTSIDE, INSIDE = "outside", "inside"  # the side of vLLM's budget a start-up ran short on
# vLLM's start-up messages (tuner.sim.memory._failure quotes them), by the side they name.
_SIDES = (
    (INSIDE, ("No available memory for the cache blocks", "KV cache is needed", "max seq len")),
    (OUTSIDE, ("Free memory on device", "loading the model weights", "capturing CUDA graphs")),
)
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


def oom_side(text: str) -> str | None:
    """Which side of vLLM's budget a start-up's OOM message says ran short (None: not said)."""
    for side, markers in _SIDES:
        if any(marker in text for marker in markers):
            return side
    return None


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


Slacks = tuple[float, float]  # (outside, inside) GiB, as memory_slacks gives them


@dataclass
class OomScreen:
    """The study's pre-screen: skips a config only where the model and the evidence agree.

    Attributes:
        tolerance_gib: how far short of fitting (under the model) a config may be and still be
            launched: the model's error.
        ooms: the slacks (under the model) of each start-up that ran out of memory.
        started: the slacks of each start-up that did not.
    """

    tolerance_gib: float = MODEL_ERROR_GIB
    ooms: list[Slacks] = field(default_factory=list)
    started: list[Slacks] = field(default_factory=list)

    def launches(self, slacks: Slacks) -> bool:
        """Whether a config with ``slacks`` to spare (under the model) is launched."""
        return min(slacks) >= -self.tolerance_gib and self._evidence(slacks) is None

    def record(self, slacks: Slacks, oom: bool) -> None:
        """Books one start-up: ran out of memory or not, with its slacks under the model."""
        (self.ooms if oom else self.started).append(slacks)

    def why_skipped(self, slacks: Slacks) -> str:
        """The line an OOM-predicted trial carries: the evidence's verdict or the model's."""
        oom = self._evidence(slacks)
        if oom is not None:
            return (
                f"predicted to run out of memory: {_gib(slacks)} to spare under the memory "
                f"model, and a start-up in this study with {_gib(oom)} did"
            )
        return (
            f"predicted to run out of memory: {-min(slacks):.2f} GiB short under the memory "
            f"model, more than its error ({self.tolerance_gib:.2f} GiB)"
        )

    def _evidence(self, slacks: Slacks) -> Slacks | None:
        """A start-up that ran out of memory with at least as much to spare, outside and inside
        the budget, as ``slacks``; one contradicted by a start-up that ran with no more to spare
        (start-ups vary) is not evidence."""
        for oom in self.ooms:
            if _within(slacks, oom) and not any(_within(s, oom) for s in self.started):
                return oom
        return None


def _within(slacks: Slacks, bound: Slacks) -> bool:
    return slacks[0] <= bound[0] and slacks[1] <= bound[1]


def _gib(slacks: Slacks) -> str:
    return f"{slacks[0]:+.2f} GiB outside vLLM's budget and {slacks[1]:+.2f} GiB inside"
