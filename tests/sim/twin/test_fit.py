"""The fit recovers what a perturbed simulator measured, with intervals that shrink with data."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tuner import serde
from tuner.catalog.models import load_model
from tuner.config.space import load_space
from tuner.config.trial import ServerConfig, SpecMethod, TrialConfig, load_draft
from tuner.config.verification import DraftSampling, Verification
from tuner.sim.oom_screen import memory_slacks
from tuner.sim.twin import AcceptanceShift, TwinParams, TwinPhysics
from tuner.sim.twin.fit import FittedTwin, Observation, fit, observe
from tuner.sim.virtual_time import simulate

SPACE = load_space(str(Path(__file__).parents[3] / "benchmarks" / "held_out_space.yaml"))
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
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
    twin = fit(SPACE.hardware, _trials(), FittedTwin(), SPACE.version)
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
    twin = fit(SPACE.hardware, [], FittedTwin(), SPACE.version)
    assert twin.params == TwinParams()
    assert twin.margin_gib == pytest.approx(0.75)


_SHORT_OUTSIDE = "ValueError: Free memory on device cuda:0 (21.28/23.99 GiB) on startup is less"


def _headroom(twin: FittedTwin, server: ServerConfig) -> float:
    """GiB to spare under ``twin``, as the twin's screen reckons it."""
    target, draft = load_model(server.model), load_draft(server)
    outside, inside = memory_slacks(SPACE.hardware, target, draft, server, SPACE.version)
    return min(outside - twin.params.outside_gib, inside - twin.params.inside_gib)


def _oom(server: ServerConfig) -> Observation:
    return Observation(server, 0.2, "code", 512, 256, 1, oom=True, failure=_SHORT_OUTSIDE)


def test_an_oom_moves_the_memory_boundary_for_every_method() -> None:
    none = SPACE.config(None, 0.86, 2048, 0.2).server  # well inside the model's memory
    head = SPACE.config(SPACE.speculative(DRAFT, 4), 0.86, 4096, 0.2).server
    prior = FittedTwin()
    assert _headroom(prior, none) >= prior.margin_gib
    assert _headroom(prior, head) >= prior.margin_gib
    twin = fit(SPACE.hardware, [_oom(none)], prior)
    # The config that ran out, and one of another method with as little to spare outside
    # vLLM's budget, are no longer given the margin.
    assert _headroom(twin, none) < twin.margin_gib
    assert _headroom(twin, head) < twin.margin_gib
    assert twin.params.inside_gib == prior.params.inside_gib  # the message named the outside


def test_memory_the_prior_knows_is_held_outside_leaves_its_margin_whole() -> None:
    # Other processes held 2 GiB when the study started: an OOM measures no peak, and the
    # margin for what nobody knows must stay, on top of the 2 GiB known.
    prior = FittedTwin(TwinParams(outside_gib=2.0))
    none = SPACE.config(None, 0.86, 2048, 0.2).server
    twin = fit(SPACE.hardware, [_oom(none)], prior, SPACE.version)
    assert twin.margin_gib == pytest.approx(prior.margin_gib)
    assert twin.params.outside_gib >= 2.0


def test_each_further_oom_doubles_the_step_and_a_start_up_that_ran_caps_it() -> None:
    servers = [SPACE.config(None, u, 2048, 0.2).server for u in (0.90, 0.86, 0.82)]
    one = fit(SPACE.hardware, [_oom(servers[0])], FittedTwin(), SPACE.version)
    two = fit(SPACE.hardware, [_oom(servers[0]), _oom(servers[1])], FittedTwin(), SPACE.version)
    step_one = one.params.outside_gib - (_headroom(FittedTwin(), servers[0]) - one.margin_gib)
    step_two = two.params.outside_gib - (_headroom(FittedTwin(), servers[1]) - two.margin_gib)
    assert step_two == pytest.approx(2 * step_one)
    ran = Observation(servers[2], 0.2, "code", 512, 256, 1)
    capped = fit(
        SPACE.hardware, [_oom(servers[0]), _oom(servers[1]), ran], FittedTwin(), SPACE.version
    )
    assert _headroom(capped, servers[2]) >= capped.margin_gib - 1e-6  # what ran stays safe
    assert _headroom(capped, servers[1]) < capped.margin_gib


def test_fitted_twin_and_observations_round_trip_through_json() -> None:
    observations = _trials()
    twin = fit(SPACE.hardware, observations, FittedTwin(), SPACE.version)
    text = json.dumps(serde.dump(twin))
    back = serde.load(FittedTwin, json.loads(text))
    assert back.params.draft == pytest.approx(twin.params.draft)
    assert back.sd == twin.sd and math.isclose(back.margin_gib, twin.margin_gib)
    first = observations[1]
    assert serde.load_json(Observation, serde.dump_json(first)) == first


SPACE_2026 = load_space("qwen3-coder-30b-fp8-4090x2-2026-vllm032")
SMALL_2026 = "Qwen/Qwen3-0.6B"
HEAD_2026 = "eagle3:amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE"
# On these prompts block verification gains far more than the shipped model says, sampled
# drafts lose more, and the P-EAGLE head's later positions fall faster when it drafts at once.
SETTINGS_TRUTH = TwinParams(
    acceptance={
        (SMALL_2026, "code"): AcceptanceShift(logit=0.3, probabilistic=-0.5, block=1.5),
        (HEAD_2026, "code"): AcceptanceShift(parallel_log_decay=-0.1),
    }
)


def _measure_2026(
    draft: str, k: int, t: float, seed: int, truth: TwinParams = SETTINGS_TRUTH, **settings: Any
) -> Observation:
    speculative = SPACE_2026.speculative(draft, k)
    assert speculative is not None
    config = SPACE_2026.config(replace(speculative, **settings), 0.9, 2048, t)
    workload = replace(SPACE_2026.workload, requests=80)  # counts enough to tell the terms apart
    result = simulate(
        SPACE_2026.hardware,
        SPACE_2026.target,
        SPACE_2026.draft_model(draft),
        config.server,
        t,
        workload,
        1,
        seed,
        TwinPhysics(truth),
        SPACE_2026.version,
    )
    # The space samples a mix of temperatures; these requests were all sampled at ``t``.
    return replace(observe(config, result), temperature=t)


def test_the_fit_learns_what_each_setting_of_a_method_does() -> None:
    block, sampled = Verification.BLOCK, DraftSampling.PROBABILISTIC
    trials = [
        _measure_2026(SMALL_2026, 4, 0.8, 0),
        _measure_2026(SMALL_2026, 4, 0.8, 1, rejection_sample_method=block),
        _measure_2026(SMALL_2026, 4, 0.8, 2, draft_sample_method=sampled),
        _measure_2026(SMALL_2026, 4, 0.2, 3),
        _measure_2026(HEAD_2026, 6, 0.2, 4),
        _measure_2026(HEAD_2026, 6, 0.2, 5, parallel_drafting=True),
    ]
    twin = fit(SPACE_2026.hardware, trials, FittedTwin(), SPACE_2026.version)

    small = twin.params.shift(SMALL_2026, "code")
    assert small.block == pytest.approx(1.5, abs=0.4)
    assert small.probabilistic == pytest.approx(-0.5, abs=0.3)
    assert small.logit == pytest.approx(0.3, abs=0.25)  # the drafter's own, not block's
    head = twin.params.shift(HEAD_2026, "code")
    assert head.parallel_log_decay == pytest.approx(-0.1, abs=0.04)
    assert twin.sd[f"{SMALL_2026}|code|block"] < 1.0  # narrower than its prior

    # The twin's rates of a config with the setting are the truth's, not the shipped model's.
    target, draft = SPACE_2026.target, SPACE_2026.draft_model(SMALL_2026)
    speculative = SPACE_2026.speculative(SMALL_2026, 4)
    assert speculative is not None
    verified_by_block = replace(speculative, rejection_sample_method=block)
    args = (target, draft, SpecMethod.DRAFT_MODEL, "code", 0.8, 4)
    truth = TwinPhysics(SETTINGS_TRUTH).position_rates(*args, speculative=verified_by_block)
    learned = TwinPhysics(twin.params).position_rates(*args, speculative=verified_by_block)
    shipped = TwinPhysics(TwinParams()).position_rates(*args, speculative=verified_by_block)
    assert max(abs(a - b) for a, b in zip(learned, truth, strict=True)) < 0.03
    assert max(abs(a - b) for a, b in zip(shipped, truth, strict=True)) > 0.1


def test_adaptive_verification_s_own_cost_is_learned_apart_from_the_engine_s() -> None:
    # Adaptive verification's own work per step costs four times the modelled here; the rest
    # of the engine is as modelled. Without a factor of its own, the adaptive trials' slower
    # steps would raise the engine's factor for every config.
    truth = TwinParams(adaptive=4.0)
    plan = [(2, False), (5, False), (3, True), (4, True), (5, True), (6, True)]
    trials = [
        _measure_2026(SMALL_2026, k, 0.2, seed, truth, enable_adaptive_verification=adaptive)
        for seed, (k, adaptive) in enumerate(plan)
    ]
    twin = fit(SPACE_2026.hardware, trials, FittedTwin(), SPACE_2026.version)

    # Its work is a twelfth of a step here, about three times the steps' noise: the fit moves
    # its factor from the shipped 1 well towards the truth's 4, and leaves the engine's alone.
    assert twin.params.adaptive > 1.7
    assert twin.params.overhead == pytest.approx(1.0, abs=0.1)
    assert twin.sd["adaptive"] < 0.65  # narrower than its prior (0.7)
    assert "adaptive" in [name for name, *_ in twin.intervals()]
    # A twin that measured no adaptive config neither moves its factor nor shows it.
    plain = fit(SPACE_2026.hardware, trials[:2], FittedTwin(), SPACE_2026.version)
    assert plain.params.adaptive == 1.0
    assert "adaptive" not in [name for name, *_ in plain.intervals()]
    assert "adaptive" not in serde.dump(plain)["params"]  # written only where learned
    assert serde.dump(twin)["params"]["adaptive"] == pytest.approx(twin.params.adaptive)


def test_the_fit_learns_what_prompt_lookup_s_window_does() -> None:
    # On these prompts a match of three tokens predicts what follows far better than one of
    # one: each token more of the window's minimum adds 0.6 to the first position's logit.
    # The shipped model has no window term; two windows measured tell the fit the slope.
    truth = TwinParams(acceptance={("ngram_gpu", "code"): AcceptanceShift(lookup_min=0.6)})
    trials = [
        _measure_2026("ngram_gpu", 4, 0.0, seed, truth, prompt_lookup_min=low, prompt_lookup_max=4)
        for seed, low in enumerate((1, 3, 1, 3))
    ]
    twin = fit(SPACE_2026.hardware, trials, FittedTwin(), SPACE_2026.version)

    lookup = twin.params.shift("ngram_gpu", "code")
    assert lookup.lookup_min == pytest.approx(0.6, abs=0.15)
    assert lookup.logit == pytest.approx(0.0, abs=0.2)  # the drafter's own, not the window's
    assert abs(lookup.lookup_max) < 0.05  # never measured apart: the prior's 0
    assert twin.sd["ngram_gpu|code|lookup_min"] < 0.5  # narrower than its prior
    # A window it never measured (2-5) is forecast from the slope: the truth's rates.
    speculative = SPACE_2026.speculative("ngram_gpu", 4)
    assert speculative is not None
    window = replace(speculative, prompt_lookup_min=2, prompt_lookup_max=5)
    args = (SPACE_2026.target, None, SpecMethod.NGRAM_GPU, "code", 0.0, 4)
    learned = TwinPhysics(twin.params).position_rates(*args, speculative=window)
    expected = TwinPhysics(truth).position_rates(*args, speculative=window)
    shipped = TwinPhysics(TwinParams()).position_rates(*args, speculative=window)
    assert learned[0] == pytest.approx(expected[0], abs=0.03)
    assert expected[0] - shipped[0] > 0.08
    # Written only where learned: a twin fitted before the term writes back alike.
    row = serde.dump(twin)["params"]["acceptance"][0]
    assert "lookup_min" in row and "lookup_max" not in row
    # Measured at one window, even another than the default, the whole shift is the
    # drafter's: nothing tells a window's part from it.
    at_3_4 = fit(SPACE_2026.hardware, trials[1:2], FittedTwin(), SPACE_2026.version)
    one_window = at_3_4.params.shift("ngram_gpu", "code")
    assert one_window.lookup_min == 0.0 and one_window.logit > 0.8
    assert "lookup_min" not in serde.dump(at_3_4)["params"]["acceptance"][0]
