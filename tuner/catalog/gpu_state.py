"""One GPU's state at one moment, and a measured window's readings summed up.

:class:`GpuState` is what :meth:`tuner.catalog.nvml.GpuMonitor.state` reads per GPU (power,
the energy counter, clocks, temperature, the clocks-event reasons, the power limit in force,
the processes holding memory); :func:`summarise` turns the readings that fall inside a
measured window into the :class:`~tuner.results.GpuWindow` stored with the pair.

Energy comes from the boards' energy counters (NVML's total energy since the driver loaded,
Volta and later) where every GPU has one; otherwise from the mean power reading times the
window's length. Either way the figure is scaled to the window: readings come every half
second or so, so the first and last fall a little inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import fmean

from tuner.results import GpuWindow, Throttle

__all__ = ["GpuState", "combined", "summarise"]


@dataclass(frozen=True)
class GpuState:
    """One GPU read at one moment; a field is None where this GPU or driver cannot say.

    Attributes:
        at: when, on the monotonic clock (the clock request timestamps use).
        gpu: the NVML index.
        memory_used_gib: memory in use, every process's.
        power_w: board power draw.
        energy_j: the board's energy counter (joules since the driver loaded).
        sm_clock_mhz: the SM clock.
        memory_clock_mhz: the memory clock.
        temperature_c: the GPU's temperature.
        power_limit_w: the power limit in force (the user's cap, or the board's default).
        throttle: the clocks-event reasons active now.
        processes: (pid, GiB) of every process NVML lists on the GPU; None where it cannot.
    """

    at: float
    gpu: int
    memory_used_gib: float
    power_w: float | None = None
    energy_j: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    throttle: frozenset[Throttle] = field(default_factory=frozenset)
    processes: tuple[tuple[int, float], ...] | None = None


# Whether a process is the measured server's (its own processes are no other tenant's memory).
Owns = Callable[[int], bool]


def summarise(
    states: Sequence[GpuState], window: tuple[float, float], owns: Owns | None = None
) -> GpuWindow | None:
    """The readings inside ``window`` (start, end on the monotonic clock) summed up.

    Args:
        states: readings of every GPU, in the order taken.
        window: the measured window; readings outside it (warm-up, start-up) are left out.
        owns: which processes are the server's; None when that cannot be told, and then the
            memory of other tenants is not reported.

    Returns:
        The window's figures; None when no reading fell inside it.
    """
    start, end = window
    inside = [s for s in states if start <= s.at <= end]
    if not inside:
        return None
    by_gpu: dict[int, list[GpuState]] = {}
    for state in inside:
        by_gpu.setdefault(state.gpu, []).append(state)
    seconds = end - start
    mean_power = _mean_power(by_gpu)
    energy, energy_from = _energy(by_gpu, seconds, mean_power)
    others = (
        [_others_gib(readings, owns) for readings in zip(*by_gpu.values(), strict=False)]
        if owns is not None
        else []
    )
    known = [o for o in others if o is not None]
    return GpuWindow(
        seconds=seconds,
        samples=min(len(readings) for readings in by_gpu.values()),
        energy_j=energy,
        energy_from=energy_from,
        mean_power_w=mean_power,
        sm_clock_mhz=_mean(inside, lambda s: s.sm_clock_mhz),
        memory_clock_mhz=_mean(inside, lambda s: s.memory_clock_mhz),
        max_temperature_c=max(
            (s.temperature_c for s in inside if s.temperature_c is not None), default=None
        ),
        power_limit_w=tuple(
            limit
            for readings in by_gpu.values()
            if (limit := readings[-1].power_limit_w) is not None
        ),
        throttled_s=_throttled_s(by_gpu, end),
        others_memory_gib=max(known) if known else None,
        others_memory_change_gib=max(known) - min(known) if known else None,
    )


def combined(windows: Sequence[GpuWindow]) -> GpuWindow | None:
    """Windows measured one after another on the same server (a pair's rounds) as one."""
    if not windows:
        return None
    seconds = sum(w.seconds for w in windows)
    energies = [w.energy_j for w in windows]
    energy = None if any(e is None for e in energies) else sum(e or 0.0 for e in energies)
    throttled: dict[str, float] = {}
    for window in windows:
        for reason, held in window.throttled_s.items():
            throttled[reason] = round(throttled.get(reason, 0.0) + held, 3)
    others = [w.others_memory_gib for w in windows if w.others_memory_gib is not None]
    changes = [w.others_memory_change_gib or 0.0 for w in windows]
    return GpuWindow(
        seconds=seconds,
        samples=sum(w.samples for w in windows),
        energy_j=energy,
        energy_from=None if energy is None else _energy_from(windows),
        mean_power_w=energy / seconds if energy is not None and seconds > 0 else None,
        sm_clock_mhz=_weighted(windows, lambda w: w.sm_clock_mhz),
        memory_clock_mhz=_weighted(windows, lambda w: w.memory_clock_mhz),
        max_temperature_c=max(
            (w.max_temperature_c for w in windows if w.max_temperature_c is not None), default=None
        ),
        power_limit_w=windows[-1].power_limit_w,
        throttled_s=dict(sorted(throttled.items())),
        others_memory_gib=max(others) if others else None,
        others_memory_change_gib=max([*changes, max(others) - min(others)]) if others else None,
    )


def _energy_from(windows: Sequence[GpuWindow]) -> str:
    """Where the windows' energy came from: their common source (the boards' counters, or the
    simulator's model), else power readings."""
    sources = {w.energy_from for w in windows}
    return str(sources.pop()) if len(sources) == 1 and None not in sources else "power"


def _weighted(
    windows: Sequence[GpuWindow], read: Callable[[GpuWindow], float | None]
) -> float | None:
    pairs = [(v, w.seconds) for w in windows if (v := read(w)) is not None]
    total = sum(s for _, s in pairs)
    return sum(v * s for v, s in pairs) / total if pairs and total > 0 else None


def _mean(states: Sequence[GpuState], read: Callable[[GpuState], float | None]) -> float | None:
    values = [v for s in states if (v := read(s)) is not None]
    return fmean(values) if values else None


def _mean_power(by_gpu: dict[int, list[GpuState]]) -> float | None:
    """All GPUs' mean power summed: from each counter's delta where it moved, else the readings."""
    total = 0.0
    for readings in by_gpu.values():
        power = _counter_power(readings)
        if power is None:
            power = _mean(readings, lambda s: s.power_w)
        if power is None:
            return None
        total += power
    return total


def _counter_power(readings: Sequence[GpuState]) -> float | None:
    first, last = readings[0], readings[-1]
    if first.energy_j is None or last.energy_j is None or last.at <= first.at:
        return None
    return (last.energy_j - first.energy_j) / (last.at - first.at)


def _energy(
    by_gpu: dict[int, list[GpuState]], seconds: float, mean_power: float | None
) -> tuple[float | None, str | None]:
    if mean_power is None:
        return None, None
    counted = all(_counter_power(readings) is not None for readings in by_gpu.values())
    return mean_power * seconds, "counter" if counted else "power"


def _throttled_s(by_gpu: dict[int, list[GpuState]], end: float) -> dict[str, float]:
    """Seconds each reason held, on the GPU that held it longest: a reading stands until the
    next one (the last until the window's end)."""
    seen: dict[str, float] = {}
    for readings in by_gpu.values():
        ends = [*(s.at for s in readings[1:]), end]
        held: dict[str, float] = {}
        for state, until in zip(readings, ends, strict=True):
            for reason in state.throttle:
                held[reason.value] = held.get(reason.value, 0.0) + max(until - state.at, 0.0)
        for name, seconds in held.items():
            seen[name] = max(seen.get(name, 0.0), round(seconds, 3))
    return dict(sorted(seen.items()))


def _others_gib(readings: Sequence[GpuState], owns: Owns) -> float | None:
    """Other tenants' memory across the GPUs at one round of readings."""
    if any(s.processes is None for s in readings):
        return None
    return sum(gib for s in readings for pid, gib in s.processes or () if not owns(pid))
