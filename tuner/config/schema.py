"""What a search-space YAML may say: one pydantic model per section, every key typed and bounded.

    SpaceModel             name, hardware, target, and the sections below
    ├── ServerModel        server: max_model_len, tensor_parallel_size, quantization, extra_flags
    ├── VllmModel          vllm: image, version
    ├── SloModel           slo: objective (throughput or goodput), prefer (throughput, energy
    │                      or both), ttft_ms, tpot_ms, max_failed_requests, stream_gap_p99_ms
    ├── WorkloadModel      workload: prompt_set, token counts, the traffic (concurrency levels and
    │                      temperatures, each with a weight), requests, warm-up, ...
    ├── QualityModel       quality: the opt-in to lossy verification and the check it gets
    └── SearchModel        search: the tuned dimensions, speculation methods first
                           (:mod:`tuner.config.search_section`)

Unknown keys are refused with the nearest known one, so a typo never runs silently.
:func:`parse_space` turns the first problem into one line naming the file, the key path, the
value and the fix (a :class:`ConfigError`); :func:`check_workload` holds a
:class:`WorkloadSpec` built in code to the same bounds. Single values are typed in
:mod:`tuner.config.bounds`, which the CLI options share.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from itertools import pairwise
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

from tuner.catalog.files import is_file
from tuner.catalog.gpus import GpuSpec
from tuner.config.bounds import (
    Concurrency,
    ContextLength,
    FlagValue,
    Gibibytes,
    GpuCount,
    Milliseconds,
    ModelId,
    Name,
    Rate,
    Requests,
    Seconds,
    Seed,
    Share,
    Temperature,
    Tokens,
    VersionText,
    Warmup,
    Weight,
)
from tuner.config.methods.fields import SpecTokensRange
from tuner.config.preference import Preference
from tuner.config.prompt_sets import PROMPT_SETS, missing_package
from tuner.config.schema_base import AS_LIST as _AS_LIST
from tuner.config.schema_base import NON_EMPTY as _NON_EMPTY
from tuner.config.schema_base import StrictModel
from tuner.config.schema_base import context_flag as _context
from tuner.config.schema_errors import GPU_NAME, GPU_SPEC, ONE_RATE, RATE_STEPS
from tuner.config.schema_errors import one_line as _one_line
from tuner.config.search_section import FractionRange, SearchModel, TemperatureRange
from tuner.errors import ConfigError

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "DEFAULT_TEMPERATURE",
    "FractionRange",
    "HardwareModel",
    "LoadLevel",
    "Objective",
    "QualityModel",
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

BUILTIN_PROMPT_SETS = tuple(PROMPT_SETS)
"""Built-in prompt sets (``tuner.config.prompt_sets``); a JSONL/ShareGPT path works too."""

DEFAULT_TEMPERATURE = 0.7
"""A workload's temperature when it names none: Qwen2.5's generation-config default."""


def _known_prompt_set(name: str, info: ValidationInfo) -> str:
    # A stored study may be read where its prompt file (or package) is not; read when used.
    if _context(info, "lenient"):
        return name
    if name in BUILTIN_PROMPT_SETS:
        missing = missing_package(name)
        if missing:
            raise PydanticCustomError("prompt_set", missing)
        return name
    if is_file(name):
        return name
    raise PydanticCustomError(
        "prompt_set",
        "must be a built-in set ({known}) or an existing JSONL/ShareGPT file",
        {"known": ", ".join(f"{n} ({i.origin})" for n, i in PROMPT_SETS.items())},
    )


PromptSet = Annotated[Name, AfterValidator(_known_prompt_set)]


class Objective(enum.StrEnum):
    """What a study maximises (``slo.objective``): its first objective, named and in units."""

    THROUGHPUT = "throughput"
    """The traffic-weighted output tokens/s over the concurrency levels and temperatures."""
    GOODPUT = "goodput"
    """The highest request rate (``workload.request_rate`` steps) whose p95 TTFT and p95 TPOT
    meet the limits."""

    @property
    def metric(self) -> str:
        """The objective's name in Optuna (its metric name) and in JSON output."""
        return "goodput_req_s" if self is Objective.GOODPUT else "output_tok_s"

    @property
    def unit(self) -> str:
        return "req/s" if self is Objective.GOODPUT else "tok/s"

    @property
    def digits(self) -> int:
        """Decimals to print it with: request rates are small numbers."""
        return 2 if self is Objective.GOODPUT else 1

    @property
    def label(self) -> str:
        """What a reader calls it: ``output tok/s`` or ``goodput req/s``."""
        return f"{'goodput' if self is Objective.GOODPUT else 'output'} {self.unit}"


class _StrictModel(StrictModel, BaseModel):
    """:class:`StrictModel`, BaseModel named here: ruff sees a pydantic model (no RUF012) only
    through a base defined in the same file."""


class TemperatureShare(_StrictModel):
    """One temperature the user's product sends, and its share of the traffic."""

    value: Temperature = Field(examples=[0.2])
    weight: Weight = 1.0
    """Its share of the traffic (weights are normalised to sum to 1)."""


class LoadLevel(_StrictModel):
    """One concurrency level of the traffic profile, and its share of the time."""

    level: Concurrency = Field(examples=[8])
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


def _increasing(rates: list[float]) -> list[float]:
    if any(b <= a for a, b in pairwise(rates)):
        raise PydanticCustomError("increasing", "must be increasing rates (e.g. [0.5, 1, 2, 4])")
    return rates


def _rate_branch(value: Any) -> str:
    return RATE_STEPS if isinstance(value, list | tuple) else ONE_RATE


RateSteps = Annotated[list[Rate], _NON_EMPTY, AfterValidator(_increasing)]
RateOrSteps = Annotated[
    Annotated[Rate, Tag(ONE_RATE)] | Annotated[RateSteps, Tag(RATE_STEPS)],
    Discriminator(_rate_branch),
]


class ServerModel(_StrictModel):
    """``server``: vLLM settings fixed for the whole study."""

    max_model_len: ContextLength = 8192
    """Longest sequence (prompt + output) the server accepts."""
    tensor_parallel_size: GpuCount | None = None
    """GPUs one server spans; default: the GPU count of ``hardware``."""
    quantization: Name | None = None
    """Passed as --quantization (vLLM also detects it from the model)."""
    extra_flags: dict[str, FlagValue] = {}
    """Further vLLM flags, flag: value (no secrets: the space is stored with the study)."""
    memory_headroom_gib: Gibibytes | None = None
    """GPU memory per GPU to leave for processes outside vLLM that allocate after it starts (a
    desktop, a notebook). On vLLM 0.34+ it is the one reason to cap gpu_memory_utilization
    below 1.0: unset, the study leaves the flag unset (the KV cache is sized from memory
    measured free) and searches.gpu_memory_utilization's caps are not tried."""


class VllmModel(_StrictModel):
    """``vllm``: which vLLM runs the trials."""

    image: Name = "vllm/vllm-openai:latest"
    """Docker image; its tag also selects the flag dialect."""
    version: VersionText | None = None
    """vLLM version whose flags to speak, when the image tag does not say."""


class SloModel(_StrictModel):
    """``slo``: what a study maximises and the service-level objective a trial must meet."""

    objective: Objective = Objective.THROUGHPUT
    """throughput: output tok/s over the traffic; goodput: the highest request rate in limits."""
    prefer: Preference = Preference.THROUGHPUT
    """What the recommendation optimises: throughput (the objective above), energy (the most
    tokens per joule within the limits) or both (the tok/s against J/token front, its
    fastest recommended); needs a backend that reads the GPUs."""
    ttft_ms: Milliseconds = 1000
    """p95 time to first token in ms, at every concurrency level; trials above it are infeasible."""
    tpot_ms: Milliseconds | None = None
    """p95 time per output token in ms, at every level; unset: no limit (goodput needs one)."""
    max_failed_requests: Share = 0.0
    """Share of measured requests that may fail (0 to 1); a trial above it is infeasible."""
    stream_gap_p99_ms: Milliseconds | None = None
    """p99 gap between streamed chunks in ms, at every level; unset: no limit on smoothness."""


class QualityModel(_StrictModel):
    """``quality``: whether a lossy verifier (vLLM 0.33's ``fly``) may be searched, and how its
    answers are checked against standard verification's (:mod:`tuner.bench.quality`)."""

    allow_lossy: bool = False
    """Opt in to ``rejection_sample_method: fly``: it may answer what the target alone would
    not have; every fly trial is checked on the workload's prompts."""
    min_similarity: Share = 0.9
    """A fly trial's answers must keep this share of standard verification's words (the mean
    over the check's prompts, greedy); below it the trial is infeasible."""
    prompts: Requests = 8
    """Prompts of the workload each check sends (greedy, the same to both servers)."""
    max_tokens: Tokens = 128
    """Tokens each check answer is long."""


class WorkloadModel(_StrictModel):
    """``workload``: the traffic each trial serves, at every (concurrency, temperature) pair."""

    prompt_set: PromptSet = "code"
    """code (real: HumanEval), sharegpt (real chat: spectune[sharegpt]), creative, chat,
    long-context (synthetic: generated from templates), or a JSONL/ShareGPT file."""
    input_tokens: Tokens = 512
    """Mean prompt length in tokens."""
    output_tokens: Tokens = 256
    """Most tokens a reply may have; replies end where the model ends them."""
    concurrency: LoadProfile = [LoadLevel(level=1)]
    """Requests in flight: levels ({level: 8, weight: 0.3}) or plain numbers (equal weights)."""
    temperature: TemperatureMix = [TemperatureShare(value=DEFAULT_TEMPERATURE)]
    """What the product sends: one temperature or a mix ({value: 0.2, weight: 0.7})."""
    requests: Requests = 40
    """Measured requests per (level, temperature); p95 needs about 40."""
    warmup: Warmup = 1
    """Requests sent first and left out of the results."""
    request_rate: RateOrSteps | None = None
    """Poisson arrivals per second (open loop); unset: closed loop. Goodput: its steps."""
    seed: Seed = 0
    """Makes prompts and arrival times reproducible."""


class _WorkloadRecord(WorkloadModel):
    """A :class:`WorkloadSpec` as built in code: weights apart, a window bounded in time, one
    rate per measurement and goodput's steps apart."""

    concurrency_weights: Weights = []
    temperature_weights: Weights = []
    duration_s: Seconds | None = None
    request_rate: Rate | None = None
    rate_steps: list[Rate] = []
    seed: int = 0
    """Trials and pairs derive their own seeds from the user's, past 32 bits: they seed
    Python's ``random``, which takes any integer."""


class HardwareModel(_StrictModel):
    """``hardware`` as a GPU the catalog lacks: its description (the keys of a catalog entry,
    ``spectune hardware --json``) and how many serve the model."""

    gpu: GpuSpec
    count: GpuCount = 1


def _hardware_branch(value: Any) -> str:
    return GPU_SPEC if isinstance(value, Mapping | BaseModel) else GPU_NAME


Hardware = Annotated[
    Annotated[Name, Tag(GPU_NAME)] | Annotated[HardwareModel, Tag(GPU_SPEC)],
    Discriminator(_hardware_branch),
]


class SpaceModel(_StrictModel):
    """A spectune search space: fixed settings plus the tuned ``search`` dimensions."""

    name: Name | None = None
    """Study name; default: the file name."""
    hardware: Hardware = "4090x2"
    """GPUs as GPU[xCOUNT], e.g. 4090x2 (`spectune hardware` lists them), or {gpu: {...},
    count: N} for a GPU the catalog lacks."""
    target: ModelId = Field(examples=["Qwen/Qwen2.5-32B-Instruct-AWQ"])
    """The served model: a Hugging Face id or a local model folder."""
    server: ServerModel = ServerModel()
    vllm: VllmModel = VllmModel()
    slo: SloModel = SloModel()
    workload: WorkloadModel = WorkloadModel()
    quality: QualityModel = QualityModel()
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
