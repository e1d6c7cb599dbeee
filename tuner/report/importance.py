"""Parameter importances for the report: which knobs decide throughput and TTFT.

Optuna's default evaluator (PED-ANOVA) is used: deterministic, and unlike fANOVA it needs no
scikit-learn. Only trials that measured something count: an OOM trial (observed or predicted)
has no throughput or TTFT, and scoring it as 0 would rank the memory knobs by where the memory
limit lies, not by what they do to speed; a repeat of an earlier trial ("same as #N") would
count that trial twice.

The study's own search space is conditional (K exists only with a draft), so the trials are
copied into an in-memory study where K is 0 without speculation: every measured trial then
counts, and "no draft" shows up as K = 0 instead of being left out.

Only the parameters the space tunes are ranked. A setting every trial shares (the workload's
temperature mix, a fixed batch size) explains nothing, and handing PED-ANOVA a constant once
ranked the untuned temperature first.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Literal

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tuner.analysis.trials import Point
from tuner.config.space import Range, SearchSpace
from tuner.config.trial import SpecMethod

__all__ = ["importance_points", "param_importances", "tuned_parameters"]

Direction = Literal["maximize", "minimize"]


def importance_points(points: Sequence[Point]) -> list[Point]:
    """The trials importances are computed on: measured ones, repeats left out."""
    return [
        p
        for p in points
        if p.throughput is not None and p.p95_ttft_ms is not None and p.duplicate_of is None
    ]


def tuned_parameters(space: SearchSpace) -> tuple[str, ...]:
    """The parameters ``space`` lets the study vary, in the report's order."""
    memory = space.gpu_memory_utilization
    tuned = {
        "draft": len(space.choices) > 1,
        # With every K fixed, K follows from the draft: it is no parameter of its own.
        "K": any(c.method != SpecMethod.NONE and c.k.low < c.k.high for c in space.choices),
        "gpu_memory_utilization": memory.low < memory.high,
        "max_num_batched_tokens": len(space.max_num_batched_tokens) > 1,
        "temperature": space.tunes_temperature,
    }
    return tuple(name for name, varies in tuned.items() if varies)


def param_importances(
    points: Sequence[Point], space: SearchSpace, throughput: str = "output tok/s"
) -> dict[str, dict[str, float]]:
    """Importances for throughput (named ``throughput``: the study's first objective) and
    p95 TTFT over :func:`importance_points`, for the parameters ``space`` tunes.

    K is taken as 0 for trials without speculation, so it counts for every trial instead of
    only the speculative ones. Fewer than three measured trials, or nothing tuned, give no
    importances.
    """
    tuned = tuned_parameters(space)
    params = {name: get for name, get in _PARAMS.items() if name in tuned}
    targets: dict[str, tuple[Callable[[Point], float | None], Direction]] = {
        throughput: (lambda p: p.throughput, "maximize"),
        "p95 TTFT": (lambda p: p.p95_ttft_ms, "minimize"),
    }
    result = {}
    measured = importance_points(points)
    for name, (target, direction) in targets.items():
        rows = [(p, target(p)) for p in measured]
        usable = [(p, v) for p, v in rows if v is not None and math.isfinite(v)]
        if len(usable) >= 3 and params:
            result[name] = _importances(usable, params, direction, space)
    return result


_PARAMS: dict[str, Callable[[Point], object]] = {
    "draft": lambda p: p.draft,
    "K": lambda p: p.k,
    "gpu_memory_utilization": lambda p: p.gpu_memory_utilization,
    "max_num_batched_tokens": lambda p: p.max_num_batched_tokens,
    "temperature": lambda p: p.temperature,
}


def _distribution(
    name: str, rows: Sequence[tuple[Point, float]], space: SearchSpace
) -> BaseDistribution:
    """The parameter's domain as the space gives it (categories as the trials name them)."""
    if name == "draft":
        return CategoricalDistribution(sorted({p.draft for p, _ in rows}))
    if name == "max_num_batched_tokens":
        return CategoricalDistribution(sorted({p.max_num_batched_tokens for p, _ in rows}))
    if name == "K":
        return IntDistribution(0, int(space.num_speculative_tokens.high))
    memory = name == "gpu_memory_utilization"
    domain = space.gpu_memory_utilization if memory else space.trial_temperature
    low, high = (domain.low, domain.high) if isinstance(domain, Range) else (domain, domain)
    return FloatDistribution(low, high)


def _importances(
    rows: Sequence[tuple[Point, float]],
    params: dict[str, Callable[[Point], object]],
    direction: Direction,
    space: SearchSpace,
) -> dict[str, float]:
    distributions = {name: _distribution(name, rows, space) for name in params}
    study = optuna.create_study(direction=direction)  # in memory, for the evaluator only
    for point, value in rows:
        study.add_trial(
            optuna.trial.create_trial(
                params={name: get(point) for name, get in params.items()},
                distributions=distributions,
                value=value,
            )
        )
    if len({v for _, v in rows}) < 2:
        return dict.fromkeys(params, 0.0)
    with warnings.catch_warnings():  # "experimental" labels are not ours to act on
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return dict(optuna.importance.get_param_importances(study))
