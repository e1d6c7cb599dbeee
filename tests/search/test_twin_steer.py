"""The study-side twin: fitted and stored after every trial, proposing and guarding memory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import optuna
import pytest

from tuner.config.space import load_space
from tuner.search.forecast import predicted_pairs
from tuner.search.proposals import PROPOSED_ATTR, REUSES_KEY, on_traffic
from tuner.search.startup import REUSE_FLOOR
from tuner.search.strategy import FIRST_START_MARGIN_GIB, predicted_configs, warm_start
from tuner.search.twin_screen import TwinScreen, twin_screen
from tuner.search.twin_steer import TwinSampler, stored_twin
from tuner.sim.twin import TwinParams
from tuner.sim.twin.fit import FittedTwin
from tuner.study.study import StudyOptions, open_study, run_trials
from tuner.trial.record import WARM_START_ATTR

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from worlds import WORLDS, World, WorldBackend

SPACE = load_space(str(Path(__file__).parents[2] / "benchmarks" / "held_out_space.yaml"))


def _study(world: World, trials: int, tmp_path: Path, seed: int = 0) -> optuna.Study:
    sampler = TwinSampler(
        optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)
    )
    study = open_study("t", optuna.storages.InMemoryStorage(), SPACE, sampler)[0]
    warm_start(study, SPACE, trials)
    backend = WorldBackend(SPACE.hardware, world, seed, SPACE.version)
    run_trials(study, SPACE, backend, StudyOptions(trials, seed, tmp_path, SPACE.ttft_limit_ms))
    return study


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_twin_learns_a_costly_draft_and_proposes_ngram(tmp_path: Path) -> None:
    world = World("draft 2.5x", "", draft_cost=2.5)
    study = _study(world, 12, tmp_path)
    twin = stored_twin(study)
    assert twin is not None and twin.observations >= 10
    assert twin.params.draft == pytest.approx(2.5, rel=0.2)
    proposed = [t for t in study.trials if PROPOSED_ATTR in t.user_attrs]
    assert proposed, "the twin proposed nothing"
    best = max(
        (t for t in study.trials if t.values and all(c <= 0 for c in t.constraints.values())),
        key=lambda t: t.values[0],
    )
    assert best.params["draft"] == "ngram"  # truly best in that world; the prior says the draft


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_twin_keeps_launches_out_of_measured_memory_trouble(tmp_path: Path) -> None:
    world = World("memory +1.1 GiB", "", outside_gib=1.1)
    study = _study(world, 16, tmp_path, seed=1)
    statuses = [t.user_attrs.get("status") for t in study.trials]
    assert statuses.count("OOM") <= 1
    twin = stored_twin(study)
    assert twin is not None and twin.params.outside_gib == pytest.approx(1.1, abs=0.1)
    assert twin.margin_gib >= 0.5


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("seed", [0, 1])
def test_the_queue_is_replanned_after_an_oom(tmp_path: Path, seed: int) -> None:
    # GPUs that hold 2 GiB more outside vLLM's budget than modelled: every config the warm
    # start queued (a draft, an EAGLE-3 head, none, each at a tight utilization) would run out.
    space = load_space(
        str(Path(__file__).parents[1] / "sim" / "twin" / "spaces" / "eagle3-8b-4090x1.yaml")
    )
    world = World("memory +2 GiB", "", outside_gib=2.0)
    sampler = TwinSampler(
        optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)
    )
    study = open_study("t", optuna.storages.InMemoryStorage(), space, sampler)[0]
    queued = warm_start(study, space, 10)
    planned = [t.system_attrs["fixed_params"] for t in study.get_trials()]
    backend = WorldBackend(space.hardware, world, seed, space.version)
    run_trials(study, space, backend, StudyOptions(10, seed, tmp_path, space.ttft_limit_ms))
    statuses = [t.user_attrs.get("status") for t in study.trials[:10]]
    assert statuses.count("OOM") <= 2, statuses  # not one launch per queued config
    ran = [t.params for t in study.trials[:queued]]
    assert ran[-1] != planned[-1]  # the last queued config moved before it launched
    assert ran[-1]["gpu_memory_utilization"] < planned[-1]["gpu_memory_utilization"]
    assert statuses[queued - 1] == "ok"


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_close_temperature_on_the_running_server_is_proposed_before_a_new_server(
    tmp_path: Path,
) -> None:
    # In this world (the prior's favourite accepts less than modelled) the twin's best after
    # the first trials needs a new server, while the server that ran last is forecast within
    # a few per cent of it at another temperature: a request-side change that costs no
    # start-up.
    world = next(w for w in WORLDS if w.name == "favourite accepts less")
    study = _study(world, 10, tmp_path)
    trials = study.trials[:10]
    reusing = [t for t in trials if REUSES_KEY in t.user_attrs.get(PROPOSED_ATTR, {})]
    assert reusing, [t.params for t in trials]
    for trial in reusing:
        proposal = trial.user_attrs[PROPOSED_ATTR]
        before = study.trials[proposal[REUSES_KEY]]
        assert trial.number == before.number + 1  # it ran right after the trial it reuses
        assert not trial.user_attrs["restarted"]
        server = {k: v for k, v in trial.params.items() if k != "temperature"}
        assert server == {k: v for k, v in before.params.items() if k != "temperature"}
        assert trial.params["temperature"] != before.params["temperature"]
        instead = proposal["instead_of"]
        assert instead["startup_from"] == "prior"  # the simulator times no start-up
        assert proposal["output_tok_s"] >= REUSE_FLOOR * instead["output_tok_s"]
        assert proposal["output_tok_s"] <= instead["output_tok_s"]
        # One per server: what the twin proposes next is not another change of the same one.
        after = [t for t in trials[trial.number + 1 :] if PROPOSED_ATTR in t.user_attrs]
        again = after[0].user_attrs[PROPOSED_ATTR].get(REUSES_KEY) if after else None
        if again is not None:
            reused = {k: v for k, v in study.trials[again].params.items() if k != "temperature"}
            assert reused != server
    # The twin never proposes a config already run or still queued.
    proposed = [t for t in trials if PROPOSED_ATTR in t.user_attrs]
    for trial in proposed:
        assert all(trial.params != t.params for t in trials[: trial.number])
        # Each forecast says how wrong it may be, as the warm start's do.
        band = trial.user_attrs[PROPOSED_ATTR]["error_band"]
        assert band.startswith(("+/- ", "too few public figures for ")), band


def test_screen_respects_the_fitted_margin() -> None:
    screen = TwinScreen(SPACE)
    loose = FittedTwin()
    tight = FittedTwin(TwinParams(outside_gib=2.5), margin_gib=0.75)
    top_loose, top_tight = screen.rank(loose)[0], screen.rank(tight)[0]
    assert top_loose.headroom_gib >= 0.75
    assert top_tight.headroom_gib >= 0.75
    arm = screen.arm("none", 0)
    settings = sorted(screen.settings)  # every arm is screened at every setting
    assert sum(screen.safe(tight, arm, s) for s in settings) < sum(
        screen.safe(loose, arm, s) for s in settings
    )


def test_the_twins_proposals_forecast_the_traffic_mix() -> None:
    space = load_space(
        str(Path(__file__).parents[1] / "sim" / "twin" / "spaces" / "mixed-14b-4090x1.yaml")
    )
    screen = TwinScreen(space)
    twin = FittedTwin()  # neutral: its physics are the shipped simulator's
    alone = screen.rank(twin)  # the closed form: one request at a time
    mixed = on_traffic(screen, twin, alone)

    def scored(params: dict[str, Any]) -> float:
        config = space.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(params)))
        workload = config.client.workload
        pairs = predicted_pairs(space, config.server, workload, workload.conditions)
        return sum(c.weight * r.output_tok_s for c, r in pairs)

    assert mixed[0].output_tok_s == pytest.approx(scored(mixed[0].params), rel=0.01)
    assert scored(mixed[0].params) >= scored(alone[0].params)
    assert {p.method for p in mixed} == {p.method for p in alone}  # every method still there


def _mixed_study(
    space_file: str, world: World, trials: int, tmp_path: Path, seed: int
) -> list[Any]:
    """(params, status, values) of every trial of a spectune study of ``world``."""
    space = load_space(space_file)
    sampler = TwinSampler(
        optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)
    )
    study = open_study("t", optuna.storages.InMemoryStorage(), space, sampler)[0]
    warm_start(study, space, trials)
    backend = WorldBackend(space.hardware, world, seed, space.version)
    options = StudyOptions(trials, seed, tmp_path, space.ttft_limit_ms, rounds=True)
    run_trials(study, space, backend, options)
    return [(t.params, t.user_attrs.get("status"), t.values) for t in study.trials]


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_study_does_not_depend_on_the_studies_before_it(tmp_path: Path) -> None:
    """A user (or a Ray worker, or the held-out benchmark's worker pool) running several studies
    in one process gets, for the same space, world and seed, the same trials as in a fresh
    process: the caches the screens keep per space change how fast, never what is chosen."""
    space_file = str(
        Path(__file__).parents[1] / "sim" / "twin" / "spaces" / "mixed-14b-4090x1.yaml"
    )
    ngram = World("ngram workload", "", ngram_logit=2.0)
    predicted_configs.cache_clear()  # as in a fresh process
    twin_screen.cache_clear()
    fresh = _mixed_study(space_file, ngram, 8, tmp_path, seed=0)
    _mixed_study(space_file, World("draft 2.5x", "", draft_cost=2.5), 8, tmp_path, seed=1)
    again = _mixed_study(space_file, ngram, 8, tmp_path, seed=0)
    assert len(fresh) == 8
    assert again == fresh


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("outside_gib", [0.0, 1.1])
def test_the_first_launch_measures_memory_before_the_queue_s_tight_setting(
    tmp_path: Path, outside_gib: float
) -> None:
    # The 14B space's favourite (0.5B draft, K=4) is forecast best at 0.94 of the 4090, a GiB
    # to spare, and the warm start queues every method there: a world holding 1.1 GiB more
    # than modelled would run the first launch out of memory.
    space = load_space("qwen2.5-14b-awq-4090x1")
    favourite = predicted_configs(space)[0]
    assert favourite.headroom_gib < FIRST_START_MARGIN_GIB
    tight = favourite.params["gpu_memory_utilization"]
    sampler = TwinSampler(optuna.samplers.TPESampler(seed=0, multivariate=True, group=True))
    study = open_study("t", optuna.storages.InMemoryStorage(), space, sampler)[0]
    warm_start(study, space, 12)
    backend = WorldBackend(space.hardware, World("", "", outside_gib=outside_gib), 0, space.version)
    run_trials(study, space, backend, StudyOptions(2, 0, tmp_path, space.ttft_limit_ms))
    first, second = study.trials[:2]
    assert [t.user_attrs.get("status") for t in (first, second)] == ["ok", "ok"]
    same = ("draft", "num_speculative_tokens")
    assert {k: first.params[k] for k in same} == {k: favourite.params[k] for k in same}
    assert first.params["gpu_memory_utilization"] < tight
    # Where the model is right the next queued config runs at the favourite's setting; where
    # it is not, the first start-up's peak moved it to one that fits.
    assert second.user_attrs.get(WARM_START_ATTR)
    assert (second.params["gpu_memory_utilization"] == tight) == (outside_gib == 0)
