"""The search sees every method's own settings (issue 39): the screen's arms, the warm start's
forecasts, the twin's proposals, the benchmark's grid, and K for a block drafter moved by what
its counters measured. On the shipped 2026 space (vLLM 0.34: DFlash, an EAGLE-3 head, a draft
model, suffix decoding, prompt lookup, each with its verification and drafting options)."""

from __future__ import annotations

import itertools
import math
import operator
from collections import Counter
from dataclasses import replace
from typing import cast

import optuna

from tuner.config.space import load_space
from tuner.config.verification import Verification
from tuner.search.proposals import on_traffic
from tuner.search.screen import Screen, grid_params, screened_traffic
from tuner.search.strategy import predicted_configs, warm_start_configs
from tuner.search.twin_screen import TwinScreen
from tuner.sim.twin.counters import PositionCounts
from tuner.sim.twin.fit import FittedTwin, fit, observe
from tuner.sim.twin.model import AcceptanceShift, TwinParams, TwinPhysics
from tuner.sim.virtual_time import simulate

SPACE = load_space("qwen3-coder-30b-fp8-4090x2-2026")
DFLASH = "dflash:z-lab/Qwen3-Coder-30B-A3B-DFlash"
DRAFT = "Qwen/Qwen3-0.6B"


def test_the_screen_forecasts_each_setting_of_each_method_one_at_a_time() -> None:
    screen = Screen(SPACE)
    specs = [arm.spec for arm in screen.arms if arm.draft == DRAFT and arm.k == 3]
    assert specs and all(spec is not None for spec in specs)
    # The defaults, then each other value alone: probabilistic sampling, block verification,
    # adaptive verification (a one-at-a-time design, not the 8-config product).
    changed = [
        {
            name
            for name in ("draft_sample_method", "rejection_sample_method")
            if str(getattr(spec, name)) not in ("greedy", "standard")
        }
        | ({"enable_adaptive_verification"} if spec.enable_adaptive_verification else set())
        for spec in specs
        if spec is not None
    ]
    assert changed == [
        set(),
        {"draft_sample_method"},
        {"rejection_sample_method"},
        {"enable_adaptive_verification"},
    ]
    windows = {
        (arm.spec.prompt_lookup_min, arm.spec.prompt_lookup_max)
        for arm in screen.arms
        if arm.draft == "ngram_gpu" and arm.k == 2 and arm.spec is not None
    }
    # The minimum's every value (1-3), the maximum's ends and middle (2-5: 2, 4, 5).
    assert windows == {(2, 4), (1, 4), (3, 4), (2, 2), (2, 5)}
    # Each point's parameters make the config it forecasts (enqueued as they are named).
    for point in itertools.islice(screen.points(), 0, None, 7):
        params = screen.params(*point)
        assert SPACE.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(params))) == (
            screen.config(*point)
        )
        assert screen.arm_of(params) == point[0]


def test_the_grid_is_the_whole_product_of_every_method_s_settings() -> None:
    points = list(grid_params(SPACE))
    configs = [SPACE.suggest(cast(optuna.Trial, optuna.trial.FixedTrial(p))) for p in points]
    assert len(set(configs)) == len(configs)  # no two points one config
    per_draft = Counter(str(p["draft"]) for p in points)
    batches = len(SPACE.max_num_batched_tokens)
    # DFlash: 12 K x standard/block x adaptive off/on; the draft model x greedy/probabilistic.
    assert per_draft[DFLASH] == 12 * 4 * batches
    assert per_draft[DRAFT] == 6 * 8 * batches
    # Prompt lookup: every window 1-3 x 2-5 with min <= max (11), x block/standard, 8 K.
    assert per_draft["ngram_gpu"] == 8 * 11 * 2 * batches


def test_the_warm_start_forecasts_each_variant_and_queues_those_its_forecast_ranks() -> None:
    ranked = predicted_configs(SPACE)
    # A variant carries its own forecast: predicting its config again gives the same number.
    block = next(
        p
        for p in ranked
        if p.config.server.speculative is not None
        and p.config.server.speculative.rejection_sample_method is Verification.BLOCK
    )
    draft = SPACE.draft_model(block.arm.draft)
    total = value = 0.0
    for condition, result in screened_traffic(SPACE, block.config, draft):
        total += condition.weight
        value += condition.weight * result.output_tok_s
    assert math.isclose(block.throughput, value / total, rel_tol=1e-9)
    # At these temperatures (0.2 and 0.7) block verification keeps more drafts than standard,
    # and adaptive verification pays its own work per step: the forecast tells them apart.
    standard = {
        (p.arm.draft, p.arm.k, p.config.server.max_num_batched_tokens): p.throughput
        for p in ranked
        if p.config.server.speculative is not None
        and p.config.server.speculative.rejection_sample_method is Verification.STANDARD
        and not p.config.server.speculative.enable_adaptive_verification
        and str(p.config.server.speculative.draft_sample_method) == "greedy"
    }
    key = (block.arm.draft, block.arm.k, block.config.server.max_num_batched_tokens)
    assert block.throughput > standard[key]
    plan = warm_start_configs(SPACE, 30)
    verifications = {
        str(p.config.server.speculative.rejection_sample_method)
        for p in plan
        if p.config.server.speculative is not None
    }
    assert verifications == {"standard", "block"}
    # The plan's first config is the screen's best, whatever its options.
    assert plan[0] == ranked[0]


def test_the_twin_proposes_block_verification_where_it_forecasts_it_ahead() -> None:
    screen = TwinScreen(SPACE)
    twin = FittedTwin()
    closed_form = screen.rank(twin)  # one request at the mix's mean temperature
    adaptive = [p for p in closed_form if p.params.get("enable_adaptive_verification") is True]
    assert adaptive and all(p.output_tok_s > 0 for p in adaptive)  # ranked like any arm
    # On the space's traffic (30 % of it at temperature 0.7) block verification keeps more.
    ranked = on_traffic(screen, twin, closed_form)
    best = {p.method: p for p in reversed(ranked)}
    assert best[DFLASH].params["rejection_sample_method"] == "block"
    standard = next(
        p
        for p in ranked
        if p.method == DFLASH
        and p.params["rejection_sample_method"] == "standard"
        and p.params["num_speculative_tokens"] == best[DFLASH].params["num_speculative_tokens"]
    )
    assert best[DFLASH].output_tok_s > standard.output_tok_s


def test_the_twin_proposes_the_window_its_fit_ranks_ahead() -> None:
    screen = TwinScreen(SPACE)

    def best_window(twin: FittedTwin) -> tuple[object, object]:
        ranked = on_traffic(screen, twin, screen.rank(twin))
        lookup = next(p for p in ranked if p.method == "ngram_gpu")
        return lookup.params["prompt_lookup_min"], lookup.params["prompt_lookup_max"]

    # The shipped model has no window term: every window forecasts alike, and the design's
    # first (the middle of each range) is kept.
    assert best_window(FittedTwin()) == (2, 4)
    # A study that measured a shorter match accepting less (its fit's slope, per token of the
    # window's minimum) proposes the longest minimum the space offers.
    shift = AcceptanceShift(lookup_min=0.6)
    learned = FittedTwin(TwinParams(acceptance={("ngram_gpu", "code"): shift}))
    assert best_window(learned) == (3, 4)


def test_a_dflash_study_whose_counters_fall_off_proposes_a_lower_k() -> None:
    """One DFlash trial at K=15 whose counters say the block's later positions are rarely
    accepted: the twin fitted on it reads the lower K off them (block verification scaled
    from them too), learns the drafter's acceptance for the arms counters do not speak for
    (adaptive verification), and puts DFlash's best K well below the prior's."""
    screen = TwinScreen(SPACE)
    prior = FittedTwin()
    prior_best = next(
        p for p in on_traffic(screen, prior, screen.rank(prior)) if p.method == DFLASH
    )
    assert int(prior_best.params["num_speculative_tokens"]) >= 8  # the prior: a long block
    arm = screen.arm(DFLASH, 15)
    config = screen.config(arm, screen.settings[0], screen.temperatures[0])
    server, temperature = config.server, config.client.sampling_temperature
    result = simulate(
        SPACE.hardware,
        SPACE.target,
        SPACE.draft_model(DFLASH),
        server,
        temperature,
        SPACE.workload,
        1,
        0,
        TwinPhysics(prior.params),
        version=SPACE.version,
    )
    drafts = 4000.0
    reach = list(itertools.accumulate([0.8, 0.75, 0.7, 0.6] + [0.15] * 11, operator.mul))
    counts = PositionCounts.measured(drafts, [r * drafts for r in reach])
    measured = replace(
        observe(config, result),
        reach=tuple(reach),
        drafts=drafts,
        counts=tuple((t, counts) for t, _ in SPACE.workload.temperature_mix),
    )
    twin = fit(SPACE.hardware, [measured], prior, SPACE.version)
    closed_form = screen.rank(twin)
    best = next(p for p in on_traffic(screen, twin, closed_form) if p.method == DFLASH)
    assert best.accepted is not None and not best.accepted.continued  # read off the counters
    assert int(best.params["num_speculative_tokens"]) <= 6
    dflash = [p for p in closed_form if p.method == DFLASH]
    adaptive = next(p for p in dflash if p.params["enable_adaptive_verification"])
    assert adaptive.output_tok_s < dflash[0].output_tok_s  # its fitted acceptance fell too


def test_a_variant_that_moves_the_best_k_is_queued_at_its_own_best_k() -> None:
    # On vLLM 0.32 P-EAGLE drafts sequentially unless parallel drafting is on: its K is
    # chosen in the first variant (K=3 there), and one pass for every drafted token makes a
    # higher K pay. The warm start queues the parallel variant at the K best for it.
    space = load_space("qwen3-coder-30b-fp8-4090x2-2026-vllm032")
    head = "eagle3:amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE"
    queued = next(p for p in warm_start_configs(space, 20) if p.params["draft"] == head)
    assert queued.params["parallel_drafting"]
    screen = Screen(space)
    server = queued.config.server
    setting = (server.gpu_memory_utilization, server.max_num_batched_tokens)
    temperature = queued.config.client.sampling_temperature

    def forecast(k: int) -> float:
        config = screen.config(
            screen.arm(head, k, {"parallel_drafting": True}), setting, temperature
        )
        pairs = screened_traffic(space, config, space.draft_model(head))
        return sum(pair.weight * result.output_tok_s for pair, result in pairs)

    best = max(space.k_range(head), key=forecast)
    assert queued.params["num_speculative_tokens"] == best
    assert forecast(best) > 1.02 * forecast(3)  # the K the first variant suits
