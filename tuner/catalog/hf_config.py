"""A :class:`~tuner.catalog.models.ModelSpec` from a Hugging Face ``config.json``.

Parameters are counted from the architecture: attention (q, k, v, o), the MLP (three matrices:
gate, up, down), and for a mixture of experts every expert for memory but only the routed
``num_experts_per_tok`` (plus shared experts) for compute. Weight bytes follow how vLLM loads the
checkpoint's ``quantization_config``:

- none: 2 bytes (bf16/fp16; vLLM's ``dtype=auto`` serves fp32 checkpoints in 16 bits too);
- ``awq``, ``gptq``: ``bits`` per linear weight plus a 16-bit scale and zero per ``group_size``
  weights (4-bit, group 128: 4.25 bits); embeddings and the LM head stay 16-bit;
- ``fp8`` (and ``fbgemm_fp8``): one byte per linear weight, embeddings 16-bit;
- ``mxfp4`` (gpt-oss): experts 4 bits plus an 8-bit scale per 32 weights (4.25 bits); attention,
  router, embeddings and LM head stay 16-bit (its ``modules_to_not_convert``);
- ``compressed-tensors``: ``config_groups.*.weights.num_bits`` (plus group scales), ``ignore``d
  modules (usually ``lm_head``) 16-bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.errors import ConfigError

__all__ = [
    "Architecture",
    "architecture",
    "expert_weight_bytes",
    "quantization_of",
    "weight_bytes",
]

# vLLM's dtype "auto" serves fp32 checkpoints in 16 bits too.
_UNQUANTIZED_BYTES = 2.0
_MXFP4_BITS = 4 + 8 / 32  # 4-bit values, one 8-bit shared exponent per block of 32


@dataclass(frozen=True)
class Architecture:
    """The shape numbers of one checkpoint, as its ``config.json`` states them."""

    layers: int
    hidden: int
    intermediate: int  # the dense MLP's width, or one expert's for a mixture of experts
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    experts: int  # routed experts a layer (0: dense)
    active_experts: int  # routed experts a token uses
    attention_params: float  # all layers
    dense_mlp_params: float  # layers with a dense MLP
    expert_params: float  # routed experts, all of them
    active_expert_params: float  # the routed experts one token runs through
    shared_params: float  # shared experts and routers (always run)

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> float:
        """Every parameter, embeddings included (what memory holds)."""
        linear = self.attention_params + self.dense_mlp_params + self.shared_params
        return linear + self.expert_params + self.embedding_params

    @property
    def active_params(self) -> float:
        """Parameters one token runs through (what compute costs)."""
        linear = self.attention_params + self.dense_mlp_params + self.shared_params
        return linear + self.active_expert_params + self.embedding_params


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal checkpoints nest the language model's numbers under ``text_config``."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else config


def _int(config: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return int(value)
    if default is None:
        raise KeyError(keys[0])
    return default


def architecture(raw: Mapping[str, Any], origin: str) -> Architecture:
    """Reads the shape numbers; a missing one is a :class:`ConfigError` naming ``origin``."""
    config = _text_config(raw)
    try:
        hidden = _int(config, "hidden_size", "n_embd", "d_model")
        heads = _int(config, "num_attention_heads", "n_head")
        layers = _int(config, "num_hidden_layers", "n_layer")
        vocab = _int(config, "vocab_size")
        kv_heads = _int(config, "num_key_value_heads", default=heads)
        head_dim = _int(config, "head_dim", default=hidden // heads)
        experts = _int(config, "num_experts", "num_local_experts", "n_routed_experts", default=0)
        intermediate = _int(
            config,
            *(("moe_intermediate_size",) if experts else ()),
            "intermediate_size",
            "ffn_dim",
        )
        dense_intermediate = _int(config, "intermediate_size", default=intermediate)
        active = _int(config, "num_experts_per_tok", "experts_per_token", default=1)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{origin}: config.json lacks a usable {exc} value: point at a Hugging Face model "
            "with hidden_size, num_attention_heads, num_hidden_layers, intermediate_size and "
            "vocab_size"
        ) from None
    attention = layers * (hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2)
    if config.get("kv_lora_rank"):
        attention, kv_heads, head_dim = _mla(config, layers, hidden, heads)
    if not experts:
        return Architecture(
            layers,
            hidden,
            intermediate,
            heads,
            kv_heads,
            head_dim,
            vocab,
            bool(config.get("tie_word_embeddings", False)),
            0,
            0,
            float(attention),
            float(layers * 3 * hidden * intermediate),
            0.0,
            0.0,
            0.0,
        )
    # DeepSeek's first layers and Qwen-MoE's mlp_only_layers keep a dense MLP.
    dense_layers = int(config.get("first_k_dense_replace") or 0) + len(
        config.get("mlp_only_layers") or []
    )
    moe_layers = layers - dense_layers
    shared_width = (
        int(config.get("shared_expert_intermediate_size") or 0)
        + int(config.get("n_shared_experts") or 0) * intermediate
    )
    per_expert = 3 * hidden * intermediate
    return Architecture(
        layers=layers,
        hidden=hidden,
        intermediate=intermediate,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=experts,
        active_experts=active,
        attention_params=float(attention),
        dense_mlp_params=float(dense_layers * 3 * hidden * dense_intermediate),
        expert_params=float(moe_layers * experts * per_expert),
        active_expert_params=float(moe_layers * active * per_expert),
        shared_params=float(moe_layers * (3 * hidden * shared_width + hidden * experts)),
    )


def _mla(config: Mapping[str, Any], layers: int, hidden: int, heads: int) -> tuple[int, int, int]:
    """Multi-head latent attention (DeepSeek-V2/V3): its weights, and its KV cache as heads.

    MLA caches one latent of ``kv_lora_rank + qk_rope_head_dim`` values per token and layer,
    the same on every tensor-parallel GPU; one KV "head" of half that width (K and V counted
    apart) holds the same bytes. Returns (attention weights, KV heads, head width).
    """
    lora, rope = int(config["kv_lora_rank"]), int(config.get("qk_rope_head_dim") or 0)
    nope, v_dim = int(config.get("qk_nope_head_dim") or 0), int(config.get("v_head_dim") or 0)
    q_lora = int(config.get("q_lora_rank") or 0)
    q_width = heads * (nope + rope)
    query = hidden * q_lora + q_lora * q_width if q_lora else hidden * q_width
    per_layer = (
        query + hidden * (lora + rope) + lora * heads * (nope + v_dim) + heads * v_dim * hidden
    )
    return layers * per_layer, 1, (lora + rope) // 2


def quantization_of(config: Mapping[str, Any]) -> str:
    """spectune's name for how the checkpoint stores its linear weights.

    ``bf16``/``fp16``/``fp32``, ``awq``, ``gptq-int4``/``gptq-int8``, ``fp8``, ``mxfp4``,
    ``compressed-tensors-w4``/``-w8``.
    """
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        dtype = str(_text_config(config).get("torch_dtype") or config.get("dtype") or "bfloat16")
        return {"float16": "fp16", "half": "fp16", "float32": "fp32"}.get(dtype, "bf16")
    method = str(quant.get("quant_method", "")).lower().replace("_", "-")
    if method == "gptq":
        return f"gptq-int{int(quant.get('bits', 4))}"
    if method == "compressed-tensors":
        return f"compressed-tensors-w{_compressed_bits(quant)}"
    if method in ("fp8", "fbgemm-fp8"):
        return "fp8"
    return method  # awq, mxfp4, or a method read as 16-bit below


def _compressed_bits(quant: Mapping[str, Any]) -> int:
    groups = quant.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, Mapping) else ():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if isinstance(weights, Mapping) and weights.get("num_bits"):
            return int(weights["num_bits"])
    return 16


def _group_size(quant: Mapping[str, Any]) -> int:
    groups = quant.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, Mapping) else ():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if isinstance(weights, Mapping) and weights.get("group_size"):
            return int(weights["group_size"])
    size = quant.get("group_size") or quant.get("q_group_size") or 0
    return int(size) if int(size) > 0 else 0


def _linear_bytes(config: Mapping[str, Any], quantization: str) -> float:
    """Bytes a quantized linear weight takes, scales included."""
    quant = config.get("quantization_config") or {}
    bits = {
        "awq": int(quant.get("bits", quant.get("w_bit", 4))),
        "fp8": 8,
    }.get(quantization)
    if quantization.startswith("gptq-int"):
        bits = int(quantization.removeprefix("gptq-int"))
    if quantization.startswith("compressed-tensors-w"):
        bits = int(quantization.removeprefix("compressed-tensors-w"))
    if bits is None or bits >= 16:
        return _UNQUANTIZED_BYTES
    group = _group_size(quant) if quantization != "fp8" else 0
    # A 16-bit scale and a zero point per group; fp8 and per-channel scales are negligible.
    return (bits + (32 / group if group else 0.0)) / 8


def weight_bytes(config: Mapping[str, Any], arch: Architecture) -> float:
    """Bytes of weights in GPU memory, every tensor-parallel shard together."""
    quantization = quantization_of(config)
    embeddings = arch.embedding_params * _UNQUANTIZED_BYTES
    dense = arch.attention_params + arch.dense_mlp_params + arch.shared_params
    if quantization == "mxfp4":
        return embeddings + dense * _UNQUANTIZED_BYTES + arch.expert_params * _MXFP4_BITS / 8
    linear = _linear_bytes(config, quantization)
    return embeddings + (dense + arch.expert_params) * linear


def expert_weight_bytes(config: Mapping[str, Any], arch: Architecture) -> float:
    """The routed experts' part of :func:`weight_bytes` (0 for a dense model)."""
    if quantization_of(config) == "mxfp4":
        return arch.expert_params * _MXFP4_BITS / 8
    return arch.expert_params * _linear_bytes(config, quantization_of(config))
