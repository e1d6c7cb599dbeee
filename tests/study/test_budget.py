"""A run's time budget: the trials stop in time to confirm, and the run ends on time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner.config.space import SearchSpace, load_space, space_from_dict
from tuner.search.plan import Confirmation, TrialCost, fit_confirmation, plan_study
from tuner.search.startup import start_prior_s
from tuner.study.budget import SimulatedBudget, simulated_trial_s
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.run import OpenedRun
from tuner.trial.record import TrialRecord, records


def _small_space() -> SearchSpace:
    """The default space with eight requests a pair: the same traffic mix, priced quicker."""
    raw = load_space(None).source
    return space_from_dict({**raw, "workload": {**raw["workload"], "requests": 8}})


def test_the_budget_stops_the_trials_in_time_to_confirm(tmp_path: Path) -> None:
    space = _small_space()
    request = OptimizeRequest(
        "budget",
        space,
        "sim",
        200,
        tmp_path,
        confirm_top=1,
        confirm_repeats=1,
        time_budget_s=3600,
        rounds=True,
    )
    result = optimize(request)
    ended = (TrialState.COMPLETE, TrialState.PRUNED)
    ran = [t for t in result.handle.get_trials() if t.state in ended]
    assert 1 <= len(ran) < 200  # a simulated hour holds a few trials, not 200
    assert result.budget_note is not None
    # A simulated study spends the simulator's clock: start-ups at their prior, benchmarks at
    # their simulated durations, warm-ups included; within the hour, with time to confirm.
    assert result.budget_note.startswith(
        f"time budget 1h00m of simulated GPU time: stopped after {len(ran)} trials"
    )
    records = [r for r in map(TrialRecord.from_trial, ran) if r is not None]
    spent = sum(simulated_trial_s(r, space.workload.warmup) for r in records)
    assert 0 < spent < 3600
    first = records[0]
    assert simulated_trial_s(first, 1) > start_prior_s(first.server)  # a start-up and a bench
    assert result.confirmed  # the time left went to the confirmation
    assert optuna.load_study(study_name="budget", storage=result.storage).user_attrs["confirmed"]


def test_trials_that_overran_the_plan_end_the_run_on_time_unconfirmed(tmp_path: Path) -> None:
    space = _small_space()
    seconds = 400.0
    request = OptimizeRequest(
        "late", space, "sim", 20, tmp_path, confirm_top=1, confirm_repeats=1, rounds=True
    )
    opened = OpenedRun.open(request)
    # A budget whose plan priced a trial at 2 s, as a plan can be wrong about a world slower
    # than the simulator's (a plan this wrong is refused when opened, hence set here): the
    # first trial, minutes of simulated GPU time, overruns it.
    wrong = SimulatedBudget(seconds, TrialCost(1.0, 1.0), 1, space.workload.warmup)
    result = optimize(replace(opened, budget=wrong))
    (first,) = records(result.handle.get_trials())  # one more would not fit: the trials stop
    spent = simulated_trial_s(first, space.workload.warmup)
    assert seconds / 2 < spent < seconds  # so what is left holds no run like it
    assert result.confirmed == [] and not list(tmp_path.rglob("confirm-*"))
    assert result.recommended is not None and not result.recommended.numbers.confirmed
    assert result.best_yaml is not None and result.best_yaml.exists()
    note = result.budget_note
    assert note is not None and note.startswith("time budget 6m40s of simulated GPU time")
    assert note.endswith(": the recommendation is one run, not confirmed")


def test_a_budget_too_short_for_the_k_table_confirms_the_best_alone(tmp_path: Path) -> None:
    space = _small_space()
    wanted = Confirmation(1, 1)
    run_s = plan_study(space, 20, wanted).confirm_cost.total_s
    # 20 minutes: a third holds one run of the best config, not the K table's run beside it.
    assert fit_confirmation(space, wanted, 1200, run_s) == Confirmation(1, 1, k_table=False)
    request = OptimizeRequest(
        "short", space, "sim", 20, tmp_path, confirm_top=1, confirm_repeats=1, time_budget_s=1200
    )
    result = optimize(request)
    assert result.confirmed and result.k_table is None
    assert not list(tmp_path.rglob("k-table-*"))  # no run of a table was started


def test_a_budget_whose_third_holds_one_run_spends_it_on_trials(tmp_path: Path) -> None:
    """The default confirmation chooses between configs; a third of this budget holds one run,
    of the best alone, which could not change the pick: none is kept, trials take the time."""
    space = _small_space()
    run_s = plan_study(space, 20, Confirmation(3, 3)).confirm_cost.total_s
    seconds = 4 * run_s  # a third: one run and a third of another
    assert fit_confirmation(space, Confirmation(3, 3), seconds, run_s).runs(space) == 0
    request = OptimizeRequest(
        "lean", space, "sim", 20, tmp_path, confirm_top=3, time_budget_s=seconds, rounds=True
    )
    result = optimize(request)
    assert result.confirmed == [] and not list(tmp_path.rglob("confirm-*"))
    assert result.recommended is not None and not result.recommended.numbers.confirmed
    ran = records(result.handle.get_trials())
    spent = sum(simulated_trial_s(r, space.workload.warmup) for r in ran)
    # With nothing reserved the trials run until one more would pass the budget.
    assert seconds - 2 * run_s < spent <= seconds
    note = result.budget_note
    assert note is not None and "no confirmation, as a third of the budget holds one run" in note
