"""Goodput: the highest request rate whose p95 TTFT and p95 TPOT meet the limits.

The climb (which steps are measured, and when it stops), the score it makes, a simulated study
that climbs every server config at every temperature on one server, and a measured study on
the fake server (``vllm serve``'s stand-in over real HTTP) that climbs, records the rates
offered, and never recommends a config that lost requests.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.trial.traffic_support import SMALL_SPACE, fake_request
from tuner.analysis.picks import recommend
from tuner.analysis.trials import level_tok_s
from tuner.cli import app
from tuner.config.schema import Objective
from tuner.config.space import SearchSpace, load_space
from tuner.config.workload import Condition
from tuner.export.vllm import export
from tuner.results import RequestRecord, Source, TrialResult
from tuner.search.forecast import predicted_trial
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.trial.record import TrialRecord, records
from tuner.trial.scoring import Limits, TrialStatus, meets, score_goodput
from tuner.trial.traffic import Climb

GOODPUT: dict[str, Any] = {
    "slo": {"objective": "goodput", "ttft_ms": 5000, "tpot_ms": 200},
    "workload": {
        "prompt_set": "chat",
        "input_tokens": 64,
        "output_tokens": 16,
        "request_rate": [10, 20, 40],
        "temperature": [{"value": 0.2, "weight": 0.7}, {"value": 0.8, "weight": 0.3}],
        "requests": 6,
        "warmup": 1,
    },
}


def _space(tmp_path: Path, **slo_and_workload: Any) -> SearchSpace:
    """The traffic tests' small space as a goodput study (its workload replaced, not merged:
    goodput takes no concurrency levels), written to ``space.yaml`` like a user's."""
    raw = {**SMALL_SPACE, **GOODPUT}
    for name, values in slo_and_workload.items():
        raw[name] = {**raw[name], **values}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_space(str(path))


def _climb(steps: tuple[float, ...], passes: float) -> list[float]:
    """The rates a climb measures when every rate up to ``passes`` meets the limits."""
    climb, measured = Climb(steps), []
    while (rate := climb.next_rate()) is not None:
        measured.append(rate)
        climb = climb.record(rate, rate <= passes)
    return measured


def test_the_climb_stops_at_the_first_miss_then_measures_once_between() -> None:
    steps = (0.5, 1.0, 2.0, 4.0, 8.0)
    assert _climb(steps, passes=100) == list(steps)  # every step passed: goodput is the top
    assert _climb(steps, passes=3.0) == [0.5, 1.0, 2.0, 4.0, 2.828]  # sqrt(2 x 4) passes
    assert _climb(steps, passes=2.0) == [0.5, 1.0, 2.0, 4.0, 2.828]  # ... or misses: done
    assert _climb(steps, passes=0.1) == [0.5]  # the lowest step missed: nothing to refine
    climb = Climb(steps)
    for rate, ok in ((0.5, True), (1.0, True), (2.0, False), (1.414, True)):
        climb = climb.record(rate, ok)
    assert climb.next_rate() is None and climb.goodput == 1.414


def _result(ttft_s: float, tpot_s: float, *, failed: int = 0, n: int = 20) -> TrialResult:
    done = [
        RequestRecord(
            start=0.0,
            first_token=ttft_s,
            end=ttft_s + 15 * tpot_s,
            chunk_times=(ttft_s,),
            completion_tokens=16,
        )
        for _ in range(n)
    ]
    lost = [RequestRecord(start=0.0, error="HTTP 500") for _ in range(failed)]
    return TrialResult(Source.SIMULATED, n, 10.0, tuple(done + lost))


def test_goodput_is_the_highest_step_whose_every_temperature_met_both_limits() -> None:
    limits = Limits(ttft_ms=500, tpot_ms=50, objective=Objective.GOODPUT)
    pairs = [
        (Condition(20, 0.2, 0.7, 1.0), _result(0.1, 0.02)),
        (Condition(20, 0.8, 0.3, 1.0), _result(0.2, 0.03)),
        (Condition(20, 0.2, 0.7, 2.0), _result(0.3, 0.04)),
        (Condition(20, 0.8, 0.3, 2.0), _result(0.3, 0.06)),  # TPOT over at the hot temperature
    ]
    conditions, results = zip(*pairs, strict=True)
    scored = score_goodput(results, conditions, limits)
    assert scored.values[0] == 1.0 and scored.values[1] == pytest.approx(200.0)  # at its step
    assert scored.steps == ((1.0, True), (2.0, False)) and scored.feasible
    assert scored.status is TrialStatus.OK

    (slow,) = [_result(0.1, 0.06)]
    none_passed = score_goodput([slow], [Condition(20, 0.2, 1.0, 1.0)], limits)
    assert none_passed.values[0] == 0.0 and not none_passed.feasible
    assert none_passed.status is TrialStatus.OVER_TPOT and none_passed.keyed()["tpot_slo"] > 0

    lossy = score_goodput([_result(0.1, 0.02, failed=2)], [Condition(22, 0.2, 1.0, 1.0)], limits)
    assert lossy.status is TrialStatus.FAILED_REQUESTS and lossy.values[0] == 0.0


def _rates(record: TrialRecord) -> list[tuple[float, float]]:
    return [(float(level["offered_rate"]), float(level["temperature"])) for level in record.levels]


def test_a_simulated_goodput_study_climbs_every_config_on_one_server(tmp_path: Path) -> None:
    # With 20 requests a step, the simulated 14B on one 4090 meets 30 ms a token up to some
    # 16-32 requests/s without speculation, and fewer with ngram's bookkeeping.
    steps = {"request_rate": [1, 4, 16, 64, 256], "requests": 20}
    space = _space(tmp_path, slo={"tpot_ms": 30}, workload=steps)
    result = optimize(
        OptimizeRequest(
            "traffic",
            space,
            "sim",
            4,
            tmp_path / "studies",
            sampler="random",
            confirm_top=0,
            prefetch=False,
        )
    )
    done = records(result.handle.get_trials())
    assert result.handle.metric_names == ["goodput_req_s", "p95_ttft_ms"]
    assert any(not ok for r in done for _, ok in r.steps)  # some climb stopped short
    for record in done:
        if record.status.oom:
            continue
        assert record.steps, record.status
        rates = [rate for rate, _ in record.steps]
        # Each step measured at both temperatures on the trial's one server, lowest rate first.
        assert _rates(record) == [(r, t) for r in _measured_order(record) for t in (0.2, 0.8)]
        passed = [rate for rate, ok in record.steps if ok]
        assert record.values is not None and record.values[0] == max(passed, default=0.0)
        missed = [rate for rate, ok in record.steps if not ok] or [math.inf]
        assert all(rate < min(missed) for rate in passed)  # it climbed, then stopped
        assert len(missed) <= 2 and sorted(rates) == rates
        assert level_tok_s(record.levels, record.steps) == ()  # steps are rates, not levels
    chosen = recommend(result.handle)
    assert chosen is not None and chosen.throughput > 0
    text = export(result.handle, result.space, "vllm").text
    assert "goodput" in text and "p95 TPOT limit 30 ms at every step" in text
    assert "request rates climbed 1, 4, 16, 64, 256 per s" in text
    assert "send temperature" not in text and "--temperature" not in text  # no advice
    assert "temperatures 0.2 (70 %), 0.8 (30 %) as requests send them" in text


def test_the_forecast_of_a_goodput_trial_climbs_as_the_trial_does(tmp_path: Path) -> None:
    # The warm start and the plan price a goodput trial on the steps its climb would measure:
    # each step at every temperature, lowest first, up to the first miss, then once between.
    steps = (1.0, 4.0, 16.0, 64.0, 256.0)
    workload = {"request_rate": list(steps), "requests": 20}  # enough to queue at 64/s
    space = _space(tmp_path, slo={"tpot_ms": 30}, workload=workload)
    config = space.config(None, 0.9, 2048, 0.2)
    predicted = predicted_trial(space, config)
    rates = list(dict.fromkeys(c.request_rate or 0.0 for c, _ in predicted))
    assert 0.0 not in rates  # every pair offers a rate
    limits = Limits.of(space)
    passed = [r for r in rates if meets([x for c, x in predicted if c.request_rate == r], limits)]
    assert passed and len(passed) < len(rates)  # it climbed, then missed
    assert rates == _climb(steps, max(passed))
    temperatures = [(c.request_rate, c.sampling_temperature) for c, _ in predicted]
    assert temperatures == [(r, t) for r in rates for t in (0.2, 0.8)]


def _measured_order(record: TrialRecord) -> list[float]:
    """The step rates in the order the climb measured them (the refining step last)."""
    order: list[float] = []
    for level in record.levels:
        if float(level["offered_rate"]) not in order:
            order.append(float(level["offered_rate"]))
    return order


@pytest.mark.usefixtures("fast_fake_server")
def test_a_measured_goodput_study_climbs_a_real_http_server(tmp_path: Path) -> None:
    result = optimize(fake_request(tmp_path, _space(tmp_path), 2))
    done = records(result.handle.get_trials())
    assert [r.status for r in done] == [TrialStatus.OK] * 2, [r.failure for r in done]
    for record in done:
        assert record.restarted and record.failed_share == 0.0
        # The fake server keeps these limits at every rate: the climb reaches the top step.
        assert record.steps == ((10.0, True), (20.0, True), (40.0, True))
        assert _rates(record) == [(r, t) for r in (10.0, 20.0, 40.0) for t in (0.2, 0.8)]
        assert all(level["request_rate"] > 0 for level in record.levels)
    chosen = recommend(result.handle)
    assert chosen is not None and chosen.throughput == 40.0


@pytest.mark.usefixtures("fast_fake_server")
def test_a_goodput_trial_that_lost_requests_is_never_recommended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECTUNE_SIM_FAULT", "http-500-every=3")
    result = optimize(fake_request(tmp_path, _space(tmp_path), 2))
    assert recommend(result.handle) is None
    for record in records(result.handle.get_trials()):
        assert record.status is TrialStatus.FAILED_REQUESTS and not record.feasible
        assert record.failure is not None and "HTTP 500" in record.failure


def test_the_cli_speaks_goodput(tmp_path: Path) -> None:
    assert _space(tmp_path).goodput  # written to space.yaml
    path = tmp_path / "space.yaml"
    runner = CliRunner()
    studies = str(tmp_path / "studies")
    args = [
        "optimize",
        "--space",
        str(path),
        "--backend",
        "sim",
        "--trials",
        "2",
        "--studies-dir",
        studies,
        "--confirm-top",
        "0",
        "--no-prefetch",
    ]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    best = data["recommended"] or data["pareto_front"][0]
    assert "goodput_req_s" in best and "output_tok_s" not in best
    table = runner.invoke(app, [*args, "--study", "again"])
    assert table.exit_code == 0, table.output
    assert "req/s" in table.stdout and "goodput" in table.stdout
