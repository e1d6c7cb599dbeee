"""Workers handed the same config at the same moment: one runs it, the others reuse its result."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Container
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig
from tuner.results import Source
from tuner.study.claims import claim_or_reuse
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

SERVER = ServerConfig(
    "Qwen/Qwen2.5-32B-Instruct-AWQ",
    2,
    8192,
    0.9,
    2048,
    SpeculativeConfig(SpecMethod.NGRAM, 4, None),
)
WORKERS = 4


class SlowStorage(optuna.storages.InMemoryStorage):
    """A database's latency: every read and write lets the other workers run in between."""

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        time.sleep(random.uniform(0, 0.004))
        return super().get_all_trials(study_id, deepcopy, states)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        time.sleep(random.uniform(0, 0.004))
        super().set_trial_user_attr(trial_id, key, value)


def _study() -> optuna.Study:
    return optuna.create_study(storage=SlowStorage(), directions=["maximize", "minimize"])


def _record(number: int, state: TrialState) -> TrialRecord:
    return TrialRecord(
        number=number,
        state=state,
        server=SERVER,
        trial_temperature=0.0,
        status=TrialStatus.OK if state is TrialState.COMPLETE else TrialStatus.FAILED,
        source=Source.SIMULATED,
        values=(50.0 + number, 200.0) if state is TrialState.COMPLETE else None,
    )


def _race(study: optuna.Study, fail_first_launch: bool = False) -> list[str]:
    """Each worker asks for a trial, is handed the one config, then all decide at once."""
    barrier = threading.Barrier(WORKERS)
    failed_once = threading.Event()

    def worker(_: int) -> str:
        trial = study.ask()
        trial.suggest_categorical("draft", ["ngram"])
        barrier.wait()
        reused = claim_or_reuse(study, trial, poll_s=0.02)
        if reused is not None:
            study.tell(trial, reused.objective)
            return f"reused #{reused.number}"
        if fail_first_launch and not failed_once.is_set():
            failed_once.set()
            study.tell(trial, state=TrialState.FAIL)  # a crash: whoever waits must run it
            return f"failed #{trial.number}"
        for key, value in _record(trial.number, TrialState.COMPLETE).to_attrs().items():
            trial.set_user_attr(key, value)
        study.tell(trial, (50.0 + trial.number, 200.0))
        return f"ran #{trial.number}"

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(worker, range(WORKERS)))


def test_one_of_four_workers_handed_one_config_runs_it_and_three_reuse_it() -> None:
    for _ in range(10):  # the decisions interleave differently each round
        study = _study()
        outcomes = _race(study)
        ran = [o for o in outcomes if o.startswith("ran")]
        assert len(ran) == 1, outcomes
        number = ran[0].split("#")[1]
        assert sorted(outcomes) == sorted([ran[0], *[f"reused #{number}"] * (WORKERS - 1)])
        assert all(t.state is TrialState.COMPLETE for t in study.trials)


def test_a_run_that_fails_is_taken_over_by_one_waiting_worker() -> None:
    study = _study()
    outcomes = _race(study, fail_first_launch=True)
    assert sum(o.startswith("failed") for o in outcomes) == 1, outcomes
    ran = [o for o in outcomes if o.startswith("ran")]
    assert len(ran) == 1, outcomes  # a failure is not a result: the config is run again, once
    assert sum(o == f"reused #{ran[0].split('#')[1]}" for o in outcomes) == WORKERS - 2
