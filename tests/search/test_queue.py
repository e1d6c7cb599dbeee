"""The queue the sampler owns: the twin's proposal goes ahead of a warm-start config it beats."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest

from tuner.config.space import load_space
from tuner.search.queue import HELD_ATTR, place
from tuner.search.strategy import warm_start
from tuner.search.twin_steer import TwinSampler
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.record import PROPOSED_ATTR, WARM_START_ATTR

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from worlds import WORLDS, WorldBackend

SPACE_2026 = load_space("qwen3-coder-30b-fp8-4090x2-2026")


def _study(trials: int) -> optuna.Study:
    sampler = TwinSampler(
        optuna.samplers.TPESampler(seed=0, multivariate=True, group=True, n_startup_trials=8)
    )
    return open_study("t", optuna.storages.InMemoryStorage(), SPACE_2026, sampler)[0]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_proposal_from_measurements_runs_before_a_warm_config_it_beats(tmp_path: Path) -> None:
    """Where drafts decay faster than the prior thinks, the twin's lower-K proposal runs before
    the prior's remaining configs, which it forecasts short of it even at their band's top; the
    config it went ahead of waits at the queue's end, and each trial stores what it ran."""
    world = next(w for w in WORLDS if w.name == "acceptance decay")
    study = _study(30)
    queued = warm_start(study, SPACE_2026, 30)
    backend = WorldBackend(SPACE_2026.hardware, world, 0, SPACE_2026.version)
    options = StudyOptions(queued, 0, tmp_path, SPACE_2026.ttft_limit_ms, rounds=True)
    run_trials(study, SPACE_2026, backend, options)

    trials = study.get_trials(deepcopy=False)
    ahead = [t for t in trials if (t.user_attrs.get(PROPOSED_ATTR) or {}).get("ahead_of")]
    assert ahead, "no proposal went ahead of a warm-start config"
    first = ahead[0]
    assert first.number < queued  # it ran inside the warm start's turns
    assert first.user_attrs[WARM_START_ATTR] is None  # it ran the proposal, not the warm config
    passed = first.user_attrs[PROPOSED_ATTR]["ahead_of"]
    assert passed["high_tok_s"] < first.user_attrs[PROPOSED_ATTR]["output_tok_s"]
    assert first.params != passed["params"]
    later = [t for t in trials if t.number > first.number and t.user_attrs.get(WARM_START_ATTR)]
    assert any(
        all(t.system_attrs["fixed_params"].get(k) == v for k, v in passed["params"].items())
        for t in later
    ), "the warm config it went ahead of is no longer queued"


def test_a_proposal_is_held_while_warm_configs_wait_and_queued_when_none_do() -> None:
    params = {"draft": "none", "gpu_memory_utilization": 0.9, "max_num_batched_tokens": 4096}
    study = _study(8)
    study.enqueue_trial({**params, "draft": "ngram"}, user_attrs={WARM_START_ATTR: {"x": 1}})
    before = len(study.get_trials(deepcopy=False))
    place(study, params, {"output_tok_s": 1.0})
    assert len(study.get_trials(deepcopy=False)) == before
    assert study.user_attrs[HELD_ATTR]["params"] == params

    empty = _study(8)
    place(empty, params, {"output_tok_s": 1.0})
    (trial,) = empty.get_trials(deepcopy=False)
    assert trial.user_attrs[PROPOSED_ATTR] == {"output_tok_s": 1.0}
    assert not empty.user_attrs.get(HELD_ATTR)
