"""The target's own multi-token-prediction layers draft (DeepSeek-V3/R1, GLM-4.5/5, Qwen3-Next,
Qwen3.5, MiMo, ...: every model type vLLM maps to ``mtp``).

The generic ``mtp`` name: users' 0.19 logs already warn that the per-model names
(``deepseek_mtp``, ``qwen3_next_mtp``, ...) are deprecated, so 0.19 is the oldest release
spectune writes it for (DeepSeek MTP itself came in PR #12755 for 0.7.3, under other names).
The target's checkpoint rules are :func:`tuner.catalog.mtp.check_mtp`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tuner.catalog.models import ModelSpec
from tuner.catalog.mtp import MTP_MODEL_TYPES, check_mtp
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, Method, MethodFamily, Range
from tuner.config.methods.fields import DraftHeads, KChoice, SpecTokensRange, Verified
from tuner.config.verification import DraftHead
from tuner.config.vllm_version import VllmVersion

__all__ = ["MTP", "MtpMethod", "alias_refusal"]


class MtpMethod(Verified):
    """The target's own multi-token-prediction layers (DeepSeek-V3/R1, GLM-4.5/5, Qwen3-Next,
    Qwen3.5, MiMo, ...: every model type vLLM 0.32 maps to ``mtp``)."""

    method: Literal[SpecMethod.MTP]
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=3)
    draft_lm_head_quantization: DraftHeads = Field(default=[DraftHead.NONE])
    """none, fp8, nvfp4 or a list: the MTP drafter's LM head quantized (vLLM 0.33+, V2 only)."""


def alias_refusal(name: str) -> str | None:
    """Why a space may not write a per-model MTP name (None: ``name`` is none of them)."""
    if name in MTP_MODEL_TYPES and name != SpecMethod.MTP:
        return (
            f"method {name}: vLLM runs every per-model MTP name as mtp and warns that {name} "
            "is deprecated (vllm/config/speculative.py:1375-1379 in 0.34.0); write method: mtp"
        )
    return None


class _Mtp(Method):
    def check(
        self, target: ModelSpec, model: str | None, k: Range, release: VllmVersion | None
    ) -> Range:
        check_mtp(target.hf_id, target.config)
        return k


MTP = _Mtp(
    SpecMethod.MTP,
    MethodFamily.MTP,
    since=VllmVersion(0, 19, 0),
    since_source="the generic mtp name",
    # Fitted: one MTP layer rerun for later positions drifts fast (GLM-4.5-Air's 0.92 / 0.68 /
    # 0.38).
    prior=AcceptancePrior(
        decay=0.784,
        logit={"code": 2.96, "long-context": 2.46, "chat": 1.99, "creative": 1.46, "math": 2.51},
    ),
)
