"""The points of a search space's discretised grid, named as Optuna's parameters name them.

The warm start screens these points with the simulator (:mod:`tuner.study.strategy`) and the
twin's re-screen walks them (:mod:`tuner.study.twin_steer`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from tuner.config.space import Range, SearchSpace

__all__ = ["grid_params", "point_params", "range_values", "space_ks", "space_temperatures"]

# A float range without a step is screened at this many equal intervals.
_FLOAT_INTERVALS = 10


def grid_params(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every point of the discretised space, named as :meth:`SearchSpace.suggest` names them.

    Float ranges are taken at their step (or at 10 equal intervals when they have none); K is
    left out where there is no draft, and the temperature where the space fixes it.
    """
    for draft in space.drafts:
        for k in space_ks(space, draft):
            for util in range_values(space.gpu_memory_utilization):
                for mnbt in space.max_num_batched_tokens:
                    for temperature in space_temperatures(space):
                        yield point_params(space, draft, k, util, mnbt, temperature)


def point_params(
    space: SearchSpace, draft: str, k: int, util: float, mnbt: int, temperature: float
) -> dict[str, Any]:
    """One point's parameters: the choice, its own, then the server's and the temperature."""
    params: dict[str, Any] = space.choice_params(draft, k)  # the choice, then its own
    params["gpu_memory_utilization"] = util
    params["max_num_batched_tokens"] = mnbt
    if not isinstance(space.temperature, float):
        params["temperature"] = temperature
    return params


def space_ks(space: SearchSpace, draft: str) -> range:
    """The K values of one choice."""
    return space.k_range(draft)  # each choice has its own K range (0 alone for none)


def space_temperatures(space: SearchSpace) -> tuple[float, ...]:
    """The temperatures a space screens: its fixed one, or its range's points."""
    if isinstance(space.temperature, float):
        return (space.temperature,)
    return range_values(space.temperature)


def range_values(value: Range) -> tuple[float, ...]:
    """The points Optuna's ``suggest_float`` can return for ``value``, rounded as it checks them."""
    if value.high <= value.low:
        return (value.low,)
    step = value.step or (value.high - value.low) / _FLOAT_INTERVALS
    count = math.floor((value.high - value.low) / step + 1e-9)
    return tuple(round(value.low + i * step, 10) for i in range(count + 1))
