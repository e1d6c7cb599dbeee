"""The twin in closed form for one request at a time: thousands of forecasts a second.

At concurrency 1 the engine runs one request after another: a prefill (one step per chunk of
``max-num-batched-tokens``), then decode steps that each verify 1+K tokens and emit one plus
the accepted drafts. :func:`step_parts` takes the shipped step-time model apart into what the
twin scales (target decode pass, draft passes, engine overhead, prefill passes), at the mean
context of the request; :func:`forecast` puts the parts back together under a twin's factors.
With neutral factors it matches ``predict`` to within a tenth of a percent (tests pin it);
its error against measurements is what the fit absorbs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.catalog.gpus import Hardware
from tuner.catalog.models import ModelSpec
from tuner.config.methods import MethodFamily, method_of
from tuner.config.trial import ServerConfig
from tuner.config.vllm_version import VllmVersion
from tuner.sim.memory import effective_batched_tokens
from tuner.sim.perfmodel import ForwardPass, PerfModel, verifies_adaptively
from tuner.sim.twin.model import TwinParams, TwinPhysics
from tuner.sim.virtual_time import API_IN_S, API_OUT_S

__all__ = [
    "Forecast",
    "StepParts",
    "decode_step_s",
    "decode_steps",
    "drafted",
    "forecast",
    "step_parts",
]


@dataclass(frozen=True)
class StepParts:
    """The shipped step-time parts of one request served alone, in seconds.

    Attributes:
        decode_target: the target's pass in one decode step (1+K tokens).
        decode_draft: the drafter's passes in one decode step (K, or one for a drafter that
            proposes all K at once).
        decode_overhead: the engine's work in one decode step, adaptive verification's aside.
        decode_adaptive: adaptive verification's own work in one decode step (0: off).
        prefill_target: the target's passes over the whole prompt.
        prefill_draft: the draft's passes over the whole prompt.
        prefill_overhead: the engine's work in the prefill steps.
        first_token: the speculative set-up before the first token streams.
        k: speculative tokens per step.
    """

    decode_target: float
    decode_draft: float
    decode_overhead: float
    decode_adaptive: float
    prefill_target: float
    prefill_draft: float
    prefill_overhead: float
    first_token: float
    k: int


@dataclass(frozen=True)
class Forecast:
    output_tok_s: float
    ttft_ms: float


def _eager(server: ServerConfig) -> bool:
    return any(
        name.lstrip("-").replace("_", "-") == "enforce-eager" and bool(value)
        for name, value in server.extra_flags
    )


def _mean_context(prompt_tokens: int, output_tokens: int) -> int:
    """The mean context while a request decodes."""
    return prompt_tokens + 1 + (output_tokens - 1) // 2


def step_parts(
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    prompt_tokens: int,
    output_tokens: int,
    version: VllmVersion | None = None,
    k: int | None = None,
) -> StepParts:
    """Takes one request's steps apart on vLLM ``version`` (None: the newest known; ``draft``
    only matters for a draft-model server), each decode step drafting ``k`` tokens (None: the
    server's K; adaptive verification drafts fewer: :func:`drafted`)."""
    uses_draft = method_of(server.method).family is MethodFamily.DRAFT
    perf = PerfModel(hardware, target, draft if uses_draft else None, server, version=version)
    k = server.k if k is None else k
    budget = effective_batched_tokens(server)
    prefill_target = prefill_draft = prefill_overhead = 0.0
    done = 0
    while done < prompt_tokens:
        chunk = min(prompt_tokens - done, budget)
        batch = ForwardPass(chunk, 1, done + chunk, chunk * (done + chunk / 2), graphed=False)
        prefill_target += perf.target_pass_s(batch)
        prefill_draft += perf.draft_pass_s(batch)
        prefill_overhead += perf.step_overhead_s(1, 0, perf.ngram)
        done += chunk
    context = _mean_context(prompt_tokens, output_tokens)
    graphed = not _eager(server)
    passes, per_pass = perf.drafting_passes(k)
    verified = (1 + k) if k else 0
    adaptive = perf.adaptive_step_s(verified)
    return StepParts(
        decode_target=perf.target_pass_s(
            ForwardPass(1 + k, 1, context, (1 + k) * context, graphed)
        ),
        decode_draft=passes
        * perf.draft_pass_s(ForwardPass(per_pass, 1, context, context, graphed)),
        decode_overhead=perf.step_overhead_s(1, verified, perf.ngram) - adaptive,
        decode_adaptive=adaptive,
        prefill_target=prefill_target,
        prefill_draft=prefill_draft,
        prefill_overhead=prefill_overhead,
        first_token=perf.first_token_s,
        k=k,
    )


def drafted(  # noqa: PLR0913  (the engine's rule takes each of them)
    hardware: Hardware,
    target: ModelSpec,
    draft: ModelSpec | None,
    server: ServerConfig,
    prompt_tokens: int,
    output_tokens: int,
    version: VllmVersion | None,
    params: TwinParams,
    reach: Sequence[float],
) -> int:
    """The tokens a decode step drafts for one request at a time: the server's K, or where
    adaptive verification sizes each step's budget, the K the engine's own rule picks
    (:meth:`~tuner.sim.perfmodel.PerfModel.adaptive_k`) under the twin's factors at the
    request's mean context, its positions reached with ``reach``. Priced at the full K, an
    adaptive draft model's config came out up to a quarter slower than the engine runs it."""
    if not verifies_adaptively(server.speculative):
        return server.k
    uses_draft = method_of(server.method).family is MethodFamily.DRAFT
    perf = TwinPhysics(params).perf_model(
        hardware, target, draft if uses_draft else None, server, version
    )
    context = _mean_context(prompt_tokens, output_tokens)
    return perf.adaptive_k(1, context, reach, graphed=not _eager(server))


def decode_step_s(parts: StepParts, params: TwinParams) -> float:
    """One decode step under the twin's factors."""
    return (
        params.decode * parts.decode_target
        + params.draft * parts.decode_draft
        + params.overhead * parts.decode_overhead
        + params.adaptive * parts.decode_adaptive
    )


def prefill_s(parts: StepParts, params: TwinParams) -> float:
    """The prompt's prefill steps under the twin's factors, speculative set-up included."""
    passes = parts.prefill_target + params.draft * parts.prefill_draft
    fixed = params.first_token * parts.first_token + params.ttft_offset_s
    return params.prefill * passes + params.overhead * parts.prefill_overhead + fixed


def forecast(
    parts: StepParts, params: TwinParams, accepted_per_step: float, output_tokens: int
) -> Forecast:
    """Throughput and TTFT of requests served one at a time.

    Args:
        parts: from :func:`step_parts`.
        params: the twin's factors.
        accepted_per_step: expected accepted drafts per decode step (0 without speculation).
        output_tokens: tokens each request generates.
    """
    ttft = API_IN_S + prefill_s(parts, params) + API_OUT_S
    steps = decode_steps(accepted_per_step, parts.k, output_tokens)
    request = ttft + steps * decode_step_s(parts, params)
    return Forecast(output_tokens / request, ttft * 1000.0)


@functools.lru_cache(maxsize=4096)  # a re-screen asks it for every batch size and prompt length
def decode_steps(accepted_per_step: float, k: int, output_tokens: int) -> int:
    """Decode steps after the first token, counted as the noise-free engine counts them.

    The engine emits whole tokens: expected acceptance accrues as credit and only its whole
    part is emitted, so the count is not simply ``(output - 1) / (1 + accepted)``.
    """
    credit, generated, steps = 0.0, 1, 0
    while generated < output_tokens:
        credit += accepted_per_step
        accepted = min(int(credit), k)
        credit -= accepted
        generated += min(1 + accepted, output_tokens - generated)
        steps += 1
    return steps
