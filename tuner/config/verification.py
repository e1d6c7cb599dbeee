"""How a server verifies drafted tokens and how its drafter samples them: vLLM's names.

The values a search space may set for ``rejection_sample_method``, ``draft_sample_method`` and
``draft_lm_head_quantization``
(vLLM 0.32's ``RejectionSampleMethod`` and ``DraftSampleMethod`` in
``vllm/config/speculative.py``); which releases and model runners honour them is
:mod:`tuner.config.vllm_features`.
"""

from __future__ import annotations

import enum

__all__ = ["DraftHead", "DraftSampling", "Verification"]


class Verification(enum.StrEnum):
    """vLLM's ``rejection_sample_method`` a server may run.

    ``standard`` and ``block`` are lossless. 0.33's ``fly`` is lossy: a space offers it only
    when it opts in (``quality.allow_lossy``), and each fly trial is checked against standard
    verification on the workload's prompts (:mod:`tuner.bench.quality`). ``synthetic``
    (forced acceptance) is a benchmarking tool, never offered.
    """

    STANDARD = "standard"  # each drafted token accepted or rejected on its own
    BLOCK = "block"  # the drafted tokens verified jointly (Sun et al.): more accepted per step
    FLY = "fly"  # a rejection at an uncertain position deferred, then accepted: lossy

    @property
    def lossy(self) -> bool:
        """Whether the server may answer what the target alone would not have."""
        return self is Verification.FLY


class DraftSampling(enum.StrEnum):
    """vLLM's ``draft_sample_method``: how the drafter picks the tokens it proposes."""

    GREEDY = "greedy"  # the drafter's argmax, treated as one-hot when verified
    PROBABILISTIC = "probabilistic"  # sampled; the full draft logits kept (more memory)


class DraftHead(enum.StrEnum):
    """vLLM 0.33's ``draft_lm_head_quantization``: the precision of the drafter's LM head (an
    EAGLE head's or MTP layers' projection onto the vocabulary, most of a head's weights)."""

    NONE = "none"  # the checkpoint's own precision (vLLM's None: the key is not written)
    FP8 = "fp8"
    NVFP4 = "nvfp4"
