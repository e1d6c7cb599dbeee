"""The executor contract: wherever a StudyRun's trials run (this process, worker processes on
one PostgreSQL database), the same observable outcome: every trial ends, the budget is kept
(across runs too), every trial's record is stored; a setup that keeps failing stops the run
with the lifecycle's one message and uses none of the budget; a config asked for again, or by
two workers at once, is measured once.

Ray's executor is held to the same cases in tests/study/cluster/ (a cluster of containers: heavy).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.trial.traffic_support import one_config_space
from tuner.config.space import SearchSpace, load_space
from tuner.errors import SpectuneError
from tuner.results import Source
from tuner.study.executor import InProcess
from tuner.study.lifecycle import MAX_FAILURES_IN_A_ROW
from tuner.study.optimize import OpenedRun, OptimizeRequest, StudyRun
from tuner.study.workers import LocalWorkers
from tuner.trial.backends import BackendOptions, ProcessSettings
from tuner.trial.optuna_private import rdb_of
from tuner.trial.record import TrialRecord

SPACE = str(Path(__file__).with_name("small-space.yaml"))
ENDED = (TrialState.COMPLETE, TrialState.PRUNED)
FAKE_SERVER = (sys.executable, "-m", "tuner.sim.server")


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
    name: str,
    url: str,
    workers: int,
    trials: int,
    folder: Path,
    rounds: bool = False,
    space: SearchSpace | None = None,
) -> StudyRun:
    request = OptimizeRequest(
        study=name,
        space=space or load_space(SPACE),
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
    run, ticks, seen = _trials_of(request)
    told = seen if workers == 1 else ticks[-1:]  # this process hears each, or counts them
    assert told and (len(told) == trials if workers == 1 else told[0] <= trials)
    return run


def _trials_of(request: OptimizeRequest) -> tuple[StudyRun, list[int], list[int]]:
    """Runs ``request``'s trials: the run, the ticks and the trial numbers it was told."""
    run = OpenedRun.open(request).prepare().start()
    ticks: list[int] = []
    seen: list[int] = []
    try:
        run.run_trials(lambda record: seen.append(record.number), ticks.append)
    finally:
        rdb = rdb_of(run.study)
        if rdb is not None:  # no connection left for a later test to find
            rdb.engine.dispose()
    return run, ticks, seen


def _stored(name: str, url: str) -> list[optuna.trial.FrozenTrial]:
    opened = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(study_name=name, storage=opened).get_trials()
    finally:
        opened.engine.dispose()


def test_every_trial_ends_within_the_budget_with_its_record(
    storage: tuple[str, int], tmp_path: Path
) -> None:
    url, workers = storage
    name = f"executor-{uuid.uuid4().hex[:8]}"
    first = _run(name, url, workers, 4, tmp_path)
    assert isinstance(first.executor, InProcess if workers == 1 else LocalWorkers)
    _run(name, url, workers, 2, tmp_path)  # a second run adds its trials to the budget

    trials = _stored(name, url)
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

    records = [TrialRecord.from_trial(t) for t in _stored(name, url) if t.state in ENDED]
    measured = [r for r in records if r is not None and r.duplicate_of is None]
    assert measured
    stopped = {level["stopped"] for r in measured for level in r.levels}
    assert stopped and "fixed count" not in stopped


def test_a_setup_that_keeps_failing_stops_the_run_with_one_message(
    storage: tuple[str, int], tmp_path: Path
) -> None:
    # Every start of the fake server fails (as an unknown flag or a broken image would): the
    # failed trials use none of the budget, so only the lifecycle's count stops the run.
    url, workers = storage
    name = f"failing-{uuid.uuid4().hex[:8]}"
    settings = ProcessSettings(vllm_command=FAKE_SERVER, ready_timeout_s=30)
    request = OptimizeRequest(
        study=name,
        space=one_config_space(name, {"sim-fault": "crash-at-start"}),
        backend="process",
        trials=6,
        studies_dir=tmp_path,
        storage=url,
        sampler="random",
        workers=workers,
        gpus_per_trial=1,
        confirm_top=0,
        backend_options=BackendOptions(study="", settings=settings),
        prefetch=False,
    )
    with pytest.raises(SpectuneError) as raised:
        _trials_of(request)

    message = str(raised.value)
    assert f"{MAX_FAILURES_IN_A_ROW} trials in a row failed, the last with: " in message
    assert "crash-at-start" in message  # the server's own reason, not a generic one
    assert "\n" not in message
    trials = _stored(name, url)
    assert [t.state for t in trials] == [TrialState.FAIL] * len(trials)  # none counted
    # Each worker stops at its own count; none goes on to the budget's six.
    assert len(trials) == MAX_FAILURES_IN_A_ROW * workers
    assert all(str(t.user_attrs["failure"]).startswith("vLLM did not start") for t in trials)


def test_a_config_asked_for_again_is_measured_once(
    storage: tuple[str, int], tmp_path: Path
) -> None:
    # One config in the space: every trial after the first asks for it again; with two
    # workers, the first two ask at once and race for it.
    url, workers = storage
    name = f"dedupe-{uuid.uuid4().hex[:8]}"
    _run(name, url, workers, 4, tmp_path, space=one_config_space(name))

    trials = _stored(name, url)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    (ran,) = [t for t in trials if t.user_attrs.get("duplicate_of") is None]
    others = [t for t in trials if t is not ran]
    assert all(t.user_attrs["duplicate_of"] == ran.number for t in others)
    assert all(t.values == ran.values for t in others)  # the measured result, not another
