"""The acceptance model: pair, workload and temperature drive the per-token probability."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tuner.catalog.models import load_model
from tuner.config.trial import SpecMethod
from tuner.sim.acceptance import (
    POSITION_DECAY,
    SHIPPED_ACCEPTANCE,
    AcceptanceConstants,
    acceptance_probability,
    expected_accepted,
    position_rates,
    rates_over_prompts,
)
from tuner.sim.perfmodel import acceptance_probability as exported

TARGET = load_model("Qwen/Qwen2.5-32B-Instruct-AWQ")
DRAFT = load_model("Qwen/Qwen2.5-0.5B-Instruct")


def _alpha(
    prompt_set: str,
    temperature: float = 0.2,
    method: str = "draft_model",
    draft: str = "Qwen/Qwen2.5-0.5B-Instruct",
    target: str = "Qwen/Qwen2.5-32B-Instruct-AWQ",
) -> float:
    return acceptance_probability(
        load_model(target), load_model(draft), SpecMethod(method), prompt_set, temperature
    )


def test_exposed_from_perfmodel_too() -> None:
    assert exported is acceptance_probability


def test_workload_order_for_a_draft_model() -> None:
    code, long, chat, creative = (_alpha(s) for s in ("code", "long-context", "chat", "creative"))
    assert code > long > chat > creative
    assert 0.0 < creative < code < 1.0


def test_user_dataset_is_treated_like_chat() -> None:
    assert _alpha("/data/my_prompts.jsonl") == _alpha("chat")


def test_ngram_depends_strongly_on_the_workload() -> None:
    def ngram(prompt_set: str) -> float:
        return acceptance_probability(TARGET, None, SpecMethod.NGRAM, prompt_set, 0.2)

    assert ngram("long-context") > ngram("code") > 4 * ngram("creative")
    assert ngram("code") > 3 * ngram("chat") / 2
    assert ngram("creative") < 0.15
    assert ngram("code") < _alpha("code")


def test_bigger_draft_or_smaller_target_accepts_more() -> None:
    assert _alpha("chat", draft="Qwen/Qwen2.5-1.5B-Instruct") > _alpha("chat")
    assert _alpha("chat", target="Qwen/Qwen2.5-14B-Instruct-AWQ") > _alpha("chat")


def test_temperature_cuts_acceptance_sharply_above_point_eight() -> None:
    temps = [0.0, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5]
    alphas = [_alpha("code", t) for t in temps]
    assert alphas == sorted(alphas, reverse=True)
    assert alphas[0] - alphas[2] < 0.05  # flat up to 0.3
    assert alphas[4] < alphas[1] - 0.15  # sharp drop by 0.8


def test_mismatched_tokenizer_accepts_almost_nothing() -> None:
    llama = load_model("meta-llama/Llama-3.2-1B-Instruct")
    assert acceptance_probability(TARGET, llama, SpecMethod.DRAFT_MODEL, "code", 0.0) < 0.05


def test_bad_method_or_missing_draft() -> None:
    with pytest.raises(ValueError, match="'none' drafts nothing"):
        acceptance_probability(TARGET, DRAFT, SpecMethod.NONE, "code", 0.0)
    with pytest.raises(ValueError, match="needs a draft"):
        acceptance_probability(TARGET, None, SpecMethod.DRAFT_MODEL, "code", 0.0)


def test_position_rates_decay_for_drafts_and_stay_flat_for_ngram() -> None:
    rates = position_rates(0.9, 4, SpecMethod.DRAFT_MODEL)
    assert rates == pytest.approx([0.9 * POSITION_DECAY**i for i in range(4)])
    assert position_rates(0.4, 3, SpecMethod.NGRAM) == pytest.approx([0.4, 0.4, 0.4])
    assert expected_accepted((0.5, 0.5, 0.5)) == pytest.approx((0.5, 0.25, 0.125))
    assert expected_accepted(()) == ()


def test_a_method_s_own_sampled_penalty_replaces_the_shared_one() -> None:
    """A block drafter trained to sample its block may lose otherwise than a head when its
    drafts are sampled: its own penalty, where it has one, applies to sampled drafts only."""
    target = load_model("Qwen/Qwen3-30B-A3B")

    def alpha(method: SpecMethod, constants: AcceptanceConstants, sampled: bool) -> float:
        return acceptance_probability(
            target, None, method, "chat", 1.0, constants, probabilistic=sampled
        )

    own = replace(SHIPPED_ACCEPTANCE, sampled_penalty={SpecMethod.DSPARK: 0.3})
    for method in (SpecMethod.DSPARK, SpecMethod.MTP):
        assert alpha(method, own, False) == alpha(method, SHIPPED_ACCEPTANCE, False)
    assert alpha(SpecMethod.DSPARK, own, True) > alpha(SpecMethod.DSPARK, SHIPPED_ACCEPTANCE, True)
    assert alpha(SpecMethod.MTP, own, True) == alpha(SpecMethod.MTP, SHIPPED_ACCEPTANCE, True)


def test_greedy_drafts_keep_each_prompt_s_rates() -> None:
    """At temperature 0 every prompt's argmax agreement is about as likely: a block drafter's
    rates are its geometric ones, as a head's are at any temperature."""
    decay = SHIPPED_ACCEPTANCE.decay[SpecMethod.DFLASH]
    greedy = position_rates(0.8, 6, SpecMethod.DFLASH, temperature=0.0)
    assert greedy == pytest.approx([0.8 * decay**i for i in range(6)])
    head = position_rates(0.8, 4, SpecMethod.EAGLE3, temperature=1.0)
    assert head == position_rates(0.8, 4, SpecMethod.EAGLE3)
    assert rates_over_prompts(0.8, 0.9, 3, 0.0) == pytest.approx([0.8, 0.72, 0.648])


def test_sampled_prompts_spread_and_the_easy_ones_reach_further() -> None:
    """Sampling spreads a block drafter's acceptance over prompts: the first position's rate
    is still the mean, and the counted rate of later positions rises (DSpark's counters at
    temperature 1, vllm PR #52992), the more the hotter, until DSpark's own slow decay
    takes over near the end of its block; a flat drafter's own rates stay flat."""
    warm = position_rates(0.7, 15, SpecMethod.DSPARK, temperature=0.5)
    hot = position_rates(0.7, 15, SpecMethod.DSPARK, temperature=1.0)
    assert warm[0] == pytest.approx(0.7, abs=1e-6) and hot[0] == pytest.approx(0.7, abs=1e-6)
    assert list(hot[:8]) == sorted(hot[:8]) and hot[-1] - hot[0] > 0.1
    assert all(h >= w for h, w in zip(hot, warm, strict=True))
    flat = rates_over_prompts(0.7, 1.0, 15, 0.0)
    assert flat == pytest.approx([0.7] * 15)
    # A decaying drafter's counted rates fall more slowly than each prompt's.
    spread = rates_over_prompts(0.7, 0.9, 5, 1.5)
    one = rates_over_prompts(0.7, 0.9, 5, 0.0)
    assert all(s > o for s, o in zip(spread[1:], one[1:], strict=True))
