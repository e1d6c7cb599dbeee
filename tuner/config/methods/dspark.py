"""DSpark: a block drafter with a Markov head (and optionally a confidence head).

First in 0.25 (``DSparkModelTypes``, ``vllm/config/speculative.py``), where V1 cannot run it:
0.25-0.28 force it onto Model Runner V2 whatever the target (``VllmConfig.use_v2_model_runner``).
Without a drafter model it drafts with stages inside the target's own checkpoint
(DeepSeek-V4). ``dspark_draft_topk`` (0.28) evaluates the Markov projection on the top-k base
logits (Qwen3 drafters only). Adaptive verification came with it in 0.28, for DSpark alone
until 0.30 ("Adaptive verification only supported with DSpark"). From 0.34 its draft pass
samples from the anchor token by default (``sample_from_anchor``), taking K query slots a
request instead of K + 1 (``vllm/v1/worker/gpu/spec_decode/dspark/config.py:129-137``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, MethodFamily
from tuner.config.methods.block import BlockDrafter
from tuner.config.vllm_version import VllmVersion

__all__ = ["DSPARK"]

_FORCED_V2 = VllmVersion(0, 25, 0)
_ANCHOR_SAMPLING = VllmVersion(0, 34, 0)
_EVERY_TARGET_V2 = VllmVersion(0, 29, 0)


class _DSpark(BlockDrafter):
    @property
    def needs_model(self) -> bool:
        return False

    def forces_v2(self, version: VllmVersion, drafter: Mapping[str, Any]) -> bool:
        return _FORCED_V2 <= version < _EVERY_TARGET_V2

    def lookahead(self, k: int, version: VllmVersion) -> int:
        return k if version >= _ANCHOR_SAMPLING else k + 1


DSPARK = _DSpark(
    SpecMethod.DSPARK,
    MethodFamily.BLOCK,
    since=VllmVersion(0, 25, 0),
    since_source="vllm/config/speculative.py DSparkModelTypes (0.25)",
    keys=("dspark_draft_topk",),
    v2_since=VllmVersion(0, 25, 0),
    adaptive_since=VllmVersion(0, 28, 0),
    prior=AcceptancePrior(decay=0.995, sampled_penalty=1.02),
    # Its counters carry about, not exactly, as DFlash's (tuner/config/methods/dflash.py).
)
