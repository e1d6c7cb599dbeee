"""The study on the simulator backend: constraints, resume, restarts, budget, storage errors."""

import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tuner.config.prompts import PromptRequest
from tuner.config.space import SearchSpace, load_space
from tuner.config.trial import LaunchContext, ServerConfig, TrialConfig
from tuner.errors import ConfigError, FailureKind, StartupFailure
from tuner.launch.exit_hooks import Terminated
from tuner.results import Endpoint, TrialResult
from tuner.search.screen import grid_params
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.storage import RetryOwnRecord, open_storage
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.backends import Backend, BackendOptions, backend_factory
from tuner.trial.record import BUDGET_ATTR, TrialRecord
from tuner.trial.run_facts import RunFacts
from tuner.trial.runner import TrialRunner
from tuner.trial.scoring import CONSTRAINT_KEYS, TrialStatus


def _request(tmp_path: Path, trials: int = 6, **kw: Any) -> OptimizeRequest:
    return OptimizeRequest(
        study="s", space=load_space(), backend="sim", trials=trials, studies_dir=tmp_path, **kw
    )


def test_oom_trials_are_complete_with_constraints(tmp_path: Path) -> None:
    result = optimize(_request(tmp_path, trials=12, seed=3))
    study = optuna.load_study(study_name="s", storage=result.storage)
    trials = study.get_trials()
    assert len(trials) == 12
    assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials)
    for t in trials:
        # Only the keyed constraints: a legacy list would make Optuna count them twice.
        assert list(t.constraints) == list(CONSTRAINT_KEYS)
        assert "constraints" not in t.system_attrs
        assert all(v == v and abs(v) < float("inf") for v in t.values)
    assert study.metric_names == ["output_tok_s", "p95_ttft_ms"]
    assert study.user_attrs[BUDGET_ATTR] == 12


def test_resume_adds_trials_and_keeps_the_space(tmp_path: Path) -> None:
    optimize(_request(tmp_path, trials=3))
    again = optimize(
        OptimizeRequest(study="s", space=None, backend="sim", trials=2, studies_dir=tmp_path)
    )
    assert again.trials == 5 and again.space == load_space()
    other = load_space().with_ttft_limit(123)
    with pytest.raises(ConfigError, match="TTFT limit of"):
        optimize(
            OptimizeRequest(study="s", space=other, backend="sim", trials=1, studies_dir=tmp_path)
        )


def test_predicted_oom_launches_nothing_and_request_changes_reuse_the_server(
    tmp_path: Path,
) -> None:
    space = load_space()
    starts: list[object] = []
    backend = backend_factory("sim")(space, BackendOptions(study="s"))
    original = backend.start

    def counting_start(server, context):  # type: ignore[no-untyped-def]
        starts.append(server)
        return original(server, context)

    backend.start = counting_start  # type: ignore[method-assign]
    runner = TrialRunner.for_space(backend, space)
    ctx = LaunchContext("s", 0, tmp_path)
    too_big = space.config(space.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.98, 2048, 0.2)
    # Short by less than the memory model's error: launched once, and it runs out of memory;
    # then the runner's own evidence skips it without a launch.
    out = runner.run(too_big, ctx, seed=1)
    assert out.status is TrialStatus.OOM and len(starts) == 1
    again = runner.run(too_big.with_temperature(0.7), ctx, seed=2)
    assert again.status is TrialStatus.OOM_PREDICTED and len(starts) == 1 and not again.results
    assert "a start-up in this study" in (again.failure or "")
    starts.clear()
    fits = space.config(space.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.92, 2048, 0.2)
    first = runner.run(fits, ctx, seed=1)
    second = runner.run(fits.with_temperature(0.7), ctx, seed=2)
    assert first.restarted and not second.restarted and len(starts) == 1
    assert first.primary is not None and second.primary is not None
    assert second.primary.acceptance_rate < first.primary.acceptance_rate  # type: ignore[operator]
    runner.close()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("not a url", "invalid storage URL"),
        ("nosuchdb://x/y", "cannot open storage"),
        ("postgresql+psycopg://u:secret@127.0.0.1:1/db", "cannot open storage"),
    ],
)
def test_bad_storage_urls(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        open_storage(url)
    assert "secret" not in str(info.value)


def test_unwritable_studies_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="not writable"):
        optimize(_request(blocker / "studies"))


def test_simulated_and_measured_trials_never_share_a_study(tmp_path: Path) -> None:
    optimize(_request(tmp_path, trials=1))
    with pytest.raises(ConfigError, match="holds simulated trials"):
        optimize(
            OptimizeRequest(
                study="s", space=None, backend="process", trials=1, studies_dir=tmp_path
            )
        )


def _sim(space: SearchSpace) -> Backend:
    return backend_factory("sim")(space, BackendOptions(study="r"))


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_retried_stale_trial_carries_only_its_own_constraints(tmp_path: Path) -> None:
    space = load_space()
    storage = open_storage(f"sqlite:///{tmp_path / 'r.db'}")
    study, _ = open_study("r", storage, space, optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(next(grid_params(space)))
    dead = study.ask()
    # The dead worker recorded its trial, then died before telling Optuna.
    dead.set_user_attr("status", "OOM")
    dead.set_user_attr("failure", "the dead run's failure")
    dead.set_constraint("oom", 1.0)
    dead.set_constraint("ttft_slo", 12345.0)
    study.tell(dead, state=TrialState.FAIL)  # what the heartbeat check does to a stale trial
    retry_callback = storage.get_heartbeat_stale_trial_callback()
    assert isinstance(retry_callback, RetryOwnRecord)
    retry_callback(study, study.trials[dead.number])

    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].params == study.trials[dead.number].params
    assert waiting[0].constraints == {} and "status" not in waiting[0].user_attrs
    assert waiting[0].system_attrs["failed_trial"] == dead.number  # Optuna's retry history stays

    seen: list[TrialRecord] = []
    run_trials(study, space, _sim(space), StudyOptions(1, 0, tmp_path, 500.0), seen.append)
    retried = study.trials[waiting[0].number]
    assert retried.state is TrialState.COMPLETE and [r.number for r in seen] == [retried.number]
    assert retried.constraints == dict(seen[0].constraints)  # its own, not the dead run's
    assert retried.constraints["ttft_slo"] != 12345.0
    assert retried.user_attrs.get("failure") == seen[0].failure  # not the dead run's either


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")
def test_a_trial_whose_worker_died_right_after_ask_goes_stale(tmp_path: Path) -> None:
    """The worker dies (or the database goes away) between ``ask`` and the trial loop's first
    beat: the trial beat once as it started, so the stale check fails and retries it; without
    that beat Optuna never sees it stale and it stays RUNNING, holding a place in the budget."""
    space = load_space()
    storage = open_storage(
        f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval_s=1, grace_period_s=1
    )
    study, _ = open_study("s", storage, space, optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(next(grid_params(space)))
    taken, sampled = study.ask(), study.ask()  # an enqueued config, then a sampled one
    assert study.trials[taken.number].system_attrs.get("fixed_params")
    time.sleep(3.0)  # past the grace: SQLite's clock counts whole seconds
    optuna.storages.fail_stale_trials(study)
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states[taken.number] is TrialState.FAIL and states[sampled.number] is TrialState.FAIL
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 2  # each retried once


class _Crashing:
    """The simulator, except that every server start crashes."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.source = inner.source

    def start(self, server: ServerConfig, context: LaunchContext) -> Endpoint:
        raise StartupFailure(FailureKind.CRASH, "engine core died", 1, "Traceback ...")

    def measure(self, config: TrialConfig, concurrency: int, seed: int) -> TrialResult:
        return self.inner.measure(config, concurrency, seed)

    def answer(self, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
        return self.inner.answer(requests)

    def stop(self) -> None:
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()

    def facts(self, space: SearchSpace) -> RunFacts:
        return self.inner.facts(space)


def test_a_failed_trial_records_its_config(tmp_path: Path) -> None:
    space = load_space()
    storage = open_storage(f"sqlite:///{tmp_path / 'f.db'}")
    study, _ = open_study("f", storage, space, optuna.samplers.RandomSampler(seed=0))
    fits = space.config(space.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.9, 2048, 0.2)
    study.enqueue_trial(
        {
            "draft": "Qwen/Qwen2.5-0.5B-Instruct",
            "num_speculative_tokens": 4,
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": 2048,
            "temperature": 0.2,
        }
    )
    seen: list[TrialRecord] = []
    run_trials(
        study,
        space,
        _Crashing(_sim(space)),
        StudyOptions(1, 0, tmp_path, 500.0),
        seen.append,
    )
    trial = study.trials[0]
    assert trial.state is TrialState.FAIL and trial.user_attrs["status"] == "failed"
    record = TrialRecord.from_trial(trial)
    assert record is not None and record == seen[0]
    assert record.status is TrialStatus.FAILED and record.server == fits.server
    assert "engine core died" in (record.failure or "") and record.log_tail == "Traceback ..."
    assert trial.constraints == {}  # a FAIL trial is invisible to the sampler anyway


class _SignalledSampler(optuna.samplers.RandomSampler):
    """Sends SIGTERM where Optuna runs no objective: in ask once the trial exists, or in tell
    before the trial's state is written."""

    def __init__(self, where: str) -> None:
        super().__init__(seed=0)
        self.where = where

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.where == "ask":
            os.kill(os.getpid(), signal.SIGTERM)

    def after_trial(self, *args: Any) -> None:
        if self.where == "tell":
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("where", ["ask", "tell"])
@pytest.mark.parametrize("enqueued", [False, True], ids=["sampled", "enqueued"])
@pytest.mark.usefixtures("sigterm_raises")
def test_a_signal_outside_the_objective_ends_the_trial_and_stops(
    tmp_path: Path, where: str, enqueued: bool
) -> None:
    space = load_space()
    storage = open_storage(f"sqlite:///{tmp_path / 'g.db'}")
    study, _ = open_study("g", storage, space, _SignalledSampler(where))
    if enqueued:  # popped to RUNNING by ask, not created
        study.enqueue_trial(next(grid_params(space)))
    with pytest.raises(Terminated):
        run_trials(study, space, _sim(space), StudyOptions(2, 0, tmp_path, 500.0))
    # Optuna's own loop leaves the asked trial RUNNING, or raises UnboundLocalError from tell.
    # Here a trial stopped before its objective fails; one measured is told, then the study stops.
    ended = TrialState.FAIL if where == "ask" else TrialState.COMPLETE
    assert [t.state for t in study.get_trials()] == [ended]
