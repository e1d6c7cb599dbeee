"""The building blocks of the search-space schema: a strict YAML mapping and a ``low``/``high``
range, shared by :mod:`tuner.config.schema` and :mod:`tuner.config.methods`
(each method's section).

A :class:`StrictModel` takes ``null`` as empty, refuses unknown keys naming the nearest known one
(unless validated with ``context={"lenient": True}``, for stored copies), and names a missing
required key with an example; :mod:`tuner.config.schema_errors` turns these into one line.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tuner.config.schema_errors import A_RANGE, ONE_VALUE

__all__ = ["AS_LIST", "CHOICE", "NON_EMPTY", "RangeModel", "StrictModel", "context_flag"]

T = TypeVar("T")


def _as_list(value: object) -> object:
    return list(value) if isinstance(value, list | tuple) else [value]


def _non_empty(value: list[T]) -> list[T]:
    if not value:
        raise PydanticCustomError("empty", "must be a non-empty list")
    return value


def context_flag(info: ValidationInfo, key: str) -> bool:
    """Whether the validation context sets ``key`` (``lenient`` for stored copies)."""
    return bool(isinstance(info.context, Mapping) and info.context.get(key))


class StrictModel(BaseModel):
    """A YAML mapping: ``null`` is empty, unknown keys fail naming the nearest known one."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, defer_build=True
    )

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any, info: ValidationInfo) -> Any:
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            raise PydanticCustomError("mapping", "must be a YAML mapping of key: value")
        known = list(cls.model_fields)
        unknown = [str(key) for key in data if key not in cls.model_fields]
        if unknown and context_flag(info, "lenient"):  # stored by a version that ignored typos
            return {key: value for key, value in data.items() if key in cls.model_fields}
        if unknown:
            near = difflib.get_close_matches(unknown[0], known, n=1)
            raise PydanticCustomError(
                "unknown_key",
                "unknown key",
                {"key": unknown[0], "near": near[0] if near else "", "known": known},
            )
        for name, spec in cls.model_fields.items():
            if spec.is_required() and name not in data:
                example = spec.examples[0] if spec.examples else "..."
                raise PydanticCustomError(
                    "missing_key", "missing key", {"key": name, "example": example}
                )
        return data


class RangeModel(StrictModel):
    """``{low: .., high: ..}``; subclasses bound both ends."""

    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> RangeModel:
        if self.low > self.high:
            raise PydanticCustomError(
                "order",
                "low {low} is above high {high}: swap them",
                {"low": self.low, "high": self.high},
            )
        return self


def _branch(value: object) -> str:
    return A_RANGE if isinstance(value, Mapping | BaseModel) else ONE_VALUE


# A list field takes one bare value as a list of one; a tuned number takes a value or a range.
AS_LIST, NON_EMPTY = BeforeValidator(_as_list), AfterValidator(_non_empty)
CHOICE = Discriminator(_branch)
