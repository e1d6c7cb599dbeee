"""How every trial ends, written once for the local loop and the Ray driver."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.config.space import load_space
from tuner.errors import LaunchError, SpectuneError
from tuner.results import Source
from tuner.study.lifecycle import MAX_FAILURES_IN_A_ROW, TrialEnds
from tuner.study.study import make_sampler, open_study
from tuner.trial.record import TrialRecord, records

SPACE = load_space(str(Path(__file__).parent / "small-space.yaml"))


def _failed(study: optuna.Study, ends: TrialEnds, why: str) -> TrialRecord:
    trial = study.ask()
    config = SPACE.suggest(trial)
    record = ends.write(
        trial, TrialRecord.failed(trial.number, config, LaunchError(why), Source.SIMULATED)
    )
    study.tell(trial, state=TrialState.FAIL)
    ends.tell(record)
    return record


def test_a_trial_ends_written_as_readers_see_it_and_told_once() -> None:
    study, _ = open_study(
        "ends", optuna.storages.InMemoryStorage(), SPACE, make_sampler("random", 0)
    )
    told: list[TrialRecord] = []
    ends = TrialEnds(study, told.append, "/tmp/logs")
    record = _failed(study, ends, "no image")
    (stored,) = records(study.get_trials())
    assert stored.failure == record.failure and "no image" in (stored.failure or "")
    assert record.params == stored.params and record.params  # the params Optuna stored
    assert told == [record]


def test_a_setup_that_keeps_failing_stops_the_run_in_one_line_naming_the_logs() -> None:
    """Three failed runs in a row stop it; a run that measured something in between does not."""
    study, _ = open_study(
        "ends", optuna.storages.InMemoryStorage(), SPACE, make_sampler("random", 0)
    )
    ends = TrialEnds(study, None, "/tmp/logs")
    for attempt in range(MAX_FAILURES_IN_A_ROW - 1):
        ends.count(_failed(study, ends, f"attempt {attempt}"))
    ends.count(replace(_failed(study, ends, "x"), state=TrialState.PRUNED))  # it measured
    for attempt in range(MAX_FAILURES_IN_A_ROW - 1):
        ends.count(_failed(study, ends, f"again {attempt}"))
    last = _failed(study, ends, "image not found")
    with pytest.raises(SpectuneError) as stopped:
        ends.count(last)
    message = str(stopped.value)
    assert message.startswith(f"{MAX_FAILURES_IN_A_ROW} trials in a row failed, the last with: ")
    assert "image not found" in message and message.endswith("logs in /tmp/logs)")
    assert "\n" not in message
