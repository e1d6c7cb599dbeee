"""Suffix decoding: suffix trees over the prompt and earlier outputs propose the tokens.

First in 0.11.1 (vllm PR #25784) through the ``arctic-inference`` package, which vLLM's
environment must hold ("Arctic Inference is required for suffix decoding"); Model Runner V2
does not run it through 0.33 (``_get_v2_model_runner_unsupported_features``, ``vllm/config/
vllm.py``). 0.34 runs it natively on the GPU inside V2 (``vllm/v1/worker/gpu/spec_decode/
suffix/``, no package needed): K defaults to ``min(8, suffix_decoding_max_tree_depth)`` (24
before; ``suffix/config.py:28``), and ``suffix_decoding_max_spec_factor`` and
``suffix_decoding_min_token_prob`` are "Deprecated and has no effect"
(``vllm/config/speculative.py:598-604``): spectune neither searches nor writes them there.
"""

from __future__ import annotations

from typing import Literal

from tuner.catalog.spec_method import SpecMethod
from tuner.config.bounds import Warmup
from tuner.config.methods.base import AcceptancePrior, Method, MethodFamily
from tuner.config.methods.fields import (
    CountChoice,
    FactorChoice,
    KChoice,
    SectionModel,
    ShareChoice,
    SpecTokensRange,
)
from tuner.config.vllm_version import VllmVersion

__all__ = ["SUFFIX", "SuffixMethod"]

_ON_THE_GPU = VllmVersion(0, 34, 0)
# The knobs the GPU speculator ignores, with vLLM's defaults.
_DEAD_ON_THE_GPU = {"suffix_decoding_max_spec_factor": 1.0, "suffix_decoding_min_token_prob": 0.1}


class SuffixMethod(SectionModel):
    """Suffix decoding (arctic-inference): suffix trees over the prompt and earlier outputs."""

    method: Literal[SpecMethod.SUFFIX]
    num_speculative_tokens: KChoice = SpecTokensRange(low=4, high=24)
    """The most tokens proposed per step (the tree decides how many, up to this)."""
    suffix_decoding_max_tree_depth: CountChoice = 24
    """Deepest match plus speculation in the trees."""
    suffix_decoding_max_spec_factor: FactorChoice = 1.0
    """Tokens proposed per token of the match."""
    suffix_decoding_min_token_prob: ShareChoice = 0.1
    """Only propose tokens at least this frequent after the match."""
    suffix_decoding_max_cached_requests: Warmup = 10000
    """Earlier requests kept in the global tree (0: prompt trees only)."""


class _Suffix(Method):
    def keys_for(self, version: VllmVersion) -> tuple[str, ...]:
        if version < _ON_THE_GPU:
            return self.keys
        return tuple(k for k in self.keys if k not in _DEAD_ON_THE_GPU)

    def option_refusal(self, name: str, value: object, version: VllmVersion) -> str | None:
        default = _DEAD_ON_THE_GPU.get(name)
        if default is None or version < _ON_THE_GPU or value == default:
            return None
        return (
            f"{name} has no effect on vLLM {version}: its suffix decoding runs on the GPU and "
            f"ignores it (vllm/config/speculative.py:598-604 in 0.34.0); drop it, or use an "
            "image up to vLLM 0.33"
        )


SUFFIX = _Suffix(
    SpecMethod.SUFFIX,
    MethodFamily.LOOKUP,
    since=VllmVersion(0, 11, 1),
    since_source="vllm PR #25784",
    keys=(
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "suffix_decoding_max_cached_requests",
    ),
    v2_since=VllmVersion(0, 34, 0),
    prior=AcceptancePrior(decay=1.0),
    matches_earlier_outputs=True,
    counters_carry=False,
)
