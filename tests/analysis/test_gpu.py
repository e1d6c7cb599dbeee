"""Throttled measurements: never the recommendation while a fair one exists, and said once."""

from __future__ import annotations

from typing import Any

from optuna.trial import TrialState

from tuner.analysis.gpu import throttle_note
from tuner.analysis.picks import candidates, choose
from tuner.config.trial import ServerConfig
from tuner.results import Source
from tuner.trial.record import TrialRecord
from tuner.trial.scoring import TrialStatus

SERVER = ServerConfig("Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048)


def _gpu(throttled: bool, temperature: float = 70.0) -> dict[str, Any]:
    return {
        "seconds": 20.0,
        "throttled_s": {"thermal": 12.0, "power_cap": 20.0} if throttled else {"power_cap": 20.0},
        "throttled_pairs": int(throttled),
        "max_temperature_c": temperature,
        "power_limit_w": [450.0],
    }


def _trial(number: int, tok_s: float, gpu: dict[str, Any] | None) -> TrialRecord:
    return TrialRecord(
        number=number,
        state=TrialState.COMPLETE,
        server=SERVER,
        trial_temperature=0.0,
        status=TrialStatus.OK,
        source=Source.MEASURED,
        values=(tok_s, 200.0),
        constraints={"oom": -1.0, "ttft_slo": -800.0, "errors": -1.0},
        gpu=gpu,
    )


def test_the_recommendation_is_not_a_throttled_measurement() -> None:
    hot_and_fast = _trial(0, 90.0, _gpu(throttled=True))
    fair = _trial(1, 70.0, _gpu(throttled=False))
    assert hot_and_fast.throttled and not fair.throttled
    chosen = choose(candidates([hot_and_fast, fair], {}, 1000.0), "max-throughput")
    assert chosen is not None and chosen.number == 1
    # Where every candidate was throttled they all stay: the study then says why.
    only_hot = choose(candidates([hot_and_fast], {}, 1000.0), "max-throughput")
    assert only_hot is not None and only_hot.number == 0


def test_a_study_throttled_on_most_trials_says_so_once_with_heat_and_limit() -> None:
    trials = [
        _trial(0, 50.0, _gpu(True, 88.0)),
        _trial(1, 60.0, _gpu(True, 92.0)),
        _trial(2, 55.0, _gpu(False)),
        _trial(3, 40.0, None),  # not read: not counted
    ]
    note = throttle_note(trials)
    assert note is not None
    assert note.startswith("The GPUs throttled (thermal) in 2 of 3 measured trials, up to 92 °C")
    assert "under a 450 W power limit" in note
    assert throttle_note(trials[1:]) is None  # one of two is not most
    assert throttle_note([_trial(0, 1.0, None)]) is None
