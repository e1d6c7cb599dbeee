"""Keeps every config a study launches inside the memory its trials measured.

A utilization or batch size the fitted twin predicts to leave less than its margin (fitted from
NVML's peaks and the start-ups that ran out of memory, whatever their method) is moved to the
nearest one that does; where no setting of a (draft, K) does, to the nearest K of the draft
that has one. The sampler guards TPE's draws with it, and the queue the configs queued before
the twin learned where memory ends (:mod:`tuner.search.queue`).
"""

from __future__ import annotations

import math
from typing import Any

from tuner.search.twin_screen import TwinScreen
from tuner.sim.twin.fit import FittedTwin

__all__ = ["guard", "safe_params"]


def safe_params(screen: TwinScreen, twin: FittedTwin, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` guarded (:func:`guard`); where no setting of its (draft, K) is safe, at the
    nearest K of the same draft that has one."""
    guarded = guard(screen, twin, params)
    arm = screen.arm_of(guarded)
    util = guarded.get("gpu_memory_utilization")
    mnbt = guarded.get("max_num_batched_tokens")
    if arm is None or util is None or mnbt is None:
        return guarded
    if screen.safe(twin, arm, (float(util), int(mnbt))):
        return guarded
    own = screen.space.choice(arm.draft).own(arm.spec) if arm.spec is not None else {}
    others = [
        other
        for other in (screen.arm(arm.draft, k, own) for k in screen.space.k_range(arm.draft))
        if other.k != arm.k and screen.safe_settings(twin, other)
    ]
    if not others:
        return guarded
    nearest = min(others, key=lambda a: (abs(a.k - arm.k), a.k))
    return guard(screen, twin, {**guarded, "num_speculative_tokens": nearest.k})


def guard(screen: TwinScreen, twin: FittedTwin, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the utilization (then batch size) nearest to it that the twin deems safe."""
    arm = screen.arm_of(params)
    util, mnbt = params.get("gpu_memory_utilization"), params.get("max_num_batched_tokens")
    if arm is None or util is None:
        return params
    util = float(util)
    safe = list(screen.safe_settings(twin, arm))
    if mnbt is not None:
        if (round(util, 6), int(mnbt)) in {(round(u, 6), m) for u, m in safe}:
            return params
        choices = safe
    else:  # the batch size is not chosen yet: any batch size may still make it fit
        if any(math.isclose(u, util) for u, _ in safe):
            return params
        choices = safe
    if not choices:
        return params
    near = min(choices, key=lambda s: (abs(s[0] - util), abs(s[1] - int(mnbt or s[1]))))
    out = dict(params)
    out["gpu_memory_utilization"] = near[0]
    if mnbt is not None:
        out["max_num_batched_tokens"] = near[1]
    return out
