"""How often the target accepts drafted tokens: the acceptance model of the simulator.

Acceptance is geometric: position ``i`` of a draft is only looked at when positions ``1..i-1``
were accepted, and is then accepted with a conditional probability. For a draft model that
probability is ``alpha * POSITION_DECAY ** (i - 1)``: the draft drifts away from the target the
further it runs ahead, which is why K above 6 wastes work (BRIEF.md). Prompt lookup (ngram) copies
text from the prompt, and a copy that matched so far tends to keep matching, so it has no decay.

``alpha`` is built in logit space from three parts, each calibrated on the reference table:

- the draft/target pair: a bigger draft relative to its target guesses better;
- the workload: code repeats identifiers and structure, creative writing does not;
- the sampling temperature: rejection sampling accepts less as both distributions flatten, slowly
  below 0.3 and sharply from about 0.8 (a quadratic penalty).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tuner.catalog.models import ModelSpec

__all__ = [
    "NGRAM",
    "POSITION_DECAY",
    "SPEC_METHODS",
    "Rates",
    "acceptance_probability",
    "expected_accepted",
    "position_rates",
    "shipped_rates",
]

NGRAM = "ngram"
DRAFT_MODEL = "draft_model"
SPEC_METHODS = (DRAFT_MODEL, NGRAM)

# Conditional acceptance falls by this factor per position for draft models.
POSITION_DECAY = 0.95

# Workload offsets in logit space for the reference pair (Qwen2.5-0.5B drafting for 32B). Code and
# creative are fitted to the reference table (78.2 % and 51.4 % acceptance at K=4, T=0.2); chat and
# long-context sit between, long-context close to code because answers quote the context.
_DRAFT_LOGIT = {"code": 3.05, "long-context": 2.6, "chat": 2.0, "creative": 1.42}
# Prompt lookup only wins where the output repeats the input.
_NGRAM_LOGIT = {"code": -0.2, "long-context": 0.1, "chat": -1.4, "creative": -2.5}
_DEFAULT_SET = "chat"  # a user dataset is assumed to look like chat traffic

# Logit gained per doubling of the draft/target parameter ratio, relative to 0.5B/32B.
_PAIR_SLOPE = 0.4
_REFERENCE_RATIO = 0.494e9 / 32.5e9
# Logit lost per squared unit of temperature.
_TEMPERATURE_PENALTY = 3.5
# A draft with another tokenizer proposes ids that mean something else: nearly all rejected.
_MISMATCHED_ALPHA = 0.02


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


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
        draft: the draft model; ignored (may be None) for ``method="ngram"``.
        method: ``"draft_model"`` or ``"ngram"``.
        prompt_set: ``code``, ``creative``, ``chat``, ``long-context``; anything else (a user's
            dataset) is treated like ``chat``.
        temperature: the sampling temperature of the request (0 = greedy).

    Returns:
        The per-token acceptance probability, in (0, 1).

    Raises:
        ValueError: an unknown method, or a draft-model method without a draft.
    """
    penalty = _TEMPERATURE_PENALTY * max(temperature, 0.0) ** 2
    if method == NGRAM:
        base = _NGRAM_LOGIT.get(prompt_set, _NGRAM_LOGIT[_DEFAULT_SET])
        return _sigmoid(base - penalty)
    if method != DRAFT_MODEL:
        raise ValueError(f"unknown speculative method {method!r}; known: {', '.join(SPEC_METHODS)}")
    if draft is None:
        raise ValueError("method 'draft_model' needs a draft model")
    if draft.tokenizer_family != target.tokenizer_family:
        return _MISMATCHED_ALPHA
    ratio = min(draft.params / target.params, 1.0)
    pair = _PAIR_SLOPE * math.log2(ratio / _REFERENCE_RATIO)
    base = _DRAFT_LOGIT.get(prompt_set, _DRAFT_LOGIT[_DEFAULT_SET])
    return _sigmoid(base + pair - penalty)


def position_rates(alpha: float, k: int, method: str) -> tuple[float, ...]:
    """Conditional acceptance probability of each of the ``k`` drafted positions.

    Args:
        alpha: the first position's probability, from :func:`acceptance_probability`.
        k: number of speculative tokens.
        method: ``"draft_model"`` (decaying) or ``"ngram"`` (constant).
    """
    decay = 1.0 if method == NGRAM else POSITION_DECAY
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
