"""The twin's model: neutral corrections are the shipped simulator; the closed form matches it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tuner import serde
from tuner.config.space import NO_DRAFT, SearchSpace, load_space
from tuner.config.trial import SpeculativeConfig
from tuner.config.verification import Verification
from tuner.errors import StartupFailure
from tuner.sim.acceptance import expected_accepted
from tuner.sim.memory import estimate_memory
from tuner.sim.twin import AcceptanceShift, TwinParams, TwinPhysics, forecast, step_parts
from tuner.sim.twin.forecast import Forecast, drafted
from tuner.sim.virtual_time import predict

SPACE = load_space(str(Path(__file__).parents[3] / "benchmarks" / "held_out_space.yaml"))
# Drafters that propose all K tokens in one pass (DFlash; P-EAGLE's parallel drafting), block
# verification and adaptive verification (which drafts fewer than K where a step's cost says
# so): the closed form holds for every method's settings.
SPACE_2026 = load_space("qwen3-coder-30b-fp8-4090x2-2026-vllm032")


def _configs() -> list[tuple[str, int, int, float]]:
    return [
        (NO_DRAFT, 0, 2048, 0.0),
        ("ngram", 4, 1024, 0.2),
        ("Qwen/Qwen2.5-0.5B-Instruct", 5, 8192, 0.0),
        ("Qwen/Qwen2.5-1.5B-Instruct", 3, 2048, 0.6),
    ]


def _settings_2026() -> list[tuple[str, int, dict[str, Any]]]:
    dflash = next(d for d in SPACE_2026.drafts if d.startswith("dflash:"))
    eagle = next(d for d in SPACE_2026.drafts if d.startswith("eagle3:"))
    return [
        (dflash, 4, {}),
        (dflash, 12, {"rejection_sample_method": Verification.BLOCK}),
        (dflash, 8, {"enable_adaptive_verification": True}),
        (eagle, 6, {"parallel_drafting": True}),
        (eagle, 6, {}),
        (eagle, 6, {"enable_adaptive_verification": True}),
        ("Qwen/Qwen3-0.6B", 6, {"enable_adaptive_verification": True}),
    ]


def _closed_form_and_engine(
    space: SearchSpace, draft: str, speculative: SpeculativeConfig | None, mnbt: int, t: float
) -> tuple[Forecast, Forecast]:
    config = space.config(speculative, 0.86, mnbt, t)
    model = space.draft_model(draft)
    workload = space.workload
    params = TwinParams(decode=1.2, draft=1.7, overhead=0.8, prefill=1.4)
    physics = TwinPhysics(params)
    args = (space.hardware, space.target, model, config.server)
    engine = predict(*args, t, workload, 1, physics, space.version)
    tokens = (workload.input_tokens, workload.output_tokens, space.version)
    parts = step_parts(*args, *tokens)
    accepted = 0.0
    if speculative is not None:
        rates = physics.position_rates(
            space.target,
            model,
            speculative.method,
            workload.prompt_set,
            t,
            speculative.num_speculative_tokens,
            speculative=speculative,
        )
        reach = expected_accepted(rates)
        k = drafted(*args, *tokens, params, reach)
        parts = step_parts(*args, *tokens, k)
        accepted = sum(reach[:k])
    closed = forecast(parts, params, accepted, workload.output_tokens)
    return closed, Forecast(engine.output_tok_s, engine.ttft_ms(95) or 0.0)


@pytest.mark.parametrize(("draft", "k", "mnbt", "temperature"), _configs())
def test_closed_form_matches_the_engine(draft: str, k: int, mnbt: int, temperature: float) -> None:
    closed, engine = _closed_form_and_engine(
        SPACE, draft, SPACE.speculative(draft, k), mnbt, temperature
    )
    assert closed.output_tok_s == pytest.approx(engine.output_tok_s, rel=1e-3)
    assert closed.ttft_ms == pytest.approx(engine.ttft_ms, rel=1e-3)


@pytest.mark.parametrize(("draft", "k", "settings"), _settings_2026())
def test_closed_form_matches_the_engine_for_every_method_setting(
    draft: str, k: int, settings: dict[str, Any]
) -> None:
    # The closed form once priced a one-pass drafter's K positions as K passes: the twin
    # fitted to a DFlash trial at K=15 then put the best K far too low.
    speculative = SPACE_2026.speculative(draft, k)
    assert speculative is not None
    speculative = replace(speculative, **settings)
    closed, engine = _closed_form_and_engine(SPACE_2026, draft, speculative, 2048, 0.3)
    assert closed.output_tok_s == pytest.approx(engine.output_tok_s, rel=1e-3)
    assert closed.ttft_ms == pytest.approx(engine.ttft_ms, rel=1e-3)


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
