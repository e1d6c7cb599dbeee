"""Search spaces: YAML in, Optuna suggestions out, as a :class:`TrialConfig`.

A space has fixed settings (target, hardware, vLLM version, the SLO, the workload with its traffic
of concurrency levels and temperatures) and tuned ones (the speculation choice, then its own K
and settings, :mod:`tuner.config.choices`; gpu-memory-utilization, max-num-batched-tokens; the
temperature only where the user may choose it). The temperatures the user serves belong to the
workload: every trial is measured at each of them, so the recommended server config holds for
that mix.

The YAML is checked against :mod:`tuner.config.schema` (typed,
bounded, no unknown keys), and drafts against the target, when the space loads, so a bad value
or a mismatched draft stops the study before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import TypeAdapter

from tuner.catalog.gpus import CATALOG, Hardware, parse_hardware
from tuner.catalog.models import ModelSpec, load_model
from tuner.config.bounds import Milliseconds, check_value
from tuner.config.choice_rules import check_adaptive, check_choices, check_lossy
from tuner.config.choices import Option, Range, SpecChoice, choices_from_search
from tuner.config.context import check_lengths
from tuner.config.local_paths import absolute, absolute_space_paths
from tuner.config.preference import Preference
from tuner.config.schema import (
    FractionRange,
    Objective,
    QualityModel,
    SpaceModel,
    SpecTokensRange,
    TemperatureRange,
    parse_space,
)
from tuner.config.trial import (
    ClientConfig,
    FlagValue,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    TrialConfig,
    is_secret_flag,
)
from tuner.config.vllm_args import (
    NEWEST_KNOWN,
    UNSET_MEMORY_SHARE,
    VllmVersion,
    check_extra_flags,
    measured_kv_cache,
    memory_range,
    parse_version,
    version_from_image,
)
from tuner.config.workload import WorkloadSpec, workload_from_space
from tuner.errors import ConfigError

if TYPE_CHECKING:
    import optuna  # annotations only: importing it costs a CLI start a second

T = TypeVar("T")

__all__ = [
    "NGRAM",
    "NO_DRAFT",
    "Range",
    "SearchSpace",
    "SpecChoice",
    "builtin_spaces",
    "load_space",
]

# The ``draft`` labels of the two choices without a model (:func:`choice_label`).
NO_DRAFT = str(SpecMethod.NONE)
NGRAM = str(SpecMethod.NGRAM)
DEFAULT_SPACE = "default"
_TTFT_LIMIT = TypeAdapter(Milliseconds)


@dataclass(frozen=True)
class SearchSpace:
    """One study's fixed settings and tuned dimensions."""

    name: str
    hardware: Hardware
    target: ModelSpec
    choices: tuple[SpecChoice, ...]  # the speculation choices, each with its own K and settings
    gpu_memory_utilization: Range
    max_num_batched_tokens: tuple[int, ...]
    # The trial's temperature (``search.temperature``): a Range when trials choose it;
    # otherwise the workload mix's weighted mean, which forecasts stand in for the mix (every
    # trial is measured at each of its temperatures).
    trial_temperature: Range | float
    max_model_len: int
    tensor_parallel_size: int
    quantization: str | None
    vllm_image: str
    vllm_version: str | None
    ttft_limit_ms: float
    workload: WorkloadSpec
    # The validated file: the one form the fields here are built from (:func:`_build`), and
    # what a study stores (:attr:`source`); ``with_*`` edit it and build again.
    model: SpaceModel = field(compare=False, repr=False)
    extra_flags: tuple[tuple[str, FlagValue], ...] = ()
    max_failed_requests: float = 0.0  # share of measured requests that may fail
    stream_gap_limit_ms: float | None = None  # p99 gap between streamed chunks; None: no limit
    tpot_limit_ms: float | None = None  # p95 time per output token; None: no limit
    objective: Objective = Objective.THROUGHPUT
    prefer: Preference = Preference.THROUGHPUT  # what the recommendation optimises
    # GPU power limits in watts the trials choose among (``search.power_limit_w``); empty: the
    # power limit is not a dimension and is never touched (:mod:`tuner.study.power_limit`).
    power_limits_w: tuple[int, ...] = ()

    @property
    def source(self) -> dict[str, Any]:
        """The copy of the space a study stores, as JSON: the file's keys as written (with what
        ``with_*`` changed), validated; :func:`space_from_dict` builds the same space from it."""
        return self.model.model_dump(mode="json", by_alias=True, exclude_unset=True)

    @property
    def newer_note(self) -> str | None:
        """The one warning a space pinned to a vLLM newer than spectune's rules gets; None for
        a release spectune knows."""
        if self.version <= NEWEST_KNOWN:
            return None
        return (
            f"WARNING: vLLM {self.version} is newer than spectune's rules ({NEWEST_KNOWN}): its "
            f"configs are written as for {NEWEST_KNOWN}, and on the docker backend the image's "
            "own vLLM judges every config before the first trial (the pre-flight)"
        )

    @property
    def memory_note(self) -> str | None:
        """What the memory dimension means on a release that sizes the KV cache from measured
        memory (0.34+); None before, where the space's range is searched as written."""
        if not measured_kv_cache(self.version):
            return None
        share = self.gpu_memory_utilization
        if share.low >= UNSET_MEMORY_SHARE:
            return (
                f"gpu_memory_utilization: left unset on vLLM {self.version}, which sizes the KV "
                "cache from the memory it measures free; set server.memory_headroom_gib to "
                "leave GPU memory for processes that allocate after vLLM starts"
            )
        return (
            f"gpu_memory_utilization: {share.low:.2f} to {share.high:.2f}, leaving "
            f"{self.model.server.memory_headroom_gib:g} GiB per GPU to other processes "
            "(server.memory_headroom_gib)"
        )

    @property
    def quality(self) -> QualityModel | None:
        """The check every lossy (``fly``) trial gets; None where the space has not opted in."""
        return self.model.quality if self.model.quality.allow_lossy else None

    @property
    def tunes_temperature(self) -> bool:
        """Whether trials choose the temperature (``search.temperature``), not the workload."""
        return isinstance(self.trial_temperature, Range)

    @property
    def goodput(self) -> bool:
        """Whether the study maximises goodput (request-rate steps), not throughput."""
        return self.objective is Objective.GOODPUT

    @property
    def version(self) -> VllmVersion:
        """The vLLM version whose flag dialect the study speaks: explicit, else the image tag."""
        if self.vllm_version is not None:
            return parse_version(self.vllm_version)
        return version_from_image(self.vllm_image) or NEWEST_KNOWN

    @property
    def drafts(self) -> tuple[str, ...]:
        """The values of the ``draft`` parameter: each choice's label."""
        return tuple(choice.label for choice in self.choices)

    @property
    def num_speculative_tokens(self) -> Range:
        """K's range over every choice (each choice has its own: :meth:`k_range`)."""
        ranges = [c.k for c in self.choices if c.method is not SpecMethod.NONE] or [Range(1, 1)]
        return Range(min(r.low for r in ranges), max(r.high for r in ranges))

    def choice(self, draft: str) -> SpecChoice:
        """The choice a ``draft`` parameter value selects.

        Raises:
            ConfigError: the value names no choice of this space.
        """
        found = next((c for c in self.choices if c.label == draft), None)
        if found is None:
            raise ConfigError(
                f"{draft!r} is not a speculation choice of {self.name}: use one of "
                f"{', '.join(self.drafts)}"
            )
        return found

    def k_range(self, draft: str) -> range:
        """The K values of one choice (just 0 for ``none``)."""
        choice = self.choice(draft)
        if choice.method is SpecMethod.NONE:
            return range(0, 1)
        return range(int(choice.k.low), int(choice.k.high) + 1)

    def choice_params(
        self, draft: str, k: int, options: Mapping[str, Option] | None = None
    ) -> dict[str, Any]:
        """The Optuna parameters of one choice at K = ``k`` with default settings (and
        ``options``, the first values where None)."""
        return {"draft": draft, **self.choice(draft).params(k, options)}

    @property
    def tuned_dimensions(self) -> tuple[str, ...]:
        """The Optuna parameters that can take more than one value in this space."""
        own = {name for choice in self.choices for name in choice.tuned}
        spans = {
            "draft": len(self.choices) > 1,
            **{name: True for name in sorted(own)},
            "gpu_memory_utilization": self.gpu_memory_utilization.low
            < self.gpu_memory_utilization.high,
            "max_num_batched_tokens": len(set(self.max_num_batched_tokens)) > 1,
            "power_limit_w": len(set(self.power_limits_w)) > 1,
            "temperature": isinstance(self.trial_temperature, Range)
            and self.trial_temperature.low < self.trial_temperature.high,
        }
        return tuple(name for name, varies in spans.items() if varies)

    def draft_model(self, draft: str) -> ModelSpec | None:
        """The ModelSpec of a choice's draft or head; None for none, ngram, suffix and mtp."""
        model = self.choice(draft).model
        return None if model is None else load_model(model)

    def suggest(self, trial: optuna.Trial) -> TrialConfig:
        """Asks ``trial`` for one point of the space: the choice, then its own parameters."""
        draft = str(trial.suggest_categorical("draft", list(self.drafts)))
        speculative = self.choice(draft).suggest(trial)
        util = _suggest_float(trial, "gpu_memory_utilization", self.gpu_memory_utilization)
        mnbt = int(
            trial.suggest_categorical("max_num_batched_tokens", list(self.max_num_batched_tokens))
        )
        temperature = (
            self.trial_temperature
            if isinstance(self.trial_temperature, float)
            else _suggest_float(trial, "temperature", self.trial_temperature)
        )
        watts = (
            int(trial.suggest_categorical("power_limit_w", list(self.power_limits_w)))
            if self.power_limits_w
            else None
        )
        return self.config(speculative, util, mnbt, temperature, power_limit_w=watts)

    def speculative(self, draft: str, k: int) -> SpeculativeConfig | None:
        """One choice's vLLM settings at K = ``k``, its other settings at their defaults."""
        return self.choice(draft).speculative(k)

    def config(
        self,
        speculative: SpeculativeConfig | None,
        gpu_memory_utilization: float,
        max_num_batched_tokens: int,
        temperature: float,
        *,
        power_limit_w: int | None = None,
    ) -> TrialConfig:
        """Builds a TrialConfig from explicit values (used by suggest, estimate and enqueue);
        ``power_limit_w`` None leaves the GPUs' power limit as it is."""
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
        return TrialConfig(server, self.client(temperature), power_limit_w)

    def client(self, temperature: float) -> ClientConfig:
        """The request side of a trial: the workload's temperature mix, or ``temperature``
        alone when the space tunes it (then it is the trial's own choice)."""
        if not self.tunes_temperature:
            return ClientConfig(self.workload.mean_temperature, self.workload)
        temperature = round(temperature, 4)
        return ClientConfig(temperature, self.workload.serving(temperature))

    def with_vllm_version(self, version: str) -> SearchSpace:
        """The same space for another vLLM version (its flag dialect), checked now."""
        # A method or draft pair one version runs may be refused by another.
        check_choices(self.choices, self.target, parse_version(version), self.tensor_parallel_size)
        return self._edited("vllm", {"version": version})

    def with_ttft_limit(self, ttft_ms: float) -> SearchSpace:
        """The same space under another TTFT limit (stored with the study like the rest)."""
        return self._edited("slo", {"ttft_ms": check_value(_TTFT_LIMIT, ttft_ms, "slo.ttft_ms")})

    def with_prefer(self, prefer: Preference) -> SearchSpace:
        """The same space recommending by ``prefer`` (``slo.prefer``)."""
        return self._edited("slo", {"prefer": prefer.value})

    def with_memory_headroom(self, gib: float) -> SearchSpace:
        """The same space leaving ``gib`` per GPU to other processes (``server.
        memory_headroom_gib``): on vLLM 0.34+ its memory dimension then searches caps."""
        return self._edited("server", {"memory_headroom_gib": gib})

    def with_hardware(self, hardware: Hardware) -> SearchSpace:
        """The same space on other GPUs; tensor parallelism follows the GPU count."""
        server = {
            k: v for k, v in self.source.get("server", {}).items() if k != "tensor_parallel_size"
        }
        return self._edited("hardware", hardware.as_source(), server=server)

    def without_choices(self, labels: Collection[str]) -> SearchSpace:
        """The same space without the speculation choices labelled ``labels`` (a model is
        taken out of its entry's list; an entry left with none goes).

        Raises:
            ConfigError: no choice would be left.
        """
        if all(choice.label in labels for choice in self.choices):
            raise ConfigError(
                f"{self.name}: every speculation choice would be taken out ({', '.join(labels)})"
            )
        gone = {(str(c.method), c.model) for c in self.choices if c.label in labels}
        search = dict(self.source.get("search", {}))
        if "methods" in search:
            kept: list[Any] = []
            for entry in search["methods"]:
                named = {"method": entry} if isinstance(entry, str) else dict(entry)
                method, models = str(named["method"]), named.get("model")
                if models is None:
                    if (method, None) not in gone:
                        kept.append(entry)
                    continue
                left = [m for m in _as_list(models) if (method, m) not in gone]
                if left:
                    kept.append({**named, "model": left})
            search["methods"] = kept
        else:  # the earlier form: a method's name, or a draft model's id
            search["draft"] = [d for d in _as_list(search.get("draft", [])) if str(d) not in labels]
        return self._edited("search", search)

    def _edited(self, key: str, value: Any, **sections: Any) -> SearchSpace:
        """This space with ``key`` of its file set to ``value`` (a section's keys merged into
        it), built again from the edited file."""
        raw = self.source
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            value = {**raw[key], **value}
        return _build({**raw, key: value, **sections}, self.name, lenient=True)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


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
    path = builtin_spaces().get(text) or absolute(text)
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
    # Local model folders and prompt files as absolute paths: the copy stored with the study is
    # read by workers, resumes and containers that run in other folders.
    return _build(absolute_space_paths(raw), str(path), lenient=False)


def space_from_dict(raw: Any, origin: str = "search space") -> SearchSpace:
    """Rebuilds the copy of a space stored with a study (``SearchSpace.source``).

    Checked like a file, except that keys this version does not know are ignored (earlier
    versions stored them unread) and prompt files need not exist on this machine.
    """
    return _build(raw, origin, lenient=True)


def _build(raw: Any, origin: str, *, lenient: bool) -> SearchSpace:
    _refuse_secrets(raw, origin)
    model = parse_space(raw, origin, lenient=lenient)
    if isinstance(model.hardware, str):
        hardware = _named(origin, parse_hardware, model.hardware)
    else:  # a GPU the catalog lacks, described in the space
        hardware = Hardware(model.hardware.gpu, model.hardware.count)
    if hardware.gpu not in CATALOG:  # stored whole: a resume or a worker needs no --gpu-spec
        model = parse_space({**raw, "hardware": hardware.as_source()}, origin, lenient=True)
    if model.name is None:  # stored named: a resume names it as the file did
        model = model.model_copy(update={"name": Path(origin).stem})
    target = _named(origin, load_model, model.target)
    search, server = model.search, model.server
    workload = workload_from_space(model, origin, lenient)
    vllm = model.vllm
    release = parse_version(vllm.version) if vllm.version else version_from_image(vllm.image)
    tensor_parallel = server.tensor_parallel_size or hardware.count
    _named(origin, lambda _: _check_tensor_parallel(target, hardware, tensor_parallel), "")
    _named(origin, lambda _: check_extra_flags(tuple(server.extra_flags.items()), release), "")
    choices = _named(
        origin,
        lambda _: check_choices(
            choices_from_search(search, origin), target, release, tensor_parallel
        ),
        "",
    )
    extra_flags = tuple(server.extra_flags.items())
    _named(origin, lambda _: check_adaptive(choices, extra_flags), "")
    _named(origin, lambda _: check_lossy(choices, model.quality.allow_lossy), "")
    if not lenient:  # a stored study ran with what it stored
        lengths = ("server.max_model_len", "workload.input_tokens", "workload.output_tokens")
        _named(
            origin,
            lambda _: check_lengths(
                target, server.max_model_len, workload.input_tokens, workload.output_tokens, lengths
            ),
            "",
        )
    assert model.name is not None  # named above
    return SearchSpace(
        name=model.name,
        hardware=hardware,
        target=target,
        choices=choices,
        gpu_memory_utilization=memory_range(
            _range(search.gpu_memory_utilization),
            release,
            server.memory_headroom_gib,
            hardware.gpu.vram_gib,
        ),
        max_num_batched_tokens=tuple(search.max_num_batched_tokens),
        power_limits_w=tuple(search.power_limit_w or ()),
        trial_temperature=(
            workload.mean_temperature
            if not isinstance(search.temperature, TemperatureRange)
            else _range(search.temperature)
        ),
        max_model_len=server.max_model_len,
        tensor_parallel_size=tensor_parallel,
        quantization=server.quantization,
        vllm_image=model.vllm.image,
        vllm_version=model.vllm.version,
        ttft_limit_ms=float(model.slo.ttft_ms),
        workload=workload,
        extra_flags=extra_flags,
        max_failed_requests=float(model.slo.max_failed_requests),
        stream_gap_limit_ms=_optional_float(model.slo.stream_gap_p99_ms),
        tpot_limit_ms=_optional_float(model.slo.tpot_ms),
        objective=model.slo.objective,
        prefer=model.slo.prefer,
        model=model,
    )


def _check_tensor_parallel(target: ModelSpec, hardware: Hardware, size: int) -> None:
    """What every trial's server would refuse, refused before a study is stored."""
    if size > hardware.count:
        raise ConfigError(
            f"server.tensor_parallel_size = {size}: more than the {hardware.count} GPUs of "
            f"{hardware.label}; use at most {hardware.count}, or more GPUs in hardware"
        )
    if target.heads % size:
        raise ConfigError(
            f"server.tensor_parallel_size = {size}: {target.hf_id}'s {target.heads} attention "
            f"heads do not split into {size}; use a size that divides {target.heads}"
        )


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _range(value: float | SpecTokensRange | FractionRange | TemperatureRange) -> Range:
    if isinstance(value, int | float):
        return Range(float(value), float(value))
    step = getattr(value, "step", None)  # K steps by 1
    return Range(float(value.low), float(value.high), None if step is None else float(step))


def _named(origin: str, parse: Callable[[str], T], text: str) -> T:
    """``parse(text)``, its ConfigError (of the same class) naming the file."""
    try:
        return parse(text)
    except ConfigError as exc:
        raise type(exc)(f"{origin}: {exc}") from None


def _refuse_secrets(raw: Any, origin: str) -> None:
    """A secret flag stops the space before it is stored, or echoed in an error."""
    server = raw.get("server") if isinstance(raw, dict) else None
    flags = server.get("extra_flags") if isinstance(server, dict) else None
    for flag in flags if isinstance(flags, dict) else ():
        if is_secret_flag(name := str(flag).partition("=")[0]):  # never echo `api-key=VALUE`
            raise ConfigError(
                f"{origin}: server.extra_flags `{name}` carries a secret, and the space is stored "
                "with the study: set it in the server's environment instead (e.g. VLLM_API_KEY)"
            )
