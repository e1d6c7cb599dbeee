"""The acceptance model: pair, workload and temperature drive the per-token probability."""

from __future__ import annotations

import pytest

from tuner.catalog.models import load_model
from tuner.config.trial import SpecMethod
from tuner.sim.acceptance import (
    POSITION_DECAY,
    acceptance_probability,
    expected_accepted,
    position_rates,
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
