"""How a server verifies drafted tokens and how its drafter samples them: vLLM's names.

The values a search space may set for ``rejection_sample_method`` and ``draft_sample_method``
(vLLM 0.32's ``RejectionSampleMethod`` and ``DraftSampleMethod`` in
``vllm/config/speculative.py``); which releases and model runners honour them is
:mod:`tuner.config.vllm_features`.
"""

from __future__ import annotations

import enum

__all__ = ["DraftSampling", "Verification"]


class Verification(enum.StrEnum):
    """vLLM's ``rejection_sample_method`` a server may run (both lossless).

    ``synthetic`` (forced acceptance) and 0.33's ``fly`` (lossy) change what the server
    answers, so no search space may propose them.
    """

    STANDARD = "standard"  # each drafted token accepted or rejected on its own
    BLOCK = "block"  # the drafted tokens verified jointly (Sun et al.): more accepted per step


class DraftSampling(enum.StrEnum):
    """vLLM's ``draft_sample_method``: how the drafter picks the tokens it proposes."""

    GREEDY = "greedy"  # the drafter's argmax, treated as one-hot when verified
    PROBABILISTIC = "probabilistic"  # sampled; the full draft logits kept (more memory)
