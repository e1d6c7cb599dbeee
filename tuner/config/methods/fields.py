"""The fields a method's section of a search space is made of: K, numbers, switches, the
verification settings; each one value or a range (a list) to search."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, Tag
from pydantic_core import PydanticCustomError

from tuner.config.bounds import Count, ModelId, Share, SpecTokens, Step, Weight
from tuner.config.schema_base import AS_LIST, CHOICE, NON_EMPTY, RangeModel, StrictModel
from tuner.config.schema_errors import A_RANGE, ONE_VALUE
from tuner.config.verification import DraftHead, DraftSampling, Verification

__all__ = [
    "CountChoice",
    "DraftHeads",
    "FactorChoice",
    "KChoice",
    "Models",
    "SectionModel",
    "ShareChoice",
    "SpecTokensRange",
    "Switches",
    "Verifications",
    "Verified",
    "high",
    "low",
]


class SectionModel(StrictModel, BaseModel):
    """:class:`StrictModel`, BaseModel named here: ruff sees a pydantic model (no RUF012) only
    through a base defined in the same file, and every method's section derives from this."""

    def models(self) -> list[str | None]:
        """The models this section lists, each a choice of its own ([None]: it loads none)."""
        return [None]


class SpecTokensRange(RangeModel):
    """Speculative tokens K, every integer from low to high."""

    low: SpecTokens
    high: SpecTokens


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
CountChoice = Annotated[
    Annotated[Count, Tag(ONE_VALUE)] | Annotated[CountRange, Tag(A_RANGE)], CHOICE
]
ShareChoice = Annotated[
    Annotated[Share, Tag(ONE_VALUE)] | Annotated[ShareRange, Tag(A_RANGE)], CHOICE
]
FactorChoice = Annotated[
    Annotated[Weight, Tag(ONE_VALUE)] | Annotated[FactorRange, Tag(A_RANGE)], CHOICE
]
Models = Annotated[
    list[ModelId], AS_LIST, NON_EMPTY, Field(examples=["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"])
]


def _serving_verification(value: object) -> object:
    """``synthetic`` is a valid vLLM value that no server should be tuned to (``fly`` is
    offered where the space opts in to lossy verification: :func:`check_lossy`)."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if item == "synthetic":
            raise PydanticCustomError(
                "synthetic",
                "synthetic forces an acceptance rate or length: a benchmarking tool, not a "
                "serving setting; use standard or block",
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
DraftHeads = Annotated[list[DraftHead], AS_LIST, NON_EMPTY, Field(examples=[["none", "fp8"]])]


def low(value: float | RangeModel) -> float:
    """A value's, or a range's lowest, value."""
    return value.low if isinstance(value, RangeModel) else value


def high(value: float | RangeModel) -> float:
    """A value's, or a range's highest, value."""
    return value.high if isinstance(value, RangeModel) else value


class Verified(SectionModel):
    """The verification settings of a model-based drafter, each one value or a list to search."""

    rejection_sample_method: Verifications = [Verification.STANDARD]
    """standard, block, fly (lossy: only with ``quality.allow_lossy``), or a list to search
    (block: Model Runner V2 only)."""
    draft_sample_method: DraftSamplings = [DraftSampling.GREEDY]
    """greedy, probabilistic (more accepted at temperature > 0, more memory), or both."""
    enable_adaptive_verification: Switches = [False]
    """false, true, or both: each request's draft budget sized from its confidence (V2 only)."""
