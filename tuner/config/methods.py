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

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

from tuner.catalog.mtp import MTP_MODEL_TYPES
from tuner.catalog.spec_method import SpecMethod
from tuner.config.bounds import (
    BatchTokens,
    Count,
    Draft,
    Fraction,
    ModelId,
    Share,
    SpecTokens,
    Step,
    Temperature,
    Warmup,
    Weight,
)
from tuner.config.schema_base import AS_LIST, CHOICE, NON_EMPTY, RangeModel, StrictModel
from tuner.config.schema_errors import A_RANGE, ONE_VALUE
from tuner.config.verification import DraftSampling, Verification

__all__ = [
    "BatchChoices",
    "BlockMethod",
    "DraftMethod",
    "Drafts",
    "FractionChoice",
    "FractionRange",
    "HeadMethod",
    "KChoice",
    "MethodChoice",
    "MtpMethod",
    "NgramMethod",
    "NoMethod",
    "SearchModel",
    "SpecTokensRange",
    "SuffixMethod",
    "TemperatureChoice",
    "TemperatureRange",
    "Verified",
]


class _StrictModel(StrictModel, BaseModel):
    """:class:`StrictModel`, BaseModel named here: ruff sees a pydantic model (no RUF012) only
    through a base defined in the same file."""


class SpecTokensRange(RangeModel):
    """Speculative tokens K, every integer from low to high."""

    low: SpecTokens
    high: SpecTokens


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


class CountRange(RangeModel):
    """Every integer from low to high."""

    low: Count
    high: Count


class ShareRange(RangeModel):
    """A probability from low to high, optionally in steps."""

    low: Share
    high: Share
    step: Step | None = None


class FactorRange(RangeModel):
    """A positive factor from low to high, optionally in steps."""

    low: Weight
    high: Weight
    step: Step | None = None


KChoice = Annotated[
    Annotated[SpecTokens, Tag(ONE_VALUE)] | Annotated[SpecTokensRange, Tag(A_RANGE)], CHOICE
]
FractionChoice = Annotated[
    Annotated[Fraction, Tag(ONE_VALUE)] | Annotated[FractionRange, Tag(A_RANGE)], CHOICE
]
TemperatureChoice = Annotated[
    Annotated[Temperature, Tag(ONE_VALUE)] | Annotated[TemperatureRange, Tag(A_RANGE)], CHOICE
]
CountChoice = Annotated[
    Annotated[Count, Tag(ONE_VALUE)] | Annotated[CountRange, Tag(A_RANGE)], CHOICE
]
ShareChoice = Annotated[
    Annotated[Share, Tag(ONE_VALUE)] | Annotated[ShareRange, Tag(A_RANGE)], CHOICE
]
FactorChoice = Annotated[
    Annotated[Weight, Tag(ONE_VALUE)] | Annotated[FactorRange, Tag(A_RANGE)], CHOICE
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
Models = Annotated[
    list[ModelId], AS_LIST, NON_EMPTY, Field(examples=["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"])
]


def _serving_verification(value: object) -> object:
    """``synthetic`` and ``fly`` are valid vLLM values that no server should be tuned to."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if item == "synthetic":
            raise PydanticCustomError(
                "synthetic",
                "synthetic forces an acceptance rate or length: a benchmarking tool, not a "
                "serving setting; use standard or block",
            )
        if item == "fly":
            raise PydanticCustomError(
                "lossy",
                "fly (vLLM 0.33) is lossy: it accepts tokens the target would not have "
                "sampled, which changes the answers; use standard or block",
            )
    return value


Verifications = Annotated[
    list[Verification],
    BeforeValidator(_serving_verification),
    AS_LIST,
    NON_EMPTY,
    Field(examples=[["standard", "block"]]),
]
DraftSamplings = Annotated[
    list[DraftSampling], AS_LIST, NON_EMPTY, Field(examples=[["greedy", "probabilistic"]])
]
Switches = Annotated[list[bool], AS_LIST, NON_EMPTY, Field(examples=[[False, True]])]


def _low(value: float | RangeModel) -> float:
    return value.low if isinstance(value, RangeModel) else value


def _high(value: float | RangeModel) -> float:
    return value.high if isinstance(value, RangeModel) else value


class NoMethod(_StrictModel):
    """No speculation: the target decodes alone."""

    method: Literal[SpecMethod.NONE]


class NgramMethod(_StrictModel):
    """Prompt lookup: drafts what followed the last matching n-gram of the prompt (``ngram``
    on the CPU between steps, ``ngram_gpu`` on the GPU inside the step)."""

    method: Literal[SpecMethod.NGRAM, SpecMethod.NGRAM_GPU]
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=8)
    """K, tokens proposed per step."""
    prompt_lookup_min: CountChoice = 1
    """Shortest n-gram matched (vLLM's default: 5 when neither is set)."""
    prompt_lookup_max: CountChoice = 4
    """Longest n-gram matched."""
    rejection_sample_method: Verifications = [Verification.STANDARD]
    """standard, block, or both to search (block: Model Runner V2 only)."""

    @model_validator(mode="after")
    def _window(self) -> NgramMethod:
        if _low(self.prompt_lookup_min) > _high(self.prompt_lookup_max):
            raise PydanticCustomError(
                "window",
                "prompt_lookup_min {low} is above every prompt_lookup_max ({high}): vLLM "
                "refuses min > max; lower the min or raise the max",
                {"low": _low(self.prompt_lookup_min), "high": _high(self.prompt_lookup_max)},
            )
        return self


class SuffixMethod(_StrictModel):
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


class Verified(_StrictModel):
    """The verification settings of a model-based drafter, each one value or a list to search."""

    rejection_sample_method: Verifications = [Verification.STANDARD]
    """standard, block, or both (block: Model Runner V2 only)."""
    draft_sample_method: DraftSamplings = [DraftSampling.GREEDY]
    """greedy, probabilistic (more accepted at temperature > 0, more memory), or both."""
    enable_adaptive_verification: Switches = [False]
    """false, true, or both: each request's draft budget sized from its confidence (V2 only)."""


class DraftMethod(Verified):
    """A separate, smaller model of the target's vocabulary."""

    method: Literal[SpecMethod.DRAFT_MODEL]
    model: Models = Field(examples=["Qwen/Qwen2.5-0.5B-Instruct"])
    """One draft or a list (each is a choice of its own)."""
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=8)


class HeadMethod(Verified):
    """An EAGLE (``eagle``) or EAGLE-3 (``eagle3``) head trained for this target."""

    method: Literal[SpecMethod.EAGLE, SpecMethod.EAGLE3]
    model: Models = Field(examples=["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"])
    """One head or a list (each is a choice of its own)."""
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=6)
    parallel_drafting: Switches = [False]
    """P-EAGLE: true for a head trained to draft all K tokens in one pass, or both to search."""


class BlockMethod(Verified):
    """A block drafter (``dflash``, ``dspark``) trained for this target: K tokens in one pass."""

    method: Literal[SpecMethod.DFLASH, SpecMethod.DSPARK]
    model: Models | None = Field(default=None, examples=["z-lab/Qwen3-8B-DFlash-b16"])
    """One drafter or a list; dspark without one drafts with stages inside the target's own
    checkpoint (DeepSeek-V4)."""
    num_speculative_tokens: KChoice | None = None
    """K; unset: the drafter's trained width (dflash: block_size - 1, dspark: block_size)."""
    dspark_draft_topk: CountChoice | None = None
    """dspark with a Qwen3 drafter: the Markov projection on the top-k base logits only."""

    @model_validator(mode="after")
    def _topk_is_dsparks(self) -> BlockMethod:
        if self.dspark_draft_topk is not None and self.method is not SpecMethod.DSPARK:
            raise PydanticCustomError(
                "topk", "dspark_draft_topk belongs to method dspark (vLLM refuses it otherwise)"
            )
        return self


class MtpMethod(Verified):
    """The target's own multi-token-prediction layers (DeepSeek-V3/R1, GLM-4.5/5, Qwen3-Next,
    Qwen3.5, MiMo, ...: every model type vLLM 0.32 maps to ``mtp``)."""

    method: Literal[SpecMethod.MTP]
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=3)


def _named(value: object) -> object:
    """One choice or a list of them; a bare name (``none``) is ``{method: none}``."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    named = [{"method": item} if isinstance(item, str) else item for item in items]
    for item in named:
        method = item.get("method") if isinstance(item, dict) else None
        if method in MTP_MODEL_TYPES and method != SpecMethod.MTP:
            raise PydanticCustomError(
                "mtp_name",
                "method {name}: vLLM 0.32 runs every per-model MTP name as mtp (and warns that "
                "{name} is deprecated); write method: mtp",
                {"name": method},
            )
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
    temperature: TemperatureChoice | None = None
    """Only when your product may choose it: a range of temperatures to tune over (the
    report then shows the best server config per temperature); unset: workload.temperature."""

    @property
    def earlier_form(self) -> bool:
        """Whether ``draft`` or ``num_speculative_tokens`` was written (not ``methods``)."""
        return bool({"draft", "num_speculative_tokens"} & self.model_fields_set)
