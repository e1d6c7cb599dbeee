"""The quality check of a lossy verifier: the same greedy prompts to it and to standard
verification, their answers compared word by word.

vLLM's ``fly`` (0.33) accepts some drafted tokens the target would not have produced, so the
server answers differently from the target alone; standard and block verification never do
(greedy, their answer is the target's own). A fly trial is therefore checked: the first
``quality.prompts`` prompts of the workload, sent greedy (temperature 0, one seed) with
``quality.max_tokens`` tokens each, to the fly server and to a lossless server of the same
target (:mod:`tuner.trial.runner` decides which), and :func:`compare` scores the answers:

- ``identical``: how many answers are the same text;
- ``similarity``: the mean over prompts of the share of words the two answers share in order
  (``difflib``'s ratio over words: 1.0 identical, 0.0 nothing in common).

The answers themselves are not stored: they are the user's prompts' continuations.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from tuner.config.prompts import PromptRequest
from tuner.config.workload import WorkloadSpec, build_requests
from tuner.errors import MeasurementError
from tuner.results import Endpoint

__all__ = ["QualityCheck", "check_requests", "compare", "complete"]

_SEED = 0  # the same sampling seed to both servers (greedy needs none; it costs nothing)


@dataclass(frozen=True)
class QualityCheck:
    """How a lossy server's greedy answers compare with standard verification's.

    Attributes:
        prompts: answers compared.
        identical: of them, the same text.
        similarity: the mean share of words kept in order (1.0: every answer identical).
    """

    prompts: int
    identical: int
    similarity: float


def check_requests(workload: WorkloadSpec, count: int, max_tokens: int) -> list[PromptRequest]:
    """The check's prompts: the workload's first ``count``, each answered at ``max_tokens``."""
    return [
        PromptRequest(r.messages, r.prompt, max_tokens, r.approx_input_tokens)
        for r in build_requests(workload, count)
    ]


def compare(reference: Sequence[str], answers: Sequence[str]) -> QualityCheck:
    """Scores ``answers`` against the lossless ``reference``, prompt by prompt.

    Raises:
        ValueError: the two differ in length (they answer the same prompts).
    """
    if len(reference) != len(answers):
        raise ValueError(f"{len(answers)} answers for {len(reference)} reference answers")
    shares = [
        difflib.SequenceMatcher(None, ref.split(), got.split(), autojunk=False).ratio()
        if ref.split() or got.split()
        else 1.0
        for ref, got in zip(reference, answers, strict=True)
    ]
    same = sum(ref == got for ref, got in zip(reference, answers, strict=True))
    return QualityCheck(len(shares), same, sum(shares) / len(shares) if shares else 1.0)


def complete(
    endpoint: Endpoint,
    requests: Sequence[PromptRequest],
    *,
    timeout_s: float = 120.0,
) -> tuple[str, ...]:
    """The greedy answer of the server at ``endpoint`` to each of ``requests``, through
    ``/v1/chat/completions`` as the measurement sends them (blocking).

    Raises:
        MeasurementError: a request failed or the answer has no text.
    """
    return asyncio.run(_answers(endpoint, requests, timeout_s))


async def _answers(
    endpoint: Endpoint, requests: Sequence[PromptRequest], timeout_s: float
) -> tuple[str, ...]:
    async with httpx.AsyncClient(base_url=endpoint.base_url, timeout=timeout_s) as client:
        return tuple([await _answer(client, endpoint.model, r) for r in requests])


async def _answer(client: httpx.AsyncClient, model: str, request: PromptRequest) -> str:
    payload = {
        "model": model,
        "messages": request.chat_messages(),
        "max_tokens": request.max_tokens,
        "temperature": 0.0,
        "seed": _SEED,
        "stream": False,
    }
    try:
        response = await client.post("/v1/chat/completions", json=payload)
        response.raise_for_status()
        text = response.json()["choices"][0]["message"]["content"]
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise MeasurementError(f"the quality check's request failed: {exc}") from None
    if not isinstance(text, str):
        raise MeasurementError("the quality check's answer has no text")
    return text
