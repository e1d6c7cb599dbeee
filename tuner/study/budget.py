"""A run's time budget: another trial only while it and the confirmation still fit.

:func:`price_budget` prices the budget before anything is stored: the plan's prior for a trial
(:func:`tuner.search.plan.plan_study`: start-ups at the prices a resumed study measured), and as
many confirmation runs as fit a third of it; a budget too short for one trial is refused there.
While the trials run, :class:`Budget` replaces the prior with the wall times this run measured;
:class:`SimulatedBudget` counts a simulated run on the simulator's clock instead, as a GPU would
have spent it (the simulator has no start-up clock of its own).
"""

from __future__ import annotations

import time

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config.space import SearchSpace
from tuner.errors import ConfigError
from tuner.search.plan import (
    Confirmation,
    TrialCost,
    cut_confirmation,
    fit_confirmation,
    format_duration,
    plan_study,
)
from tuner.search.startup import StartupPrices, start_prior_s
from tuner.trial.record import TrialRecord

__all__ = [
    "Budget",
    "SimulatedBudget",
    "another_fits",
    "price_budget",
    "runs_that_fit",
    "simulated_trial_s",
]


def another_fits(seconds: float, elapsed: float, per_trial: float, confirm_runs: int) -> bool:
    """Whether a budget of ``seconds`` that has spent ``elapsed`` holds one more trial and
    ``confirm_runs`` confirmation runs, each priced at ``per_trial``."""
    return elapsed + per_trial * (1 + confirm_runs) <= seconds


def runs_that_fit(left_s: float, run_s: float) -> int:
    """Confirmation runs of ``run_s`` each that fit in ``left_s`` (none once nothing is left)."""
    return max(0, int(left_s // run_s))


class Budget:
    """A run's time budget: another trial only while it, then confirmation, fit in what is left.

    Args:
        seconds: the whole run's budget, trials and confirmation.
        prior: the expected cost of a trial before this run has measured one.
        confirm_runs: confirmation runs to leave time for (each a fresh server).
        began: when the run began (``time.time()``); default now.
        unconfirmed: the confirmation asked for was dropped, as a third of the budget held one
            run, of the best config alone (:func:`tuner.search.plan.fit_confirmation`): the
            run's note says so.
    """

    def __init__(
        self,
        seconds: float,
        prior: TrialCost,
        confirm_runs: int,
        began: float | None = None,
        unconfirmed: bool = False,
    ) -> None:
        self.seconds = seconds
        self.prior = prior
        self.confirm_runs = confirm_runs
        self.began = time.time() if began is None else began
        self._stopped: tuple[int, float, float] | None = None  # trials run, elapsed, needed
        self._cut: tuple[int, int, float, float] | None = None  # runs wanted, kept, left, each
        self.unconfirmed = unconfirmed
        self.clock = ""  # how its time is counted, where not by the wall clock

    def next_trial_s(self, study: optuna.Study) -> float:
        """A trial with a start-up, as this run measured them (else the prior)."""
        walls = [
            (t.datetime_complete - t.datetime_start).total_seconds()
            for t in self._ran(study)
            if t.datetime_complete and t.datetime_start and t.user_attrs.get("restarted")
        ]
        return sum(walls) / len(walls) if walls else self.prior.total_s

    def _ran(self, study: optuna.Study) -> list[FrozenTrial]:
        """The trials this run started (a resumed study holds earlier runs' too)."""
        ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        done = study.get_trials(deepcopy=False, states=ended)
        return [t for t in done if t.datetime_start and t.datetime_start.timestamp() >= self.began]

    def elapsed(self, study: optuna.Study) -> float:
        """The GPU time this run has spent: the wall time since it began."""
        del study
        return time.time() - self.began

    def allows_another(self, study: optuna.Study) -> bool:
        """Whether one more trial and the confirmation fit in what is left of the budget."""
        per_trial = self.next_trial_s(study)
        elapsed = self.elapsed(study)
        if another_fits(self.seconds, elapsed, per_trial, self.confirm_runs):
            return True
        self._stopped = (len(self._ran(study)), elapsed, per_trial * (1 + self.confirm_runs))
        return False

    def confirmation_left(
        self, study: optuna.Study, space: SearchSpace, wanted: Confirmation
    ) -> Confirmation:
        """``wanted`` cut to the runs that fit in what the trials left of the budget, each a
        trial with a start-up (:meth:`next_trial_s`); none where not even one fits. The trials
        stopped with time for ``wanted``, but a trial can overrun its forecast, and a budget
        is a promise: the run ends on time, its recommendation unconfirmed if need be."""
        each = self.next_trial_s(study)
        left = self.seconds - self.elapsed(study)
        fitted = cut_confirmation(space, wanted, runs_that_fit(left, each))
        if fitted != wanted:
            self._cut = (wanted.runs(space), fitted.runs(space), left, each)
        return fitted

    def note(self) -> str | None:
        """Why the trials stopped early and the confirmation was dropped or cut; None when the
        budget did none of it."""
        parts = []
        if self._stopped is not None:
            ran, elapsed, needed = self._stopped
            runs = f" with {_runs(self.confirm_runs)}" if self.confirm_runs else ""
            parts.append(
                f"time budget {format_duration(self.seconds)}{self.clock}: stopped after {ran} "
                f"trials at {format_duration(elapsed)}, as one more (about "
                f"{format_duration(needed)}{runs}) would not fit"
            )
        if self.unconfirmed:
            head = "" if parts else f"time budget {format_duration(self.seconds)}{self.clock}: "
            parts.append(
                f"{head}no confirmation, as a third of the budget holds one run, of the best "
                "config alone, which could not change the pick: trials took its time"
            )
        if self._cut is not None:
            wanted, kept, left, each = self._cut
            what = (
                "the recommendation is one run, not confirmed"
                if kept == 0
                else f"kept {_runs(kept)} of {wanted}"
            )
            head = "" if parts else f"time budget {format_duration(self.seconds)}{self.clock}: "
            parts.append(
                f"{head}{format_duration(max(0.0, left))} left, a confirmation run about "
                f"{format_duration(each)}: {what}"
            )
        return "; ".join(parts) or None

    def check_fits(self) -> None:
        """Refuses a budget too short for even one trial and the confirmation.

        Raises:
            ConfigError: naming what one trial and the confirmation are expected to take.
        """
        needed = self.prior.total_s * (1 + self.confirm_runs)
        if needed > self.seconds:
            kept = f" and {_runs(self.confirm_runs)}" if self.confirm_runs else ""
            fewer = ", or fewer --confirm-top/--confirm-repeats" if self.confirm_runs else ""
            raise ConfigError(
                f"--time-budget {format_duration(self.seconds)} is shorter than one "
                f"trial{kept} (about {format_duration(needed)}): give more time{fewer}"
            )


def _runs(count: int) -> str:
    return f"{count} confirmation run" + ("" if count == 1 else "s")


class SimulatedBudget(Budget):
    """A simulated run's budget, on the simulator's clock (:func:`simulated_trial_s`): a
    simulated trial takes what it takes on this CPU, not what it would take a GPU.

    Args:
        warmup: the workload's warm-up requests, sent before each pair's every round.
    """

    def __init__(
        self,
        seconds: float,
        prior: TrialCost,
        confirm_runs: int,
        warmup: int,
        began: float | None = None,
        unconfirmed: bool = False,
    ) -> None:
        super().__init__(seconds, prior, confirm_runs, began, unconfirmed)
        self.warmup = warmup
        self.clock = " of simulated GPU time"

    def _costs(self, study: optuna.Study) -> list[tuple[bool, float]]:
        found = (TrialRecord.from_trial(t) for t in self._ran(study))
        return [(r.restarted, simulated_trial_s(r, self.warmup)) for r in found if r is not None]

    def elapsed(self, study: optuna.Study) -> float:
        return sum(cost for _, cost in self._costs(study))

    def next_trial_s(self, study: optuna.Study) -> float:
        started = [cost for restarted, cost in self._costs(study) if restarted]
        return sum(started) / len(started) if started else self.prior.total_s


def simulated_trial_s(record: TrialRecord, warmup: int) -> float:
    """What a simulated trial would have taken a GPU: its start-up prior when it started a
    server, then each pair's simulated duration and each round's ``warmup`` requests."""
    spent = start_prior_s(record.server) if record.restarted else 0.0
    for level in record.levels:
        duration, requests = float(level.get("duration_s") or 0.0), int(level.get("requests") or 0)
        slots = min(int(level.get("concurrency") or 1), max(1, requests))
        rounds = int(level.get("rounds") or 1)
        spent += duration * (1 + rounds * warmup * slots / max(1, requests))
    return spent


def price_budget(
    space: SearchSpace,
    seconds: float,
    trials: int,
    wanted: Confirmation,
    simulated: bool,
    began: float,
    startups: StartupPrices,
) -> tuple[Confirmation, Budget]:
    """A run of ``trials`` on ``space`` in ``seconds``: ``wanted`` cut to as many confirmation
    runs as fit in a third of it, and the budget, its prior from the plan (start-ups at the
    prices ``startups`` measured, where the study resumes).

    Args:
        simulated: the trials run on the simulator, whose clock the budget then counts.
        began: when the run began (``time.time()``): the budget counts from there.

    Raises:
        ConfigError: one trial and the confirmation cannot fit.
    """
    # One plan: a confirmation run's cost does not depend on how many there are.
    cost = plan_study(space, trials, wanted, startups=startups).confirm_cost
    fitted = fit_confirmation(space, wanted, seconds, cost.total_s)
    runs = fitted.runs(space)
    dropped = bool(wanted.top) and not fitted.top
    budget = (
        # A simulated trial takes what it takes here, not a GPU's time: the simulator's clock.
        SimulatedBudget(seconds, cost, runs, space.workload.warmup, began, dropped)
        if simulated
        else Budget(seconds, cost, runs, began, dropped)
    )
    budget.check_fits()
    return fitted, budget
