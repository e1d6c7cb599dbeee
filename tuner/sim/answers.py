"""Simulated answers: the text a simulated server generates, and what a lossy verifier changes.

The simulator has no language model: an answer is a fixed cycle of words, one per token
(:func:`tuner.sim.server.openai.token_text`), the same for every lossless config. Under a lossy
verifier (``rejection_sample_method: fly``) each token is, with the probability
:func:`lossy_share` gives, one the target would not have produced: another word, drawn per
prompt and position, so the same prompt gets the same answer from the same config. The sim
backend and the fake server answer with :func:`answer_text`, so a quality check
(:mod:`tuner.bench.quality`) sees the acceptance model's loss on either.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from tuner.catalog.models import ModelSpec, load_model
from tuner.config.prompts import PromptRequest
from tuner.config.trial import ServerConfig, load_draft
from tuner.config.verification import Verification
from tuner.sim.acceptance import loose_share, shipped_rates
from tuner.sim.server.openai import prompt_set_of, token_words

__all__ = ["answer_text", "lossy_share", "simulated_answers"]

_OTHER = " otherwise"  # the word a lossy token becomes: never one of the cycle's


def lossy_share(
    target: ModelSpec, draft: ModelSpec | None, server: ServerConfig, prompt_set: str
) -> float:
    """The share of a greedy answer's tokens that ``server``'s verifier accepted although the
    target would not have produced them (0.0 for a lossless one)."""
    spec = server.speculative
    if spec is None or not spec.rejection_sample_method.lossy:
        return 0.0
    k = spec.num_speculative_tokens
    exact = replace(spec, rejection_sample_method=Verification.STANDARD)
    lossless = shipped_rates(target, draft, spec.method, prompt_set, 0.0, k, speculative=exact)
    lossy = shipped_rates(target, draft, spec.method, prompt_set, 0.0, k, speculative=spec)
    return loose_share(lossless, lossy)


def answer_text(prompt: str, start: int, words: list[str], loose: float) -> str:
    """``words``, tokens ``start`` onwards of the lossless answer to ``prompt``, each replaced
    with probability ``loose`` by a word the target would not have produced (drawn per prompt
    and position: a streamed answer and a whole one agree)."""
    if loose <= 0.0:
        return "".join(words)
    return "".join(
        _OTHER if _draw(prompt, start + i) < loose else word for i, word in enumerate(words)
    )


def _draw(prompt: str, position: int) -> float:
    digest = hashlib.sha256(f"{position}:{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def simulated_answers(server: ServerConfig, requests: Sequence[PromptRequest]) -> tuple[str, ...]:
    """The answers the fake server running ``server`` gives ``requests`` (greedy), the kind
    of each prompt guessed as the fake server guesses it."""
    target, draft = load_model(server.model), load_draft(server)
    return tuple(
        answer_text(
            r.prompt,
            0,
            token_words(0, r.max_tokens),
            lossy_share(target, draft, server, prompt_set_of(r.prompt)),
        )
        for r in requests
    )
