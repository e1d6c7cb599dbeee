"""The twin's model: neutral corrections are the shipped simulator; the closed form matches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner import serde
from tuner.config.space import NO_DRAFT, load_space
from tuner.errors import StartupFailure
from tuner.sim.acceptance import expected_accepted
from tuner.sim.memory import estimate_memory
from tuner.sim.twin import AcceptanceShift, TwinParams, TwinPhysics, forecast, step_parts
from tuner.sim.virtual_time import predict

SPACE = load_space(str(Path(__file__).parents[3] / "benchmarks" / "held_out_space.yaml"))


def _configs() -> list[tuple[str, int, int, float]]:
    return [
        (NO_DRAFT, 0, 2048, 0.0),
        ("ngram", 4, 1024, 0.2),
        ("Qwen/Qwen2.5-0.5B-Instruct", 5, 8192, 0.0),
        ("Qwen/Qwen2.5-1.5B-Instruct", 3, 2048, 0.6),
    ]


@pytest.mark.parametrize(("draft", "k", "mnbt", "temperature"), _configs())
def test_closed_form_matches_the_engine(draft: str, k: int, mnbt: int, temperature: float) -> None:
    config = SPACE.config(SPACE.speculative(draft, k), 0.86, mnbt, temperature)
    model = SPACE.draft_model(draft)
    workload = SPACE.workload
    params = TwinParams(decode=1.2, draft=1.7, overhead=0.8, prefill=1.4)
    physics = TwinPhysics(params)
    engine = predict(
        SPACE.hardware, SPACE.target, model, config.server, temperature, workload, 1, physics
    )
    parts = step_parts(
        SPACE.hardware,
        SPACE.target,
        model,
        config.server,
        workload.input_tokens,
        workload.output_tokens,
    )
    accepted = 0.0
    if config.server.speculative is not None:
        method = config.server.speculative.method
        rates = physics.position_rates(
            SPACE.target, model, method, workload.prompt_set, temperature, k
        )
        accepted = sum(expected_accepted(rates))
    closed = forecast(parts, params, accepted, workload.output_tokens)
    assert closed.output_tok_s == pytest.approx(engine.output_tok_s, rel=1e-3)
    assert closed.ttft_ms == pytest.approx(engine.ttft_ms(95), rel=1e-3)


def test_neutral_twin_is_the_shipped_simulator() -> None:
    config = SPACE.config(SPACE.speculative("Qwen/Qwen2.5-0.5B-Instruct", 4), 0.9, 2048, 0.2)
    model = SPACE.draft_model("Qwen/Qwen2.5-0.5B-Instruct")
    args = (SPACE.hardware, SPACE.target, model, config.server, 0.2, SPACE.workload, 1)
    shipped = predict(*args)
    twin = predict(*args, physics=TwinPhysics(TwinParams()))
    assert twin.output_tok_s == shipped.output_tok_s
    assert twin.spec_decode == shipped.spec_decode


def test_corrections_move_the_prediction_the_right_way() -> None:
    draft = "Qwen/Qwen2.5-0.5B-Instruct"
    config = SPACE.config(SPACE.speculative(draft, 4), 0.9, 2048, 0.2)
    model = SPACE.draft_model(draft)
    args = (SPACE.hardware, SPACE.target, model, config.server, 0.2, SPACE.workload, 1)
    base = predict(*args).output_tok_s
    slower_draft = predict(*args, physics=TwinPhysics(TwinParams(draft=2.0))).output_tok_s
    shift = {(draft, SPACE.workload.prompt_set): AcceptanceShift(logit=1.0)}
    better = predict(*args, physics=TwinPhysics(TwinParams(acceptance=shift))).output_tok_s
    assert slower_draft < base < better


def test_memory_corrections_shrink_the_kv_cache_and_can_fail_a_start() -> None:
    config = SPACE.config(None, 0.96, 2048, 0.2)
    v = SPACE.version
    shipped = estimate_memory(SPACE.hardware, SPACE.target, None, config.server, version=v)
    physics = TwinPhysics(TwinParams(inside_gib=0.5, outside_gib=0.2))
    twin = physics.memory(SPACE.hardware, SPACE.target, None, config.server, version=v)
    assert shipped.fits
    assert twin.kv_cache_gib == pytest.approx(shipped.kv_cache_gib - 0.5)
    assert twin.peak_gib == pytest.approx(shipped.peak_gib + 0.2)  # NVML sees the outside part
    too_much = TwinPhysics(TwinParams(outside_gib=2.0))
    assert not too_much.memory(SPACE.hardware, SPACE.target, None, config.server, version=v).fits
    with pytest.raises(StartupFailure):
        server = config.server
        predict(SPACE.hardware, SPACE.target, None, server, 0.2, SPACE.workload, 1, too_much, v)


def test_params_round_trip_through_json() -> None:
    shift = {("ngram", "code"): AcceptanceShift(0.5, -0.2, -0.05)}
    params = TwinParams(decode=1.1, draft=2.0, acceptance=shift, outside_gib=0.3)
    assert serde.load(TwinParams, serde.dump(params)) == params
