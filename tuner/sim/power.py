"""What a simulated GPU draws: board power from what each step moves and computes.

A GPU with a model loaded and no work draws its idle power; one that streams memory and runs
its tensor cores flat out draws its board power (the default power limit, TGP or TDP). In
between, the simulator reads each step's work from the step-time model
(:meth:`tuner.sim.perfmodel.PerfModel.step_work`): the share of the datasheet bandwidth the step
streams at (``bytes / (seconds x bandwidth)``) and the share of the datasheet tensor rate it
computes at (``flops / (seconds x tensor rate)``), and draws

    idle + (board - idle) x (memory x bandwidth share + compute x tensor share)

per GPU, capped at the power limit in force. ``memory`` and ``compute`` are fitted to public
power figures (:mod:`tuner.sim.power_fit`): a step at the full tensor rate would draw about
fifteen times what one at the full bandwidth draws above idle (the dense FLOPs counted here
leave out the dequantization a 4-bit kernel also computes, which the weight absorbs). One share
raised to an exponent cannot say that: the RTX 5090 sweep the fit cites measured power *rising*
with K (537 W without speculation, the 600 W limit from K=2) while the share of the bandwidth
the step uses falls, because each verified token adds compute.

The figures are all of one stream decoding: at dozens of requests the tensor share grows and the
model draws the limit, which is what loaded GPUs report, but no cited figure checks by how much.

What it leaves out: clocks that a power limit below the demand lowers (the simulator's step
times are those of the stock limit: a demand above the limit is drawn at the limit, and the step
takes as long as before), temperature, and the memory clock's own idle states.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from tuner.catalog.gpus import GpuSpec, MemoryKind, known_gpus
from tuner.results import MODELLED, GpuWindow
from tuner.sim.perfmodel import StepWork

__all__ = [
    "MODELLED",
    "SHIPPED_POWER",
    "EnergyMeter",
    "PowerConstants",
    "PowerModel",
    "idle_w",
    "power_model",
]


@dataclass(frozen=True)
class PowerConstants:
    """How much of the span between idle and board power a share of each kind of work draws.

    Attributes:
        memory: the span drawn by streaming at the full datasheet bandwidth for the whole step.
        compute: the span drawn by computing at the full datasheet tensor rate.
    """

    memory: float
    compute: float


# Fitted by tuner.sim.power_fit.fit on tuner.sim.power_fit.FIGURES (the reference script
# prints the fit, each figure's error and its error held out).
SHIPPED_POWER = PowerConstants(memory=0.881, compute=14.633)


def idle_w(gpu: GpuSpec) -> float | None:
    """The GPU's idle draw: its cited one, else its board power times the median idle share
    of the cited GPUs of its memory class (None without board power)."""
    if gpu.board_w is None:
        return None
    if gpu.idle_w is not None:
        return gpu.idle_w
    return gpu.board_w * _idle_share(gpu.memory)


def _idle_share(memory: MemoryKind) -> float:
    shares = [
        g.idle_w / g.board_w
        for g in known_gpus()
        if g.memory is memory and g.idle_w is not None and g.board_w is not None
    ]
    if not shares:  # a class without a cited reading: the cited GPUs of any class
        shares = [g.idle_w / g.board_w for g in known_gpus() if g.idle_w and g.board_w]
    return median(shares)


@dataclass(frozen=True)
class PowerModel:
    """One GPU's draw as the simulator models it.

    Attributes:
        idle_w: with a model loaded and no work.
        board_w: the board's default power limit, what full work draws.
        limit_w: the power limit in force (the board's, or a cap).
        bandwidth: datasheet bytes per second.
        tensor_rate: datasheet dense 16-bit FLOPs per second.
        constants: the fitted weights of memory and compute work.
    """

    idle_w: float
    board_w: float
    limit_w: float
    bandwidth: float
    tensor_rate: float
    constants: PowerConstants = SHIPPED_POWER

    def draw_w(self, work: StepWork, seconds: float) -> float:
        """Watts one GPU draws through a step of ``seconds`` that did ``work`` on it."""
        if seconds <= 0:
            return self.idle_w
        return min(self.demand_w(work, seconds), self.limit_w)

    def demand_w(self, work: StepWork, seconds: float) -> float:
        """What the step would draw without a power limit."""
        memory = work.bytes / (seconds * self.bandwidth)
        compute = work.flops / (seconds * self.tensor_rate)
        c = self.constants
        activity = c.memory * memory + c.compute * compute
        return self.idle_w + (self.board_w - self.idle_w) * activity


def power_model(
    gpu: GpuSpec, *, limit_w: float | None = None, constants: PowerConstants = SHIPPED_POWER
) -> PowerModel | None:
    """The power model of ``gpu`` (None where its board power is not published).

    Args:
        limit_w: the power limit in force; None: the board's default.
        constants: the weights of memory and compute work (default: the shipped fit).
    """
    idle = idle_w(gpu)
    if gpu.board_w is None or idle is None:
        return None
    return PowerModel(
        idle_w=idle,
        board_w=gpu.board_w,
        limit_w=gpu.board_w if limit_w is None else limit_w,
        bandwidth=gpu.bandwidth_gbs * 1e9,
        tensor_rate=gpu.fp16_tflops * 1e12,
        constants=constants,
    )


@dataclass
class EnergyMeter:
    """Sums what ``gpus`` GPUs drew over a simulated measured window, step by step.

    Attributes:
        model: each GPU's power model.
        gpus: how many GPUs the work is split over (the tensor-parallel size): each does the
            step's per-GPU work.
    """

    model: PowerModel
    gpus: int
    busy_s: float = 0.0
    busy_j: float = 0.0
    steps: int = 0

    def add(self, work: StepWork, seconds: float) -> None:
        """One step of ``seconds`` that did ``work`` on each GPU."""
        self.busy_s += seconds
        self.busy_j += self.model.draw_w(work, seconds) * seconds * self.gpus
        self.steps += 1

    def window(self, seconds: float) -> GpuWindow:
        """The window of ``seconds`` the steps fell in, the time between steps drawn at idle;
        labelled ``model``: no GPU was read."""
        idle_s = max(seconds - self.busy_s, 0.0)
        energy = self.busy_j + self.model.idle_w * idle_s * self.gpus
        return GpuWindow(
            seconds=seconds,
            samples=self.steps,
            energy_j=energy,
            energy_from=MODELLED,
            mean_power_w=energy / seconds if seconds > 0 else None,
            power_limit_w=(self.model.limit_w,) * self.gpus,
        )
