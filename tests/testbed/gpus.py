"""A stand-in for NVML's GPUs behind :class:`tuner.catalog.nvml.GpuMonitor`, for hosts without one.

:class:`FakeGpus` reads like NVML would: board power, an energy counter that integrates that
power over real time (so joules follow how long the work ran), SM and memory clocks, a
temperature, the power limit in force, the processes holding memory. A test drives it: it sets
the power (``power_w``), throttles on command (:meth:`FakeGpus.throttle`, which also lowers the
SM clock and raises the temperature as a hot GPU does, :meth:`FakeGpus.cool` ends it, and
:meth:`FakeGpus.throttle_for` ends it by itself), adds a
tenant (``tenants``), or hands a ``script`` called before each read to change any of it
mid-measurement.

It is a :class:`~tuner.catalog.power.PowerControl` too: every limit set is recorded
(``limit_sets``), a set outside the board's range or without privilege (``privileged=False``)
is refused as NVML refuses it. A limit outlives the process that set it on a real GPU; with
``limit_file`` the stand-in's does too (a JSON file of the limit per GPU), so a study killed
in one process leaves its limit for the next process to find.

Or it follows a fake server (:meth:`FakeGpus.follow`): power and the energy counter are then
what the server's simulated GPUs draw for the work it runs (its ``/metrics``, from
:mod:`tuner.sim.server.gpu`), and the SM clock is the boost clock while it works and the idle
clock while it waits; throttling on command still holds the clock down.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tuner.catalog.gpu_state import GpuState
from tuner.catalog.power import PowerLimit, PowerLimitDenied
from tuner.results import Throttle

__all__ = ["FakeGpus"]

_THROTTLED_SM_MHZ = 1200.0
_BOOST_SM_MHZ = 2520.0
_IDLE_SM_MHZ = 210.0


@dataclass
class FakeGpus:
    """``count`` GPUs that all read alike; every field may be changed while sampled."""

    count: int = 1
    power_w: float = 300.0
    sm_clock_mhz: float = 2520.0
    memory_clock_mhz: float = 10501.0
    temperature_c: float = 60.0
    power_limit_w: float = 450.0  # in force on every GPU until one is set
    default_limit_w: float = 450.0
    limit_range_w: tuple[float, float] = (150.0, 450.0)
    privileged: bool = True
    limit_file: Path | None = None
    limit_sets: list[tuple[int, float]] = field(default_factory=list)
    server_gib: float = 20.0  # memory the server holds
    has_energy_counter: bool = True
    # (pid, GiB) per GPU of every process NVML would list, the server's included.
    tenants: list[tuple[int, float]] = field(default_factory=list)
    reasons: frozenset[Throttle] = frozenset()
    script: Callable[[FakeGpus], None] | None = None
    reads: int = 0
    following: str | None = None  # a fake server's base URL
    idle_w: float | None = None  # the followed server's idle draw, once seen
    _energy_j: float = 0.0
    _offset_j: float = 0.0
    _last: float | None = None
    _hot_until: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def throttle(self, *reasons: Throttle) -> None:
        """From now on the GPUs hold their clocks down for ``reasons`` (thermal by default)."""
        self.reasons = frozenset(reasons or (Throttle.THERMAL,))
        self.sm_clock_mhz = _THROTTLED_SM_MHZ
        self.temperature_c = 91.0

    def throttle_for(self, seconds: float, *reasons: Throttle) -> None:
        """Throttles now, and cools by itself ``seconds`` later (a transient hot spell)."""
        self.throttle(*reasons)
        self._hot_until = time.monotonic() + seconds

    def cool(self) -> None:
        """The throttling ends; clocks and temperature are back."""
        self.reasons = frozenset()
        self.sm_clock_mhz = _BOOST_SM_MHZ
        self.temperature_c = 60.0

    def power_limits(self) -> list[PowerLimit]:
        low, high = self.limit_range_w
        return [
            PowerLimit(gpu, self.limit_now(gpu), self.default_limit_w, low, high)
            for gpu in range(self.count)
        ]

    def set_power_limit(self, gpu: int, watts: float) -> None:
        if not self.privileged:
            raise PowerLimitDenied("Insufficient Permissions")  # NVML_ERROR_NO_PERMISSION
        low, high = self.limit_range_w
        if not low <= watts <= high:
            raise PowerLimitDenied("Invalid Argument")
        self.limit_sets.append((gpu, watts))
        limits = self._limits()
        limits[gpu] = watts
        if self.limit_file is None:
            self.power_limit_w = watts  # the GPUs all read alike: without a file, one limit
        else:
            self.limit_file.write_text(json.dumps({str(g): w for g, w in limits.items()}))

    def limit_now(self, gpu: int = 0) -> float:
        """GPU ``gpu``'s power limit in force."""
        return self._limits()[gpu]

    def _limits(self) -> dict[int, float]:
        if self.limit_file is not None and self.limit_file.exists():
            return {int(g): w for g, w in json.loads(self.limit_file.read_text()).items()}
        return dict.fromkeys(range(self.count), self.power_limit_w)

    def follow(self, base_url: str) -> None:
        """From now on power, energy and the SM clock follow the fake server at ``base_url``."""
        self.following = base_url
        self.idle_w = None
        self._offset_j = self._energy_j  # a counter never runs backwards, across servers too

    def _integrate(self) -> None:
        """The energy counter moves at the present power since the last read."""
        if self._last is not None:
            self._energy_j += self.power_w * (time.monotonic() - self._last)

    def _read_server(self) -> None:
        """Power and energy from the followed server's ``/metrics``; the clock from its work."""
        assert self.following is not None
        try:
            text = httpx.get(f"{self.following}/metrics", timeout=2.0).text
        except httpx.HTTPError:  # the server has stopped: its GPU idles, as a freed GPU does
            self.power_w = self.idle_w if self.idle_w is not None else self.power_w
            self.sm_clock_mhz = _IDLE_SM_MHZ if not self.reasons else self.sm_clock_mhz
            self._integrate()
            return
        samples = {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        self.power_w = samples["spectune_sim_gpu_power_watts"]
        self._energy_j = self._offset_j + samples["spectune_sim_gpu_energy_joules_total"]
        # The idle draw is the least the server has shown; above it, the GPU works.
        self.idle_w = min(self.power_w, self.idle_w or self.power_w)
        if not self.reasons:
            working = self.power_w > self.idle_w + 1.0
            self.sm_clock_mhz = _BOOST_SM_MHZ if working else _IDLE_SM_MHZ

    def memory_used_gib(self) -> list[float] | None:
        return [self.memory_used_gib_now()] * self.count

    def memory_used_gib_now(self) -> float:
        return self.server_gib + sum(gib for _, gib in self.tenants)

    def state(self) -> list[GpuState] | None:
        with self._lock:
            if self.script is not None:
                self.script(self)
            self.reads += 1
            now = time.monotonic()
            if self._hot_until is not None and now >= self._hot_until:
                self._hot_until = None
                self.cool()
            if self.following is not None:
                self._read_server()
                # The reading is the server's answer: stamped when it came, not when it was
                # asked for (under load the request alone takes a sizeable part of a second).
                now = time.monotonic()
            else:
                self._integrate()
            self._last = now
            limits = self._limits()
            return [
                GpuState(
                    at=now,
                    gpu=index,
                    memory_used_gib=self.memory_used_gib_now(),
                    power_w=self.power_w,
                    energy_j=self._energy_j if self.has_energy_counter else None,
                    sm_clock_mhz=self.sm_clock_mhz,
                    memory_clock_mhz=self.memory_clock_mhz,
                    temperature_c=self.temperature_c,
                    power_limit_w=limits[index],
                    throttle=self.reasons,
                    processes=tuple(self.tenants),
                )
                for index in range(self.count)
            ]
