"""EAGLE heads: a small head fed the target's hidden states drafts token by token.

``eagle`` (EAGLE-1) and ``eagle3`` (three target layers' hidden states, its own vocabulary) both
came to the V1 engine in 0.8.5 (vllm PR #16937) and run on Model Runner V2 wherever it exists.
A P-EAGLE head (``parallel_drafting: true``) drafts all K tokens in one pass: 0.16-0.33 run it
on the V1 runner only, and 0.34 refuses it ("parallel_drafting is only supported by the dflash
and dspark methods", ``vllm/config/speculative.py:1689``). The head's own rules are
:func:`tuner.catalog.heads.check_head` and :func:`tuner.catalog.drafters.check_parallel_head`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tuner.catalog.heads import check_head
from tuner.catalog.models import ModelSpec, load_model
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, Method, MethodFamily, Range
from tuner.config.methods.fields import (
    DraftHeads,
    KChoice,
    Models,
    SpecTokensRange,
    Switches,
    Verified,
)
from tuner.config.verification import DraftHead
from tuner.config.vllm_version import VllmVersion

__all__ = ["EAGLE", "EAGLE3", "HeadMethod"]


class HeadMethod(Verified):
    """An EAGLE (``eagle``) or EAGLE-3 (``eagle3``) head trained for this target."""

    method: Literal[SpecMethod.EAGLE, SpecMethod.EAGLE3]
    model: Models = Field(examples=["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"])
    """One head or a list (each is a choice of its own)."""
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=6)
    parallel_drafting: Switches = Field(default=[False])
    """P-EAGLE: true for a head trained to draft all K tokens in one pass, or both to search."""
    draft_lm_head_quantization: DraftHeads = Field(default=[DraftHead.NONE])
    """none, fp8, nvfp4 or a list: the head's LM head quantized (vLLM 0.33+, V2 only)."""

    def models(self) -> list[str | None]:
        return list(self.model)


_PARALLEL_REFUSED = VllmVersion(0, 34, 0)


class _Head(Method):
    def option_refusal(self, name: str, value: object, version: VllmVersion) -> str | None:
        if name == "parallel_drafting" and value is True and version >= _PARALLEL_REFUSED:
            return (
                f"P-EAGLE (parallel_drafting true on {self.name}) cannot start on vLLM "
                f'{version}: "parallel_drafting is only supported by the dflash and dspark '
                'methods" (vllm/config/speculative.py:1689 in 0.34.0); use a DFlash drafter, '
                "or an image up to vLLM 0.33 (vllm/vllm-openai:v0.33.0)"
            )
        return None

    def check(
        self, target: ModelSpec, model: str | None, k: Range, release: VllmVersion | None
    ) -> Range:
        head = load_model(str(model))
        check_head(target.hf_id, target.config, head.hf_id, head.config, self.name)
        return k


EAGLE = _Head(
    SpecMethod.EAGLE,
    MethodFamily.HEAD,
    since=VllmVersion(0, 8, 5),
    since_source="vllm PR #16937",
    # Fitted: EAGLE-1's later positions drift like a draft model's (vLLM issue #20780's
    # acceptance lengths for K=2..7).
    prior=AcceptancePrior(
        decay=0.956,
        logit={"code": 2.78, "long-context": 1.78, "chat": 0.48, "creative": -0.02, "math": 2.0},
    ),
)
EAGLE3 = _Head(
    SpecMethod.EAGLE3,
    MethodFamily.HEAD,
    since=VllmVersion(0, 8, 5),
    since_source="vllm PR #16937",
    # Fitted: an EAGLE-3 head's later positions drift about as a draft model's (vLLM issue
    # #20780, the per-position rates of AMD's SPEED-Bench run and of InferenceX PR #1737).
    prior=AcceptancePrior(
        decay=0.933,
        logit={"code": 1.54, "long-context": 2.53, "chat": 1.23, "creative": 0.73, "math": 1.99},
    ),
)
