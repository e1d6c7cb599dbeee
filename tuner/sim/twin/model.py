"""The twin's parameters and the simulator they drive.

A twin is the shipped simulator with a handful of corrections a study can measure: how much
slower (or faster) than modelled the target's decode pass, the draft's pass, the engine's
per-step work and the prefill pass are; how far each speculation method's acceptance sits from
the shipped model, per workload (a shift of the first position's logit, one of its temperature
penalty, one of the per-position decay, and what each of the method's own settings adds:
sampled drafts, block verification, parallel drafting, prompt lookup's window); and how much
memory a start-up needs outside vLLM's budget and inside it beyond the memory model. All
corrections at their neutral value give the shipped simulator exactly.

:class:`TwinPhysics` turns the corrections into a :class:`tuner.sim.virtual_time.Physics`, so
``simulate``/``predict`` run the twin; :mod:`tuner.sim.twin.forecast` is its fast closed form
for one request at a time, which the study's re-screen uses.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from pydantic import (
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
)

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.methods import method_of
from tuner.config.methods.ngram import DEFAULT_WINDOW
from tuner.config.trial import ServerConfig, SpecMethod, SpeculativeConfig, choice_label
from tuner.config.verification import Verification
from tuner.config.vllm_version import VllmVersion
from tuner.sim.acceptance import (
    POSITION_DECAY,
    SHIPPED_ACCEPTANCE,
    acceptance_probability,
    drafts_in_parallel,
    prompt_spread,
    rates_over_prompts,
    samples_drafts,
    verified,
)
from tuner.sim.memory import MemoryEstimate, adjust_memory, estimate_memory
from tuner.sim.perfmodel import ForwardPass, PerfModel, StepShape

__all__ = [
    "TIME_FACTORS",
    "AcceptanceShift",
    "SettingTerms",
    "TwinParams",
    "TwinPhysics",
    "method_key",
    "setting_terms",
]

# The step-time corrections, each a factor on a part of the shipped step time.
TIME_FACTORS = ("decode", "draft", "overhead", "adaptive", "prefill", "first_token")


def method_key(server: ServerConfig) -> str | None:
    """What acceptance is fitted per: ``ngram`` or the draft model's id (None: no speculation)."""
    return server.draft


@dataclass(frozen=True)
class AcceptanceShift:
    """One method's acceptance correction on one workload (0 everywhere: the shipped model).

    The drafter's own terms move every config of it; the settings' terms move only the
    configs that use the setting, so a study that measured a drafter both ways learns what the
    setting does on its prompts, and one that measured it one way learns it for both.

    Attributes:
        logit: added to the logit of the first position's acceptance.
        temperature: added to that logit per squared unit of temperature.
        log_decay: added to the log of the per-position decay.
        probabilistic: added to that logit where the drafts are sampled
            (``draft_sample_method: probabilistic``).
        block: added to that logit per unit of temperature under block verification (which
            accepts the same prefix as the standard rule at T=0).
        parallel_log_decay: added to the log decay where a head drafts all K in one pass
            (``parallel_drafting``).
        lookup_min: added to that logit per token prompt lookup's shortest n-gram
            (``prompt_lookup_min``) sits above the section's default window's.
        lookup_max: the same per token of its longest n-gram (``prompt_lookup_max``).
    """

    logit: float = 0.0
    temperature: float = 0.0
    log_decay: float = 0.0
    probabilistic: float = 0.0
    block: float = 0.0
    parallel_log_decay: float = 0.0
    lookup_min: float = 0.0
    lookup_max: float = 0.0


def _written(shift: AcceptanceShift) -> dict[str, float]:
    drafter = ("logit", "temperature", "log_decay")
    return {k: v for k, v in asdict(shift).items() if v or k in drafter}


class SettingTerms(NamedTuple):
    """What multiplies each setting's term of :class:`AcceptanceShift` in a config's
    first-position logit (0 where the config does not use the setting).

    Attributes:
        probabilistic: 1 where its drafts are sampled.
        block: its temperature under block verification.
        lookup_min: how many tokens prompt lookup's shortest n-gram sits above the default
            window's.
        lookup_max: the same for its longest n-gram.
    """

    probabilistic: float = 0.0
    block: float = 0.0
    lookup_min: float = 0.0
    lookup_max: float = 0.0

    def logit(self, shift: AcceptanceShift) -> float:
        """What ``shift``'s setting terms add to the first position's logit here."""
        return float(sum(getattr(shift, name) * value for name, value in self._asdict().items()))


def setting_terms(speculative: SpeculativeConfig | None, temperature: float) -> SettingTerms:
    """The config's :class:`SettingTerms`: a drafter measured with and without a setting tells
    what that setting does on its prompts, as the fit learns it (a window is learned from
    trials at two windows: the simulator's shipped model has no term for it, vLLM's proposer
    changes what it proposes with the window, and no public figure measures by how much)."""
    if speculative is None:
        return SettingTerms()
    block = speculative.rejection_sample_method is Verification.BLOCK
    shortest, longest = speculative.prompt_lookup_min, speculative.prompt_lookup_max
    return SettingTerms(
        float(samples_drafts(speculative)),
        temperature if block else 0.0,
        0.0 if shortest is None else float(shortest - DEFAULT_WINDOW[0]),
        0.0 if longest is None else float(longest - DEFAULT_WINDOW[1]),
    )


@dataclass(frozen=True)
class TwinParams:
    """The twin's corrections to the shipped simulator.

    Attributes:
        decode: factor on the target's decode pass (bandwidth efficiency, all-reduce).
        draft: factor on each draft pass.
        overhead: factor on the engine's per-step work outside the passes.
        adaptive: factor on adaptive verification's own work per step, apart from the
            engine's (``enable_adaptive_verification``): written only where it is not 1, so a
            twin fitted before it was writes back alike.
        prefill: factor on the target's (and draft's) prefill pass.
        first_token: factor on the speculative set-up before the first token.
        ttft_offset_s: time to first token the model has no part for (HTTP, tokenizer, a CPU).
        acceptance: ``(method key, prompt set) -> shift``; absent pairs are unshifted.
        outside_gib: memory a start-up needs outside vLLM's budget beyond the memory model.
        inside_gib: memory inside the budget beyond the model (taken from the KV cache).
    """

    decode: float = 1.0
    draft: float = 1.0
    overhead: float = 1.0
    adaptive: float = 1.0
    prefill: float = 1.0
    first_token: float = 1.0
    ttft_offset_s: float = 0.0
    acceptance: dict[tuple[str, str], AcceptanceShift] = field(default_factory=dict)
    outside_gib: float = 0.0
    inside_gib: float = 0.0

    def shift(self, method: str, prompt_set: str) -> AcceptanceShift:
        return self.acceptance.get((method, prompt_set), AcceptanceShift())

    @field_serializer("acceptance")
    def _shift_rows(
        self, acceptance: dict[tuple[str, str], AcceptanceShift]
    ) -> list[dict[str, Any]]:
        """A row per shift, its key's parts named (JSON keys are strings, not pairs); a
        setting's term at 0 is left out, so a twin fitted before they were writes back alike."""
        return [{"method": m, "prompt_set": p, **_written(s)} for (m, p), s in acceptance.items()]

    @model_serializer(mode="wrap")
    def _unwritten_neutral(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("adaptive") == 1.0:
            del data["adaptive"]
        return data

    @field_validator("acceptance", mode="before")
    @classmethod
    def _shifts_by_key(cls, rows: Any) -> Any:
        if not isinstance(rows, list):
            return rows
        return {(row["method"], row["prompt_set"]): row for row in rows}


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def shipped_logit(
    target: ModelSpec,
    draft: ModelSpec | None,
    method: SpecMethod,
    prompt_set: str,
    temperature: float,
    *,
    probabilistic: bool = False,
) -> float:
    """The shipped model's logit of the first position's acceptance."""
    alpha = acceptance_probability(
        target, draft, method, prompt_set, temperature, probabilistic=probabilistic
    )
    return _logit(alpha)


def shipped_decay(method: SpecMethod) -> float:
    return SHIPPED_ACCEPTANCE.decay.get(method, POSITION_DECAY)


class _TwinPerf(PerfModel):
    """The shipped step-time model with each part scaled by the twin's factors."""

    def __init__(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        params: TwinParams,
        version: VllmVersion | None,
    ) -> None:
        super().__init__(hardware, target, draft, server, version=version)
        self.params = params

    def target_pass_s(self, batch: ForwardPass) -> float:
        # A decode pass carries 1+K tokens a sequence; anything more holds a prefill chunk.
        decoding = batch.tokens <= batch.seqs * (1 + self.k)
        factor = self.params.decode if decoding else self.params.prefill
        return super().target_pass_s(batch) * factor

    def draft_pass_s(self, batch: ForwardPass) -> float:
        # A drafting pass carries one token a sequence, or all K where one pass drafts them.
        decoding = batch.tokens <= batch.seqs * self.drafting_passes(self.k)[1]
        factor = self.params.draft * (1.0 if decoding else self.params.prefill)
        return super().draft_pass_s(batch) * factor

    def step_overhead_s(self, seqs: int, verified: int, ngram: bool) -> float:
        own = self.adaptive_step_s(verified)
        engine = super().step_overhead_s(seqs, verified, ngram) - own
        return engine * self.params.overhead + own * self.params.adaptive

    def step_s(self, shape: StepShape) -> float:
        seconds = super().step_s(shape)
        if shape.first_tokens:  # the parts of a first token's latency the passes do not hold
            seconds += self.params.ttft_offset_s
            if self.k:
                seconds += (self.params.first_token - 1.0) * self.first_token_s
        return seconds


def _fitted_decay(method: SpecMethod, shift: AcceptanceShift) -> float:
    return shipped_decay(method) * math.exp(shift.log_decay)


def _shift_key(
    draft: ModelSpec | None, method: SpecMethod, speculative: SpeculativeConfig | None = None
) -> str:
    """The key of a drafter's fitted shift, as :func:`method_key` names it from the server:
    the space's label (``eagle3:HEAD``, ``dflash:DRAFTER``, a draft model's id, ``ngram``).

    The simulator's scheduler hands over a draft model only, so a head's id comes from the
    server's settings where it is not given (without it no head's shift would apply)."""
    model = None
    if method_of(method).takes_model and draft is not None:
        model = draft.hf_id
    elif method_of(method).takes_model and speculative is not None:
        model = speculative.model
    return choice_label(SpeculativeConfig(method, 1, model=model))


@dataclass(frozen=True)
class TwinPhysics:
    """The twin as the simulator's :class:`~tuner.sim.virtual_time.Physics`."""

    params: TwinParams

    def perf_model(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        version: VllmVersion | None = None,
    ) -> PerfModel:
        return _TwinPerf(hardware, target, draft, server, self.params, version)

    def position_rates(
        self,
        target: ModelSpec,
        draft: ModelSpec | None,
        method: SpecMethod,
        prompt_set: str,
        temperature: float,
        k: int,
        *,
        speculative: SpeculativeConfig | None = None,
    ) -> tuple[float, ...]:
        shift = self.params.shift(_shift_key(draft, method, speculative), prompt_set)
        terms = setting_terms(speculative, temperature)
        logit = shipped_logit(
            target, draft, method, prompt_set, temperature, probabilistic=bool(terms.probabilistic)
        )
        logit += shift.logit + shift.temperature * temperature**2
        logit += terms.logit(shift)
        alpha = 1 / (1 + math.exp(-logit))
        decay = _fitted_decay(method, shift)
        if drafts_in_parallel(speculative):
            decay *= SHIPPED_ACCEPTANCE.parallel_decay * math.exp(shift.parallel_log_decay)
        rates = rates_over_prompts(alpha, decay, k, prompt_spread(method, temperature))
        return verified(rates, speculative, temperature, prompt_set=prompt_set)

    def decay(self, draft: ModelSpec | None, method: SpecMethod, prompt_set: str) -> float:
        """The fitted factor by which each drafted position's conditional acceptance falls
        below the one before (one after another, not in parallel)."""
        return _fitted_decay(method, self.params.shift(_shift_key(draft, method), prompt_set))

    def memory(
        self,
        hardware: Hardware,
        target: ModelSpec,
        draft: ModelSpec | None,
        server: ServerConfig,
        jitter_gib: float = 0.0,
        *,
        version: VllmVersion | None = None,
    ) -> MemoryEstimate:
        outside = self.params.outside_gib
        base = estimate_memory(
            hardware, target, draft, server, jitter_gib + outside, version=version
        )
        return adjust_memory(base, target, draft, server, self.params.inside_gib, outside)
