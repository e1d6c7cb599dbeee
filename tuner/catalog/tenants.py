"""Other tenants of a study's GPUs: the memory other processes hold when the study starts.

A desktop, a notebook or a second model on the GPUs holds memory no server of the study can
use. :func:`read_tenants` reads it through a :class:`~tuner.catalog.nvml.GpuMonitor` before the
study's first server starts (NVML on a real host; a benchmark's simulated world reports its own
the same way), and the study keeps it as its ``tenants`` attribute (:func:`record_tenants`,
:func:`stored_tenants`), so the memory model's every prior starts from it: the warm start's
screen, the twin's memory outside vLLM's budget, the runner's pre-screen. Memory in use then is
all other processes' (no server of the study runs yet); below :data:`TENANT_GIB` it is the
driver's own and counts as none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import field_serializer

from tuner import serde
from tuner.catalog.gpu_state import GpuState

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

    from tuner.catalog.nvml import GpuMonitor

__all__ = [
    "TENANTS_ATTR",
    "TENANT_GIB",
    "Tenants",
    "read_tenants",
    "record_tenants",
    "stored_tenants",
    "tenants_of",
]

TENANTS_ATTR = "tenants"
# Below this a GPU counts as empty: the driver's own context and display buffers of a headless
# host (nvidia-smi shows a few hundred MiB used on an idle 4090).
TENANT_GIB = 0.5


@dataclass(frozen=True)
class Tenants:
    """Memory other processes held on the study's GPUs when it started.

    Attributes:
        gib: GiB in use on the fullest of the GPUs (0.0: none, or nothing could be read).
        pids: the processes NVML listed on that GPU (empty where it lists none: some
            containers hide them).
    """

    gib: float = 0.0
    pids: tuple[int, ...] = ()

    def describe(self) -> str:
        """E.g. ``2.1 GiB (pid 4242)``."""
        if not self.pids:
            return f"{self.gib:.1f} GiB"
        label = "pid" if len(self.pids) == 1 else "pids"
        return f"{self.gib:.1f} GiB ({label} {', '.join(str(p) for p in self.pids)})"

    @field_serializer("gib")
    def _rounded(self, gib: float) -> float:
        return round(gib, 3)


def tenants_of(states: Sequence[GpuState] | None) -> Tenants:
    """What ``states`` (one reading per GPU, taken before the study's servers) say the other
    processes hold: the fullest GPU's memory in use, with the processes on it."""
    if not states:
        return Tenants()
    fullest = max(states, key=lambda s: s.memory_used_gib)
    if fullest.memory_used_gib < TENANT_GIB:
        return Tenants()
    pids = tuple(pid for pid, _ in fullest.processes or ())
    return Tenants(fullest.memory_used_gib, pids)


def read_tenants(monitor: GpuMonitor) -> Tenants:
    """What other processes hold now on the GPUs ``monitor`` reads (nothing without NVML)."""
    return tenants_of(monitor.state())


def record_tenants(study: optuna.Study, tenants: Tenants) -> None:
    """Stores ``tenants`` as the study's ``tenants`` attribute."""
    study.set_user_attr(TENANTS_ATTR, serde.dump(tenants))


def stored_tenants(study: optuna.Study) -> Tenants:
    """What other processes held when the study started; none where it was not read (the
    simulator, a study written before it was recorded)."""
    raw = study.user_attrs.get(TENANTS_ATTR)
    return Tenants() if raw is None else serde.load(Tenants, raw)
