"""Bounded values: what one number (or name) in a search space or on the command line may be.

Each type checks with pydantic and fails with one reason and an example, "must be an integer
>= 1 (e.g. 4)", whatever went wrong (a wrong type, a bound, NaN, YAML's ``yes`` for a number).
The search-space schema (:mod:`tuner.config.schema`), :class:`WorkloadSpec` and the CLI options
all use these, so each bound is written once; the numbers themselves live in
:mod:`tuner.config.limits`, which ``--help`` quotes without loading pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import Field, GetCoreSchemaHandler, GetJsonSchemaHandler, TypeAdapter, ValidationError
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from tuner.config.limits import (
    MAX_CONCURRENCY,
    MAX_CONTEXT,
    MAX_GIB,
    MAX_GPUS,
    MAX_NAME,
    MAX_REPEATS,
    MAX_REQUESTS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SPEC_TOKENS,
    MAX_TRIALS,
)
from tuner.errors import ConfigError

__all__ = [
    "BatchTokens",
    "Concurrency",
    "ContextLength",
    "Count",
    "Draft",
    "FlagValue",
    "Fraction",
    "Gibibytes",
    "GpuCount",
    "Milliseconds",
    "ModelId",
    "Name",
    "Picks",
    "Port",
    "Rate",
    "Repeats",
    "Requests",
    "Seconds",
    "Seed",
    "Share",
    "SimSpeed",
    "SpecTokens",
    "Step",
    "Temperature",
    "Tokens",
    "Trials",
    "VersionText",
    "Warmup",
    "Watts",
    "Weight",
    "check_value",
]

T = TypeVar("T")


@dataclass(frozen=True)
class _Rule:
    """Replaces any error of the value it annotates by "must be TEXT (e.g. EXAMPLE)", or, for
    a value above ``high``, by "must be at most HIGH: WHY"."""

    text: str
    example: object
    high: int | float | None = None
    why: str = ""
    """Where ``high`` comes from, in the words of what the value means."""

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
                if self._above(value):
                    unit = " characters" if isinstance(value, str) else ""
                    raise PydanticCustomError(
                        "too_big",
                        "must be at most {high}{unit}: {why}",
                        {"high": self.high, "unit": unit, "why": self.why},
                    ) from None
                raise PydanticCustomError(
                    "rule",
                    "must be {text} (e.g. {example})",
                    {"text": self.text, "example": self.example},
                ) from None

        return core_schema.no_info_wrap_validator_function(check, handler(source))

    def _above(self, value: object) -> bool:
        if self.high is None:
            return False
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value > self.high
        return isinstance(value, str) and len(value) > self.high

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "description": self.text, "examples": [self.example]}


_K_WHY = "vLLM verifies K + 1 tokens a step, and past 64 a drafted token is almost never accepted"
_TOKENS_WHY = "4 times the longest context of any model (1M tokens)"
_NAME_WHY = "PATH_MAX, the longest path Linux opens"
MAX_WATTS = 2000
_WATTS_WHY = "more than any GPU board draws (a B200 is rated 1000 W)"

# Bounded scalars. vLLM's SamplingParams refuses temperatures outside [0, 2].
Fraction = Annotated[
    float, Field(gt=0, le=1, allow_inf_nan=False), _Rule("a number > 0 and <= 1", 0.92)
]
Gibibytes = Annotated[
    float,
    Field(ge=0, le=MAX_GIB, allow_inf_nan=False),
    _Rule("a number of GiB >= 0", 2.0, MAX_GIB, "more memory than any GPU holds"),
]
SpecTokens = Annotated[
    int, Field(ge=1, le=MAX_SPEC_TOKENS), _Rule("an integer >= 1", 4, MAX_SPEC_TOKENS, _K_WHY)
]
Temperature = Annotated[
    float, Field(ge=0, le=2, allow_inf_nan=False), _Rule("a number from 0 to 2", 0.2)
]
Step = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 0.05)]
ContextLength = Annotated[
    int, Field(gt=0, le=MAX_CONTEXT), _Rule("an integer > 0", 8192, MAX_CONTEXT, _TOKENS_WHY)
]
# A board's power limit: NVML's constraints say what one GPU takes (checked at study start);
# no GPU board draws more than the bound.
Watts = Annotated[
    int, Field(gt=0, le=MAX_WATTS), _Rule("a whole number of watts > 0", 350, MAX_WATTS, _WATTS_WHY)
]
BatchTokens = Annotated[
    int, Field(gt=0, le=MAX_CONTEXT), _Rule("an integer > 0", 2048, MAX_CONTEXT, _TOKENS_WHY)
]
Tokens = Annotated[
    int, Field(gt=0, le=MAX_CONTEXT), _Rule("an integer > 0", 256, MAX_CONTEXT, _TOKENS_WHY)
]
Count = Annotated[
    int, Field(ge=1, le=MAX_CONTEXT), _Rule("an integer >= 1", 8, MAX_CONTEXT, _TOKENS_WHY)
]
Concurrency = Annotated[
    int,
    Field(ge=1, le=MAX_CONCURRENCY),
    _Rule(
        "an integer >= 1",
        8,
        MAX_CONCURRENCY,
        "more requests in flight than one host drives; vLLM batches at most --max-num-seqs",
    ),
]
Requests = Annotated[
    int,
    Field(ge=1, le=MAX_REQUESTS),
    _Rule(
        "an integer >= 1",
        40,
        MAX_REQUESTS,
        "100,000 requests at a second each is a day for one (level, temperature)",
    ),
]
Trials = Annotated[
    int,
    Field(ge=1, le=MAX_TRIALS),
    _Rule("an integer >= 1", 30, MAX_TRIALS, "10,000 trials at a minute each is a week of GPU"),
]
GpuCount = Annotated[
    int,
    Field(ge=1, le=MAX_GPUS),
    _Rule("an integer >= 1", 2, MAX_GPUS, "more GPUs than one host holds"),
]
Warmup = Annotated[
    int,
    Field(ge=0, le=MAX_REQUESTS),
    _Rule("an integer >= 0", 1, MAX_REQUESTS, "more warm-up requests than a day of load"),
]
Picks = Annotated[
    int,
    Field(ge=0, le=MAX_TRIALS),
    _Rule("an integer >= 0", 3, MAX_TRIALS, "no study has more trials to pick from"),
]
Repeats = Annotated[
    int,
    Field(ge=1, le=MAX_REPEATS),
    _Rule("an integer >= 1", 3, MAX_REPEATS, "each repeat starts a fresh server; 100 take days"),
]
Seed = Annotated[
    int,
    Field(ge=0, le=MAX_SEED),
    _Rule("an integer >= 0", 0, MAX_SEED, "numpy and Optuna take unsigned 32-bit seeds"),
]
Port = Annotated[
    int, Field(ge=1, le=65535), _Rule("a TCP port >= 1", 8080, 65535, "TCP ports end at 65535")
]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False), _Rule("a share from 0 to 1", 0.0)]
Weight = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 0.5)]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 2.0)]
Milliseconds = Annotated[float, Field(gt=0, allow_inf_nan=False), _Rule("a number > 0", 500)]
Seconds = Annotated[
    float,
    Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False),
    _Rule("a number > 0", 120, MAX_SECONDS, "a week; a longer limit is no limit at all"),
]
SimSpeed = Annotated[float, Field(gt=0), _Rule("a number > 0, or inf", 10)]
Name = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME),
    _Rule("a non-empty string", "my-study", MAX_NAME, _NAME_WHY),
]
ModelId = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME),
    _Rule(
        "a Hugging Face id or a model folder",
        "Qwen/Qwen2.5-32B-Instruct-AWQ",
        MAX_NAME,
        _NAME_WHY,
    ),
]
Draft = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME),
    _Rule(
        "a model id, a model folder, none or ngram",
        "Qwen/Qwen2.5-0.5B-Instruct",
        MAX_NAME,
        _NAME_WHY,
    ),
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
