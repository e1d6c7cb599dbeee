"""``spectune estimate``: the simulator's prediction for one config, nothing launched.

The config's speculation is written as a search space writes one choice (a method, its model,
K, its own settings and options), so it passes the same checks a space's choices pass
(:mod:`tuner.config.choice_rules`): every method the space can search can be estimated, and
one the target or the vLLM release cannot run is refused in one line. The memory verdict
follows the rules of the vLLM version asked for (``tuner.sim.memory``), and the prediction
carries the error band of its regime (:mod:`tuner.sim.band`). Where the GPU's board power is
known, it carries its energy too (:mod:`tuner.sim.power`), with the power model's band
(:mod:`tuner.sim.power_fit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tuner.catalog.drafters import block_kind
from tuner.catalog.gpus import Hardware
from tuner.catalog.heads import head_kind
from tuner.catalog.models import ModelSpec, load_model
from tuner.config.choice_rules import check_choices
from tuner.config.choices import SpecChoice, choices_from_search
from tuner.config.methods import METHODS, MethodFamily, method_of
from tuner.config.schema_errors import one_line
from tuner.config.search_section import SearchModel
from tuner.config.space import NGRAM, NO_DRAFT
from tuner.config.trial import ServerConfig, SpecMethod
from tuner.config.vllm_version import VllmVersion
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError
from tuner.results import TrialResult
from tuner.sim.band import Band, error_band, regime_of
from tuner.sim.memory import MemoryEstimate, estimate_memory
from tuner.sim.power import SHIPPED_POWER, PowerModel, power_model
from tuner.sim.power_fit import PowerBand, power_band
from tuner.sim.twin.power import PowerScale, scaled
from tuner.sim.virtual_time import SHIPPED, Physics, predict

__all__ = ["Estimate", "estimate", "speculation_choice"]

SettingValue = str | int | float | bool


@dataclass(frozen=True)
class Estimate:
    """A predicted run; ``result`` is None when the config does not fit in memory.

    Attributes:
        band: the measured error of predictions of this regime (GPU class, method, load).
        power_band: the power model's error; None where the GPU's board power is unknown
            (and the result carries no energy).
        power_scale: a study's correction of the power model to its own GPUs; None: the
            shipped model.
    """

    hardware: Hardware
    server: ServerConfig
    memory: MemoryEstimate
    result: TrialResult | None
    band: Band
    power_band: PowerBand | None = None
    power_scale: PowerScale | None = None

    @property
    def power_error(self) -> float | None:
        """The power model's relative error: the spread of the study's pairs around the scaled
        model, else the shipped model's leave-one-out band; None without board power."""
        if self.power_band is None:
            return None
        return self.power_scale.spread if self.power_scale else self.power_band.error

    @property
    def energy_error(self) -> float | None:
        """The relative error J/token may carry: the power model's plus the throughput's (the
        energy of a token is power times the time it takes); None where either is unknown."""
        power = self.power_error
        if power is None or self.band.error is None:
            return None
        return power + self.band.error


def _method_of(draft: str) -> SpecMethod:
    """The method a ``--draft`` names on its own: none, ngram, or what its config.json is."""
    if draft in {str(m.name) for m in METHODS.values() if not m.takes_model}:
        return SpecMethod(draft)
    model = load_model(draft)
    return (
        head_kind(model.config, model.hf_id)
        or block_kind(model.config, model.hf_id)
        or SpecMethod.DRAFT_MODEL
    )


def speculation_choice(
    target: ModelSpec,
    *,
    method: str | None,
    draft: str,
    k: int,
    settings: Mapping[str, SettingValue],
    version: VllmVersion | None,
    tensor_parallel: int,
) -> SpecChoice:
    """One speculation choice as a space would list it, checked as a space's choices are.

    Args:
        target: the served model.
        method: the vLLM method; None: read from ``draft`` (none, ngram, or a model's kind).
        draft: the draft, head or block drafter (``none`` for methods without one).
        k: speculative tokens.
        settings: the method's own settings and options (``prompt_lookup_max``,
            ``parallel_drafting``, ``rejection_sample_method``, ...), one value each.
        version: the vLLM release whose rules apply (None: only the target's).
        tensor_parallel: the target's tensor-parallel size.

    Raises:
        ConfigError: one line naming the setting at fault and what to write instead.
    """
    chosen = method or _method_of(draft)
    entry: dict[str, Any] = {"method": chosen}
    takes_model = method_of(SpecMethod.parse(chosen)).takes_model
    if takes_model and draft in (NO_DRAFT, NGRAM):
        if method_of(SpecMethod.parse(chosen)).needs_model:  # DSpark may draft inside the target
            raise ConfigError(
                f"--method {chosen} needs its model: pass --draft with the draft, head or "
                "drafter's Hugging Face id or folder"
            )
    elif takes_model:
        entry["model"] = draft
    elif draft not in (NO_DRAFT, NGRAM, chosen):
        raise ConfigError(
            f"--method {chosen} drafts without a model, but --draft names {draft}: drop "
            "--draft, or pick a method that loads it (draft_model, eagle, eagle3, dflash, dspark)"
        )
    if method_of(SpecMethod.parse(chosen)).speculates:
        entry["num_speculative_tokens"] = k
        entry.update(settings)
    elif settings:
        raise ConfigError(f"--set {next(iter(settings))}: no speculation takes no settings")
    try:
        search = SearchModel.model_validate({"methods": [entry]})
    except ValidationError as exc:
        where = f"methods.0.{chosen}."  # the space's key path; here they are --set names
        raise ConfigError(f"--set: {one_line(exc).replace(where, '')}") from None
    choices = choices_from_search(search, "spectune estimate")
    return check_choices(choices, target, version, tensor_parallel)[0]


def estimate(  # noqa: PLR0913  (one keyword per estimate setting, as the CLI passes them)
    hardware: Hardware,
    model: str,
    *,
    method: str | None = None,
    draft: str = NO_DRAFT,
    k: int = 4,
    settings: Mapping[str, SettingValue] | None = None,
    workload: WorkloadSpec,
    temperature: float = 0.2,
    gpu_memory_utilization: float = 0.92,
    max_num_batched_tokens: int = 2048,
    max_model_len: int = 8192,
    concurrency: int = 1,
    physics: Physics = SHIPPED,
    vllm_version: VllmVersion | None = None,
    free_gib: float | None = None,
    power_scale: PowerScale | None = None,
) -> Estimate:
    """Predicts throughput, TTFT, acceptance and memory for one config on ``hardware``.

    Args:
        method: the speculation method (None: read from ``draft``).
        draft: the draft model, head or block drafter; ``ngram`` or ``none`` alone.
        settings: the method's own settings and options (see :func:`speculation_choice`).
        physics: the simulator's models: the shipped ones, or a study's fitted twin
            (:class:`tuner.sim.twin.TwinPhysics`).
        vllm_version: whose memory, method and engine rules apply (None: the newest).
        free_gib: NVML's free memory per GPU, where the caller read it (another process counts).
        power_scale: a study's power correction (:func:`tuner.study.twin_power.study_power`).

    Raises:
        ConfigError: an unknown model, or speculation ``vllm_version`` or the target refuses.
    """
    target = load_model(model)
    choice = speculation_choice(
        target,
        method=method,
        draft=draft,
        k=k,
        settings=settings or {},
        version=vllm_version,
        tensor_parallel=hardware.count,
    )
    speculative = choice.speculative(k)
    separate = method_of(choice.method).family is MethodFamily.DRAFT
    draft_spec = load_model(str(choice.model)) if separate else None
    server = ServerConfig(
        model=target.hf_id,
        tensor_parallel_size=hardware.count,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        speculative=speculative,  # no --quantization: vLLM reads it from the checkpoint
    )
    memory = (
        estimate_memory(
            hardware, target, draft_spec, server, version=vllm_version, free_gib=free_gib
        )
        if physics is SHIPPED
        else physics.memory(hardware, target, draft_spec, server, version=vllm_version)
    )
    constants = SHIPPED_POWER if power_scale is None else scaled(SHIPPED_POWER, power_scale.scale)
    power: PowerModel | None = power_model(hardware.gpu, constants=constants)
    result = None
    if memory.fits:
        result = predict(
            hardware,
            target,
            draft_spec,
            server,
            temperature,
            workload,
            concurrency,
            physics,
            vllm_version,
            power,
        )
    band = error_band(regime_of(hardware, server, concurrency))
    if power is None:
        return Estimate(hardware, server, memory, result, band)
    return Estimate(hardware, server, memory, result, band, power_band(), power_scale)
