"""The built-in catalog: the ``config.json`` of models people serve, for offline use.

Each entry is the part of the model's published ``config.json`` (on the Hugging Face Hub, at
``https://huggingface.co/<id>/blob/main/config.json``) that memory, speed and vLLM's own config
checks depend on, transcribed from those files; the same reader that reads a downloaded
``config.json`` turns them into :class:`~tuner.catalog.models.ModelSpec`\\ s, and the validation
tier (``tests/vllm_validation``) writes them out as the ``config.json`` real vLLM judges. Where a
model card states the parameter count, it is kept as ``params`` (the reader's count differs by
the bias vectors and norms it leaves out); otherwise the reader counts them.

Tokenizer families: the Qwen2.5 instruct models share one tokenizer whatever their embedding
size (151936 rows up to 3B, 152064 from 7B: padding); DeepSeek's R1 distills changed the special
tokens of the base model they came from; Qwen3 and Qwen3-Coder share Qwen3's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SEED", "SeedEntry"]


@dataclass(frozen=True)
class SeedEntry:
    """One catalog model: its id, tokenizer family, published config and parameter count."""

    hf_id: str
    family: str
    config: dict[str, Any] = field(hash=False)
    params: float | None = None  # the model card's count, when it states one
    source: str = ""  # where the numbers were read

    @property
    def where(self) -> str:
        return self.source or f"https://huggingface.co/{self.hf_id}/blob/main/config.json"


_AWQ = {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True}
_GPTQ4 = {"bits": 4, "group_size": 128, "desc_act": False, "quant_method": "gptq", "sym": True}
_FP8_BLOCK = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128],
}
_MXFP4 = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": [
        "model.layers.*.self_attn",
        "model.layers.*.mlp.router",
        "model.embed_tokens",
        "lm_head",
    ],
}
_LLAMA31_ROPE = {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}


def _dense(
    arch: str,
    model_type: str,
    layers: int,
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    vocab: int,
    tied: bool,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": model_type,
        "hidden_act": "silu",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
        **extra,
    }


def _qwen25(
    size: str, params: float, layers: int, hidden: int, inter: int, heads: int, kv: int, vocab: int
) -> list[SeedEntry]:
    tied = vocab == 151936  # 0.5B-3B tie the LM head to the embeddings
    base = _dense(
        "Qwen2ForCausalLM", "qwen2", layers, hidden, inter, heads, kv, vocab, tied,
        max_position_embeddings=32768, rope_theta=1000000.0, sliding_window=131072,
        use_sliding_window=False, max_window_layers=layers,
    )  # fmt: skip
    hf_id = f"Qwen/Qwen2.5-{size}-Instruct"
    return [
        SeedEntry(hf_id, "qwen2.5", base, params),
        SeedEntry(
            f"{hf_id}-AWQ",
            "qwen2.5",
            {**base, "torch_dtype": "float16", "quantization_config": _AWQ},
            params,
        ),
        SeedEntry(
            f"{hf_id}-GPTQ-Int4",
            "qwen2.5",
            {**base, "torch_dtype": "float16", "quantization_config": _GPTQ4},
            params,
        ),
    ]


def _qwen3(hf_id: str, layers: int, hidden: int, inter: int, heads: int, tied: bool) -> SeedEntry:
    config = _dense(
        "Qwen3ForCausalLM", "qwen3", layers, hidden, inter, heads, 8, 151936, tied,
        head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
    )  # fmt: skip
    return SeedEntry(hf_id, "qwen3", config)


def _qwen3_moe(
    hf_id: str,
    layers: int,
    hidden: int,
    moe_inter: int,
    heads: int,
    kv: int,
    experts: int,
    max_len: int = 40960,
) -> SeedEntry:
    config = _dense(
        "Qwen3MoeForCausalLM", "qwen3_moe", layers, hidden, hidden * 3, heads, kv, 151936, False,
        head_dim=128, moe_intermediate_size=moe_inter, num_experts=experts,
        num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
        max_position_embeddings=max_len, rope_theta=1000000.0,
    )  # fmt: skip
    return SeedEntry(hf_id, "qwen3", config)


def _llama(
    hf_id: str,
    family: str,
    layers: int,
    hidden: int,
    inter: int,
    heads: int,
    head_dim: int,
    tied: bool,
    rope_factor: float,
    params: float,
) -> SeedEntry:
    config = _dense(
        "LlamaForCausalLM", "llama", layers, hidden, inter, heads, 8, 128256, tied,
        head_dim=head_dim, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
        rope_scaling={**_LLAMA31_ROPE, "factor": rope_factor},
    )  # fmt: skip
    return SeedEntry(hf_id, family, config, params)


def _distill_qwen(size: str, base: SeedEntry, params: float, vocab: int) -> SeedEntry:
    # Qwen2.5-Math bases for 1.5B/7B: untied embeddings, a shorter RoPE base.
    config = {**base.config, "vocab_size": vocab, "tie_word_embeddings": False}
    config["max_position_embeddings"] = 131072
    hf_id = f"deepseek-ai/DeepSeek-R1-Distill-Qwen-{size}"
    return SeedEntry(hf_id, "deepseek-r1-qwen", config, params)


def _gpt_oss(hf_id: str, layers: int, experts: int) -> SeedEntry:
    config = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "num_hidden_layers": layers,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_local_experts": experts,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "vocab_size": 201088,
        "tie_word_embeddings": False,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
        "quantization_config": _MXFP4,
    }
    return SeedEntry(hf_id, "o200k-harmony", config)


def _deepseek_v3(hf_id: str) -> SeedEntry:
    # MLA attention (kv_lora_rank 512 + rope 64 cached per token and layer), 256 routed experts
    # (8 a token) plus one shared, the first 3 layers dense, FP8 blocks; one MTP layer.
    config = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8, "topk_group": 4,
        "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
        "norm_topk_prob": True, "kv_lora_rank": 512, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "num_nextn_predict_layers": 1, "vocab_size": 129280, "tie_word_embeddings": False,
        "max_position_embeddings": 163840, "rope_theta": 10000, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "torch_dtype": "bfloat16", "quantization_config": _FP8_BLOCK,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    }  # fmt: skip
    return SeedEntry(hf_id, "deepseek-v3", config, 671e9)


def _glm45(hf_id: str, layers: int, hidden: int, inter: int, moe: int, experts: int,
           dense: int, params: float) -> SeedEntry:  # fmt: skip
    config = _dense(
        "Glm4MoeForCausalLM", "glm4_moe", layers, hidden, inter, 96, 8, 151552, False,
        head_dim=128, moe_intermediate_size=moe, n_routed_experts=experts, n_shared_experts=1,
        num_experts_per_tok=8, first_k_dense_replace=dense, norm_topk_prob=True,
        partial_rotary_factor=0.5, num_nextn_predict_layers=1, max_position_embeddings=131072,
        rope_theta=1000000, rms_norm_eps=1e-5, use_qk_norm=False, routed_scaling_factor=1.0,
        n_group=1, topk_group=1, attention_bias=True,
    )  # fmt: skip
    return SeedEntry(hf_id, "glm4.5", config, params)


_QWEN3_NEXT = _dense(
    "Qwen3NextForCausalLM", "qwen3_next", 48, 2048, 5120, 16, 2, 151936, False,
    head_dim=256, moe_intermediate_size=512, shared_expert_intermediate_size=512,
    num_experts=512, num_experts_per_tok=10, decoder_sparse_step=1, mlp_only_layers=[],
    norm_topk_prob=True, full_attention_interval=4, linear_num_key_heads=16,
    linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, partial_rotary_factor=0.25, max_position_embeddings=262144,
    rope_theta=10000000,
)  # fmt: skip
_MIMO = _dense(
    "MiMoForCausalLM", "mimo", 36, 4096, 11008, 32, 8, 151680, False,
    num_nextn_predict_layers=1, max_position_embeddings=32768, rope_theta=640000,
    attention_bias=True, rms_norm_eps=1e-5,
    # MiMo ships its own modeling code: vLLM needs --trust-remote-code and the code files.
    auto_map={"AutoConfig": "configuration_mimo.MiMoConfig",
              "AutoModelForCausalLM": "modeling_mimo.MiMoForCausalLM"},
)  # fmt: skip
_MTP_TARGETS = (
    _deepseek_v3("deepseek-ai/DeepSeek-V3"),
    _deepseek_v3("deepseek-ai/DeepSeek-R1"),
    _glm45("zai-org/GLM-4.5", 92, 5120, 12288, 1536, 160, 3, 355e9),
    _glm45("zai-org/GLM-4.5-Air", 46, 4096, 10944, 1408, 128, 1, 106e9),
    SeedEntry("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3", _QWEN3_NEXT, 80e9),
    SeedEntry("XiaomiMiMo/MiMo-7B-RL", "mimo", _MIMO),
)

_QWEN25 = (
    # size, card's parameters, layers, hidden, intermediate, heads, KV heads, vocabulary rows
    *_qwen25("0.5B", 0.494e9, 24, 896, 4864, 14, 2, 151936),
    *_qwen25("1.5B", 1.54e9, 28, 1536, 8960, 12, 2, 151936),
    *_qwen25("3B", 3.09e9, 36, 2048, 11008, 16, 2, 151936),
    *_qwen25("7B", 7.62e9, 28, 3584, 18944, 28, 4, 152064),
    *_qwen25("14B", 14.7e9, 48, 5120, 13824, 40, 8, 152064),
    *_qwen25("32B", 32.5e9, 64, 5120, 27648, 40, 8, 152064),
    *_qwen25("72B", 72.7e9, 80, 8192, 29696, 64, 8, 152064),
)
_BY_SIZE = {e.hf_id: e for e in _QWEN25}

# fmt: off
SEED: tuple[SeedEntry, ...] = (
    *_QWEN25,
    # Qwen3 dense: head_dim 128, 8 KV heads, 151936 rows; 0.6B-4B tie the LM head.
    _qwen3("Qwen/Qwen3-0.6B", 28, 1024, 3072, 16, True),
    _qwen3("Qwen/Qwen3-1.7B", 28, 2048, 6144, 16, True),
    _qwen3("Qwen/Qwen3-4B", 36, 2560, 9728, 32, True),
    _qwen3("Qwen/Qwen3-8B", 36, 4096, 12288, 32, False),
    _qwen3("Qwen/Qwen3-14B", 40, 5120, 17408, 40, False),
    _qwen3("Qwen/Qwen3-32B", 64, 5120, 25600, 64, False),
    SeedEntry(
        "Qwen/Qwen3-8B-FP8",
        "qwen3",
        {**_qwen3("x", 36, 4096, 12288, 32, False).config, "quantization_config": _FP8_BLOCK},
    ),
    # Qwen3 MoE: 128 experts, 8 routed a token.
    _qwen3_moe("Qwen/Qwen3-30B-A3B", 48, 2048, 768, 32, 4, 128),
    _qwen3_moe("Qwen/Qwen3-235B-A22B", 94, 4096, 1536, 64, 4, 128),
    _qwen3_moe("Qwen/Qwen3-Coder-30B-A3B-Instruct", 48, 2048, 768, 32, 4, 128, 262144),
    SeedEntry(
        "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
        "qwen3",
        {
            **_qwen3_moe("x", 48, 2048, 768, 32, 4, 128, 262144).config,
            "quantization_config": _FP8_BLOCK,
        },
    ),
    SeedEntry(
        "Qwen/Qwen3-30B-A3B-FP8",
        "qwen3",
        {
            **_qwen3_moe("x", 48, 2048, 768, 32, 4, 128).config,
            "quantization_config": _FP8_BLOCK,
        },
    ),
    # Llama 3.x: 128256 rows, 8 KV heads; 3.2's small models tie the LM head.
    _llama("meta-llama/Llama-3.2-1B-Instruct", "llama3", 16, 2048, 8192, 32, 64, True, 32.0, 1.24e9),  # noqa: E501
    _llama("meta-llama/Llama-3.2-3B-Instruct", "llama3", 28, 3072, 8192, 24, 128, True, 32.0, 3.21e9),  # noqa: E501
    _llama("meta-llama/Llama-3.1-8B-Instruct", "llama3", 32, 4096, 14336, 32, 128, False, 8.0, 8.03e9),  # noqa: E501
    _llama("meta-llama/Llama-3.1-70B-Instruct", "llama3", 80, 8192, 28672, 64, 128, False, 8.0, 70.6e9),  # noqa: E501
    _llama("meta-llama/Llama-3.3-70B-Instruct", "llama3", 80, 8192, 28672, 64, 128, False, 8.0, 70.6e9),  # noqa: E501
    # DeepSeek-R1 distills keep their base's architecture (Qwen2.5-Math 1.5B/7B, Qwen2.5 14B/32B,
    # Llama-3.1-8B, Llama-3.3-70B-Instruct).
    _distill_qwen("1.5B", _BY_SIZE["Qwen/Qwen2.5-1.5B-Instruct"], 1.78e9, 151936),
    _distill_qwen("7B", _BY_SIZE["Qwen/Qwen2.5-7B-Instruct"], 7.62e9, 152064),
    _distill_qwen("14B", _BY_SIZE["Qwen/Qwen2.5-14B-Instruct"], 14.8e9, 152064),
    _distill_qwen("32B", _BY_SIZE["Qwen/Qwen2.5-32B-Instruct"], 32.8e9, 152064),
    _llama("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "deepseek-r1-llama", 32, 4096, 14336, 32, 128, False, 8.0, 8.03e9),  # noqa: E501
    _llama("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "deepseek-r1-llama", 80, 8192, 28672, 64, 128, False, 8.0, 70.6e9),  # noqa: E501
    # gpt-oss: MXFP4 experts (32 or 128, 4 routed a token), alternating sliding/full attention.
    _gpt_oss("openai/gpt-oss-20b", 24, 32),
    _gpt_oss("openai/gpt-oss-120b", 36, 128),
    # Targets with native MTP layers (num_nextn_predict_layers; vLLM's method "mtp").
    *_MTP_TARGETS,
)
# fmt: on
