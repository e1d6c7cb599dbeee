"""What a search-space YAML may say: one pydantic model per section, every key typed and bounded.

    SpaceModel             name, hardware, target, and the sections below
    ├── ServerModel        server: max_model_len, tensor_parallel_size, quantization, extra_flags
    ├── VllmModel          vllm: image, version
    ├── SloModel           slo: ttft_ms, max_failed_requests
    ├── WorkloadModel      workload: prompt_set, token counts, the traffic (concurrency levels and
    │                      temperatures, each with a weight), requests, warm-up, ...
    └── SearchModel        search: the tuned dimensions (a value or a range each)

Unknown keys are refused with the nearest known one, so a typo never runs silently.
:func:`parse_space` turns the first problem into one line naming the file, the key path, the
value and the fix (a :class:`ConfigError`); :func:`check_workload` holds a
:class:`WorkloadSpec` built in code to the same bounds. Single values are typed in
:mod:`tuner.config.bounds`, which the CLI options share.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tuner.config.bounds import (
    BatchTokens,
    ContextLength,
    Count,
    Draft,
    FlagValue,
    Fraction,
    Milliseconds,
    ModelId,
    Name,
    Rate,
    Seconds,
    Seed,
    Share,
    SpecTokens,
    Step,
    Temperature,
    Tokens,
    VersionText,
    Warmup,
    Weight,
)
from tuner.config.schema_errors import A_RANGE, ONE_VALUE
from tuner.config.schema_errors import one_line as _one_line
from tuner.errors import ConfigError

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "DEFAULT_TEMPERATURE",
    "FractionRange",
    "LoadLevel",
    "SearchModel",
    "ServerModel",
    "SloModel",
    "SpaceModel",
    "SpecTokensRange",
    "TemperatureRange",
    "TemperatureShare",
    "VllmModel",
    "WorkloadModel",
    "check_workload",
    "parse_space",
    "space_json_schema",
]

T = TypeVar("T")

BUILTIN_PROMPT_SETS = ("code", "creative", "chat", "long-context")
"""Built-in prompt sets (``tuner.config.prompts``); a JSONL/ShareGPT path works too."""

DEFAULT_TEMPERATURE = 0.7
"""A workload's temperature when it names none: Qwen2.5's generation-config default."""


def _known_prompt_set(name: str, info: ValidationInfo) -> str:
    # A stored study may be read where its prompt file is not; the file is read when used.
    if (
        name in BUILTIN_PROMPT_SETS
        or _context(info, "lenient")
        or Path(name).expanduser().is_file()
    ):
        return name
    raise PydanticCustomError(
        "prompt_set",
        "must be a built-in set ({known}) or an existing JSONL/ShareGPT file",
        {"known": ", ".join(BUILTIN_PROMPT_SETS)},
    )


PromptSet = Annotated[Name, AfterValidator(_known_prompt_set)]


def _as_list(value: object) -> object:
    return list(value) if isinstance(value, list | tuple) else [value]


def _non_empty(value: list[T]) -> list[T]:
    if not value:
        raise PydanticCustomError("empty", "must be a non-empty list")
    return value


def _context(info: ValidationInfo, key: str) -> bool:
    return bool(isinstance(info.context, Mapping) and info.context.get(key))


class _Section(BaseModel):
    """A YAML mapping: ``null`` is empty, unknown keys fail naming the nearest known one."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any, info: ValidationInfo) -> Any:
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            raise PydanticCustomError("mapping", "must be a YAML mapping of key: value")
        known = list(cls.model_fields)
        unknown = [str(key) for key in data if key not in cls.model_fields]
        if unknown and _context(info, "lenient"):  # stored by a version that ignored typos
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


class _Range(_Section):
    low: float
    high: float

    @model_validator(mode="after")
    def _ordered(self) -> _Range:
        if self.low > self.high:
            raise PydanticCustomError(
                "order",
                "low {low} is above high {high}: swap them",
                {"low": self.low, "high": self.high},
            )
        return self


class SpecTokensRange(_Range):
    """Speculative tokens K, every integer from low to high."""

    low: SpecTokens
    high: SpecTokens


class FractionRange(_Range):
    """A share of GPU memory from low to high, optionally in steps."""

    low: Fraction
    high: Fraction
    step: Step | None = None


class TemperatureRange(_Range):
    """Sampling temperatures from low to high, optionally in steps."""

    low: Temperature
    high: Temperature
    step: Step | None = None


class TemperatureShare(_Section):
    """One temperature the user's product sends, and its share of the traffic."""

    value: Temperature = Field(examples=[0.2])
    weight: Weight = 1.0
    """Its share of the traffic (weights are normalised to sum to 1)."""


class LoadLevel(_Section):
    """One concurrency level of the traffic profile, and its share of the time."""

    level: Count = Field(examples=[8])
    weight: Weight = 1.0
    """Its share of the time (weights are normalised to sum to 1)."""


def _as_shares(key: str) -> Any:
    """A bare value (or a list of them) as shares of weight 1: ``0.2`` -> ``[{value: 0.2}]``."""

    def convert(value: object) -> object:
        items = list(value) if isinstance(value, list | tuple) else [value]
        return [item if isinstance(item, Mapping | BaseModel) else {key: item} for item in items]

    return BeforeValidator(convert)


def _distinct(key: str) -> Any:
    def check(shares: list[Any]) -> list[Any]:
        if len({getattr(share, key) for share in shares}) < len(shares):
            raise PydanticCustomError("distinct", "names a {key} twice", {"key": key})
        return shares

    return AfterValidator(check)


def _branch(value: object) -> str:
    return A_RANGE if isinstance(value, Mapping | BaseModel) else ONE_VALUE


# A list field takes one bare value as a list of one; a tuned number takes a value or a range.
_AS_LIST, _NON_EMPTY = BeforeValidator(_as_list), AfterValidator(_non_empty)
LoadProfile = Annotated[
    list[LoadLevel],
    _as_shares("level"),
    _NON_EMPTY,
    _distinct("level"),
    Field(examples=[[{"level": 1, "weight": 0.5}, {"level": 8, "weight": 0.5}]]),
]
TemperatureMix = Annotated[
    list[TemperatureShare],
    _as_shares("value"),
    _NON_EMPTY,
    _distinct("value"),
    Field(examples=[[{"value": 0.2, "weight": 0.7}, {"value": 0.8, "weight": 0.3}]]),
]
Weights = Annotated[list[Weight], _AS_LIST]
Drafts = Annotated[
    list[Draft],
    _AS_LIST,
    _NON_EMPTY,
    Field(examples=[["none", "ngram", "Qwen/Qwen2.5-0.5B-Instruct"]]),
]
BatchChoices = Annotated[
    list[BatchTokens], _AS_LIST, _NON_EMPTY, Field(examples=[[1024, 2048, 4096]])
]
_Choice = Discriminator(_branch)
KChoice = Annotated[
    Annotated[SpecTokens, Tag(ONE_VALUE)] | Annotated[SpecTokensRange, Tag(A_RANGE)], _Choice
]
FractionChoice = Annotated[
    Annotated[Fraction, Tag(ONE_VALUE)] | Annotated[FractionRange, Tag(A_RANGE)], _Choice
]
TemperatureChoice = Annotated[
    Annotated[Temperature, Tag(ONE_VALUE)] | Annotated[TemperatureRange, Tag(A_RANGE)], _Choice
]


class ServerModel(_Section):
    """``server``: vLLM settings fixed for the whole study."""

    max_model_len: ContextLength = 8192
    """Longest sequence (prompt + output) the server accepts."""
    tensor_parallel_size: Count | None = None
    """GPUs one server spans; default: the GPU count of ``hardware``."""
    quantization: Name | None = None
    """Passed as --quantization (vLLM also detects it from the model)."""
    extra_flags: dict[str, FlagValue] = {}
    """Further vLLM flags, flag: value (no secrets: the space is stored with the study)."""


class VllmModel(_Section):
    """``vllm``: which vLLM runs the trials."""

    image: Name = "vllm/vllm-openai:latest"
    """Docker image; its tag also selects the flag dialect."""
    version: VersionText | None = None
    """vLLM version whose flags to speak, when the image tag does not say."""


class SloModel(_Section):
    """``slo``: the service-level objective a trial must meet."""

    ttft_ms: Milliseconds = 1000
    """p95 time to first token in ms, at every concurrency level; trials above it are infeasible."""
    max_failed_requests: Share = 0.0
    """Share of measured requests that may fail (0 to 1); a trial above it is infeasible."""


class WorkloadModel(_Section):
    """``workload``: the traffic each trial serves, at every (concurrency, temperature) pair."""

    prompt_set: PromptSet = "code"
    """code, creative, chat, long-context, or a JSONL/ShareGPT file."""
    input_tokens: Tokens = 512
    """Mean prompt length in tokens."""
    output_tokens: Tokens = 256
    """Most tokens a reply may have; replies end where the model ends them."""
    concurrency: LoadProfile = [LoadLevel(level=1)]
    """Requests in flight: levels ({level: 8, weight: 0.3}) or plain numbers (equal weights)."""
    temperature: TemperatureMix = [TemperatureShare(value=DEFAULT_TEMPERATURE)]
    """What the product sends: one temperature or a mix ({value: 0.2, weight: 0.7})."""
    requests: Count = 40
    """Measured requests per (level, temperature); p95 needs about 40."""
    warmup: Warmup = 1
    """Requests sent first and left out of the results."""
    request_rate: Rate | None = None
    """Poisson arrivals per second (open loop); unset: closed loop."""
    seed: Seed = 0
    """Makes prompts and arrival times reproducible."""


class _WorkloadRecord(WorkloadModel):
    """A :class:`WorkloadSpec` as built in code: weights apart, a window bounded in time."""

    concurrency_weights: Weights = []
    temperature_weights: Weights = []
    duration_s: Seconds | None = None


class SearchModel(_Section):
    """``search``: the tuned dimensions; a single value fixes one."""

    draft: Drafts = ["none"]
    """Draft choices: model ids or folders, none (no speculation), ngram."""
    num_speculative_tokens: KChoice = SpecTokensRange(low=1, high=8)
    """K, tokens the draft proposes per step (only when a draft or ngram is chosen)."""
    gpu_memory_utilization: FractionChoice = 0.9
    """Share of GPU memory vLLM may use."""
    max_num_batched_tokens: BatchChoices = [2048]
    """Choices of tokens per scheduler step (chunked prefill)."""
    temperature: TemperatureChoice | None = None
    """Only when your product may choose it: a range of temperatures to tune over (the
    report then shows the best server config per temperature); unset: workload.temperature."""


class SpaceModel(_Section):
    """A spectune search space: fixed settings plus the tuned ``search`` dimensions."""

    name: Name | None = None
    """Study name; default: the file name."""
    hardware: Name = "4090x2"
    """GPUs as GPU[xCOUNT], e.g. 4090x2; `spectune hardware` lists them."""
    target: ModelId = Field(examples=["Qwen/Qwen2.5-32B-Instruct-AWQ"])
    """The served model: a Hugging Face id or a local model folder."""
    server: ServerModel = ServerModel()
    vllm: VllmModel = VllmModel()
    slo: SloModel = SloModel()
    workload: WorkloadModel = WorkloadModel()
    search: SearchModel = SearchModel()


def parse_space(raw: object, origin: str, *, lenient: bool = False) -> SpaceModel:
    """Validates a parsed search-space YAML.

    Args:
        raw: what ``yaml.safe_load`` returned (or the copy a study stored).
        origin: the file (or study) named in errors.
        lenient: for stored copies: ignore unknown keys (earlier versions stored them
            unread) and do not look for prompt files (the study may be read elsewhere).

    Raises:
        ConfigError: one line naming ``origin``, the key path, the value and the fix.
    """
    try:
        return SpaceModel.model_validate(raw, context={"lenient": lenient})
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_one_line(exc)}") from None


def check_workload(values: Mapping[str, object]) -> None:
    """Checks a WorkloadSpec's fields against the ``workload`` schema (prompt files unread).

    Raises:
        ConfigError: the first out-of-bounds field, as ``workload.KEY = VALUE: must be ...``.
    """
    try:
        _WorkloadRecord.model_validate(dict(values), context={"lenient": True})
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, prefix=("workload",))) from None


def space_json_schema() -> dict[str, Any]:
    """The JSON Schema of a search-space YAML, for editors (yaml-language-server and the like)."""
    schema = SpaceModel.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
