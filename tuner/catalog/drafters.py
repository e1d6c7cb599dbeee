"""Drafters that propose a whole block in one pass: DFlash and DSpark, and P-EAGLE heads.

A block drafter (DFlash, arXiv 2602.06036; DSpark) reads the target's hidden states from a few
of its layers (``target_layer_ids``), borrows its embeddings and LM head, and fills a block of
``[bonus, mask, ..., mask]`` queries in one non-causal forward. It is trained for one target and
one block width, so its K follows that width and its shapes must be the target's. A P-EAGLE
head is an EAGLE/EAGLE-3 head trained the same way (``parallel_drafting``).

The rules below are what vLLM 0.32 checks or needs when it builds the drafter
(``vllm/config/speculative.py``, ``SpeculativeConfig.__post_init__`` and
``_validate_qwen3_omni_dspark``; ``vllm/v1/worker/gpu/spec_decode/utils.py``
``get_parallel_drafting_token_id``); each refusal is one line that names the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.spec_method import SpecMethod
from tuner.errors import IncompatibleDraftError

__all__ = [
    "BLOCK_ARCHITECTURES",
    "DFLASH_VARIANTS",
    "block_kind",
    "block_size",
    "check_block_drafter",
    "check_parallel_head",
    "check_topk",
    "drafter_params",
    "k_limit",
    "mask_token_id",
]

# Architectures vLLM 0.32 detects as each method (SpeculativeConfig.__post_init__) and
# registers (vllm/model_executor/models/registry.py, _SPECULATIVE_DECODING_MODELS).
# 0.33+'s DFlash variants, chosen by the checkpoint (vLLM 0.34's model registry,
# vllm/model_executor/models/registry.py:687-717): XPress, and DFlash2's beam and recursive
# forms; tuner.config.methods.dflash dates them.
_XPRESS = frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel"})
DFLASH_VARIANTS = _XPRESS | {"DFlash2BeamDraftModel", "DFlash2RicursiveDraftModel"}
_DFLASH = DFLASH_VARIANTS | {"DFlashDraftModel", "DFlash2DraftModel", "LiLiCorrDraftModel"}
_QWEN3_DSPARK = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel"})
_DSPARK = _QWEN3_DSPARK | {"Gemma4DSparkModel", "K3DSparkModel", "DSparkDraftModel"}
BLOCK_ARCHITECTURES = _DFLASH | _DSPARK
_OMNI_TARGETS = frozenset(
    {"Qwen3OmniMoeForConditionalGeneration", "Qwen3OmniMoeThinkerForConditionalGeneration"}
)


def _archs(config: Mapping[str, Any]) -> set[str]:
    return {str(a) for a in config.get("architectures") or ()}


def _nested(config: Mapping[str, Any], section: str, name: str) -> Any:
    inner = config.get(section)
    return inner.get(name) if isinstance(inner, Mapping) else None


def _dspark_value(config: Mapping[str, Any], name: str) -> Any:
    """DSpark's precedence (vLLM's ``_get_qwen3_dspark_value``): dflash_config, eagle_config,
    then the top level."""
    for section in ("dflash_config", "eagle_config"):
        value = _nested(config, section, name)
        if value is not None:
            return value
    return config.get(name)


def block_kind(config: Mapping[str, Any], hf_id: str = "") -> SpecMethod | None:
    """``dflash``, ``dspark`` or None, as vLLM 0.32 detects the method from a drafter: its
    architecture, else ``dflash``/``dspark`` in its name."""
    archs, name = _archs(config), hf_id.lower()
    if archs & _DFLASH or "dflash" in name:
        return SpecMethod.DFLASH
    if archs & _DSPARK or "dspark" in name:
        return SpecMethod.DSPARK
    return None


def block_size(config: Mapping[str, Any]) -> int | None:
    """The block width the drafter was trained for: DFlash keeps it at the top level (Qwen3,
    Llama drafters) or in ``dflash_config`` (Qwen3.5 and later); DSpark also as
    ``dspark_block_size``."""
    for value in (
        _dspark_value(config, "block_size"),
        config.get("dspark_block_size"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def k_limit(kind: SpecMethod, config: Mapping[str, Any]) -> int | None:
    """The most tokens the drafter proposes per step: DFlash fills ``block_size - 1`` masks
    after the bonus token (the speculators converter sets ``speculative_tokens = block_size -
    1``); DSpark's width is its ``block_size`` (vLLM's default K for it). None: unknown."""
    size = block_size(config)
    if size is None:
        return None
    return size - 1 if kind is SpecMethod.DFLASH else size


def mask_token_id(config: Mapping[str, Any]) -> int | None:
    """The token a parallel drafter puts in its masked slots, where vLLM looks for it."""
    for value in (
        _nested(config, "dflash_config", "mask_token_id"),
        config.get("mask_token_id"),
        config.get("dspark_noise_token_id"),
        config.get("pard_token"),
        config.get("ptd_token_id"),
    ):
        if value is not None:
            return int(value)
    return None


def _target_layers(config: Mapping[str, Any]) -> list[int]:
    ids = (
        _nested(config, "dflash_config", "target_layer_ids")
        or config.get("dspark_target_layer_ids")
        or config.get("target_layer_ids")
        or []
    )
    return [int(i) for i in ids] if isinstance(ids, list | tuple) else []


def drafter_params(config: Mapping[str, Any]) -> float:
    """Parameters a block drafter holds: its layers and the ``fc`` that fuses the target's
    layers into its width; the embeddings and LM head are the target's (unless it declares a
    smaller ``draft_vocab_size`` LM head of its own)."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    layers = int(config.get("num_hidden_layers") or 1)
    inter = int(config.get("intermediate_size") or 0)
    attention = hidden * (heads + 2 * kv) * head_dim + heads * head_dim * hidden
    fc = max(len(_target_layers(config)), 1) * hidden * hidden
    own_head = int(config.get("draft_vocab_size") or 0) * hidden
    return float(layers * (attention + 3 * hidden * inter) + fc + own_head)


def _refuse(drafter_id: str, rule: str) -> IncompatibleDraftError:
    return IncompatibleDraftError(f"{drafter_id}: {rule}")


def check_block_drafter(
    target_id: str,
    target_config: Mapping[str, Any],
    drafter_id: str,
    config: Mapping[str, Any],
    method: SpecMethod,
    k_high: int,
) -> None:
    """Refuses a block drafter vLLM 0.32 would refuse, or one that cannot serve this target.

    Raises:
        IncompatibleDraftError: one line naming the drafter, the rule and the fix.
    """
    kind = block_kind(config, drafter_id)
    if kind is not method:
        found = f"a {kind} drafter" if kind else f"no block drafter ({sorted(_archs(config))})"
        raise _refuse(drafter_id, f"is {found}, not {method}: list it under its own method")
    limit = k_limit(kind, config)
    if limit is None:
        raise _refuse(drafter_id, "its config.json has no block_size: K cannot be tied to it")
    if k_high > limit:
        trained = "block_size - 1" if kind is SpecMethod.DFLASH else "block_size"
        raise _refuse(
            drafter_id,
            f"K {k_high} is above the {limit} tokens it was trained to draft ({trained}, "
            f"block_size {block_size(config)}): keep num_speculative_tokens at or below {limit}",
        )
    if mask_token_id(config) is None:
        raise _refuse(
            drafter_id,
            "names no mask token (dflash_config.mask_token_id, mask_token_id, "
            "dspark_noise_token_id): vLLM cannot fill its parallel slots",
        )
    text = target_config.get("text_config")
    target = {**target_config, **text} if isinstance(text, Mapping) else dict(target_config)
    width = int(config.get("target_hidden_size") or config.get("hidden_size") or 0)
    if width != int(target.get("hidden_size") or 0):
        raise _refuse(
            drafter_id,
            f"reads hidden states of width {width} but {target_id} has "
            f"{target.get('hidden_size')}: it was trained for another target",
        )
    layers = _target_layers(config)
    deepest = int(target.get("num_hidden_layers") or 0)
    if layers and not all(0 <= i < deepest for i in layers):
        raise _refuse(
            drafter_id,
            f"reads target layers {layers} but {target_id} has {deepest}: it was trained for "
            "another target",
        )
    if kind is SpecMethod.DSPARK and _is_omni(target_config):
        _check_omni(drafter_id, config, k_high, limit)


def _is_omni(config: Mapping[str, Any]) -> bool:
    return config.get("model_type") == "qwen3_omni_moe" or bool(_archs(config) & _OMNI_TARGETS)


def _check_omni(drafter_id: str, config: Mapping[str, Any], k_high: int, size: int) -> None:
    """The Qwen3-Omni DSpark contract (vLLM 0.32's ``_validate_qwen3_omni_dspark``), the
    rules a weight-less check can see."""
    rules = (
        (
            "Qwen3OmniDSparkModel" in _archs(config),
            "a Qwen3-Omni target needs a Qwen3OmniDSparkModel drafter (generic "
            "Qwen3DSparkModel checkpoints must be converted first)",
        ),
        (k_high == size, f"Qwen3-Omni DSpark requires K to equal its block_size ({size})"),
        (
            _dspark_value(config, "use_aux_hidden_state") is True,
            "Qwen3-Omni DSpark requires use_aux_hidden_state=true",
        ),
        (
            config.get("markov_head_type") == "vanilla",
            "Qwen3-Omni DSpark requires markov_head_type 'vanilla'",
        ),
        (
            config.get("sample_from_anchor", True) is True
            and config.get("dspark_bonus_anchor", False) is False,
            "Qwen3-Omni DSpark requires sample_from_anchor=true and dspark_bonus_anchor=false",
        ),
    )
    for holds, rule in rules:
        if not holds:
            raise _refuse(drafter_id, f"{rule} (_validate_qwen3_omni_dspark)")


def check_topk(drafter_id: str, config: Mapping[str, Any], topk_high: int, tp: int) -> None:
    """``dspark_draft_topk``: a Qwen3 DSpark drafter, 1 to its draft vocabulary, draft TP 1.

    Raises:
        IncompatibleDraftError: naming the rule.
    """
    if not _archs(config) & _QWEN3_DSPARK:
        raise _refuse(
            drafter_id,
            "dspark_draft_topk is only supported by Qwen3DSparkModel and Qwen3OmniDSparkModel "
            "drafters: drop it",
        )
    _check_within_vocabulary(drafter_id, config, "dspark_draft_topk", topk_high)
    if tp > 1:
        raise _refuse(
            drafter_id,
            f"dspark_draft_topk requires draft tensor parallel size 1 and the space runs "
            f"tensor parallel {tp}: drop dspark_draft_topk",
        )


def check_topc(drafter_id: str, config: Mapping[str, Any], topc_high: int) -> None:
    """``xpress_topc``: an XPress drafter, at most its draft vocabulary (vLLM 0.34.0
    ``speculative.py:694-698``; ``xpress/config.py:14-29``: "xpress_topc must be between 0 and
    the draft vocabulary size").

    Raises:
        IncompatibleDraftError: naming the rule.
    """
    if not _archs(config) & _XPRESS:
        raise _refuse(
            drafter_id,
            "xpress_topc is only supported by XPress drafters (Qwen3XPressModel, "
            "DFlashQwen3XPressModel): drop it",
        )
    _check_within_vocabulary(drafter_id, config, "xpress_topc", topc_high)


def _check_within_vocabulary(
    drafter_id: str, config: Mapping[str, Any], setting: str, high: int
) -> None:
    """A top-k of the drafter's candidates counts at most its draft vocabulary."""
    vocab = int(config.get("draft_vocab_size") or config.get("vocab_size") or 0)
    if high > vocab:
        raise _refuse(drafter_id, f"{setting} {high} is above its draft vocabulary ({vocab})")


def check_parallel_head(head_id: str, config: Mapping[str, Any]) -> None:
    """P-EAGLE: the head must name the token of its masked slots, or vLLM fails at start-up
    ("For parallel drafting, the draft model config must have ...").

    Raises:
        IncompatibleDraftError: the head was not trained for parallel drafting.
    """
    if mask_token_id(config) is None:
        raise _refuse(
            head_id,
            "parallel_drafting needs a head trained for it (P-EAGLE), and this one's "
            "config.json names no mask_token_id / pard_token / ptd_token_id: set "
            "parallel_drafting false",
        )
