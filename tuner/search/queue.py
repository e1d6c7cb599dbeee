"""The study's queue of configs to measure, owned by the sampler.

The warm start (:mod:`tuner.search.strategy`) enqueues the configs the prior forecasts best,
one of each method among them, before any trial; Optuna takes a queue in order. The twin's
proposals (:mod:`tuner.search.proposals`) come from measurements, so they do not wait behind
the prior's: while warm-start configs wait, the twin's latest proposal is held
(:func:`place`), and as each queued config is taken (:func:`take`) the proposal runs in its
place where the twin, fitted to every trial so far, forecasts that config short of it even at
the top of its band; the config goes back to the queue's end (else the proposal is dropped,
and the twin, told one more trial, proposes again). A wrong prior is then corrected
as fast as the trials say it is wrong, while a config the twin cannot rule out keeps its turn.
Each config taken is also moved inside the memory the trials measured (:func:`replan`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.search.memory_guard import safe_params
from tuner.search.strategy import optimistic_top
from tuner.search.twin_screen import TwinScreen
from tuner.sim.twin.fit import FittedTwin
from tuner.trial.optuna_private import FIXED_PARAMS, run_instead
from tuner.trial.record import PROPOSED_ATTR, WARM_START_ATTR

__all__ = ["HELD_ATTR", "place", "queued_params", "replan", "take", "warm_start_waits"]

# The study attribute that holds the twin's proposal while warm-start configs wait.
HELD_ATTR = "twin_held_proposal"


def queued_params(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's parameters; a queued one's are those it was enqueued with (Optuna sets
    ``params`` only as it runs)."""
    fixed = trial.system_attrs.get(FIXED_PARAMS)
    return trial.params or (fixed if isinstance(fixed, dict) else {})


def replan(screen: TwinScreen, twin: FittedTwin, trial: FrozenTrial) -> None:
    """Re-checks a queued config as it is taken from the queue, against every result so far:
    one the warm start or the twin enqueued that the twin now puts short of memory (it moved
    after an OOM) moves to the nearest setting the twin deems safe, or to the nearest K of its
    method that has one. Configs enqueued by hand are left as they are: the user asked for them.

    Optuna's ``Trial`` reads an enqueued trial's parameters from the ``fixed_params`` system
    attribute of the very ``FrozenTrial`` it hands the sampler's ``before_trial``, after that
    call (``tests/trial/test_optuna_private.py`` checks it), so changing them here is what the
    objective sees.
    """
    if not (trial.user_attrs.get(WARM_START_ATTR) or trial.user_attrs.get(PROPOSED_ATTR)):
        return
    fixed = trial.system_attrs.get(FIXED_PARAMS)
    if not isinstance(fixed, dict) or "draft" not in fixed:
        return
    moved = safe_params(screen, twin, fixed)
    if moved != fixed:
        trial.system_attrs[FIXED_PARAMS] = moved


def warm_start_waits(waiting: Iterable[FrozenTrial]) -> bool:
    """Whether a warm-start config is among ``waiting`` (then the twin's proposal is held)."""
    return any(t.user_attrs.get(WARM_START_ATTR) for t in waiting)


def place(study: optuna.Study, params: dict[str, Any], forecast: dict[str, Any]) -> None:
    """Queues the twin's proposal (``forecast``: what it stores as :data:`PROPOSED_ATTR`): at
    the queue's end where no warm-start config waits, else held for :func:`take`, in place of
    the one held before (the twin has learned since)."""
    if warm_start_waits(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))):
        study.set_user_attr(HELD_ATTR, {"params": params, "forecast": forecast})
    else:
        study.enqueue_trial(params, user_attrs={PROPOSED_ATTR: forecast})


def take(study: optuna.Study, screen: TwinScreen, twin: FittedTwin, trial: FrozenTrial) -> None:
    """As ``trial`` is taken from the queue: the held proposal runs instead where ``trial`` is
    a warm-start config the twin forecasts short of it even at the top of its band (``trial``'s
    config goes back to the queue's end). Otherwise it is dropped: it was made for the turn
    right after the trial just told (a request-only change of that trial's server among the
    choices), and the twin proposes again once ``trial`` is told.

    Only ``trial``, which this process took, is changed: another worker's trials are not
    touched, so parallel workers cannot run a config twice (:func:`run_instead`: what Optuna's
    ``Trial`` reads its queued parameters from)."""
    held = study.user_attrs.get(HELD_ATTR)
    if not held:
        return
    params, forecast = dict(held["params"]), dict(held["forecast"])
    warm = trial.user_attrs.get(WARM_START_ATTR)
    fixed = trial.system_attrs.get(FIXED_PARAMS)
    if warm and isinstance(fixed, dict):
        short = _short_of(screen, twin, fixed, float(forecast["output_tok_s"]))
        if short is not None:
            study.set_user_attr(HELD_ATTR, None)
            study.enqueue_trial(fixed, user_attrs={WARM_START_ATTR: warm})
            forecast["ahead_of"] = {"params": fixed, **short}
            ahead = {PROPOSED_ATTR: forecast, WARM_START_ATTR: None}
            run_instead(study, trial, params, ahead)
            return
    study.set_user_attr(HELD_ATTR, None)


def _short_of(
    screen: TwinScreen, twin: FittedTwin, params: dict[str, Any], rival_tok_s: float
) -> dict[str, float] | None:
    """The twin's forecast of ``params`` and its top, where the top falls short of
    ``rival_tok_s``; None where it does not. The top is the counters' upper bound where its
    drafter was measured, else the forecast raised by its regime's error band
    (:func:`~tuner.search.strategy.optimistic_top`, as the warm start ranks its own configs;
    never short where too few public sources make a band)."""
    proposal = screen.forecast_of(twin, params)
    if proposal is None:
        return None
    top = screen.ceiling(proposal)
    if top is None:
        top = optimistic_top(proposal.output_tok_s, screen.band(proposal).error)
    if top >= rival_tok_s:
        return None
    return {"output_tok_s": round(proposal.output_tok_s, 3), "high_tok_s": round(top, 3)}
