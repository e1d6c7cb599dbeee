"""The ``search`` section of a search space: the tuned dimensions, speculation methods first.

``search.methods`` lists the speculation choices, each with its own settings, a value or a range
each (vLLM 0.32's ``SpeculativeConfig`` names them)::

    methods:
      - none
      - {method: ngram, num_speculative_tokens: {low: 1, high: 8},
         prompt_lookup_min: {low: 1, high: 3}, prompt_lookup_max: {low: 2, high: 5}}
      - {method: suffix, num_speculative_tokens: {low: 4, high: 24},
         suffix_decoding_max_tree_depth: 24, suffix_decoding_min_token_prob: 0.1}
      - {method: draft_model, model: [Qwen/Qwen2.5-0.5B-Instruct], num_speculative_tokens: ..}
      - {method: eagle3, model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, num_speculative_tokens: ..}
      - {method: mtp, num_speculative_tokens: {low: 1, high: 3}}
      - {method: eagle3, model: ..., parallel_drafting: [false, true]}      # P-EAGLE on/off
      - {method: dflash, model: z-lab/Qwen3-8B-DFlash-b16,
         rejection_sample_method: [standard, block], enable_adaptive_verification: [false, true]}

A bare name is that method with its default settings. The verification settings
(``rejection_sample_method``, ``draft_sample_method``, ``enable_adaptive_verification``) and
``parallel_drafting`` are each one value or a list of the values to search; which method and
vLLM release allow which is checked when the space loads (:mod:`tuner.config.vllm_features`).
A block drafter's K defaults to the width it was trained for (its ``block_size``).

The earlier form, ``draft: [none, ngram, MODEL...]`` with one ``num_speculative_tokens``, still
loads (stored studies use it): :mod:`tuner.config.choices` translates it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, Tag
from pydantic_core import PydanticCustomError

from tuner.config.bounds import BatchTokens, Draft, Fraction, Step, Temperature, Watts
from tuner.config.methods.block import BlockMethod
from tuner.config.methods.draft_model import DraftMethod
from tuner.config.methods.eagle import HeadMethod
from tuner.config.methods.fields import KChoice, SpecTokensRange
from tuner.config.methods.mtp import MtpMethod, alias_refusal
from tuner.config.methods.ngram import NgramMethod
from tuner.config.methods.none import NoMethod
from tuner.config.methods.suffix import SuffixMethod
from tuner.config.schema_base import AS_LIST, CHOICE, NON_EMPTY, RangeModel, StrictModel
from tuner.config.schema_errors import A_RANGE, ONE_VALUE

__all__ = [
    "BatchChoices",
    "Drafts",
    "FractionChoice",
    "FractionRange",
    "MethodChoice",
    "PowerChoices",
    "SearchModel",
    "TemperatureChoice",
    "TemperatureRange",
]


class _StrictModel(StrictModel, BaseModel):
    """:class:`StrictModel`, BaseModel named here: ruff sees a pydantic model (no RUF012) only
    through a base defined in the same file."""


class FractionRange(RangeModel):
    """A share of GPU memory from low to high, optionally in steps."""

    low: Fraction
    high: Fraction
    step: Step | None = None


class TemperatureRange(RangeModel):
    """Sampling temperatures from low to high, optionally in steps."""

    low: Temperature
    high: Temperature
    step: Step | None = None


FractionChoice = Annotated[
    Annotated[Fraction, Tag(ONE_VALUE)] | Annotated[FractionRange, Tag(A_RANGE)], CHOICE
]
TemperatureChoice = Annotated[
    Annotated[Temperature, Tag(ONE_VALUE)] | Annotated[TemperatureRange, Tag(A_RANGE)], CHOICE
]
Drafts = Annotated[
    list[Draft],
    AS_LIST,
    NON_EMPTY,
    Field(examples=[["none", "ngram", "Qwen/Qwen2.5-0.5B-Instruct"]]),
]
BatchChoices = Annotated[
    list[BatchTokens], AS_LIST, NON_EMPTY, Field(examples=[[1024, 2048, 4096]])
]
PowerChoices = Annotated[list[Watts], AS_LIST, NON_EMPTY, Field(examples=[[300, 350, 450]])]


def _named(value: object) -> object:
    """One choice or a list of them; a bare name (``none``) is ``{method: none}``."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    named = [{"method": item} if isinstance(item, str) else item for item in items]
    for item in named:
        method = item.get("method") if isinstance(item, dict) else None
        refusal = alias_refusal(method) if isinstance(method, str) else None
        if refusal is not None:
            raise PydanticCustomError("mtp_name", refusal)
    return named


MethodChoice = Annotated[
    NoMethod | NgramMethod | SuffixMethod | DraftMethod | HeadMethod | BlockMethod | MtpMethod,
    Field(discriminator="method"),
]
Methods = Annotated[
    list[MethodChoice],
    BeforeValidator(_named),
    NON_EMPTY,
    Field(examples=[["none", "ngram", {"method": "mtp", "num_speculative_tokens": 2}]]),
]


class SearchModel(_StrictModel):
    """``search``: the tuned dimensions; a single value fixes one."""

    methods: Methods | None = None
    """Speculation choices, each with its own settings: none, ngram, ngram_gpu, suffix,
    draft_model, eagle, eagle3 (P-EAGLE with parallel_drafting), mtp, dflash, dspark. Unset:
    the earlier ``draft`` form below."""
    draft: Drafts = ["none"]
    """Earlier form of ``methods``: model ids or folders, none, ngram (suffix, mtp)."""
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=8)
    """With ``draft``: K for every draft choice."""
    gpu_memory_utilization: FractionChoice = 0.9
    """Share of GPU memory vLLM may use."""
    max_num_batched_tokens: BatchChoices = [2048]
    """Choices of tokens per scheduler step (chunked prefill)."""
    power_limit_w: PowerChoices | None = None
    """The GPU power limits to search, in watts per GPU (NVML sets them; needs
    --allow-power-limit and the privilege to set them); unset: the limit is never touched."""
    temperature: TemperatureChoice | None = None
    """Only when your product may choose it: a range of temperatures to tune over (the
    report then shows the best server config per temperature); unset: workload.temperature."""

    @property
    def earlier_form(self) -> bool:
        """Whether ``draft`` or ``num_speculative_tokens`` was written (not ``methods``)."""
        return bool({"draft", "num_speculative_tokens"} & self.model_fields_set)
