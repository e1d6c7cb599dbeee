"""Bounded values: what one number (or name) in a search space or on the command line may be.

Each type checks with pydantic and fails with one reason and an example, "must be an integer
>= 1 (e.g. 4)", whatever went wrong (a wrong type, a bound, NaN, YAML's ``yes`` for a number).
The search-space schema (:mod:`tuner.config.schema`), :class:`WorkloadSpec` and the CLI options
all use these, so each bound is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler, TypeAdapter, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from tuner.errors import ConfigError

__all__ = [
    "BatchTokens",
    "ContextLength",
    "Count",
    "Draft",
    "FlagValue",
    "Fraction",
    "Milliseconds",
    "ModelId",
    "Name",
    "Rate",
    "Seconds",
    "Seed",
    "Share",
    "SimSpeed",
    "SpecTokens",
    "Step",
    "Temperature",
    "Tokens",
    "VersionText",
    "Warmup",
    "Weight",
    "check_value",
]

T = TypeVar("T")


@dataclass(frozen=True)
class _Rule:
    """Replaces any error of the value it annotates by "must be TEXT (e.g. EXAMPLE)"."""

    text: str
    example: object

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        numeric = source in (int, float)

        def check(value: object, inner: core_schema.ValidatorFunctionWrapHandler) -> object:
            try:
                if numeric and isinstance(value, bool):  # YAML's `yes` is no number
                    raise ValueError
                return inner(value)
            except (ValidationError, ValueError):
                raise PydanticCustomError(
                    "rule",
                    "must be {text} (e.g. {example})",
                    {"text": self.text, "example": self.example},
                ) from None

        return core_schema.no_info_wrap_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "description": self.text, "examples": [self.example]}


# Bounded scalars. vLLM's SamplingParams refuses temperatures outside [0, 2].
Fraction = Annotated[
    float, Field(gt=0, le=1, allow_inf_nan=False), _Rule("a number > 0 and <= 1", 0.92)
]
SpecTokens = Annotated[int, Field(ge=1), _Rule("an integer >= 1", 4)]
Temperature = Annotated[
    float, Field(ge=0, le=2, allow_inf_nan=False), _Rule("a number from 0 to 2", 0.2)
]
Step = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 0.05)]
ContextLength = Annotated[int, Field(gt=0), _Rule("an integer > 0", 8192)]
BatchTokens = Annotated[int, Field(gt=0), _Rule("an integer > 0", 2048)]
Tokens = Annotated[int, Field(gt=0), _Rule("an integer > 0", 256)]
Count = Annotated[int, Field(ge=1), _Rule("an integer >= 1", 8)]
Warmup = Annotated[int, Field(ge=0), _Rule("an integer >= 0", 1)]
Seed = Annotated[int, _Rule("an integer", 0)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False), _Rule("a share from 0 to 1", 0.0)]
Weight = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 0.5)]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 2.0)]
Milliseconds = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 500)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 120)]
SimSpeed = Annotated[float, Field(gt=0), _Rule("a number > 0, or inf", 10)]
Name = Annotated[str, Field(min_length=1), _Rule("a non-empty string", "my-study")]
ModelId = Annotated[
    str,
    Field(min_length=1),
    _Rule("a Hugging Face id or a model folder", "Qwen/Qwen2.5-32B-Instruct-AWQ"),
]
Draft = Annotated[
    str,
    Field(min_length=1),
    _Rule("a model id, a model folder, none or ngram", "Qwen/Qwen2.5-0.5B-Instruct"),
]
VersionText = Annotated[str, _Rule("a quoted version string", "'0.8.5'")]
FlagValue = Annotated[str | int | float | bool, _Rule("a string, a number or true/false", "true")]


def check_value(kind: TypeAdapter[T], value: object, name: str) -> T:
    """``value`` checked against a bounded type: ``check_value(TypeAdapter(SpecTokens), k, "--k")``.

    Raises:
        ConfigError: ``NAME VALUE: must be ...``.
    """
    try:
        return kind.validate_python(value)
    except ValidationError as exc:
        raise ConfigError(f"{name} {value}: {exc.errors()[0]['msg']}") from None
