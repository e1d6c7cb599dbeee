"""How a trial ends, wherever it ran: in this process, in a worker or in a Ray slot.

The local loop (:func:`tuner.study.study.run_trials`) and the Ray driver
(:mod:`tuner.study.cluster.driver`) each run trials their own way, and end every one here:
its record written to the study as readers see it (the parameters Optuna stored, its
attributes, the constraints a feasible trial is ranked by), the listener told, and the run
stopped once a setup keeps failing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import optuna
from optuna.trial import TrialState

from tuner.errors import SpectuneError
from tuner.trial.record import TrialRecord, constraint_keys
from tuner.trial.scoring import stored_constraints

__all__ = ["MAX_FAILURES_IN_A_ROW", "OnTrial", "TrialEnds"]

# FAIL trials do not use up the budget, so a setup where every launch fails would run for ever.
MAX_FAILURES_IN_A_ROW = 3

# Called after every trial with its record: run, reused ("same as #N") or failed.
OnTrial = Callable[[TrialRecord], None]


class TrialEnds:
    """Where one run's trials end.

    Args:
        study: the study they belong to (an older study keeps the constraint keys its trials
            have).
        on_trial: told each ended trial's record (the CLI's live table).
        logs: where a user reads why trials failed, as the stopping message names it.
    """

    def __init__(self, study: optuna.Study, on_trial: OnTrial | None, logs: str) -> None:
        self.keys = constraint_keys(study)
        self.on_trial = on_trial
        self.logs = logs
        self.failures_in_a_row = 0

    def write(self, trial: optuna.Trial, record: TrialRecord) -> TrialRecord:
        """Stores ``record`` on ``trial``; returns it with the parameters readers will see."""
        record = replace(record, params=dict(trial.params))
        for key, value in record.to_attrs().items():
            trial.set_user_attr(key, value)
        if record.state is TrialState.COMPLETE:  # the same keys, in the same order, on every trial
            for key, value in stored_constraints(record.constraints, self.keys).items():
                trial.set_constraint(key, value)
        return record

    def tell(self, record: TrialRecord) -> None:
        """Tells the listener ``record`` (written)."""
        if self.on_trial is not None:
            self.on_trial(record)

    def count(self, record: TrialRecord) -> None:
        """Counts a run trial's outcome (a reused result is none).

        Raises:
            SpectuneError: the last :data:`MAX_FAILURES_IN_A_ROW` run trials failed: a broken
                setup, not bad luck.
        """
        if record.state is not TrialState.FAIL:
            self.failures_in_a_row = 0
            return
        self.failures_in_a_row += 1
        if self.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            raise SpectuneError(
                f"{MAX_FAILURES_IN_A_ROW} trials in a row failed, the last with: "
                f"{record.failure}; stopping (check the image, model and flags; logs in "
                f"{self.logs})"
            )
