"""The twin's power correction: one scale on the power model, fitted to measured GPU windows.

The shipped power model (:mod:`tuner.sim.power`) draws ``idle + span x activity`` per GPU, its
weights fitted to public figures of other hosts. A study that read NVML on its own GPUs knows
what they drew for each measured pair; predicting each pair again with the simulator, the
ratio of the measured draw above idle to the predicted one is this host's correction (a board
that draws more for the same work, another clock policy, a cap). :func:`fit_power_scale` takes
the weighted geometric mean of those ratios (weighted by each window's seconds) and says how far
the pairs spread around it, the band J/token then carries.

Pairs that say nothing of the board's draw for the work are left out: simulated windows (the
model's own figure), throttled ones (heat held the clocks down), and those the prediction puts
at the power limit (the demand above the limit is not seen).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import load_model
from tuner.config.trial import ServerConfig, load_draft
from tuner.config.workload import WorkloadSpec
from tuner.errors import StartupFailure
from tuner.sim.power import SHIPPED_POWER, PowerConstants, power_model
from tuner.sim.virtual_time import SHIPPED, Physics, predict

__all__ = ["MIN_PAIRS", "MeasuredPower", "PowerScale", "fit_power_scale", "scaled"]

MIN_PAIRS = 3  # fewer measured pairs leave the shipped model as it is
_AT_LIMIT = 0.98  # a prediction this close to the limit does not show the demand


@dataclass(frozen=True)
class MeasuredPower:
    """One measured pair's GPU window, as the power fit needs it.

    Attributes:
        server: the server config measured.
        temperature: the requests' sampling temperature.
        concurrency: requests in flight.
        mean_power_w: the window's mean power, all GPUs summed.
        seconds: the window's length (the pair's weight).
        limit_w: the power limit in force per GPU (the last reading's); None: not read.
    """

    server: ServerConfig
    temperature: float
    concurrency: int
    mean_power_w: float
    seconds: float
    limit_w: float | None = None


@dataclass(frozen=True)
class PowerScale:
    """The fitted correction.

    Attributes:
        scale: the factor on the power model's draw above idle.
        pairs: the measured pairs it was fitted to.
        spread: the largest relative gap of a pair's measured draw from the scaled prediction.
    """

    scale: float
    pairs: int
    spread: float

    def describe(self) -> str:
        """``+/- 6 % (the power model scaled x1.12 to the study's 14 measured pairs)``."""
        return (
            f"+/- {self.spread * 100:.0f} % (the power model scaled x{self.scale:.2f} to the "
            f"study's {self.pairs} measured pairs)"
        )


def scaled(constants: PowerConstants, scale: float) -> PowerConstants:
    """The power model's weights with its draw above idle scaled by ``scale``."""
    return PowerConstants(memory=constants.memory * scale, compute=constants.compute * scale)


def fit_power_scale(
    hardware: Hardware,
    workload: WorkloadSpec,
    measured: Sequence[MeasuredPower],
    physics: Physics = SHIPPED,
) -> PowerScale | None:
    """The scale that brings the power model to ``measured`` (None: under :data:`MIN_PAIRS`
    usable pairs, or a GPU without board power).

    Args:
        hardware: the study's GPUs.
        workload: what the pairs served (each pair's concurrency and temperature apply).
        measured: the pairs' measured windows.
        physics: the step-time model the pairs are predicted with (a study's twin, or shipped).
    """
    usable: list[tuple[float, float, float, float]] = []  # (measured, predicted, idle, weight)
    for pair in measured:
        power = power_model(hardware.gpu, limit_w=pair.limit_w)
        if power is None:
            return None
        predicted = _predicted_w(hardware, workload, pair, physics, power.limit_w)
        gpus = pair.server.tensor_parallel_size
        idle = power.idle_w * gpus
        if predicted is None or predicted >= _AT_LIMIT * power.limit_w * gpus:
            continue
        if predicted > idle and pair.mean_power_w > idle and pair.seconds > 0:
            usable.append((pair.mean_power_w, predicted, idle, pair.seconds))
    if len(usable) < MIN_PAIRS:
        return None
    total = sum(weight for *_, weight in usable)
    log_scale = (
        sum(weight * math.log((m - idle) / (p - idle)) for m, p, idle, weight in usable) / total
    )
    scale = math.exp(log_scale)
    spread = max(abs((idle + scale * (p - idle)) / m - 1) for m, p, idle, _ in usable)
    return PowerScale(round(scale, 4), len(usable), spread)


def _predicted_w(
    hardware: Hardware,
    workload: WorkloadSpec,
    pair: MeasuredPower,
    physics: Physics,
    limit_w: float,
) -> float | None:
    """The shipped power model's mean draw for the pair, all GPUs (None: it would not start)."""
    server = pair.server
    target = load_model(server.model)
    draft = load_draft(server)
    power = power_model(hardware.gpu, limit_w=limit_w, constants=SHIPPED_POWER)
    try:
        result = predict(
            hardware,
            target,
            draft,
            server,
            pair.temperature,
            workload,
            pair.concurrency,
            physics,
            power=power,
        )
    except StartupFailure:
        return None
    return None if result.gpu is None else result.gpu.mean_power_w
