"""Multi-token-prediction (MTP) layers inside a target's own checkpoint, as vLLM finds them.

vLLM 0.32 drafts with ``method: mtp`` for every model family whose checkpoint carries MTP
layers. ``SpeculativeConfig.hf_config_override`` (``vllm/config/speculative.py``) recognises
each family by its ``model_type`` or first architecture, rewrites it into an MTP drafter
(``MTPModelTypes``: ``deepseek_mtp``, ``qwen3_5_mtp``, ``glm5_next_mtp``, ...) and reads the
layer count (``n_predict``) from one config key. :data:`FAMILIES` is that function as data
(``mtp.yaml``), one entry per family in the order vLLM tests them; :func:`mtp_layers` applies it
to a ``config.json``. The per-family method names (``method: qwen3_5_mtp``) are deprecated aliases
of ``mtp`` in 0.32 ("method ... is deprecated and replaced with mtp"); a search space writes
``mtp``.

Two families are no MTP targets for spectune: DeepSeek-V4.1 ships DSpark stages under
``mtp.*`` and vLLM refuses ``mtp`` for it ("Use speculative method 'dspark'"), and Gemma 4's
MTP drafter is a separate assistant checkpoint, not layers of the target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.entries import MtpFamily, mtp_families
from tuner.errors import IncompatibleDraftError

__all__ = ["FAMILIES", "MTP_MODEL_TYPES", "MtpFamily", "check_mtp", "mtp_family", "mtp_layers"]

MTP_MODEL_TYPES = frozenset(
    {
        "deepseek_mtp",
        "dots3_note_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "glm4_moe_lite_mtp",
        "glm_ocr_mtp",
        "ernie_mtp",
        "nemotron_h_mtp",
        "exaone_moe_mtp",
        "exaone4_5_mtp",
        "qwen3_next_mtp",
        "qwen4_exp_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "bailing_hybrid_v3_mtp",
        "minimax_m3_mtp",
        "bailing_hybrid_mtp",
        "mtp",
        "kimi_k3_mtp",
        "pangu_ultra_moe_mtp",
        "step3p5_mtp",
        "hy_v3_mtp",
        "hy_v4_mtp",
        "gemma4_mtp",
        "inkling_mtp",
        "glm5_next_mtp",
    }
)
"""vLLM 0.32's ``MTPModelTypes`` (``vllm/config/speculative.py``), verbatim."""


FAMILIES: tuple[MtpFamily, ...] = mtp_families()
"""``mtp.yaml``: one entry per family, in the order vLLM tests them."""


def _merged(config: Mapping[str, Any]) -> dict[str, Any]:
    """The text model's keys over the wrapper's (multimodal and Kimi-K3 configs nest them)."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else dict(config)


def mtp_family(config: Mapping[str, Any]) -> MtpFamily | None:
    """The family vLLM 0.32 would draft with for this ``config.json``; None for no MTP family."""
    merged = _merged(config)
    model_types = {config.get("model_type"), merged.get("model_type")}
    archs = [*(config.get("architectures") or ()), *(merged.get("architectures") or ())]
    first = str(archs[0]) if archs else ""
    return next(
        (f for f in FAMILIES if model_types & f.model_types or first in f.architectures), None
    )


def mtp_layers(config: Mapping[str, Any]) -> int:
    """MTP layers a target's checkpoint carries that vLLM 0.32 can draft with (0: none)."""
    family = mtp_family(config)
    if family is None:
        return 0
    merged = _merged(config)
    if family.drafter == "inkling_mtp":
        nested = merged.get("mtp_config") or config.get("mtp_config") or {}
        return int(nested.get("num_nextn_predict_layers") or 0)
    if not family.layers_key or merged.get(family.layers_key) is None:
        return family.default
    return int(merged[family.layers_key] or 0)  # Kimi-K2 is a DeepSeek-V3 with 0 layers


def check_mtp(target_id: str, config: Mapping[str, Any]) -> int:
    """The target's MTP layer count, or a refusal naming what is missing.

    Raises:
        IncompatibleDraftError: the target has no MTP layers vLLM can use.
    """
    if _merged(config).get("model_type") == "deepseek_v41":
        raise IncompatibleDraftError(
            f"{target_id} (DeepSeek-V4.1) ships DSpark stages, not MTP layers, and vLLM refuses "
            "mtp for it: use method dspark"
        )
    layers = mtp_layers(config)
    if layers < 1:
        raise IncompatibleDraftError(
            f"{target_id} carries no MTP layers vLLM can draft with (no MTP family of vLLM "
            "0.32's hf_config_override, or a layer count of 0), e.g. DeepSeek-V3/R1, GLM-4.5, "
            "Qwen3-Next, Qwen3.5, MiMo: remove method mtp, or pick an EAGLE head, a block "
            "drafter or a draft model"
        )
    return layers
