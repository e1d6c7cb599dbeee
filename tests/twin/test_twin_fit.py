"""The fit recovers what a perturbed simulator measured, with intervals that shrink with data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tuner.config.space import load_space
from tuner.config.trial import TrialConfig
from tuner.sim.engine import simulate
from tuner.sim.twin import AcceptanceShift, TwinParams, TwinPhysics
from tuner.sim.twin.fit import FittedTwin, Observation, fit, observe

SPACE = load_space(str(Path(__file__).parents[2] / "benchmarks" / "held_out_space.yaml"))
SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
TRUTH = TwinParams(
    decode=1.25,
    draft=2.0,
    overhead=1.0,
    prefill=1.5,
    acceptance={(SMALL, "code"): AcceptanceShift(logit=-0.6, log_decay=-0.08)},
    outside_gib=0.6,
)


def _measure(draft: str, k: int, temperature: float, seed: int) -> Observation:
    config: TrialConfig = SPACE.config(SPACE.speculative(draft, k), 0.86, 2048, temperature)
    result = simulate(
        SPACE.hardware,
        SPACE.target,
        SPACE.draft_model(draft),
        config.server,
        temperature,
        SPACE.workload,
        1,
        seed,
        TwinPhysics(TRUTH),
    )
    return observe(config, result)


def _trials() -> list[Observation]:
    plan = [("none", 0, 0.0), (SMALL, 2, 0.0), (SMALL, 6, 0.5), ("ngram", 4, 0.2), (SMALL, 4, 0.0)]
    return [_measure(d, k, t, seed) for seed, (d, k, t) in enumerate(plan)]


def test_fit_recovers_the_hidden_corrections() -> None:
    twin = fit(SPACE.hardware, _trials(), FittedTwin())
    p = twin.params
    assert p.decode == pytest.approx(TRUTH.decode, rel=0.1)
    assert p.draft == pytest.approx(TRUTH.draft, rel=0.15)
    assert p.prefill == pytest.approx(TRUTH.prefill, rel=0.1)
    shift = p.shift(SMALL, "code")
    assert shift.logit == pytest.approx(-0.6, abs=0.25)
    assert shift.log_decay == pytest.approx(-0.08, abs=0.04)
    assert p.outside_gib == pytest.approx(0.6, abs=0.05)
    # Fitted values come with intervals, narrower than the prior's.
    assert twin.sd["draft"] < 0.7 and twin.sd["outside_gib"] < 0.125
    assert twin.observations == 5


def test_no_data_keeps_the_prior_and_its_margin() -> None:
    twin = fit(SPACE.hardware, [], FittedTwin())
    assert twin.params == TwinParams()
    assert twin.margin_gib == pytest.approx(0.75)


def test_an_oom_raises_the_margin_above_what_that_config_had_to_spare() -> None:
    config = SPACE.config(None, 0.86, 2048, 0.2)  # well inside the model's memory
    oom = Observation(config.server, 0.2, "code", 512, 256, 1, oom=True)
    twin = fit(SPACE.hardware, [oom], FittedTwin())
    assert twin.margin_gib > 1.5


def test_fitted_twin_and_observations_round_trip_through_json() -> None:
    observations = _trials()
    twin = fit(SPACE.hardware, observations, FittedTwin())
    text = json.dumps(twin.to_json())
    back = FittedTwin.from_json(json.loads(text))
    assert back.params.draft == pytest.approx(twin.params.draft)
    assert back.sd == twin.sd and math.isclose(back.margin_gib, twin.margin_gib)
    first = observations[1]
    assert Observation.from_json(json.loads(json.dumps(first.to_json()))) == first
