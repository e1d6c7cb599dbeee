"""The built-in catalog of 2026 block drafters: DFlash and DSpark (P-EAGLE heads are heads).

Each entry is the part of the drafter's ``config.json`` that memory, speed and vLLM's checks
depend on, with the targets it was trained for. The Hub itself cannot be reached from where this
catalog was written, so no file was read directly: each ``source`` names the public text the
numbers were transcribed from, and every number not found there is named as taken from the
target (a drafter reads the target's hidden states, so its width and attention shape are the
target's) or from a sibling drafter of the same family. Where a published config differs,
``spectune`` reads the real one: a Hub id or folder given in a space wins over this catalog only
when it is not listed here, so correct an entry rather than shadow it.
"""

from __future__ import annotations

from typing import Any

from tuner.catalog.heads import HeadEntry

__all__ = ["DRAFTERS", "QWEN3_MASK", "drafters_for"]

QWEN3_MASK = 151669  # "<|MASK|>", the token z-lab's Qwen3 drafters add (their model cards)


def _qwen3_block(
    arch: str,
    hidden: int,
    inter: int,
    heads: int,
    kv: int,
    layers: int,
    block: int,
    target_layers: list[int],
    **extra: Any,
) -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": "qwen3",
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": 128,
        "num_hidden_layers": layers,
        "vocab_size": 151936,
        "block_size": block,
        "dflash_config": {"mask_token_id": QWEN3_MASK, "target_layer_ids": target_layers},
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **extra,
    }


DRAFTERS: tuple[HeadEntry, ...] = (
    HeadEntry(
        "z-lab/Qwen3-8B-DFlash-b16",
        "dflash",
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-FP8"),
        _qwen3_block("DFlashDraftModel", 4096, 12288, 32, 8, 5, 16, [1, 9, 17, 25, 33]),
        "https://huggingface.co/z-lab/Qwen3-8B-DFlash-b16 (not reachable here): the "
        "config.json as transcribed in vllm-project/speculators "
        "tests/unit/convert (DFlashConverter, the z-lab checkpoint's keys: block_size 16, "
        "dflash_config, 5 layers, hidden 4096, intermediate 12288, 32/8 heads); the Hub file "
        "itself was not reachable",
    ),
    HeadEntry(
        "z-lab/Qwen3-Coder-30B-A3B-DFlash",
        "dflash",
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"),
        _qwen3_block("DFlashDraftModel", 2048, 6144, 32, 4, 5, 16, [1, 12, 23, 34, 45]),
        "https://huggingface.co/z-lab/Qwen3-Coder-30B-A3B-DFlash (not reachable here): "
        "block_size 16 and about 0.5B parameters from a public drafter registry "
        "(epyc-inference-research, 'Pre-Downloaded Models'); hidden 2048 and 32/4 heads are the "
        "target's; 5 layers, the mask token and the layer spacing follow "
        "z-lab/Qwen3-8B-DFlash-b16; the Hub config.json was not reachable",
    ),
    HeadEntry(
        "deepseek-ai/dspark_qwen3_8b_block7",
        "dspark",
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-FP8"),
        _qwen3_block(
            "Qwen3DSparkModel",
            4096,
            12288,
            32,
            8,
            5,
            7,
            [1, 9, 17, 25, 33],
            draft_vocab_size=151936,
            markov_rank=256,
            markov_head_type="vanilla",
            enable_confidence_head=True,
            confidence_head_with_markov=True,
        ),
        "https://huggingface.co/deepseek-ai/dspark_qwen3_8b_block7 (not reachable here), "
        "named in vLLM 0.32's vllm/config/speculative.py; block 7, mask token 151669, target "
        "layers [1, 9, 17, 25, 33], 5 layers, markov_rank 256 (vanilla head), confidence head "
        "with Markov input, as NVIDIA NeMo-RL's DSpark recipe configures this checkpoint; full "
        "151936 vocabulary and a 4.74 GB checkpoint per a public checkpoint table (HF API, "
        "2026-08-09); widths are Qwen3-8B's; the Hub config.json was not reachable",
    ),
)


def drafters_for(target_id: str) -> tuple[HeadEntry, ...]:
    """The catalog's block drafters trained for ``target_id`` (case-insensitive)."""
    key = target_id.lower()
    return tuple(d for d in DRAFTERS if key in (t.lower() for t in d.targets))
