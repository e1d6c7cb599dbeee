"""Search spaces: YAML in, Optuna suggestions out, as a :class:`TrialConfig`.

A space has fixed settings (target, hardware, vLLM version, TTFT limit, workload) and tuned ones
(draft, K, gpu-memory-utilization, max-num-batched-tokens, temperature). K exists only when a
draft or ngram is chosen. Drafts are checked against the target when the space loads, so a
mismatched draft stops the study before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar

import optuna
import yaml

from tuner.catalog.gpus import Hardware, parse_hardware
from tuner.catalog.models import ModelSpec, check_draft, load_model
from tuner.config.trial import (
    ClientConfig,
    FlagValue,
    ServerConfig,
    SpeculativeConfig,
    TrialConfig,
    is_secret_flag,
)
from tuner.config.vllm_args import NEWEST_KNOWN, VllmVersion, parse_version, version_from_image
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError

N = TypeVar("N", int, float)

__all__ = ["NGRAM", "NO_DRAFT", "Range", "SearchSpace", "builtin_spaces", "load_space"]

NO_DRAFT = "none"
NGRAM = "ngram"
DEFAULT_SPACE = "default"
_NGRAM_LOOKUP_MAX = 4


@dataclass(frozen=True)
class Range:
    """A numeric interval; ``step`` discretises it (ints always step by 1)."""

    low: float
    high: float
    step: float | None = None


@dataclass(frozen=True)
class SearchSpace:
    """One study's fixed settings and tuned dimensions."""

    name: str
    hardware: Hardware
    target: ModelSpec
    drafts: tuple[str, ...]
    num_speculative_tokens: Range
    gpu_memory_utilization: Range
    max_num_batched_tokens: tuple[int, ...]
    temperature: Range | float
    max_model_len: int
    tensor_parallel_size: int
    quantization: str | None
    vllm_image: str
    vllm_version: str | None
    ttft_limit_ms: float
    workload: WorkloadSpec
    extra_flags: tuple[tuple[str, FlagValue], ...] = ()
    source: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def version(self) -> VllmVersion:
        """The vLLM version whose flag dialect the study speaks: explicit, else the image tag."""
        if self.vllm_version is not None:
            return parse_version(self.vllm_version)
        return version_from_image(self.vllm_image) or NEWEST_KNOWN

    def draft_model(self, draft: str) -> ModelSpec | None:
        """The ModelSpec of a draft choice; None for ``none`` and ``ngram``."""
        return None if draft in (NO_DRAFT, NGRAM) else load_model(draft)

    def suggest(self, trial: optuna.Trial) -> TrialConfig:
        """Asks ``trial`` for one point of the space."""
        draft = str(trial.suggest_categorical("draft", list(self.drafts)))
        speculative = None
        if draft != NO_DRAFT:
            k = trial.suggest_int(
                "num_speculative_tokens",
                int(self.num_speculative_tokens.low),
                int(self.num_speculative_tokens.high),
            )
            speculative = self.speculative(draft, k)
        util = _suggest_float(trial, "gpu_memory_utilization", self.gpu_memory_utilization)
        mnbt = int(
            trial.suggest_categorical("max_num_batched_tokens", list(self.max_num_batched_tokens))
        )
        temperature = (
            self.temperature
            if isinstance(self.temperature, float)
            else _suggest_float(trial, "temperature", self.temperature)
        )
        return self.config(speculative, util, mnbt, temperature)

    def speculative(self, draft: str, k: int) -> SpeculativeConfig | None:
        if draft == NO_DRAFT:
            return None
        if draft == NGRAM:
            return SpeculativeConfig(
                "ngram", k, prompt_lookup_max=_NGRAM_LOOKUP_MAX, prompt_lookup_min=1
            )
        return SpeculativeConfig("draft_model", k, model=draft)

    def config(
        self,
        speculative: SpeculativeConfig | None,
        gpu_memory_utilization: float,
        max_num_batched_tokens: int,
        temperature: float,
    ) -> TrialConfig:
        """Builds a TrialConfig from explicit values (used by suggest, estimate and enqueue)."""
        server = ServerConfig(
            model=self.target.hf_id,
            tensor_parallel_size=self.tensor_parallel_size,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=round(gpu_memory_utilization, 4),
            max_num_batched_tokens=max_num_batched_tokens,
            speculative=speculative,
            quantization=self.quantization,
            extra_flags=self.extra_flags,
        )
        return TrialConfig(server, ClientConfig(round(temperature, 4), self.workload))

    def with_vllm_version(self, version: str) -> SearchSpace:
        """The same space for another vLLM version (its flag dialect), checked now."""
        parse_version(version)
        source = {**self.source, "vllm": {**(self.source.get("vllm") or {}), "version": version}}
        return replace(self, vllm_version=version, source=source)

    def with_ttft_limit(self, ttft_ms: float) -> SearchSpace:
        """The same space under another TTFT limit (stored with the study like the rest)."""
        source = {**self.source, "slo": {**(self.source.get("slo") or {}), "ttft_ms": ttft_ms}}
        return replace(self, ttft_limit_ms=float(ttft_ms), source=source)

    def with_hardware(self, hardware: Hardware) -> SearchSpace:
        """The same space on other GPUs; tensor parallelism follows the GPU count."""
        server = {
            k: v
            for k, v in (self.source.get("server") or {}).items()
            if k != "tensor_parallel_size"
        }
        source = {**self.source, "hardware": hardware.spec, "server": server}
        return replace(self, hardware=hardware, tensor_parallel_size=hardware.count, source=source)


def _suggest_float(trial: optuna.Trial, name: str, value: Range) -> float:
    return trial.suggest_float(name, value.low, value.high, step=value.step)


def builtin_spaces() -> dict[str, Path]:
    """Shipped spaces by name (file stem); ``default`` is the 4090x2 / 32B-AWQ study."""
    folder = files("tuner.search_spaces")
    return {
        Path(item.name).stem: Path(str(item))
        for item in folder.iterdir()
        if item.name.endswith(".yaml")
    }


def load_space(name_or_path: str | None = None) -> SearchSpace:
    """Loads a shipped space by name or a YAML file by path (None: the default space).

    Raises:
        ConfigError: the file is missing, not YAML, or a value is wrong; the message names it.
    """
    text = name_or_path or DEFAULT_SPACE
    path = builtin_spaces().get(text) or Path(text).expanduser()
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        known = ", ".join(sorted(builtin_spaces()))
        raise ConfigError(
            f"search space {text!r} not found ({exc.strerror}): give a YAML path or one of {known}"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(
            f"search space {path} is not valid YAML{where}: fix the syntax "
            "(see search_spaces/default.yaml for the layout)"
        ) from None
    return space_from_dict(raw, origin=str(path))


def space_from_dict(raw: Any, origin: str = "search space") -> SearchSpace:
    """Validates a parsed space; also rebuilds the copy stored with a study."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin} must be a YAML mapping (see search_spaces/default.yaml)")
    reader = _Reader(raw, origin)
    hardware = parse_hardware(str(reader.get("hardware", "4090x2")))
    target = load_model(str(reader.require("target")))
    server = reader.section("server")
    search = reader.section("search")
    vllm = reader.section("vllm")
    drafts = tuple(str(d) for d in reader.list_of(search, "draft", [NO_DRAFT]))
    for draft in drafts:
        if draft not in (NO_DRAFT, NGRAM):
            check_draft(target, load_model(draft))
    extra = server.get("extra_flags") or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{origin}: server.extra_flags must be a mapping of flag: value")
    for flag in extra:
        if is_secret_flag(str(flag)):
            raise ConfigError(
                f"{origin}: server.extra_flags `{flag}` carries a secret, and the space is stored "
                "with the study: set it in the server's environment instead (e.g. VLLM_API_KEY)"
            )
    return SearchSpace(
        name=str(reader.get("name", Path(origin).stem)),
        hardware=hardware,
        target=target,
        drafts=drafts,
        num_speculative_tokens=reader.range(search, "num_speculative_tokens", Range(1, 8)),
        gpu_memory_utilization=reader.range(search, "gpu_memory_utilization", Range(0.9, 0.9)),
        max_num_batched_tokens=tuple(
            reader.number(int, "max_num_batched_tokens", v)
            for v in reader.list_of(search, "max_num_batched_tokens", [2048])
        ),
        temperature=reader.range_or_value(search, "temperature", 0.0),
        max_model_len=reader.number(int, "server.max_model_len", server.get("max_model_len", 8192)),
        tensor_parallel_size=reader.number(
            int, "server.tensor_parallel_size", server.get("tensor_parallel_size", hardware.count)
        ),
        quantization=server.get("quantization"),
        vllm_image=str(vllm.get("image", "vllm/vllm-openai:latest")),
        vllm_version=None if vllm.get("version") is None else str(vllm["version"]),
        ttft_limit_ms=reader.number(
            float, "slo.ttft_ms", reader.section("slo").get("ttft_ms", 1000)
        ),
        workload=reader.workload(),
        extra_flags=tuple((str(k), v) for k, v in extra.items()),
        source=raw,
    )


class _Reader:
    """Pulls typed values out of the YAML, naming the key and file in every error."""

    def __init__(self, raw: dict[str, Any], origin: str) -> None:
        self.raw = raw
        self.origin = origin

    def fail(self, key: str, expected: str) -> ConfigError:
        return ConfigError(f"{self.origin}: `{key}` must be {expected}")

    def get(self, key: str, default: Any) -> Any:
        return self.raw.get(key, default)

    def number(self, kind: type[N], key: str, value: Any) -> N:
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise self.fail(key, f"a number (got {value!r})") from None

    def require(self, key: str) -> Any:
        if key not in self.raw:
            raise self.fail(key, "set (e.g. target: Qwen/Qwen2.5-32B-Instruct-AWQ)")
        return self.raw[key]

    def section(self, key: str) -> dict[str, Any]:
        value = self.raw.get(key) or {}
        if not isinstance(value, dict):
            raise self.fail(key, "a mapping")
        return value

    def list_of(self, section: dict[str, Any], key: str, default: list[Any]) -> list[Any]:
        value = section.get(key, default)
        value = value if isinstance(value, list) else [value]
        if not value:
            raise self.fail(key, "a non-empty list")
        return value

    def range(self, section: dict[str, Any], key: str, default: Range) -> Range:
        value = section.get(key)
        if value is None:
            return default
        if isinstance(value, int | float):
            return Range(float(value), float(value))
        try:
            low, high = float(value["low"]), float(value["high"])
            step = None if value.get("step") is None else float(value["step"])
        except (TypeError, KeyError, ValueError):
            raise self.fail(key, "a number or {low: .., high: .., step: ..}") from None
        if low > high:
            raise self.fail(key, f"a range with low <= high (got {low} > {high})")
        return Range(low, high, step)

    def range_or_value(self, section: dict[str, Any], key: str, default: float) -> Range | float:
        value = section.get(key, default)
        return (
            float(value)
            if isinstance(value, int | float)
            else self.range(section, key, Range(0, 0))
        )

    def workload(self) -> WorkloadSpec:
        w = self.section("workload")
        defaults = WorkloadSpec()
        try:
            levels = w.get("concurrency", list(defaults.concurrency))
            concurrency = tuple(int(c) for c in (levels if isinstance(levels, list) else [levels]))
            rate = w.get("request_rate")
            spec = WorkloadSpec(
                prompt_set=str(w.get("prompt_set", defaults.prompt_set)),
                input_tokens=int(w.get("input_tokens", defaults.input_tokens)),
                output_tokens=int(w.get("output_tokens", defaults.output_tokens)),
                concurrency=concurrency,
                requests=int(w.get("requests", defaults.requests)),
                warmup=int(w.get("warmup", defaults.warmup)),
                request_rate=None if rate is None else float(rate),
                seed=int(w.get("seed", defaults.seed)),
            )
        except (TypeError, ValueError) as exc:
            raise self.fail("workload", f"numbers where numbers belong ({exc})") from None
        if not concurrency or min(concurrency) < 1 or spec.requests < 1:
            raise self.fail("workload", "concurrency levels >= 1 and requests >= 1")
        return spec
