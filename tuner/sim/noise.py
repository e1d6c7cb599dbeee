"""The measurement noise of a seeded simulated run (noise-free predictions have none).

A real benchmark's step times vary: a per-run speed factor (clocks, temperature), per-step
jitter, and rare host hiccups (garbage collection, a busy CPU). The scheduler draws them from the
run's own random stream, so one seed gives one run, to the last digit.
"""

from __future__ import annotations

import random

__all__ = ["StepNoise"]

RUN_SIGMA = 0.02
STEP_SIGMA = 0.03
HICCUP_PROBABILITY = 0.002
HICCUP_S = (0.01, 0.04)


class StepNoise:
    """Scales and jitters step durations with draws from ``rng`` (None: no noise)."""

    def __init__(self, rng: random.Random | None) -> None:
        self._rng = rng
        self._run_factor = rng.lognormvariate(0.0, RUN_SIGMA) if rng else 1.0

    def __call__(self, duration: float) -> float:
        if self._rng is None:
            return duration
        duration *= self._run_factor * self._rng.lognormvariate(0.0, STEP_SIGMA)
        if self._rng.random() < HICCUP_PROBABILITY:
            duration += self._rng.uniform(*HICCUP_S)
        return duration
