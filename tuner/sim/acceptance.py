"""How often the target accepts drafted tokens: the acceptance model of the simulator.

Acceptance is geometric: position ``i`` of a draft is only looked at when positions ``1..i-1``
were accepted, and is then accepted with a conditional probability. For a draft model that
probability is ``alpha * decay ** (i - 1)``: a drafter drifts away from the target the further
it runs ahead, which is why K above 6 wastes work (BRIEF.md). Each method has its own decay
(:data:`DECAY`): EAGLE-3's training-time test keeps later positions close (arXiv 2503.01840),
EAGLE-1 heads drift faster, MTP beyond its one trained layer reuses that layer (vLLM warns "may
result in lower acceptance rate"). Prompt lookup (ngram) and suffix decoding copy text, and a copy
that matched so far tends to keep matching, so they have no decay.

``alpha`` is built in logit space, each part calibrated on a public figure
(``benchmarks/simulator_reference.py`` prints each next to the prediction):

- the method: a plain draft model by the draft/target pair (a bigger draft relative to its target
  guesses better, with diminishing returns above the reference 0.5B/32B ratio, so a 1B draft for
  an 8B target stays below an EAGLE-3 head of that target); an EAGLE/EAGLE-3 head or MTP layers
  by a fixed offset, since they read the target's own hidden states;
- the workload: code repeats identifiers and structure, creative writing does not; for ngram and
  suffix, a user's prompt file is measured (how much of each prompt repeats itself);
- the sampling temperature: rejection sampling accepts less as both distributions flatten, slowly
  below 0.3 and sharply from about 0.8 (a quadratic penalty).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

from tuner.catalog.models import ModelSpec
from tuner.config.prompts import load_prompt_file
from tuner.config.trial import SpecMethod
from tuner.errors import ConfigError

__all__ = [
    "DECAY",
    "NGRAM",
    "POSITION_DECAY",
    "SPEC_METHODS",
    "Rates",
    "acceptance_probability",
    "expected_accepted",
    "nearest_method",
    "position_rates",
    "prompt_repetition",
    "shipped_rates",
]

NGRAM = "ngram"
DRAFT_MODEL = "draft_model"
SPEC_METHODS = tuple(str(m) for m in SpecMethod if m is not SpecMethod.NONE)

# Conditional acceptance falls by this factor per position for draft models.
POSITION_DECAY = 0.95
DECAY = {
    DRAFT_MODEL: POSITION_DECAY,
    NGRAM: 1.0,
    "suffix": 1.0,
    "eagle": 0.93,  # EAGLE-1 drifts faster than EAGLE-3 (arXiv 2503.01840, Fig. 1)
    "eagle3": 0.97,
    "mtp": 0.90,  # later positions rerun the one MTP layer
}
# Heads and MTP read the target's hidden states: their own logits per workload, fitted to
# EAGLE-3's 1.65x at K=2 on one H100 on MT-Bench-like chat (vllm PR #16937), EAGLE-1 within 5 %
# of EAGLE-3 at their best K (vllm #20780), DeepSeek-R1's MTP at 81-82 % for K=1 (vllm PR
# #12755; the DeepSeek-V3 report gives 85-90 %). On code an EAGLE-3 head stays above a plain
# draft of any size (the reference pair's 3.05 plus at most _PAIR_CAP).
_HEAD_LOGIT = {
    "eagle3": {"code": 3.4, "long-context": 2.4, "chat": 1.1, "creative": 0.6},
    "eagle": {"code": 3.25, "long-context": 2.25, "chat": 0.95, "creative": 0.45},
    "mtp": {"code": 2.5, "long-context": 2.0, "chat": 1.52, "creative": 1.0},
}
# Suffix trees also match earlier requests' outputs (ArcticInference: 1.4-3.9x over prompt
# lookup on SWE-bench, agentic traffic that repeats itself).
_SUFFIX_LOGIT = 0.5

# Workload offsets in logit space for the reference pair (Qwen2.5-0.5B drafting for 32B). Code and
# creative are fitted to the reference table (78.2 % and 51.4 % acceptance at K=4, T=0.2); chat and
# long-context sit between, long-context close to code because answers quote the context.
_DRAFT_LOGIT = {"code": 3.05, "long-context": 2.6, "chat": 2.0, "creative": 1.42}
# Prompt lookup only wins where the output repeats the input.
_NGRAM_LOGIT = {"code": -0.2, "long-context": 0.1, "chat": -1.4, "creative": -2.5}
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
# Logit lost per squared unit of temperature.
_TEMPERATURE_PENALTY = 3.5
# A draft with another tokenizer proposes ids that mean something else: nearly all rejected.
_MISMATCHED_ALPHA = 0.02


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# The methods vLLM 0.25-0.32 added run on the physics of the nearest method the simulator
# models, until the simulator is calibrated for them (block drafting's one pass, block
# verification, adaptive verification: issue 24, item 5): ngram_gpu is ngram's lookup on the
# GPU; a DFlash or DSpark drafter, like an EAGLE-3 head, reads the target's hidden states.
_NEAREST = {"ngram_gpu": NGRAM, "dflash": "eagle3", "dspark": "eagle3"}


def nearest_method(method: str) -> str:
    """The method whose physics the simulator runs ``method`` on (itself, where it has its
    own)."""
    return _NEAREST.get(method, method)


def acceptance_probability(
    target: ModelSpec,
    draft: ModelSpec | None,
    method: str,
    prompt_set: str,
    temperature: float,
) -> float:
    """Probability that the first drafted token is accepted (the geometric model's ``alpha``).

    Args:
        target: the verifying model.
        draft: the draft model; ignored (may be None) for every method but ``draft_model``.
        method: one of :data:`SPEC_METHODS`.
        prompt_set: ``code``, ``creative``, ``chat``, ``long-context``; anything else (a user's
            dataset) is treated like ``chat``.
        temperature: the sampling temperature of the request (0 = greedy).

    Returns:
        The per-token acceptance probability, in (0, 1).

    Raises:
        ValueError: an unknown method, or a draft-model method without a draft.
    """
    penalty = _TEMPERATURE_PENALTY * max(temperature, 0.0) ** 2
    method = nearest_method(method)
    if method in (NGRAM, "suffix"):
        base = _lookup_logit(prompt_set) + (_SUFFIX_LOGIT if method == "suffix" else 0.0)
        return _sigmoid(base - penalty)
    if method not in SPEC_METHODS:
        raise ValueError(f"unknown speculative method {method!r}; known: {', '.join(SPEC_METHODS)}")
    base = _DRAFT_LOGIT.get(prompt_set, _DRAFT_LOGIT[_DEFAULT_SET])
    if method in _HEAD_LOGIT:
        logits = _HEAD_LOGIT[method]
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


def _lookup_logit(prompt_set: str) -> float:
    """Prompt lookup's logit: the built-in sets' calibrated values, or a file's repetition."""
    if prompt_set in _NGRAM_LOGIT:
        return _NGRAM_LOGIT[prompt_set]
    repetition = prompt_repetition(prompt_set)
    if repetition is None:
        return _NGRAM_LOGIT[_DEFAULT_SET]
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


def position_rates(alpha: float, k: int, method: str) -> tuple[float, ...]:
    """Conditional acceptance probability of each of the ``k`` drafted positions.

    Args:
        alpha: the first position's probability, from :func:`acceptance_probability`.
        k: number of speculative tokens.
        method: a method of :data:`SPEC_METHODS` (its :data:`DECAY`).
    """
    decay = DECAY.get(nearest_method(method), POSITION_DECAY)
    return tuple(min(alpha * decay**i, 1.0) for i in range(k))


# (target, draft, method, prompt set, temperature, K) -> conditional acceptance of each position.
# The simulator takes one of these, so a study's fitted twin (or a benchmark's perturbed truth)
# can replace the shipped acceptance model without touching the engine.
Rates = Callable[[ModelSpec, ModelSpec | None, str, str, float, int], tuple[float, ...]]


def shipped_rates(
    target: ModelSpec,
    draft: ModelSpec | None,
    method: str,
    prompt_set: str,
    temperature: float,
    k: int,
) -> tuple[float, ...]:
    """The shipped acceptance model as a :data:`Rates` function."""
    alpha = acceptance_probability(target, draft, method, prompt_set, temperature)
    return position_rates(alpha, k, method)


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
