"""How often the target accepts drafted tokens: the acceptance model of the simulator.

Acceptance is geometric: position ``i`` of a draft is only looked at when positions ``1..i-1``
were accepted, and is then accepted with a conditional probability ``alpha * decay ** (i - 1)``.
A draft model drifts away from the target the further it runs ahead, which is why K above 6
wastes work (BRIEF.md); one MTP layer rerun for later positions drifts faster still. An EAGLE
head drifts about as a draft model does (7 % a position: its acceptance lengths for K=2..7 in
vLLM issue #20780, the per-position rates of two 2026 runs). A block drafter guesses its whole
block from one context and drifts slowly (DFlash and DSpark per-position rates on MI300X, vLLM
blog PR #310). Prompt lookup (ngram) and suffix decoding copy text, and a copy that matched so
far tends to keep matching, so they have no decay.

Sampling spreads acceptance over a workload's prompts: at a temperature above 0 some prompts
are easy to guess and others not, and a later position is reached mostly on the easy ones, so
the rates a server counts fall more slowly than each prompt's, and rise where each prompt's are
flat. That is modelled for block drafters (:attr:`AcceptanceConstants.block_spread`), whose
flat rates show it: DSpark's counters rise from 0.71 to 0.86 along a block at temperature 1
(vLLM PR #52992) and stay flat or fall when greedy (PR #46995, blog PR #310).

``alpha`` is built in logit space, each part calibrated on a public figure
(``benchmarks/simulator_reference.py`` prints each next to the prediction):

- the method: a plain draft model by the draft/target pair (a bigger draft relative to its target
  guesses better, with diminishing returns above the reference 0.5B/32B ratio); an EAGLE/EAGLE-3
  head or MTP layers by their own logit. A head guesses worse than a good draft model (an EAGLE-1
  head accepts about 55 % of first tokens on chat) and wins on cost: one layer a pass;
- the workload: code repeats identifiers and structure, creative writing does not; for ngram and
  suffix, a user's prompt file is measured (how much of each prompt repeats itself);
- the sampling temperature: rejection sampling accepts less as both distributions flatten, slowly
  below 0.3 and sharply from about 0.8 (a quadratic penalty).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from tuner.catalog.models import ModelSpec
from tuner.config.methods import MethodFamily, method_of, speculating
from tuner.config.methods.block import BLOCK_SPREAD
from tuner.config.prompts import load_prompt_file
from tuner.config.trial import SpecMethod, SpeculativeConfig
from tuner.config.verification import DraftSampling, Verification
from tuner.errors import ConfigError

__all__ = [
    "DECAY",
    "POSITION_DECAY",
    "SHIPPED_ACCEPTANCE",
    "SPEC_METHODS",
    "AcceptanceConstants",
    "Rates",
    "acceptance_probability",
    "drafts_in_parallel",
    "expected_accepted",
    "loose_share",
    "position_rates",
    "prompt_repetition",
    "prompt_spread",
    "rates_over_prompts",
    "samples_drafts",
    "shipped_rates",
    "verified",
    "verifier_gain",
]

SPEC_METHODS = tuple(m.name for m in speculating())


@dataclass(frozen=True)
class AcceptanceConstants:
    """The acceptance model's fitted constants (logits per method and prompt set).

    Prompt sets: the four built-in ones, and ``math`` (GSM8K, MATH-500, GPQA, AIME: step-by-step
    reasoning repeats the problem's terms and its own derivation, so every drafter accepts more
    than on chat), which public figures are measured on.

    Attributes:
        draft_logit: the reference pair (Qwen2.5-0.5B drafting for 32B) per prompt set.
        head_logit: EAGLE/EAGLE-3 heads and MTP layers, per method and prompt set.
        block_logit: block drafters (DFlash, DSpark), per prompt set.
        ngram_logit: prompt lookup per prompt set.
        suffix_logit: what suffix trees gain over prompt lookup.
        decay: conditional acceptance's factor per later position, per method (on one prompt).
        block_spread: the standard deviation over a workload's prompts of a block drafter's
            first-position logit, per unit of temperature (0 when greedy: every prompt's
            argmax agreement is about as likely).
        parallel_decay: the factor on a head's decay when it drafts all K tokens in one pass
            (P-EAGLE): no position sees the drafts before it.
        temperature_penalty: logit lost per squared unit of temperature with greedy drafts
            (vLLM's default: the drafter's argmax is accepted only as often as the target would
            sample it).
        probabilistic_penalty: the same with ``draft_sample_method: probabilistic`` (drafts
            sampled from the drafter's distribution, accepted with min(1, p/q)).
        sampled_penalty: the same per method whose drafter loses otherwise (block drafters:
            a drafter trained to sample its block keeps more of it).
        block_verification_gain: share of each position's rejections that block verification
            (``rejection_sample_method: block``) turns into acceptances, per unit of temperature
            (none when greedy: both rules then accept the same prefix).
        fly_gain: share of each position's rejections that FLy (``rejection_sample_method:
            fly``, lossy) accepts anyway, per prompt set: its entropy gate opens where the
            target is unsure, so open-ended text gains and step-by-step answers do not.
    """

    draft_logit: Mapping[str, float]
    head_logit: Mapping[SpecMethod, Mapping[str, float]]
    block_logit: Mapping[str, float]
    ngram_logit: Mapping[str, float]
    suffix_logit: float
    decay: Mapping[SpecMethod, float]
    block_spread: float
    parallel_decay: float
    temperature_penalty: float
    probabilistic_penalty: float
    sampled_penalty: Mapping[SpecMethod, float]
    block_verification_gain: float
    fly_gain: Mapping[str, float]


# Conditional acceptance falls by this factor per position for a method without a decay of its
# own (a draft model's, tuner/config/methods/draft_model.py).
POSITION_DECAY = 0.95
SHIPPED_ACCEPTANCE = AcceptanceConstants(
    # Fitted on benchmarks/reference_figures.yaml where a figure measures the cell (the draft
    # pair on code and creative, EAGLE-1 on chat and math, EAGLE-3 on chat, MTP on chat and
    # math); every other cell keeps its earlier offset from the method's chat logit (code and
    # long-context above, creative below: code repeats identifiers, answers quote the context),
    # and math sits as far above chat as EAGLE-1's measured pair does.
    draft_logit={"code": 2.94, "long-context": 2.6, "chat": 2.0, "creative": 1.39, "math": 3.2},
    # Heads and MTP layers: each method's own prior (tuner/config/methods/).
    head_logit={m.name: m.prior.logit for m in speculating() if m.prior.logit},
    # Block drafters: chat from DSpark's counters (vllm PRs #52992 and #46995) and speed-up
    # (#52362), math and code from the MI300X K-curves on GSM8K and HumanEval (vLLM blog PR
    # #310); long contexts and creative writing keep their earlier offsets from chat.
    block_logit={"code": 2.55, "long-context": 1.95, "chat": 1.64, "creative": 1.14, "math": 2.50},
    # Prompt lookup only wins where the output repeats the input.
    ngram_logit={"code": -0.2, "long-context": 0.1, "chat": -1.4, "creative": -2.5, "math": -0.2},
    # Suffix trees also match earlier requests' outputs (ArcticInference: 1.4-3.9x over prompt
    # lookup on SWE-bench, agentic traffic that repeats itself).
    suffix_logit=0.5,
    decay={m.name: m.prior.decay for m in speculating() if m.prior.decay is not None},
    block_spread=BLOCK_SPREAD,
    parallel_decay=0.974,
    temperature_penalty=3.5,
    probabilistic_penalty=1.39,
    sampled_penalty={
        m.name: m.prior.sampled_penalty
        for m in speculating()
        if m.prior.sampled_penalty is not None
    },
    block_verification_gain=0.085,
    # FLy on Qwen3-27B's MTP layer, RTX 5090, greedy (github.com/ggml-org/llama.cpp/discussions/
    # 24804): +5.6 % tok/s over lossless on creative writing, within 1 % on GSM8K; 0.12 of the
    # rejections accepted gives the first at MTP's prior, math none. Chat sits between; code and
    # long contexts, whose answers are pinned by their input like math's, take math's.
    fly_gain={"creative": 0.12, "chat": 0.08, "code": 0.0, "long-context": 0.0, "math": 0.0},
)
DECAY = SHIPPED_ACCEPTANCE.decay
_DEFAULT_SET = "chat"  # a user dataset is assumed to look like chat traffic

# Logit gained per doubling of the draft/target parameter ratio, relative to 0.5B/32B; above that
# ratio a doubling gains less and the gain stops at _PAIR_CAP: a plain draft is trained apart from
# the target, and no size makes it read the target's states as a head does.
_PAIR_SLOPE = 0.4
_PAIR_SLOPE_ABOVE = 0.1
_PAIR_CAP = 0.15
_REFERENCE_RATIO = 0.494e9 / 32.5e9
# A prompt file's self-repetition (share of word trigrams seen earlier in the same prompt) to
# prompt lookup's logit: 0.19 (HumanEval's code prompts) maps to the code set's -0.2, 0.03
# (prose) to creative's -2.5.
_REPETITION_SLOPE = 14.0
_REPETITION_BASE = -2.9
# A draft with another tokenizer proposes ids that mean something else: nearly all rejected.
_MISMATCHED_ALPHA = 0.02


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def acceptance_probability(
    target: ModelSpec,
    draft: ModelSpec | None,
    method: SpecMethod,
    prompt_set: str,
    temperature: float,
    constants: AcceptanceConstants = SHIPPED_ACCEPTANCE,
    *,
    probabilistic: bool = False,
) -> float:
    """Probability that the first drafted token is accepted (the geometric model's ``alpha``).

    Args:
        target: the verifying model.
        draft: the draft model; ignored (may be None) for every method but ``draft_model``.
        method: one of :data:`SPEC_METHODS`.
        prompt_set: ``code``, ``creative``, ``chat``, ``long-context``; anything else (a user's
            dataset) is treated like ``chat``.
        temperature: the sampling temperature of the request (0 = greedy).
        constants: the model's constants (default: the shipped calibration).
        probabilistic: the drafter samples its tokens (``draft_sample_method``), not argmax.

    Returns:
        The per-token acceptance probability, in (0, 1).

    Raises:
        ValueError: method ``none``, or a draft-model method without a draft.
    """
    per_degree = constants.temperature_penalty
    if probabilistic:
        per_degree = constants.sampled_penalty.get(method, constants.probabilistic_penalty)
    penalty = per_degree * max(temperature, 0.0) ** 2
    family = method_of(method).family
    if family is MethodFamily.LOOKUP:
        base = _lookup_logit(prompt_set, constants.ngram_logit)
        suffix = constants.suffix_logit if method_of(method).matches_earlier_outputs else 0.0
        return _sigmoid(base + suffix - penalty)
    if method not in SPEC_METHODS:
        raise ValueError(f"speculative method {str(method)!r} drafts nothing to accept")
    drafts = constants.draft_logit
    base = drafts.get(prompt_set, drafts[_DEFAULT_SET])
    if family is MethodFamily.BLOCK:
        blocks = constants.block_logit
        return _sigmoid(blocks.get(prompt_set, blocks[_DEFAULT_SET]) - penalty)
    if method in constants.head_logit:
        logits = constants.head_logit[method]
        return _sigmoid(logits.get(prompt_set, logits[_DEFAULT_SET]) - penalty)
    if draft is None:
        raise ValueError("method 'draft_model' needs a draft model")
    if draft.tokenizer_family != target.tokenizer_family:
        return _MISMATCHED_ALPHA
    ratio = min(draft.params / target.params, 1.0)
    doublings = math.log2(ratio / _REFERENCE_RATIO)
    slope = _PAIR_SLOPE if doublings < 0 else _PAIR_SLOPE_ABOVE
    pair = min(slope * doublings, _PAIR_CAP)
    return _sigmoid(base + pair - penalty)


def _lookup_logit(prompt_set: str, logits: Mapping[str, float]) -> float:
    """Prompt lookup's logit: the built-in sets' calibrated values, or a file's repetition."""
    if prompt_set in logits:
        return logits[prompt_set]
    repetition = prompt_repetition(prompt_set)
    if repetition is None:
        return logits[_DEFAULT_SET]
    return _REPETITION_BASE + _REPETITION_SLOPE * repetition


@cache
def prompt_repetition(path: str) -> float | None:
    """How much of each prompt of a JSONL/ShareGPT file repeats itself (None: unreadable).

    The share of word trigrams already seen earlier in the same prompt, averaged over prompts:
    what prompt lookup can copy. Built-in sets are synthetic text and keep calibrated values.
    """
    if not Path(path).expanduser().is_file():
        return None
    try:
        requests = load_prompt_file(path, 256)
    except ConfigError:  # the workload reports a file it cannot read; here it just says nothing
        return None
    shares = []
    for request in requests:
        words = re.findall(r"\w+|[^\w\s]", request.prompt)
        grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
        seen: set[tuple[str, ...]] = set()
        repeated = 0
        for gram in grams:
            repeated += gram in seen
            seen.add(gram)
        if grams:
            shares.append(repeated / len(grams))
    return sum(shares) / len(shares) if shares else None


def position_rates(
    alpha: float,
    k: int,
    method: SpecMethod,
    constants: AcceptanceConstants = SHIPPED_ACCEPTANCE,
    *,
    parallel: bool = False,
    temperature: float = 0.0,
) -> tuple[float, ...]:
    """Conditional acceptance probability of each of the ``k`` drafted positions, as a server
    counts them over a workload's prompts.

    Args:
        alpha: the first position's probability, from :func:`acceptance_probability`.
        k: number of speculative tokens.
        method: a method of :data:`SPEC_METHODS` (its decay in ``constants``).
        constants: the model's constants (default: the shipped calibration).
        parallel: a head drafting all K tokens in one pass (``parallel_drafting``).
        temperature: the requests' sampling temperature (a block drafter's prompts spread).
    """
    decay = constants.decay.get(method, POSITION_DECAY)
    if parallel and not method_of(method).one_pass:
        decay *= constants.parallel_decay
    return rates_over_prompts(alpha, decay, k, prompt_spread(method, temperature, constants))


def prompt_spread(
    method: SpecMethod, temperature: float, constants: AcceptanceConstants = SHIPPED_ACCEPTANCE
) -> float:
    """The spread of ``method``'s first-position logit over a workload's prompts."""
    if method_of(method).family is not MethodFamily.BLOCK:
        return 0.0
    return constants.block_spread * max(temperature, 0.0)


# Gauss-Hermite nodes and weights for a standard normal's expectation.
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(24)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def rates_over_prompts(alpha: float, decay: float, k: int, spread: float) -> tuple[float, ...]:
    """The counted conditional rates of ``k`` positions when each prompt's first-position logit
    lies ``spread`` (a standard deviation) around the one whose mean rate over prompts is
    ``alpha``, and each prompt's later positions fall by ``decay`` a position.

    Position ``i``'s counted rate is the share of the drafts reaching ``i - 1`` that go on:
    the mean over prompts of reaching ``i`` over that of reaching ``i - 1``."""
    if spread <= 0.0:
        return tuple(min(alpha * decay**i, 1.0) for i in range(k))
    return _mixture_rates(alpha, decay, k, spread)


# Bounded: the simulator asks again for every request of a config, but a twin's fit asks at
# ever new first-position rates, which an unbounded cache would keep for the whole study.
@lru_cache(maxsize=4096)
def _mixture_rates(alpha: float, decay: float, k: int, spread: float) -> tuple[float, ...]:
    """:func:`rates_over_prompts` over a spread of prompts (Gauss-Hermite quadrature)."""
    centre = _centre(alpha, spread)
    first = 1.0 / (1.0 + np.exp(-(centre + spread * _NODES)))
    reach = np.ones_like(first)
    out: list[float] = []
    before = 1.0
    for i in range(k):
        reach = reach * np.minimum(first * decay**i, 1.0)
        now = float(_WEIGHTS @ reach)
        out.append(now / before if before > 0.0 else 0.0)
        before = now
    return tuple(out)


def _centre(alpha: float, spread: float) -> float:
    """The logit whose prompts, spread around it, accept ``alpha`` of first positions on
    average (bisection: the mean rises with the centre)."""
    low, high = -30.0, 30.0
    for _ in range(60):
        mid = (low + high) / 2
        mean = float(_WEIGHTS @ (1.0 / (1.0 + np.exp(-(mid + spread * _NODES)))))
        low, high = (mid, high) if mean < alpha else (low, mid)
    return (low + high) / 2


def verified(
    rates: tuple[float, ...],
    speculative: SpeculativeConfig | None,
    temperature: float,
    constants: AcceptanceConstants = SHIPPED_ACCEPTANCE,
    prompt_set: str = _DEFAULT_SET,
) -> tuple[float, ...]:
    """``rates`` under the server's verification: block verification accepts a share of each
    rejection (none at T=0, where both rules accept the same prefix); FLy a share of them on
    open-ended prompts (:func:`loose_share` says how many of its tokens those are)."""
    gain = verifier_gain(speculative, temperature, constants, prompt_set)
    if not gain:
        return rates
    return tuple(rate + gain * (1.0 - rate) for rate in rates)


def verifier_gain(
    speculative: SpeculativeConfig | None,
    temperature: float,
    constants: AcceptanceConstants = SHIPPED_ACCEPTANCE,
    prompt_set: str = _DEFAULT_SET,
) -> float:
    """The share of each position's rejections the server's verifier accepts all the same
    (0: standard verification)."""
    method = Verification.STANDARD if speculative is None else speculative.rejection_sample_method
    if method is Verification.BLOCK:
        return constants.block_verification_gain * min(max(temperature, 0.0), 1.0)
    if method is Verification.FLY:
        return constants.fly_gain.get(prompt_set, constants.fly_gain[_DEFAULT_SET])
    return 0.0


def loose_share(lossless: tuple[float, ...], lossy: tuple[float, ...]) -> float:
    """The share of a lossy server's tokens that the target would not have produced: at each
    position the draft reaches, the acceptances ``lossy`` adds over ``lossless``, over the
    tokens a step emits (its accepted drafts and the target's own)."""
    reach, loose, emitted = 1.0, 0.0, 1.0
    for exact, accepted in zip(lossless, lossy, strict=True):
        loose += reach * max(accepted - exact, 0.0)
        reach *= accepted
        emitted += reach
    return loose / emitted


def samples_drafts(speculative: SpeculativeConfig | None) -> bool:
    """Whether the drafter samples its proposals (``draft_sample_method: probabilistic``)."""
    return (
        speculative is not None and speculative.draft_sample_method == DraftSampling.PROBABILISTIC
    )


def drafts_in_parallel(speculative: SpeculativeConfig | None) -> bool:
    """Whether a head drafts all K tokens in one pass (``parallel_drafting``)."""
    return speculative is not None and speculative.parallel_drafting


# (target, draft, method, prompt set, temperature, K) -> conditional acceptance of each position;
# ``speculative=`` adds the server's drafting and verification options. The simulator takes one
# of these, so a study's fitted twin (or a benchmark's perturbed truth) can replace the shipped
# acceptance model without touching the scheduler.
class Rates(Protocol):
    def __call__(
        self,
        target: ModelSpec,
        draft: ModelSpec | None,
        method: SpecMethod,
        prompt_set: str,
        temperature: float,
        k: int,
        *,
        speculative: SpeculativeConfig | None = None,
    ) -> tuple[float, ...]: ...


def shipped_rates(
    target: ModelSpec,
    draft: ModelSpec | None,
    method: SpecMethod,
    prompt_set: str,
    temperature: float,
    k: int,
    constants: AcceptanceConstants = SHIPPED_ACCEPTANCE,
    *,
    speculative: SpeculativeConfig | None = None,
) -> tuple[float, ...]:
    """The acceptance model as a :data:`Rates` function (default: the shipped constants).

    ``speculative`` (the server's settings) adds its options: sampled drafts keep more of
    their acceptance as the temperature rises, a P-EAGLE head's later positions drift, and block
    verification accepts more at temperatures above 0.
    """
    alpha = acceptance_probability(
        target,
        draft,
        method,
        prompt_set,
        temperature,
        constants,
        probabilistic=samples_drafts(speculative),
    )
    rates = position_rates(
        alpha,
        k,
        method,
        constants,
        parallel=drafts_in_parallel(speculative),
        temperature=temperature,
    )
    return verified(rates, speculative, temperature, constants, prompt_set)


def expected_accepted(rates: tuple[float, ...]) -> tuple[float, ...]:
    """Unconditional probability that each position is accepted (all before it accepted too).

    Their sum is the expected number of accepted tokens per draft; vLLM's acceptance rate is that
    sum divided by K, and its mean acceptance length is one more than the sum.
    """
    out: list[float] = []
    reach = 1.0
    for rate in rates:
        reach *= rate
        out.append(reach)
    return tuple(out)
