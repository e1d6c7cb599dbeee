"""The fitted constants of the simulator, as free parameters with priors.

Each :class:`Parameter` reads and writes one constant of :class:`tuner.sim.virtual_time.Calibrated`
and says which figures it can move (:attr:`Parameter.applies`, which keeps a Jacobian to a few
dozen simulator runs). Priors are round physics guesses made without the figures; a parameter
only one source pins returns to its prior when that source is left out of the fit
(``reference_fit.held_out``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from reference_table import Figure, FigureKind

from tuner.catalog.gpus import Interconnect, MemoryKind
from tuner.config.methods import MethodFamily, method_of, speculating
from tuner.config.trial import SpecMethod
from tuner.config.verification import DraftSampling, Verification
from tuner.config.vllm_version import VllmVersion
from tuner.sim.calibration import EngineGeneration, engine_generation
from tuner.sim.virtual_time import Calibrated

__all__ = ["PARAMETERS", "Parameter"]

_V2_DEFAULT = VllmVersion(0, 29, 0)  # Model Runner V2 for every architecture
_BLOCK_METHODS = tuple(m.name for m in speculating() if m.family is MethodFamily.BLOCK)
_ACCEPTANCE_KINDS = frozenset(
    {
        FigureKind.ACCEPTANCE_RATE,
        FigureKind.ACCEPTANCE_LENGTH,
        FigureKind.LENGTH_RATIO,
        FigureKind.POSITION_RATE,
    }
)


@dataclass(frozen=True)
class Parameter:
    """One fitted constant.

    Attributes:
        name: how the report names it.
        prior: its value before any figure, and the centre of its penalty.
        sigma: the prior's spread (log scale for positive constants, absolute for logits).
        get: reads it from the constants.
        put: writes it into the constants.
        applies: whether a figure's prediction can depend on it.
        logit: whether it is an acceptance logit (fitted additively, may be negative).
    """

    name: str
    prior: float
    sigma: float
    get: Callable[[Calibrated], float]
    put: Callable[[Calibrated, float], Calibrated]
    applies: Callable[[Figure], bool]
    logit: bool = False

    def to_free(self, value: float) -> float:
        return value if self.logit else math.log(value)

    def from_free(self, free: float) -> float:
        return free if self.logit else math.exp(free)


def _engine_of(figure: Figure) -> EngineGeneration:
    return engine_generation(figure.setup.version, figure.setup.method)


def _speed(figure: Figure) -> bool:
    return figure.kind not in _ACCEPTANCE_KINDS


def _sampled(f: Figure) -> bool:
    return f.setup.draft_sample_method == DraftSampling.PROBABILISTIC and f.setup.temperature > 0


def _block(f: Figure) -> bool:
    return method_of(f.setup.method).family is MethodFamily.BLOCK


def _bandwidth(cls: MemoryKind) -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, steps=replace(c.steps, bandwidth={**c.steps.bandwidth, cls: v}))

    return Parameter(
        f"bandwidth reached, {cls}",
        0.75,
        0.3,
        lambda c: c.steps.bandwidth[cls],
        put,
        lambda f: _speed(f) and f.setup.hardware_spec.gpu.memory is cls,
    )


def _engine(gen: EngineGeneration, field: str, prior: float, what: str) -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        costs = replace(c.steps.engines[gen], **{field: v})
        return replace(c, steps=replace(c.steps, engines={**c.steps.engines, gen: costs}))

    def applies(f: Figure) -> bool:
        if not _speed(f) or _engine_of(f) is not gen:
            return False
        method = f.setup.method
        if field == "draft_pass_s":
            return method == SpecMethod.DRAFT_MODEL
        if field == "head_pass_s":
            return method_of(method).family in (
                MethodFamily.HEAD,
                MethodFamily.MTP,
                MethodFamily.BLOCK,
            )
        if field == "drafter_per_seq_s":
            return method not in (SpecMethod.NONE, SpecMethod.NGRAM, SpecMethod.SUFFIX)
        if field == "lookup_per_seq_s":
            return method in (SpecMethod.NGRAM, SpecMethod.SUFFIX)
        if field in ("spec_per_token_s", "first_token_s"):
            return method != SpecMethod.NONE
        return True

    return Parameter(
        f"{gen} {what}",
        prior,
        1.0,
        lambda c: float(getattr(c.steps.engines[gen], field)),
        put,
        applies,
    )


def _quantized_bandwidth() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, steps=replace(c.steps, quantized_bandwidth=v))

    return Parameter(
        "4-bit kernels' share of it",
        0.7,
        0.3,
        lambda c: c.steps.quantized_bandwidth,
        put,
        lambda f: _speed(f) and f.setup.target().quantized,
    )


def _compute() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, steps=replace(c.steps, compute=v))

    return Parameter("tensor throughput reached", 0.6, 0.3, lambda c: c.steps.compute, put, _speed)


def _pcie_allreduce() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        latency = {**c.steps.allreduce_latency_s, Interconnect.PCIE: v}
        return replace(c, steps=replace(c.steps, allreduce_latency_s=latency))

    def applies(f: Figure) -> bool:
        hardware = f.setup.hardware_spec
        return _speed(f) and hardware.count > 1 and hardware.gpu.interconnect is Interconnect.PCIE

    return Parameter(
        "all-reduce latency over PCIe",
        60e-6,
        1.0,
        lambda c: c.steps.allreduce_latency_s[Interconnect.PCIE],
        put,
        applies,
    )


def _head_logit(method: SpecMethod, prompt_set: str, prior: float) -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        table = c.acceptance.head_logit
        row = {**table[method], prompt_set: v}
        return replace(c, acceptance=replace(c.acceptance, head_logit={**table, method: row}))

    return Parameter(
        f"{method} acceptance logit, {prompt_set}",
        prior,
        1.5,
        lambda c: c.acceptance.head_logit[method][prompt_set],
        put,
        lambda f: f.setup.method == method and f.setup.prompt_set == prompt_set,
        logit=True,
    )


def _draft_logit(prompt_set: str, prior: float) -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        logits = {**c.acceptance.draft_logit, prompt_set: v}
        return replace(c, acceptance=replace(c.acceptance, draft_logit=logits))

    return Parameter(
        f"draft-model acceptance logit, {prompt_set}",
        prior,
        1.5,
        lambda c: c.acceptance.draft_logit[prompt_set],
        put,
        lambda f: f.setup.method == SpecMethod.DRAFT_MODEL and f.setup.prompt_set == prompt_set,
        logit=True,
    )


def _decay(method: SpecMethod, prior: float) -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        decays = {**c.acceptance.decay, method: v}
        return replace(c, acceptance=replace(c.acceptance, decay=decays))

    return Parameter(
        f"{method} per-position decay",
        prior,
        0.2,
        lambda c: c.acceptance.decay[method],
        put,
        lambda f: f.setup.method == method and f.setup.k > 1,
    )


def _block_logit(prompt_set: str, prior: float) -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        logits = {**c.acceptance.block_logit, prompt_set: v}
        return replace(c, acceptance=replace(c.acceptance, block_logit=logits))

    return Parameter(
        f"block-drafter acceptance logit, {prompt_set}",
        prior,
        1.5,
        lambda c: c.acceptance.block_logit[prompt_set],
        put,
        lambda f: _block(f) and f.setup.prompt_set == prompt_set,
        logit=True,
    )


def _sampling_penalty() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, acceptance=replace(c.acceptance, probabilistic_penalty=v))

    return Parameter(
        "temperature penalty of sampled drafts",
        1.0,
        1.0,
        lambda c: c.acceptance.probabilistic_penalty,
        put,
        lambda f: _sampled(f) and not _block(f),
    )


def _block_table(table: Mapping[SpecMethod, float], value: float) -> dict[SpecMethod, float]:
    """``table`` with every block drafter's entry set to ``value`` (they share one prior)."""
    return {**table, **{m: value for m in _BLOCK_METHODS}}


def _block_sampling_penalty() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        penalties = _block_table(c.acceptance.sampled_penalty, v)
        return replace(c, acceptance=replace(c.acceptance, sampled_penalty=penalties))

    return Parameter(
        "temperature penalty of a block drafter's sampled drafts",
        1.0,
        1.0,
        lambda c: c.acceptance.sampled_penalty.get(
            SpecMethod.DSPARK, c.acceptance.probabilistic_penalty
        ),
        put,
        lambda f: _sampled(f) and _block(f),
    )


def _block_gain() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, acceptance=replace(c.acceptance, block_verification_gain=v))

    return Parameter(
        "block verification's share of rejections recovered",
        0.1,
        1.0,
        lambda c: c.acceptance.block_verification_gain,
        put,
        lambda f: f.setup.rejection_sample_method == Verification.BLOCK,
    )


def _parallel_decay() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, acceptance=replace(c.acceptance, parallel_decay=v))

    return Parameter(
        "parallel drafting's factor on a head's decay",
        0.9,
        0.2,
        lambda c: c.acceptance.parallel_decay,
        put,
        lambda f: f.setup.parallel_drafting,
    )


def _runner_saving() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, steps=replace(c.steps, v2_runner_saving_s=v))

    def applies(f: Figure) -> bool:
        versions = [f.setup.version] + ([f.baseline.version] if f.baseline else [])
        return _speed(f) and any(v is None or v >= _V2_DEFAULT for v in versions)

    return Parameter(
        "Model Runner V2's saving per step",
        0.3e-3,
        1.0,
        lambda c: c.steps.v2_runner_saving_s,
        put,
        applies,
    )


def _adaptive_cost() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, steps=replace(c.steps, adaptive_step_s=v))

    return Parameter(
        "adaptive verification's work per step",
        1e-3,
        1.0,
        lambda c: c.steps.adaptive_step_s,
        put,
        lambda f: _speed(f) and f.setup.enable_adaptive_verification,
    )


def _moe_routing() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, steps=replace(c.steps, moe_draft_routing=v))

    def applies(f: Figure) -> bool:
        return bool(f.setup.target().experts) and _speed(f) and f.setup.k > 0

    return Parameter(
        "independence of drafted tokens' expert routing",
        0.5,
        1.0,
        lambda c: c.steps.moe_draft_routing,
        put,
        applies,
    )


def _block_spread() -> Parameter:
    def put(c: Calibrated, v: float) -> Calibrated:
        return replace(c, acceptance=replace(c.acceptance, block_spread=v))

    return Parameter(
        "block drafters' spread over prompts per unit of temperature",
        1.0,
        1.0,
        lambda c: c.acceptance.block_spread,
        put,
        lambda f: _block(f) and f.setup.temperature > 0 and f.setup.k > 1,
    )


V0, V1 = EngineGeneration.V0, EngineGeneration.V1
# Priors are round physics guesses made without the figures (kernels reach about three quarters
# of a datasheet; the V0 engine spends milliseconds a step in Python, V1 about one; a drafter
# pass costs about a millisecond of launches and sampling; a head guesses about as well on chat
# as on any set, and better on math), wide enough (sigma 1 in log: a factor e) to let a single
# figure move them. Held out, a parameter only its own source pins returns to these.
PARAMETERS: tuple[Parameter, ...] = (
    _bandwidth(MemoryKind.HBM),
    _bandwidth(MemoryKind.GDDR),
    _quantized_bandwidth(),
    _compute(),
    _pcie_allreduce(),
    _engine(V0, "step_s", 2e-3, "step overhead"),
    # V0's Python spec worker handled every verified token (the field notes saw speculation lose
    # at dozens of requests; at 100 us a token it would still win at 32 on their rig).
    _engine(V0, "spec_per_token_s", 200e-6, "speculative bookkeeping per token"),
    _engine(V0, "draft_pass_s", 1e-3, "draft-model pass overhead"),
    _engine(V0, "first_token_s", 10e-3, "speculative first-token set-up"),
    _engine(V1, "step_s", 1e-3, "step overhead"),
    _engine(V1, "per_seq_s", 20e-6, "step overhead per sequence"),
    _engine(V1, "draft_pass_s", 1e-3, "draft-model pass overhead"),
    _engine(V1, "head_pass_s", 1e-3, "head/MTP pass overhead"),
    _engine(V1, "drafter_per_seq_s", 20e-6, "drafter pass per sequence"),
    # Measured, not guessed: vLLM 0.32's own n-gram proposer at 8 sequences of 1k tokens, one
    # thread, on a CI runner's CPU (benchmarks/lookup_cost.py: 2.5-2.8 us a sequence).
    _engine(V1, "lookup_per_seq_s", 3e-6, "prompt lookup per sequence"),
    _draft_logit("code", 2.0),
    _draft_logit("creative", 2.0),
    _head_logit(SpecMethod.EAGLE, "chat", 1.0),
    _head_logit(SpecMethod.EAGLE, "math", 2.0),
    _head_logit(SpecMethod.EAGLE3, "chat", 1.0),
    _head_logit(SpecMethod.MTP, "math", 2.0),
    _head_logit(SpecMethod.MTP, "chat", 1.0),
    _decay(SpecMethod.MTP, 0.9),
    _decay(SpecMethod.EAGLE, 0.95),
    _decay(SpecMethod.EAGLE3, 0.95),
    _head_logit(SpecMethod.EAGLE3, "code", 2.5),
    _head_logit(SpecMethod.EAGLE3, "math", 2.0),
    _block_logit("chat", 1.0),
    _block_logit("math", 2.0),
    _block_logit("code", 2.0),
    _decay(SpecMethod.DFLASH, 0.95),
    _decay(SpecMethod.DSPARK, 0.95),
    _block_spread(),
    _parallel_decay(),
    _sampling_penalty(),
    _block_sampling_penalty(),
    _block_gain(),
    _runner_saving(),
    _adaptive_cost(),
    _moe_routing(),
)
