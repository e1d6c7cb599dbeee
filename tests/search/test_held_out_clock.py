"""The held-out benchmark's GPU-time table (benchmarks/search_efficiency.py): a study whose clock
ran out before its trial count (the default space's trials take a quarter GPU-hour each) is
read at the trials it ran, with the confirmation runs each time budget keeps, and again with
optimize's default confirmation."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from search_efficiency import (
    TimeRow,
    Trace,
    budget_runs,
    stopped_early,
    summarise_time,
    time_verdict,
)

from tuner.config.space import load_space
from tuner.trial.record import TrialRecord

HOUR = 3600.0


def _clock_ran_out() -> Trace:
    """Three trials in 2.1 GPU-hours, padded to a 5-trial study as ``run_task`` pads it; the
    best's confirmation takes 2.5 hours (the default space: 12 fresh runs of six pairs)."""
    trace = Trace(
        shares=[0.8, 0.96, 1.0],
        clock=[0.3 * HOUR, 1.2 * HOUR, 2.1 * HOUR],
        confirm=[2.5 * HOUR] * 3,
        pruned=1,
        confirm_runs=12,
        budget_runs={0.5: 1, 1.0: 2, 2.0: 2, 4.0: 4},
    )
    trace.shares += [1.0, 1.0]
    return trace


def test_a_padded_trace_is_read_at_the_trials_it_ran() -> None:
    trace = _clock_ran_out()
    assert trace.trials == 3
    # Confirmation alone outlasts 2 hours: nothing is recommended within them.
    assert trace.reached_in(2 * HOUR) == 0.0
    # 0.3 h of trials + 2.5 h of confirmation fit in 3 hours; 1.2 h + 2.5 h do not.
    assert trace.reached_in(3 * HOUR) == 0.8
    assert trace.reached_in(4 * HOUR) == 0.96
    # Two of the twelve runs take 2.5 / 6 hours: 1.2 h + 0.42 h fit in 2 hours, 2.1 h do not.
    assert trace.reached_in(2 * HOUR, runs=2) == 0.96
    assert trace.reached_in(0.5 * HOUR, runs=2) == 0.0
    assert trace.confirm_in(2 * HOUR) == 2.5 * HOUR


def test_the_time_row_counts_trials_run_not_padding() -> None:
    row = summarise_time([_clock_ran_out()], [0.5, 1.0, 2.0, 4.0])
    # Each budget's own runs (one run: 2.5 / 12 hours): 0.3 h + 0.21 h miss half an hour,
    # 0.3 h + 0.42 h fit in one, 1.2 h + 0.42 h in two, 2.1 h + 0.83 h in four.
    assert row.shares == (0.0, 0.8, 0.96, 1.0)
    assert row.trials_2h == 2
    assert row.default_2h == 0.0  # the default's twelve runs alone outlast 2 hours
    assert row.confirm_2h == pytest.approx(2.5)
    assert row.pruned == pytest.approx(1 / 3)  # one of three trials run, not of five
    assert row.chosen_pruned == 0


def test_a_two_hour_budget_keeps_fewer_runs_on_the_default_space() -> None:
    """optimize --time-budget 2h keeps confirmation within a third of the budget: on the default
    space (six pairs of 40 requests on two 4090s) one config once, and the K table's run."""
    space = load_space("default")
    assert budget_runs(space, 30, 2 * HOUR) == 2
    assert budget_runs(space, 30, 100 * HOUR) == 12  # the default's 3 configs (+ table) x 3
    # An hour's third holds one run of the best, not the K table's run beside it.
    assert budget_runs(space, 30, 1 * HOUR) == 1


def test_the_aim_holds_spectune_to_tpe_at_every_budget_up_to_two_hours() -> None:
    def row(*shares: float) -> TimeRow:
        return TimeRow(shares, 8, 0.0, 2.5, 0.2, 0)

    hours = [0.5, 1.0, 2.0, 4.0]
    met, _, _ = time_verdict(
        "w", {"spectune": row(0, 0.99, 1.0, 1.0), "TPE": row(0, 0.9, 0.95, 1)}, hours
    )
    assert met
    # Ahead at 2 hours, behind at one: not met, and the line names the hour.
    met, _, why = time_verdict(
        "w", {"spectune": row(0, 0.78, 1.0, 1.0), "TPE": row(0, 0.97, 0.97, 0.97)}, hours
    )
    assert not met and why == "w: vs TPE 97.0 % after 1 h"
    # Behind after 4 hours only: past the bar's 2 hours, not judged.
    met, _, _ = time_verdict(
        "w", {"spectune": row(0, 0.99, 1.0, 0.98), "TPE": row(0, 0.9, 0.95, 1)}, hours
    )
    assert met


def _record(pruned: str | None, *requests: int | None) -> TrialRecord:
    levels = [{"requests": n} for n in requests]
    return cast(TrialRecord, SimpleNamespace(pruned=pruned, levels=levels))


def test_a_pair_stopped_under_the_count_counts_as_stopped_early() -> None:
    """The GPU-time check: no pruned trial, nor one with a pair under the workload's count (a
    losing pair's early stop), may be the recommended one; the ceiling's 80 is not early."""
    assert not stopped_early(_record(None, 40, 80, 40), 40)
    assert not stopped_early(_record(None, None), 40)  # a fixed-count record names no count
    assert stopped_early(_record(None, 40, 20), 40)
    assert stopped_early(_record("cannot reach trial 3", 40), 40)
