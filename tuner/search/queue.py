"""The study's queue of configs to measure, as the sampler re-plans it.

The warm start (:mod:`tuner.search.strategy`) and the twin (:mod:`tuner.search.proposals`)
enqueue configs with Optuna's ``Study.enqueue_trial``; Optuna takes them in order. As one is
taken, the twin has seen every trial since it was queued: :func:`replan` moves it inside the
memory the trials measured.
"""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial

from tuner.search.memory_guard import safe_params
from tuner.search.twin_screen import TwinScreen
from tuner.sim.twin.fit import FittedTwin
from tuner.trial.record import PROPOSED_ATTR, WARM_START_ATTR

__all__ = ["queued_params", "replan"]

_FIXED_PARAMS = "fixed_params"  # where Study.enqueue_trial keeps a queued trial's parameters


def queued_params(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's parameters; a queued one's are those it was enqueued with (Optuna sets
    ``params`` only as it runs)."""
    fixed = trial.system_attrs.get(_FIXED_PARAMS)
    return trial.params or (fixed if isinstance(fixed, dict) else {})


def replan(screen: TwinScreen, twin: FittedTwin, trial: FrozenTrial) -> None:
    """Re-checks a queued config as it is taken from the queue, against every result so far:
    one the warm start or the twin enqueued that the twin now puts short of memory (it moved
    after an OOM) moves to the nearest setting the twin deems safe, or to the nearest K of its
    method that has one. Configs enqueued by hand are left as they are: the user asked for them.

    Optuna's ``Trial`` reads an enqueued trial's parameters from the ``fixed_params`` system
    attribute of the very ``FrozenTrial`` it hands the sampler's ``before_trial``, after that
    call (``tests/study/test_optuna_private.py`` checks it), so changing them here is what the
    objective sees.
    """
    if WARM_START_ATTR not in trial.user_attrs and PROPOSED_ATTR not in trial.user_attrs:
        return
    fixed = trial.system_attrs.get(_FIXED_PARAMS)
    if not isinstance(fixed, dict) or "draft" not in fixed:
        return
    moved = safe_params(screen, twin, fixed)
    if moved != fixed:
        trial.system_attrs[_FIXED_PARAMS] = moved
