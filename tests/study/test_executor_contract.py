"""The executor contract: wherever a StudyRun's trials run (this process, worker processes on
one PostgreSQL database), the same observable outcome: every trial ends, the budget is kept
(across runs too), every trial's record is stored.

Ray's executor is held to the same cases in tests/study/cluster/ (a cluster of containers: heavy).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.config.space import load_space
from tuner.results import Source
from tuner.study.executor import InProcess
from tuner.study.optimize import OpenedRun, OptimizeRequest, StudyRun
from tuner.study.workers import LocalWorkers
from tuner.trial.optuna_private import rdb_of
from tuner.trial.record import TrialRecord

SPACE = str(Path(__file__).with_name("small-space.yaml"))
ENDED = (TrialState.COMPLETE, TrialState.PRUNED)


@pytest.fixture(
    params=[
        pytest.param("in-process"),
        pytest.param("local-workers", marks=pytest.mark.postgres),
    ]
)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, int]:
    """The storage URL and the number of workers each executor runs with."""
    if request.param == "in-process":
        return f"sqlite:///{tmp_path / 'contract.db'}", 1
    pg_url: str = request.getfixturevalue("pg_url")
    return pg_url, 2


def _run(
    name: str, url: str, workers: int, trials: int, folder: Path, rounds: bool = False
) -> StudyRun:
    request = OptimizeRequest(
        study=name,
        space=load_space(SPACE),
        backend="sim",
        trials=trials,
        studies_dir=folder,
        storage=url,
        sampler="random",
        workers=workers,
        confirm_top=0,
        resume_stored=True,  # the second run goes on with the stored study
        rounds=rounds,
    )
    run = OpenedRun.open(request).prepare().start()
    ticks: list[int] = []
    seen: list[int] = []
    try:
        run.run_trials(lambda record: seen.append(record.number), ticks.append)
    finally:
        rdb = rdb_of(run.study)
        if rdb is not None:  # no connection left for a later test to find
            rdb.engine.dispose()
    told = seen if workers == 1 else ticks[-1:]  # this process hears each, or counts them
    assert told and (len(told) == trials if workers == 1 else told[0] <= trials)
    return run


def test_every_trial_ends_within_the_budget_with_its_record(
    storage: tuple[str, int], tmp_path: Path
) -> None:
    url, workers = storage
    name = f"executor-{uuid.uuid4().hex[:8]}"
    first = _run(name, url, workers, 4, tmp_path)
    assert isinstance(first.executor, InProcess if workers == 1 else LocalWorkers)
    _run(name, url, workers, 2, tmp_path)  # a second run adds its trials to the budget

    opened = optuna.storages.RDBStorage(url)
    try:
        trials = optuna.load_study(study_name=name, storage=opened).get_trials()
    finally:
        opened.engine.dispose()
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    ended = [t for t in trials if t.state in ENDED]
    assert len(ended) == 6  # the two budgets, all workers together, never more
    records = [TrialRecord.from_trial(t) for t in ended]
    assert all(r is not None and r.source is Source.SIMULATED for r in records)
    assert all(r is not None and r.worker for r in records)  # each says who ran it
    if workers > 1:  # the work really was shared
        assert len({r.worker for r in records if r is not None}) >= 2


def test_every_executor_measures_in_rounds_when_the_run_says_so(
    storage: tuple[str, int], tmp_path: Path
) -> None:
    # Workers once measured the fixed count whatever the run said: each pair's record names
    # why it stopped, and "fixed count" is what a pair measured without rounds says.
    url, workers = storage
    name = f"rounds-{uuid.uuid4().hex[:8]}"
    _run(name, url, workers, 4, tmp_path, rounds=True)

    opened = optuna.storages.RDBStorage(url)
    try:
        trials = optuna.load_study(study_name=name, storage=opened).get_trials()
    finally:
        opened.engine.dispose()
    records = [TrialRecord.from_trial(t) for t in trials if t.state in ENDED]
    measured = [r for r in records if r is not None and r.duplicate_of is None]
    assert measured
    stopped = {level["stopped"] for r in measured for level in r.levels}
    assert stopped and "fixed count" not in stopped
