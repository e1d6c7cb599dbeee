"""Fitting the twin to measured trials: conjugate Gaussian updates, so every value has an interval.

Each part of the twin is a small linear-Gaussian model with the prior (the shipped model, or a
host's calibration) as its starting point:

- **step times**: a decode step's median (the gap between streamed chunks) is
  ``decode * target + draft * drafts + overhead * engine + adaptive * adaptive verification``
  over the shipped parts of that config (:func:`tuner.sim.twin.forecast.step_parts`; the last
  part is 0 but where a config verifies adaptively, so only those trials move its factor and
  its cost never leaks into the engine's); TTFT is ``prefill`` times the shipped prefill
  passes, plus ``first_token`` times the speculative set-up, plus an offset the model has no
  part for (HTTP, tokenizer, a CPU build). Configs with other K and drafts tell the factors
  apart; where they cannot (one config measured), the prior keeps the split.
- **acceptance**, per method and workload: vLLM's per-position counters give each position's
  conditional acceptance; the first position's logit minus the shipped one is linear in
  ``logit + temperature * T**2``, and the log-ratio of later positions to the first gives the
  decay. Observation noise is binomial, from the number of drafts.
- **memory**: NVML's peak minus the memory model's peak is the memory outside vLLM's budget
  that the model missed; a start-up that ran out of memory although the twin left it its
  margin raises the memory held on the side of the budget it was shortest on, in doubling
  steps, whatever its method.

Only trials run at concurrency 1 inform the step-time factors (the parts are taken apart for
one request at a time); every trial informs acceptance and memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from pydantic import field_serializer, field_validator

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec, load_model
from tuner.config.trial import ServerConfig, TrialConfig
from tuner.config.vllm_version import VllmVersion
from tuner.results import TrialResult
from tuner.sim.acceptance import (
    SHIPPED_ACCEPTANCE,
    drafts_in_parallel,
    expected_accepted,
    verifier_gain,
)
from tuner.sim.memory import MemoryEstimate, estimate_memory
from tuner.sim.oom_screen import INSIDE, OUTSIDE, Slacks, memory_slacks, oom_side
from tuner.sim.perfmodel import verifies_adaptively
from tuner.sim.twin.counters import AcceptedTokens, PositionCounts, reusable
from tuner.sim.twin.forecast import drafted, step_parts
from tuner.sim.twin.model import (
    TIME_FACTORS,
    AcceptanceShift,
    SettingTerms,
    TwinParams,
    TwinPhysics,
    method_key,
    setting_terms,
    shipped_decay,
    shipped_logit,
)
from tuner.sim.virtual_time import API_IN_S, API_OUT_S

__all__ = [
    "BASE_MARGIN_GIB",
    "FittedTwin",
    "Observation",
    "fit",
    "headroom_gib",
    "observe",
    "pooled_counters",
    "slacks",
]

# Unseen start-up variation (allocator fragmentation, workspaces) a config must leave room for
# beyond the fitted memory; with the prior's uncertainty it makes the shipped 0.75 GiB margin.
BASE_MARGIN_GIB = 0.5
_MARGIN_SIGMAS = 2.0
# Prior standard deviations: factors of the shipped model, logits, log decay, GiB.
PRIOR_SD = {
    "decode": 0.5,
    "draft": 0.7,
    "overhead": 0.7,
    "adaptive": 0.7,
    "prefill": 0.5,
    "first_token": 0.5,
    "ttft_offset_s": 0.05,  # seconds
}
# Prior standard deviations of each acceptance shift (logits; per unit of temperature for the
# block term; log decay).
_SHIFT_SD = {
    "logit": 1.5,
    "temperature": 2.0,
    "probabilistic": 0.5,
    "block": 1.0,
    "log_decay": 0.15,
    "parallel_log_decay": 0.1,
    # A token more or less of the n-gram window: what a match of that length predicts.
    "lookup_min": 0.5,
    "lookup_max": 0.5,
}
_OUTSIDE_SD = 0.125
# Relative noise of one measured median step time or TTFT (run-to-run clocks, jitter).
_TIME_NOISE = 0.03
_PEAK_NOISE_GIB = 0.05
_MIN_LOGIT_SD = 0.05  # model error: no count makes a logit exact
# The first step (GiB) the margin takes beyond a start-up that ran out of memory.
_OOM_STEP_GIB = 0.5


@dataclass(frozen=True)
class Observation:
    """What one trial measured, as the fit needs it (a start-up OOM has only ``oom``).

    Attributes:
        server: the server config.
        temperature: the requests' sampling temperature.
        prompt_set: the workload kind.
        input_tokens: mean prompt length.
        output_tokens: tokens per request.
        concurrency: requests in flight.
        oom: whether the start-up ran out of memory.
        step_ms: median gap between streamed chunks (one decode step at concurrency 1).
        ttft_ms: median time to first token.
        reach: each position's unconditional acceptance (accepted at i / drafts).
        drafts: verification steps counted (the acceptance's sample size).
        peak_gib: the largest per-GPU memory NVML saw, if it was read.
        failure: what a start-up that ran out of memory said (its last lines).
        counts: vLLM's per-position counters of every measured pair, as
            ``(temperature, counts)``: the acceptance at every lower K of the same drafter.
    """

    server: ServerConfig
    temperature: float
    prompt_set: str
    input_tokens: int
    output_tokens: int
    concurrency: int
    oom: bool = False
    step_ms: float | None = None
    ttft_ms: float | None = None
    reach: tuple[float, ...] = ()
    drafts: float = 0.0
    peak_gib: float | None = None
    failure: str = ""
    counts: tuple[tuple[float, PositionCounts], ...] = ()


def observe(config: TrialConfig, result: TrialResult | None, oom: bool = False) -> Observation:
    """The observation of one trial: its config and what its first concurrency level measured."""
    workload = config.client.workload
    base = Observation(
        config.server,
        config.client.sampling_temperature,
        workload.prompt_set,
        workload.input_tokens,
        workload.output_tokens,
        result.concurrency if result else workload.concurrency[0],
        oom=oom,
    )
    if result is None:
        return base
    spec = result.spec_decode
    return replace(
        base,
        oom=False,
        step_ms=result.itl_ms(50),
        ttft_ms=result.ttft_ms(50),
        reach=spec.per_position_rate if spec else (),
        drafts=spec.drafts if spec else 0.0,
        peak_gib=max(result.peak_memory_gib) if result.peak_memory_gib else None,
        counts=(
            ((base.temperature, PositionCounts.measured(spec.drafts, spec.accepted_per_position)),)
            if spec and spec.drafts and spec.accepted_per_position
            else ()
        ),
    )


@dataclass(frozen=True)
class FittedTwin:
    """Fitted corrections with their standard deviations, and the memory margin.

    Attributes:
        params: the posterior means.
        sd: posterior standard deviation of each scalar (factors, ``outside_gib``) and of each
            acceptance shift (``"<method>|<prompt set>|logit"`` and so on).
        margin_gib: memory a config must keep to spare, under the twin, to be proposed.
        observations: how many trials the fit saw.
        counters: the study's own per-position acceptance counters, pooled per
            ``(drafter, prompt set, temperature)`` (drafters whose counters carry to a lower K
            only: :func:`~tuner.sim.twin.counters.reusable`); a prior's are not carried.
    """

    params: TwinParams = field(default_factory=TwinParams)
    sd: dict[str, float] = field(default_factory=dict)
    margin_gib: float = BASE_MARGIN_GIB + _MARGIN_SIGMAS * _OUTSIDE_SD
    observations: int = 0
    counters: dict[tuple[str, str, float], PositionCounts] = field(default_factory=dict)

    def prior_sd(self, name: str, default: float) -> float:
        return self.sd.get(name, default)

    def measured_accepted(
        self, draft: str, prompt_set: str, temperature: float, k: int, decay: float = 1.0
    ) -> AcceptedTokens | None:
        """Accepted tokens per step at ``k`` read off the counters of ``draft`` measured on
        ``prompt_set`` at ``temperature`` (continued past the highest K counted, where ``k``
        is above it, falling by ``decay`` a position); None where none was."""
        found = self.counters.get((draft, prompt_set, round(temperature, 4)))
        return None if found is None or k < 1 else found.accepted_at(k, decay)

    def intervals(self) -> list[tuple[str, float, float, float]]:
        """Each step-time factor and the memory outside vLLM's budget (``outside_gib``) as
        ``(name, value, low, high)``, with a 95 % interval (two posterior standard deviations).

        A step-time factor scales a time, so it cannot be negative: its interval is taken on
        the log scale (two standard deviations of the log, ``sd / value``), which keeps it
        above zero and around the value. ``outside_gib`` may be either sign.
        """
        out = []
        for name in ("decode", "draft", "overhead", "adaptive", "prefill"):
            value, sd = float(getattr(self.params, name)), self.sd.get(name, 0.0)
            learned = self.sd.get(name, PRIOR_SD[name]) < PRIOR_SD[name]
            if name == "adaptive" and value == 1.0 and not learned:
                continue  # no trial verified adaptively (or stored before it had a factor)
            if value <= 0:  # a prior can be wrong, a fit cannot go below zero
                out.append((name, value, 0.0, math.inf))
                continue
            spread = math.exp(2 * sd / value)
            out.append((name, value, value / spread, value * spread))
        value, sd = self.params.outside_gib, self.sd.get("outside_gib", 0.0)
        out.append(("outside_gib", value, value - 2 * sd, value + 2 * sd))
        return out

    @field_serializer("counters")
    def _counter_rows(
        self, counters: dict[tuple[str, str, float], PositionCounts]
    ) -> list[dict[str, Any]]:
        """A row per drafter, prompt set and temperature, its key's parts named (JSON keys are
        strings, not triples)."""
        return [
            {"draft": d, "prompt_set": p, "temperature": t, **asdict(c)}
            for (d, p, t), c in counters.items()
        ]

    @field_validator("counters", mode="before")
    @classmethod
    def _counters_by_key(cls, rows: Any) -> Any:
        if not isinstance(rows, list):
            return rows
        return {(row["draft"], row["prompt_set"], row["temperature"]): row for row in rows}


def _gaussian(
    mean: np.ndarray, sd: np.ndarray, rows: list[list[float]], ys: list[float], noise: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and standard deviations of ``y = x . theta + e`` under a diagonal prior."""
    precision = np.diag(1.0 / sd**2)
    moment = precision @ mean
    if rows:
        x = np.asarray(rows)
        w = 1.0 / np.asarray(noise) ** 2
        precision = precision + x.T @ (x * w[:, None])
        moment = moment + x.T @ (w * np.asarray(ys))
    cov = np.linalg.inv(precision)
    return cov @ moment, np.sqrt(np.diag(cov))


def _models(server: ServerConfig) -> tuple[ModelSpec, ModelSpec | None]:
    draft = load_model(server.draft_model) if server.draft_model else None
    return load_model(server.model), draft


def headroom_gib(memory: MemoryEstimate, max_model_len: int) -> float:
    """Memory a start-up may use beyond ``memory`` before it fails (< 0: it fails).

    The least of the two :func:`slacks`.
    """
    return min(slacks(memory, max_model_len)) if memory.fits else -1.0


def slacks(memory: MemoryEstimate, max_model_len: int) -> tuple[float, float]:
    """(outside, KV) slack in GiB: what the card has beyond vLLM's budget and what it already
    holds there, and KV cache beyond one ``max-model-len`` request."""
    workspace = (
        memory.budget_gib
        - memory.weights_gib
        - memory.draft_gib
        - memory.activation_gib
        - memory.kv_cache_gib
    )
    outside = memory.overhead_gib - workspace
    outside_slack = memory.gpu_total_gib - memory.budget_gib - outside
    kv_slack = memory.kv_cache_gib * (1 - max_model_len / max(memory.kv_tokens, 1))
    return outside_slack, kv_slack


def fit(
    hardware: Hardware,
    observations: Sequence[Observation],
    prior: FittedTwin,
    version: VllmVersion | None = None,
) -> FittedTwin:
    """The twin fitted to ``observations`` (all of a study's trials so far), from ``prior``."""
    acceptance_sd: dict[str, float] = {}
    shifts = _fit_acceptance(observations, prior, acceptance_sd)
    # An adaptive trial drafted the K the engine picked under the real step costs, which the
    # first pass only estimates: later passes take the K the fitted costs pick. K is a step
    # function of the costs, so near a boundary the passes can alternate between two
    # solutions; the one whose K assignment explains the steps best is kept.
    adaptive = any(verifies_adaptively(obs.server.speculative) for obs in observations)
    drafting = replace(prior.params, acceptance=shifts)
    passes: list[tuple[float, dict[str, float], dict[str, float]]] = []
    for _ in range(3 if adaptive else 1):
        pass_sd: dict[str, float] = {}
        pass_times, misfit = _fit_times(hardware, observations, prior, pass_sd, version, drafting)
        passes.append((misfit, pass_times, pass_sd))
        drafting = TwinParams(**pass_times, acceptance=shifts)
    _, times, sd = min(passes, key=lambda found: found[0])
    sd.update(acceptance_sd)
    outside, inside, margin = _fit_memory(hardware, observations, prior, sd, version)
    params = TwinParams(**times, acceptance=shifts, outside_gib=outside, inside_gib=inside)
    return FittedTwin(params, sd, margin, len(observations), pooled_counters(observations))


def pooled_counters(
    observations: Sequence[Observation],
) -> dict[tuple[str, str, float], PositionCounts]:
    """Every measured pair's counters, pooled per (drafter, prompt set, temperature).

    Only the study's own measurements: counters describe the prompts they were counted on.
    """
    out: dict[tuple[str, str, float], PositionCounts] = {}
    for obs in observations:
        spec, draft = obs.server.speculative, obs.server.draft
        if obs.oom or draft is None or not reusable(spec):
            continue
        for temperature, counts in obs.counts:
            if not counts.k or max(counts.drafts) <= 0:  # nothing was drafted in that window
                continue
            key = (draft, obs.prompt_set, round(temperature, 4))
            out[key] = out[key] + counts if key in out else counts
    return out


def _fit_times(
    hardware: Hardware,
    observations: Sequence[Observation],
    prior: FittedTwin,
    sd: dict[str, float],
    version: VllmVersion | None,
    drafting: TwinParams,
) -> tuple[dict[str, float], float]:
    """The step-time factors, each adaptive trial's steps priced at the K ``drafting`` picks,
    and how badly they explain the decode steps (the Gaussian fit's objective: squared
    residuals over their noise, plus the factors' squared distance from the prior)."""
    decode = ("decode", "draft", "overhead", "adaptive")
    mean = np.array([getattr(prior.params, n) for n in decode])
    spread = np.array([prior.prior_sd(n, PRIOR_SD[n]) for n in decode])
    rows: list[list[float]] = []
    ys: list[float] = []
    prefill_rows: list[list[float]] = []
    prefill_ys: list[float] = []
    for obs in observations:
        if obs.oom or obs.concurrency != 1 or obs.step_ms is None:
            continue
        target, draft = _models(obs.server)
        k = _drafted(hardware, obs, drafting, version)
        parts = step_parts(
            hardware, target, draft, obs.server, obs.input_tokens, obs.output_tokens, version, k
        )
        rows.append(
            [parts.decode_target, parts.decode_draft, parts.decode_overhead, parts.decode_adaptive]
        )
        ys.append(obs.step_ms / 1000.0)
        if obs.ttft_ms is not None:
            passes = parts.prefill_target + prior.params.draft * parts.prefill_draft
            rest = API_IN_S + API_OUT_S + prior.params.overhead * parts.prefill_overhead
            prefill_rows.append([passes, parts.first_token, 1.0])
            prefill_ys.append(obs.ttft_ms / 1000.0 - rest)
    noise = [_TIME_NOISE * y for y in ys]
    theta, theta_sd = _gaussian(mean, spread, rows, ys, noise)
    misfit = float(np.sum(((theta - mean) / spread) ** 2))
    if rows:
        misfit += float(np.sum(((np.asarray(rows) @ theta - ys) / np.asarray(noise)) ** 2))
    first = ("prefill", "first_token", "ttft_offset_s")
    p_mean = np.array([getattr(prior.params, n) for n in first])
    p_sd = np.array([prior.prior_sd(n, PRIOR_SD[n]) for n in first])
    p_noise = [_TIME_NOISE * max(y, 1e-3) for y in prefill_ys]
    pre, pre_sd = _gaussian(p_mean, p_sd, prefill_rows, prefill_ys, p_noise)
    out = {n: max(float(v), 0.05) for n, v in zip(decode, theta, strict=True)}
    out.update({n: max(float(v), 0.0) for n, v in zip(first[:2], pre[:2], strict=True)})
    out["ttft_offset_s"] = float(pre[2])
    sd.update({n: float(v) for n, v in zip(decode + first, [*theta_sd, *pre_sd], strict=True)})
    assert set(out) == {*TIME_FACTORS, "ttft_offset_s"}
    return out, misfit


def _drafted(
    hardware: Hardware, obs: Observation, params: TwinParams, version: VllmVersion | None
) -> int:
    """The tokens ``obs``'s decode steps drafted: its K, or under adaptive verification the K
    the engine's rule picks with the prior's factors and acceptance (its steps are that
    short: priced at the full K, they made the engine look faster than it is)."""
    spec = obs.server.speculative
    if spec is None or not verifies_adaptively(spec):
        return obs.server.k
    target, draft = _models(obs.server)
    rates = TwinPhysics(params).position_rates(
        target,
        draft,
        spec.method,
        obs.prompt_set,
        obs.temperature,
        spec.num_speculative_tokens,
        speculative=spec,
    )
    return drafted(
        hardware,
        target,
        draft,
        obs.server,
        obs.input_tokens,
        obs.output_tokens,
        version,
        params,
        expected_accepted(rates),
    )


def _fit_acceptance(
    observations: Sequence[Observation], prior: FittedTwin, sd: dict[str, float]
) -> dict[tuple[str, str], AcceptanceShift]:
    groups: dict[tuple[str, str], list[Observation]] = {}
    for obs in observations:
        key = method_key(obs.server)
        if key is not None and obs.reach and obs.drafts > 0:
            groups.setdefault((key, obs.prompt_set), []).append(obs)
    shifts = dict(prior.params.acceptance)
    for (key, prompt_set), group in groups.items():
        start = prior.params.shift(key, prompt_set)
        name = f"{key}|{prompt_set}"
        centre = _window_centre(group)
        logit, decay = _Regression(), _Regression()
        for obs in group:
            _add_observation(obs, prompt_set, logit, decay, centre)
        names = ("logit", "temperature", *SettingTerms._fields)
        start_at_centre = replace(start, logit=start.logit + centre.logit(start))
        theta, theta_sd = logit.solve(
            np.array([getattr(start_at_centre, n) for n in names]),
            np.array([prior.prior_sd(f"{name}|{n}", _SHIFT_SD[n]) for n in names]),
        )
        d_names = ("log_decay", "parallel_log_decay")
        d_theta, d_sd = decay.solve(
            np.array([getattr(start, n) for n in d_names]),
            np.array([prior.prior_sd(f"{name}|{n}", _SHIFT_SD[n]) for n in d_names]),
        )
        values = dict(zip(names + d_names, [*theta, *d_theta], strict=True))
        values["log_decay"] = min(values["log_decay"], 0.2)
        shift = AcceptanceShift(**{n: float(v) for n, v in values.items()})
        shifts[(key, prompt_set)] = replace(shift, logit=shift.logit - centre.logit(shift))
        for n, v in zip(names + d_names, [*theta_sd, *d_sd], strict=True):
            sd[f"{name}|{n}"] = float(v)
    return shifts


def _window_centre(group: Sequence[Observation]) -> SettingTerms:
    """The mean prompt-lookup window of a drafter's trials, which its window terms are fitted
    around: every lookup trial has a window, so measured at one window alone the shift is the
    drafter's, whatever that window is, and only trials at two windows move the slopes."""
    terms = [setting_terms(obs.server.speculative, obs.temperature) for obs in group]
    return SettingTerms(
        lookup_min=sum(t.lookup_min for t in terms) / len(terms),
        lookup_max=sum(t.lookup_max for t in terms) / len(terms),
    )


@dataclass
class _Regression:
    """The rows of one linear-Gaussian fit: ``y = x . theta + e``."""

    rows: list[list[float]] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    noise: list[float] = field(default_factory=list)

    def add(self, row: list[float], y: float, noise: float) -> None:
        self.rows.append(row)
        self.ys.append(y)
        self.noise.append(noise)

    def solve(self, mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _gaussian(mean, sd, self.rows, self.ys, self.noise)


def _add_observation(
    obs: Observation,
    prompt_set: str,
    logit: _Regression,
    decay: _Regression,
    centre: SettingTerms,
) -> None:
    """One trial's acceptance as rows of the two fits: its first position's logit against the
    shipped one of its settings, and its later positions' fall against the shipped decay.

    What the verifier accepts beyond the standard rule is taken out first (its shipped share of
    the rejections), so the drafter's terms describe the drafter under every verifier; what the
    verifier does beyond the shipped share is left to the block term. Its window is taken
    from ``centre``, the drafter's mean measured window (:func:`_window_centre`).
    """
    target, draft = _models(obs.server)
    method, spec = obs.server.method, obs.server.speculative
    gain = verifier_gain(spec, obs.temperature, prompt_set=prompt_set)
    terms = setting_terms(spec, obs.temperature)
    parallel = float(drafts_in_parallel(spec))
    floor = 0.5 / obs.drafts
    first = _unverified(obs.reach[0], gain, floor)
    base = shipped_logit(
        target, draft, method, prompt_set, obs.temperature, probabilistic=bool(terms.probabilistic)
    )
    logit.add(
        [1.0, obs.temperature**2, *(t - c for t, c in zip(terms, centre, strict=True))],
        math.log(first / (1 - first)) - base,
        max(1 / math.sqrt(obs.drafts * first * (1 - first)), _MIN_LOGIT_SD),
    )
    shipped = shipped_decay(method) * (SHIPPED_ACCEPTANCE.parallel_decay if parallel else 1.0)
    for i in range(1, len(obs.reach)):
        shown = obs.drafts * obs.reach[i - 1]  # drafts that got as far as position i
        if shown < 5 or obs.reach[i] <= 0:
            break
        rate = _unverified(min(obs.reach[i] / obs.reach[i - 1], 1 - 0.5 / shown), gain, floor)
        decay.add(
            [float(i), i * parallel],
            math.log(rate / first) - i * math.log(shipped),
            max(math.sqrt((1 - rate) / (shown * rate)), _MIN_LOGIT_SD) + 0.02 * i,
        )


def _unverified(rate: float, gain: float, floor: float) -> float:
    """The rate the standard rule would have accepted, where a verifier accepted ``gain`` of
    the rejections besides (kept inside (0, 1))."""
    standard = (rate - gain) / (1 - gain)
    return min(max(standard, floor), 1 - floor)


def _fit_memory(
    hardware: Hardware,
    observations: Sequence[Observation],
    prior: FittedTwin,
    sd: dict[str, float],
    version: VllmVersion | None,
) -> tuple[float, float, float]:
    """The memory outside and inside the budget the model missed under ``version``'s memory
    rules, and the margin to keep."""
    rows, ys, noise = [], [], []
    # (ran out of memory, shipped slacks, the side of the budget its message names)
    found: list[tuple[bool, Slacks, str | None]] = []
    for obs in observations:
        target, draft = _models(obs.server)
        shipped = estimate_memory(hardware, target, draft, obs.server, version=version)
        slacks = memory_slacks(hardware, target, draft, obs.server, version)
        found.append((obs.oom, slacks, oom_side(obs.failure) if obs.oom else None))
        if obs.peak_gib is not None and shipped.fits:
            rows.append([1.0])
            ys.append(obs.peak_gib - shipped.peak_gib)
            noise.append(_PEAK_NOISE_GIB)
    mean = np.array([prior.params.outside_gib])
    spread = np.array([prior.prior_sd("outside_gib", _OUTSIDE_SD)])
    outside, outside_sd = _gaussian(mean, spread, rows, ys, noise)
    sd["outside_gib"] = float(outside_sd[0])
    value = float(outside[0])
    # The prior's margin is for the memory it does not know; what it knows held outside vLLM
    # (a calibration's fit, other processes' memory) is in ``value`` and must not eat it.
    margin = prior.margin_gib
    if rows:  # measured memory replaces the prior's allowance for the model's own error
        margin = BASE_MARGIN_GIB + _MARGIN_SIGMAS * float(outside_sd[0])
    inside = prior.params.inside_gib
    # Each OOM counts on the side of the budget its message names (else the side it had least
    # to spare on); a start-up that ran caps both sides.
    sides = [
        (oom, s, side or (OUTSIDE if s[0] - value <= s[1] - inside else INSIDE))
        for oom, s, side in found
    ]
    outside_slack = [(oom, s[0]) for oom, s, side in sides if not oom or side == OUTSIDE]
    inside_slack = [(oom, s[1]) for oom, s, side in sides if not oom or side == INSIDE]
    return _learned(value, margin, outside_slack), _learned(inside, margin, inside_slack), margin


def _learned(held: float, margin: float, slack: Sequence[tuple[bool, float]]) -> float:
    """``held`` (GiB the model missed on one side of the budget), raised by the start-ups that
    ran out of memory on that side although the twin left them the margin to spare.

    Such an OOM with s GiB to spare under the model says more than ``s - margin`` is held; how
    much more nobody knows, so each one doubles the step beyond the largest s (0.5, 1, 2 GiB,
    ...): a memory model wrong by 2 GiB costs a couple of launches, not one per 0.1 GiB. Every
    method's start-ups count alike (weights, heads and KV cache share the budget). A start-up
    that ran with more to spare caps the estimate where it still passes with the margin.
    """
    unexplained = [s for oom, s in slack if oom and s - held >= margin]
    if not unexplained:
        return held
    worst = max(unexplained)
    raised = worst - margin + _OOM_STEP_GIB * 2.0 ** (len(unexplained) - 1)
    ran = [s - margin for oom, s in slack if not oom and s > worst]
    return float(max(held, min(raised, min(ran, default=math.inf))))
