"""The digital twin: the simulator corrected by what a study measured.

:mod:`~tuner.sim.twin.model` holds the corrections and runs the simulator under them,
:mod:`~tuner.sim.twin.forecast` is its closed form for one request at a time, and
:mod:`~tuner.sim.twin.fit` fits the corrections, with their uncertainty, to measured trials.
"""

from tuner.sim.twin.forecast import Forecast, StepParts, forecast, step_parts
from tuner.sim.twin.model import AcceptanceShift, TwinParams, TwinPhysics, method_key

__all__ = [
    "AcceptanceShift",
    "Forecast",
    "StepParts",
    "TwinParams",
    "TwinPhysics",
    "forecast",
    "method_key",
    "step_parts",
]
