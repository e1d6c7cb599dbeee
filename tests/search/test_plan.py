"""The GPU time a study costs: ``optimize --plan`` before it runs, ``--time-budget`` as it runs."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.space import SearchSpace, load_space, space_from_dict
from tuner.config.trial import ServerConfig
from tuner.errors import ConfigError
from tuner.results import Source
from tuner.search.plan import (
    Confirmation,
    cut_confirmation,
    expected_share,
    fit_confirmation,
    plan_study,
    prior_cost,
    start_prior_s,
)
from tuner.search.startup import Family, StartupPrices
from tuner.search.strategy import warm_start_configs
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.storage import open_storage, study_names
from tuner.trial.record import TrialRecord, records
from tuner.trial.scoring import TrialStatus

runner = CliRunner()


# A space (file name and name alike) the search benchmark never ran on.
NEVER_BENCHMARKED = Path(__file__).parents[1] / "sim" / "twin" / "spaces" / "eagle3-8b-4090x1.yaml"


def _small_space() -> SearchSpace:
    """The default space with eight requests a pair: the same traffic mix, priced quicker."""
    raw = load_space(None).source
    return space_from_dict({**raw, "workload": {**raw["workload"], "requests": 8}})


def test_the_plan_prices_the_warm_start_trials_then_the_sampler_s_then_confirmation() -> None:
    space = _small_space()
    plan = plan_study(space, 12, Confirmation(2, 3))
    warm = warm_start_configs(space, 12)
    # Two configs three times each, then the per-batch-size K table three times: the default
    # space measures three levels on vLLM 0.32, so the study may propose one.
    assert len(plan.trials) == 12 and plan.confirm_runs == 9
    for (_, cost), prediction in zip(plan.trials, warm, strict=False):
        assert prior_cost(space, prediction.config).bench_s == pytest.approx(cost.bench_s)
        assert cost.start_s > 0  # each warm-start config is a new server
    # A benchmark is every (level, temperature) pair's requests: longer where the config is
    # slower (the simulator's prediction), never nothing.
    assert all(cost.bench_s > 10 for _, cost in plan.trials)
    assert plan.total_s == pytest.approx(plan.trials_s + 9 * plan.confirm_cost.total_s)


def test_only_a_space_that_can_propose_a_k_table_reserves_its_runs() -> None:
    space = _small_space()
    assert Confirmation(2, 3).runs(space) == 9
    assert Confirmation(0, 3).runs(space) == 0  # no confirmation: the table is never run
    one_level = space_from_dict(
        {**space.source, "workload": {**space.source["workload"], "concurrency": [1]}}
    )
    assert Confirmation(2, 3).runs(one_level) == 6
    old = replace(space, vllm_version="0.23.0")  # no num_speculative_tokens_per_batch_size yet
    assert Confirmation(2, 3).runs(old) == 6


def test_a_budget_cuts_repeats_then_configs_then_the_k_table() -> None:
    space = _small_space()  # three levels on vLLM 0.32: a K table is possible
    wanted, run_s = Confirmation(3, 3), 600.0

    def fitted(runs_in_a_third: float) -> Confirmation:
        return fit_confirmation(space, wanted, 3 * runs_in_a_third * run_s, run_s)

    assert fitted(12) == wanted  # (3 configs + the table) x 3 repeats
    assert fitted(4) == Confirmation(3, 1)
    assert fitted(2) == Confirmation(1, 1)  # the best once, and its K table once
    # One run would only measure the best again: it could not change the pick, and a trial
    # in its place can, so a confirmation meant to choose between configs is dropped.
    assert fitted(1).runs(space) == 0 and fitted(0.5).runs(space) == 0
    # Asked to confirm the best alone, it keeps that run, whatever it costs.
    best = Confirmation(1, 1)
    assert fit_confirmation(space, best, 1.5 * run_s, run_s) == Confirmation(1, 1, k_table=False)
    assert fit_confirmation(space, best, 0.5 * run_s, run_s).runs(space) == 1
    # What the trials left is cut the same way, down to nothing.
    assert cut_confirmation(space, wanted, 4) == Confirmation(3, 1)
    assert cut_confirmation(space, wanted, 0).runs(space) == 0


def test_plan_prints_the_run_and_stores_nothing(tmp_path: Path) -> None:
    argv = ["optimize", "--hardware", "4090x2", "--backend", "sim", "--trials", "10", "--plan"]
    argv += ["--studies-dir", str(tmp_path), "--confirm-top", "1"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.stderr
    assert "plan: 10 trials on 2x RTX 4090" in result.stdout
    assert "a config the sampler picks" in result.stdout
    assert "+6" in result.stdout and "confirmation runs" in result.stdout
    assert list(tmp_path.glob("*.db")) == []
    as_json = runner.invoke(app, [*argv, "--json"])
    planned = json.loads(as_json.stdout)
    assert len(planned["trials"]) == 10 and planned["confirm_runs"] == 6
    assert planned["confirm_k_table"] is True  # no budget: the table's runs are in the six
    assert planned["total_s"] == pytest.approx(
        sum(t["start_s"] + t["bench_s"] for t in planned["trials"]) + 6 * planned["confirm_run_s"]
    )


def test_a_plan_within_a_budget_lists_what_fits_and_the_share_the_benchmark_reached() -> None:
    space = _small_space()
    plan = plan_study(space, 30, Confirmation(3, 3), budget_s=7200)
    assert plan.budget_s == 7200
    assert len(plan.trials) > 0 and plan.total_s <= 7200
    longer = plan_study(space, 30, Confirmation(3, 3), budget_s=4 * 7200)
    assert len(longer.trials) > len(plan.trials)  # more time, more trials (past --trials too)
    # The share comes from the search benchmark's simulated worlds, shipped with the package.
    expected = plan.expected
    assert expected is not None and expected == expected_share(2.0, space.name)
    assert 0 < expected.worst <= expected.median <= 1
    assert "simulated" in expected.describe() and "held-out worlds" in expected.describe()
    assert expected_share(0.1, space.name) is None  # shorter than any budget the benchmark ran
    # Another space's share says nothing of this one: none is quoted, and the plan says why.
    assert expected_share(2.0, NEVER_BENCHMARKED.stem) is None


def test_plan_on_a_space_the_benchmark_never_ran_says_so(tmp_path: Path) -> None:
    argv = ["optimize", "--backend", "sim", "--plan", "--time-budget", "2h"]
    argv += ["--space", str(NEVER_BENCHMARKED), "--studies-dir", str(tmp_path)]
    result = runner.invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert f"the search benchmark has not run on {NEVER_BENCHMARKED.stem}" in text
    assert "of the optimum (worst world" not in text


def test_plan_with_a_time_budget_prints_the_share_it_expects(tmp_path: Path) -> None:
    argv = ["optimize", "--hardware", "4090x2", "--backend", "sim", "--plan"]
    argv += ["--studies-dir", str(tmp_path), "--time-budget", "2h"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "within a 2h00m time budget" in text
    assert "expected at 2h00m:" in text and "of the optimum" in text and "simulated" in text
    planned = json.loads(runner.invoke(app, [*argv, "--json"]).stdout)
    assert planned["time_budget_s"] == 7200 and planned["total_s"] <= 7200
    assert planned["expected_share"]["source"] == "simulated"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--time-budget", "soon"], "--time-budget 'soon': give a duration such as 2h"),
        (["--time-budget", "0m"], "--time-budget '0m': give a duration longer than 0"),
        # One trial on a GPU is a start-up and a benchmark of minutes; a third of the budget
        # would hold one run of the best config alone, which is dropped (it cannot change
        # the pick). A vLLM that exists: a missing one is refused first (tests/reliability).
        (
            ["--time-budget", "10m", "--backend", "process", "--vllm-command", sys.executable],
            "is shorter than one trial (about",
        ),
        # Asked to confirm the best alone, its run is kept, and counted.
        (
            [
                *["--time-budget", "20m", "--confirm-top", "1"],
                *["--backend", "process", "--vllm-command", sys.executable],
            ],
            "is shorter than one trial and 1 confirmation run (about",
        ),
    ],
)
def test_a_budget_that_cannot_work_is_one_line_before_anything_is_stored(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    argv = ["optimize", "--hardware", "4090x2", "--backend", "sim", "--trials", "5"]
    argv += ["--studies-dir", str(tmp_path), "--no-prefetch", "--vllm-version", "0.32.0", *flags]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert message in line
    for db in tmp_path.glob("*.db"):  # the checks may open the database; no study is in it
        assert not study_names(open_storage(f"sqlite:///{db}"))


def test_a_budget_with_several_workers_is_refused() -> None:
    request = OptimizeRequest("x", None, "sim", 5, Path("."), workers=2, time_budget_s=60)
    with pytest.raises(ConfigError, match="--time-budget runs trials in one worker"):
        optimize(request)


def test_a_space_with_nothing_predicted_feasible_is_still_priced() -> None:
    raw = _small_space().source
    unreachable = space_from_dict({**raw, "slo": {"ttft_ms": 1}})  # no config meets 1 ms
    plan = plan_study(unreachable, 3, Confirmation(1, 1))
    assert [what for what, _ in plan.trials] == ["a config the sampler picks"] * 3
    assert all(cost.start_s > 0 and cost.bench_s > 0 for _, cost in plan.trials)


def _study_with_start_ups(url: str, name: str, server: ServerConfig, seconds: list[float]) -> None:
    """A study that measured ``seconds`` of start-ups of ``server``'s family, as a GPU host's
    run stores them (and one trial that reused its server, which took none)."""
    study = optuna.create_study(study_name=name, storage=url, directions=["maximize", "minimize"])
    timed: list[float | None] = [*seconds, None]
    for number, startup_s in enumerate(timed):
        record = TrialRecord(
            number=number,
            state=TrialState.COMPLETE,
            server=server,
            trial_temperature=0.0,
            status=TrialStatus.OK,
            source=Source.MEASURED,
            values=(50.0, 200.0),
            restarted=startup_s is not None,
            startup_s=startup_s,
        )
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE, values=[50.0, 200.0], user_attrs=record.to_attrs()
            )
        )


def test_a_resumed_study_s_plan_prices_start_ups_by_what_its_family_measured(
    tmp_path: Path,
) -> None:
    space = load_space(None)  # what the command plans with no space option
    first = warm_start_configs(space, 10)[0].config.server
    prior = start_prior_s(first)
    # Measured far from the prior (a slow disk, a cold cache): 15 minutes, the median of three.
    assert abs(prior - 900.0) > 600
    url = f"sqlite:///{tmp_path / 'resumed.db'}"
    _study_with_start_ups(url, "resumed", first, [600.0, 1500.0, 900.0])
    argv = ["optimize", "--backend", "sim", "--trials", "10", "--plan"]
    argv += ["--studies-dir", str(tmp_path), "--confirm-top", "1"]
    new = json.loads(runner.invoke(app, [*argv, "--json", "--study", "new"]).stdout)
    resuming = [*argv, "--study", "resumed", "--storage", url]
    resumed = json.loads(runner.invoke(app, [*resuming, "--json"]).stdout)
    assert new["trials"][0]["start_s"] == pytest.approx(prior)
    assert new["trials"][0]["start_from"] == "prior" and new["start_ups"] == []
    assert resumed["trials"][0]["start_s"] == pytest.approx(900.0)
    assert resumed["trials"][0]["start_from"] == "measured, median of 3 start-ups"
    (family,) = resumed["start_ups"]
    assert family["family"] == Family.of(first)._asdict()
    assert (family["seconds"], family["from"], family["start_ups"]) == (900.0, "study", 3)
    # Another family's start-up keeps the prior; the whole plan pays the difference.
    others = [t for t in resumed["trials"] if t["start_from"] == "prior" and t["start_s"] > 0]
    assert others and all(t["start_s"] < 900.0 for t in others)
    assert resumed["total_s"] > new["total_s"] + (900.0 - prior)
    sampler = resumed["trials"][-1]  # the sampler's trials, at the mean of the configs named
    assert sampler["start_from"] == "mean of the configs named"
    text = " ".join(runner.invoke(app, resuming).stdout.split())
    assert "start-ups as the study measured them:" in text
    assert f"{first.model} TP{first.tensor_parallel_size} {first.method}" in text
    assert "15m00s (measured, median of 3 start-ups)" in text


def test_a_resumed_time_budget_prices_a_trial_by_its_family_s_start_ups(tmp_path: Path) -> None:
    space = _small_space()
    first = warm_start_configs(space, 10)[0].config.server
    url = f"sqlite:///{tmp_path / 'b.db'}"
    _study_with_start_ups(url, "b", first, [1800.0])
    family = StartupPrices.of(records(optuna.load_study(study_name="b", storage=url).trials))
    plain = plan_study(space, 10, Confirmation(1, 1), budget_s=4 * 3600)
    priced = plan_study(space, 10, Confirmation(1, 1), budget_s=4 * 3600, startups=family)
    assert priced.trials[0][1].start_s == 1800.0 and plain.trials[0][1].start_s < 1800.0
    assert len(priced.trials) < len(plain.trials)  # half an hour a start-up: fewer fit
