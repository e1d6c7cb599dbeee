"""The race a new trial runs (:class:`~tuner.trial.race.Race`): the study's incumbent, and the
forecast that bounds the pairs a trial has not measured yet.

The incumbent is the best feasible, completed trial whose every pair has a stored tok/s
interval (studies from before intervals were stored have none: their trials are then measured
at the fixed count, unpruned). The first feasible trial of each speculation method races no
one, so every method has numbers to compare. A pair not yet measured is bounded by the shipped
simulator's noise-free prediction for the trial's config, raised by its regime's error band
(:func:`tuner.sim.band.error_band`: the held-out error that holds 85 % of the public sources
of that kind, or of the wider class it is widened to). The prediction itself goes with the
race too, so a trial measured above it has its other pairs' bounds raised by as much
(:meth:`~tuner.trial.race.Race.surprise`).
"""

from __future__ import annotations

import functools

import optuna
from optuna.trial import TrialState

from tuner.config.space import SearchSpace
from tuner.config.trial import TrialConfig
from tuner.config.workload import Condition
from tuner.errors import StartupFailure
from tuner.search.forecast import predicted_pairs
from tuner.sim.band import error_band, regime_of
from tuner.trial.race import Incumbent, Race, incumbent_among
from tuner.trial.record import records

__all__ = ["incumbent_of", "race_for"]


def race_for(
    study: optuna.Study, space: SearchSpace, config: TrialConfig, rounds: bool
) -> Race | None:
    """What a trial of ``config`` races: the incumbent now, and its pairs' predicted bounds;
    None where it is measured at the fixed count: ``rounds`` off, or a goodput study (its
    climb decides its own steps)."""
    if not rounds or space.goodput:
        return None
    server, workload = config.server, config.client.workload

    @functools.cache
    def predicted(condition: Condition) -> float | None:
        try:
            ((_, result),) = predicted_pairs(space, server, workload, [condition])
        except StartupFailure:  # predicted out of memory, yet it started: no bound
            return None
        return result.output_tok_s

    @functools.cache
    def ceiling(condition: Condition) -> float | None:
        error = error_band(regime_of(space.hardware, server, condition.concurrency)).error
        tok_s = predicted(condition)
        return None if tok_s is None or error is None else tok_s * (1.0 + error)

    # The first trial of each method runs in full: the report answers "what does it beat"
    # with the best of every method, no speculation first, and a pruned trial has no numbers.
    rival = incumbent_of(study) if _method_measured(study, config) else None
    return Race(rival, ceiling, predicted)


def _method_measured(study: optuna.Study, config: TrialConfig) -> bool:
    """Whether a feasible trial of ``config``'s speculation method has completed in full."""
    method = config.server.method
    done = records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    return any(r.feasible and r.server.method is method for r in done)


def incumbent_of(study: optuna.Study) -> Incumbent | None:
    """The study's best feasible completed trial with an interval at every pair; None if none."""
    return incumbent_among(records(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))))
