"""Fitting the simulator's constants to the reference table, judged on held-out sources.

The free parameters (``reference_parameters.PARAMETERS``) are physical: the share of the
bandwidth kernels reach per GPU class, each engine generation's per-step and per-pass costs,
the all-reduce latency over PCIe, each method's acceptance per prompt set, the options' effects.
Each has a prior made without the figures, so a parameter only one source speaks to falls back
to its prior when that source is left out.

The fit minimises the figures' log errors, each over its uncertainty (its ``spread``, at least
:data:`FLOOR`), plus the priors' penalties, by Levenberg-Marquardt steps on a finite-difference
Jacobian. A parameter moves only figures it applies to (:attr:`Parameter.applies`), which keeps
one Jacobian to a few dozen simulator runs.

Leave-one-source-out: without a source's figures the fit moves from the full fit by one
Gauss-Newton step (the standard approximate leave-one-out), less the step the whole table would
take from there (zero at the fit's minimum; where the constants stop short of it, that part
only finishes converging them and is no effect of the source), and the source's figures are
then predicted by the simulator at those constants. A source that alone pins a parameter is
predicted from that parameter's prior: its held-out error is what a user of an unmeasured
regime would see.

Sources read after the fit (``fitted: false`` in the table, :attr:`Figure.fitted`) never enter
it: :func:`fit` and :func:`held_out` drop their figures before any residual is formed, so such a
figure's prediction is the same with or without it in the table, and :func:`held_out` gives it
the prediction of the constants as they stand (the fit never saw its source).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from reference_parameters import PARAMETERS, Parameter
from reference_table import Figure, predict_figure

from tuner.sim.virtual_time import Calibrated

__all__ = ["FLOOR", "Fit", "fit", "held_out", "predictions"]

Vector = npt.NDArray[np.float64]

# No figure is trusted beyond this relative error (the spread between runs of one benchmark).
FLOOR = 0.05
_STEP = 0.05  # finite-difference step, in the parameter's own scale


def predictions(figures: Sequence[Figure], physics: Calibrated) -> dict[str, float]:
    """Each figure's prediction under ``physics``, by id."""
    return {figure.id: predict_figure(figure, physics) for figure in figures}


def _sigma(figure: Figure) -> float:
    return max(figure.spread, FLOOR)


def _residuals(figures: Sequence[Figure], predicted: dict[str, float]) -> Vector:
    return np.array(
        [math.log(predicted[f.id] / f.measured) / _sigma(f) for f in figures], dtype=np.float64
    )


def _state(physics: Calibrated, parameters: Sequence[Parameter]) -> Vector:
    return np.array([p.to_free(p.get(physics)) for p in parameters], dtype=np.float64)


def _apply(physics: Calibrated, parameters: Sequence[Parameter], free: Vector) -> Calibrated:
    for parameter, value in zip(parameters, free, strict=True):
        physics = parameter.put(physics, parameter.from_free(float(value)))
    return physics


def _prior(parameters: Sequence[Parameter]) -> tuple[Vector, Vector]:
    centre = np.array([p.to_free(p.prior) for p in parameters], dtype=np.float64)
    return centre, np.array([p.sigma for p in parameters], dtype=np.float64)


def _jacobian(
    figures: Sequence[Figure],
    physics: Calibrated,
    parameters: Sequence[Parameter],
    base: dict[str, float],
) -> Vector:
    free = _state(physics, parameters)
    columns = np.zeros((len(figures), len(parameters)), dtype=np.float64)
    for j, parameter in enumerate(parameters):
        touched = [i for i, f in enumerate(figures) if parameter.applies(f)]
        if not touched:
            continue
        moved = free.copy()
        moved[j] += _STEP
        shifted = _apply(physics, parameters, moved)
        for i in touched:
            figure = figures[i]
            value = predict_figure(figure, shifted)
            columns[i, j] = math.log(value / base[figure.id]) / _sigma(figure) / _STEP
    return columns


@dataclass(frozen=True)
class Fit:
    """A fitted set of constants and what it predicts."""

    physics: Calibrated
    predicted: dict[str, float]
    cost: float


def _cost(residuals: Vector, free: Vector, prior: tuple[Vector, Vector]) -> float:
    centre, sigma = prior
    return float(residuals @ residuals + np.sum(((free - centre) / sigma) ** 2))


def _step(
    jacobian: Vector, residuals: Vector, free: Vector, prior: tuple[Vector, Vector], damping: float
) -> Vector:
    """One Levenberg-Marquardt step on figures plus priors (damping 0: Gauss-Newton).

    The damping scales each parameter's own curvature, figures' and prior's together
    (Marquardt's), so a rejected step shrinks in every direction. Damping the prior's alone
    shrank the parameters the figures pin least: the step came to be led by one they pin
    tightly (a drafter's cost per sequence, still the largest move at damping 25), every
    damped step raised the cost, and the fit stopped where it stood.
    """
    centre, sigma = prior
    weights = 1.0 / sigma**2
    curvature = jacobian.T @ jacobian + np.diag(weights)
    normal = curvature + damping * np.diag(np.diag(curvature))
    gradient = jacobian.T @ residuals + weights * (free - centre)
    return np.asarray(-np.linalg.solve(normal, gradient), dtype=np.float64)


def fit(
    figures: Sequence[Figure],
    start: Calibrated,
    parameters: Sequence[Parameter] = PARAMETERS,
    iterations: int = 30,
) -> Fit:
    """Fits ``parameters`` to the fitted ones of ``figures`` from ``start`` (damped
    Gauss-Newton); figures of sources read after the fit are left out (:attr:`Figure.fitted`).

    ``iterations``: from the shipped constants the 88 figures of 2026-12-07 go from cost 176.6
    to 172.0 in 30 steps; those constants were fitted while the damping held the prior's
    curvature alone (:func:`_step`), where every step was rejected from 176.6 on."""
    figures = [f for f in figures if f.fitted]
    prior = _prior(parameters)
    physics = start
    predicted = predictions(figures, physics)
    free = _state(physics, parameters)
    cost = _cost(_residuals(figures, predicted), free, prior)
    damping = 0.1
    for _ in range(iterations):
        jacobian = _jacobian(figures, physics, parameters, predicted)
        residuals = _residuals(figures, predicted)
        trial_free = free + _step(jacobian, residuals, free, prior, damping)
        trial = _apply(physics, parameters, trial_free)
        trial_predicted = predictions(figures, trial)
        trial_cost = _cost(_residuals(figures, trial_predicted), trial_free, prior)
        if trial_cost < cost:
            physics, predicted, free, cost = trial, trial_predicted, trial_free, trial_cost
            damping /= 3
        else:
            damping *= 4
    return Fit(physics, predicted, cost)


def held_out(
    figures: Sequence[Figure],
    physics: Calibrated,
    parameters: Sequence[Parameter] = PARAMETERS,
) -> tuple[dict[str, float], dict[str, tuple[str, ...]]]:
    """Each figure predicted with its own source left out of the fit.

    Only the fitted figures (:attr:`Figure.fitted`) make the fit; a figure of a source read
    after the fit is held out already, and is predicted by ``physics`` as it stands.

    Returns:
        The held-out predictions by figure id, and per fitted source the parameters only it
        pins (those fall back to their priors when it is left out).
    """
    unfitted = predictions([f for f in figures if not f.fitted], physics)
    figures = [f for f in figures if f.fitted]
    predicted = predictions(figures, physics)
    jacobian = _jacobian(figures, physics, parameters, predicted)
    residuals = _residuals(figures, predicted)
    free = _state(physics, parameters)
    prior = _prior(parameters)
    out: dict[str, float] = dict(unfitted)
    sole: dict[str, tuple[str, ...]] = {}
    # The step the whole table would take from ``physics`` only finishes converging it; what
    # leaving a source out adds is the difference between the two steps.
    full = _step(jacobian, residuals, free, prior, 0.0)
    for source in sorted({f.source for f in figures}):
        keep = np.array([f.source != source for f in figures])
        moved = free + _step(jacobian[keep], residuals[keep], free, prior, 0.0) - full
        refit = _apply(physics, parameters, moved)
        for figure in figures:
            if figure.source == source:
                out[figure.id] = predict_figure(figure, refit)
        pinned = np.abs(jacobian[~keep]).sum(axis=0) > 0
        elsewhere = np.abs(jacobian[keep]).sum(axis=0) > 0
        sole[source] = tuple(
            p.name for p, only in zip(parameters, pinned & ~elsewhere, strict=True) if only
        )
    return out, sole
