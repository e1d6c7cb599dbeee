"""What the fake server's simulated GPUs draw, on the real-time clock its steps run on.

Each step the fake server runs draws what :class:`tuner.sim.power.PowerModel` says its work
draws, for the real seconds it takes (its simulated seconds over ``--sim-speed``); between steps
the GPUs draw their idle power. :class:`GpuTrace` keeps the running sum, one GPU's, as a board's
energy counter does; ``/metrics`` shows it (``spectune_sim_gpu_energy_joules_total``, with the
present draw as ``spectune_sim_gpu_power_watts``) so that the NVML stand-in of the tests
(``tests/testbed/gpus.py``) reads power and energy that follow the work the server did.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.sim.perfmodel import StepWork
from tuner.sim.power import PowerModel

__all__ = ["GpuTrace"]


@dataclass
class GpuTrace:
    """One GPU's energy counter and present draw, on a monotonic clock (seconds).

    Attributes:
        model: the GPU's power model.
        since: when the counter started.
    """

    model: PowerModel
    since: float
    _energy_j: float = 0.0
    _until: float = 0.0  # the counter covers time up to here
    _draw_w: float = 0.0  # what the GPU draws from _until on, while no step is added

    def __post_init__(self) -> None:
        self._until = self.since
        self._draw_w = self.model.idle_w

    def step(self, work: StepWork, simulated_s: float, began: float, ended: float) -> None:
        """A step that did ``work`` in ``simulated_s`` ran from ``began`` to ``ended``."""
        self._energy_j += self.model.idle_w * max(began - self._until, 0.0)
        draw = self.model.draw_w(work, simulated_s)
        self._energy_j += draw * max(ended - max(began, self._until), 0.0)
        self._until = max(ended, self._until)
        self._draw_w = draw

    def idle(self, at: float) -> None:
        """From ``at`` on the GPU has nothing to do."""
        self._energy_j += self._draw_w * max(at - self._until, 0.0)
        self._until = max(at, self._until)
        self._draw_w = self.model.idle_w

    def read(self, now: float) -> tuple[float, float]:
        """(watts drawn now, joules since the counter started) at ``now``."""
        return self._draw_w, self._energy_j + self._draw_w * max(now - self._until, 0.0)
