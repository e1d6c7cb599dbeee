"""Speculation that lives beside a target: EAGLE / EAGLE-3 heads and native MTP layers.

An EAGLE head is one decoder layer trained on one target's hidden states (EAGLE, arXiv
2401.15077); an EAGLE-3 head (arXiv 2503.01840) reads three of the target's layers through a
``fc`` of ``3 x hidden`` inputs and predicts over its own, smaller vocabulary
(``draft_vocab_size``, mapped back to the target's by a ``d2t`` table). Both are useless for any
other target, so a head is offered only for the targets it was trained for (:data:`HEADS`), or,
given by Hugging Face id or folder, when its shapes fit the target (:func:`check_head`).

MTP layers ship inside the target's checkpoint: :mod:`tuner.catalog.mtp`.

The heads are data, ``heads.yaml``: the ``config.json`` numbers memory and speed depend on, and
where each came from (``source``; a number not read from the head's own file says so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tuner.catalog.drafters import block_kind
from tuner.catalog.entries import HeadEntry, head_entries
from tuner.catalog.spec_method import SpecMethod
from tuner.errors import IncompatibleDraftError

__all__ = [
    "HEADS",
    "HeadEntry",
    "check_head",
    "draft_vocab",
    "head_kind",
    "head_params",
    "heads_for",
    "is_head",
]


HEADS: tuple[HeadEntry, ...] = head_entries()


def is_head(config: Mapping[str, Any], hf_id: str = "") -> bool:
    """Whether a ``config.json`` (of ``hf_id``) is an EAGLE or EAGLE-3 head, not a full model."""
    return head_kind(config, hf_id) is not None


def head_kind(config: Mapping[str, Any], hf_id: str = "") -> SpecMethod | None:
    """``eagle3``, ``eagle`` or None.

    From the architectures, then from the id as vLLM 0.32 detects a method
    (``SpeculativeConfig.__post_init__``: ``eagle-`` or ``eagle3`` in the model's name): EAGLE-1
    heads such as ``yuhuili/EAGLE-LLaMA3.1-Instruct-8B`` say plain ``LlamaForCausalLM``.
    """
    if block_kind(config, hf_id) is not None:  # a DFlash/DSpark drafter, not a head
        return None
    archs = " ".join(str(a) for a in config.get("architectures") or ()).lower()
    name = hf_id.lower()
    if "eagle3" in archs or "draft_vocab_size" in config or "eagle3" in name:
        return SpecMethod.EAGLE3
    if "eagle" in archs or config.get("model_type") == "eagle" or "eagle-" in name:
        return SpecMethod.EAGLE
    return None


def draft_vocab(config: Mapping[str, Any]) -> int:
    """The vocabulary a head's LM head predicts over (EAGLE-3: ``draft_vocab_size``)."""
    return int(config.get("draft_vocab_size") or config.get("vocab_size") or 0)


def head_params(config: Mapping[str, Any]) -> float:
    """Parameters a head holds in GPU memory: its layers, its ``fc`` and its LM head.

    The input embeddings are the target's (vLLM shares them when the head's vocabulary is the
    target's); EAGLE-1 heads also share the target's LM head. An EAGLE-3 layer's attention
    reads the embedding and the fused hidden state side by side (``2 x hidden`` inputs), and
    its ``fc`` fuses three target layers (``3 x hidden``; one without auxiliary states).
    """
    hidden = int(config["hidden_size"])
    target_hidden = int(config.get("target_hidden_size") or hidden)
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    layers = int(config.get("num_hidden_layers") or 1)
    inter = int(config["intermediate_size"])
    eagle3 = head_kind(config) is SpecMethod.EAGLE3  # EAGLE-3 configs say so themselves
    eagle_config = config.get("eagle_config")
    aux = not (
        isinstance(eagle_config, Mapping) and eagle_config.get("use_aux_hidden_state") is False
    )
    inputs = 2 * hidden if eagle3 else hidden
    attention = inputs * (heads + 2 * kv) * head_dim + heads * head_dim * hidden
    mlp = 3 * hidden * inter
    fc = (3 if aux else 0) * target_hidden * hidden if eagle3 else 2 * target_hidden * hidden
    lm_head = draft_vocab(config) * hidden if eagle3 else 0
    return float(layers * (attention + mlp) + fc + lm_head)


def heads_for(target_id: str) -> tuple[HeadEntry, ...]:
    """The catalog's heads trained for ``target_id`` (case-insensitive)."""
    key = target_id.lower()
    return tuple(h for h in HEADS if key in (t.lower() for t in h.targets))


def _catalog_head(hf_id: str) -> HeadEntry | None:
    return next((h for h in HEADS if h.hf_id.lower() == hf_id.lower()), None)


def check_head(
    target_id: str,
    target_config: Mapping[str, Any],
    head_id: str,
    head_config: Mapping[str, Any],
    method: SpecMethod,
) -> None:
    """Refuses a head that cannot speculate for this target with ``method``.

    A catalog head must list the target; any other head must be an EAGLE head whose kind
    matches ``method`` and whose input width (``target_hidden_size``, else ``hidden_size``)
    and vocabulary are the target's.

    Raises:
        IncompatibleDraftError: one line naming the head, the target and the fix.
    """
    kind = head_kind(head_config, head_id)
    known = _catalog_head(head_id)
    if kind is None:
        raise IncompatibleDraftError(
            f"{head_id} is not an EAGLE head (architectures "
            f"{list(head_config.get('architectures') or [])}): use it as method draft_model, "
            "or name an EAGLE/EAGLE-3 head"
        )
    if kind is not method:
        raise IncompatibleDraftError(
            f"{head_id} is an {kind} head, not {method}: list it under method {kind}"
        )
    if known is not None and target_id.lower() not in (t.lower() for t in known.targets):
        raise IncompatibleDraftError(
            f"head {head_id} was trained for {', '.join(known.targets)}, not {target_id}: pick "
            f"a head of {target_id}" + _offer(target_id)
        )
    width = int(head_config.get("target_hidden_size") or head_config.get("hidden_size") or 0)
    target_hidden = int(target_config.get("hidden_size") or 0)
    target_vocab = int(target_config.get("vocab_size") or 0)
    if width != target_hidden or int(head_config.get("vocab_size") or 0) != target_vocab:
        raise IncompatibleDraftError(
            f"head {head_id} reads hidden states of width {width} over "
            f"{head_config.get('vocab_size')} tokens but {target_id} has {target_hidden} and "
            f"{target_vocab}: it was trained for another target; pick a head of this one"
            + _offer(target_id)
        )


def _offer(target_id: str) -> str:
    known = heads_for(target_id)
    return f" (e.g. {known[0].hf_id})" if known else ""
