"""Shapes, parameters and weight bytes read from config.json: dense, MoE, every quantization."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.catalog.models import CATALOG, load_model, spec_from_config
from tuner.config.methods.draft_model import check_pair
from tuner.config.vllm_args import parse_version
from tuner.errors import ConfigError, IncompatibleDraftError

GIB = 1024**3
DENSE: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "num_hidden_layers": 10,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}
LINEAR = 10 * (1024 * 1024 * 2 + 1024 * 256 * 2 + 3 * 1024 * 4096)
EMBEDDINGS = 2 * 32000 * 1024


def _spec(**config: Any) -> Any:
    return spec_from_config("x/y", {**DENSE, **config}, family="f")


def test_dense_parameters_and_bf16_bytes() -> None:
    spec = _spec()
    assert spec.params == LINEAR + EMBEDDINGS == spec.active_params
    assert spec.weight_bytes == 2 * (LINEAR + EMBEDDINGS)
    assert spec.quantization == "bf16" and not spec.quantized


@pytest.mark.parametrize(
    ("quantization_config", "name", "bytes_per_linear"),
    [
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq", (4 + 32 / 128) / 8),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq-int4", (4 + 0.25) / 8),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "gptq-int8", (8 + 0.25) / 8),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 1.0),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 4, "group_size": 128, "type": "int"}}
                },
                "ignore": ["lm_head"],
            },
            "compressed-tensors-w4",
            (4 + 0.25) / 8,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "compressed-tensors-w8",
            1.0,
        ),
    ],
)
def test_quantized_linear_weights_embeddings_stay_16_bit(
    quantization_config: dict[str, Any], name: str, bytes_per_linear: float
) -> None:
    spec = _spec(quantization_config=quantization_config)
    assert spec.quantization == name and spec.quantized
    assert spec.weight_bytes == pytest.approx(LINEAR * bytes_per_linear + EMBEDDINGS * 2)


def test_moe_counts_all_experts_for_memory_and_the_routed_ones_for_compute() -> None:
    moe = _spec(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=512)
    attention = 10 * (1024 * 1024 * 2 + 1024 * 256 * 2)
    expert = 3 * 1024 * 512
    router = 10 * 1024 * 8
    assert moe.experts == 8 and moe.active_experts == 2 and moe.intermediate == 512
    assert moe.params == attention + 10 * 8 * expert + router + EMBEDDINGS
    assert moe.active_params == attention + 10 * 2 * expert + router + EMBEDDINGS
    assert moe.flops_per_token == pytest.approx(2 * (moe.active_params - 32000 * 1024))


def test_mxfp4_quantizes_only_the_experts() -> None:
    oss = load_model("openai/gpt-oss-20b")
    assert oss.quantization == "mxfp4" and oss.experts == 32 and oss.active_experts == 4
    assert 20.5e9 < oss.params < 21.5e9  # the model card: 21B parameters, 3.6B active
    assert oss.active_params < 0.25 * oss.params
    assert 12.0 < oss.weight_bytes / GIB < 13.5  # the checkpoint: 13.8 GB


def test_catalog_numbers() -> None:
    ids = {m.hf_id for m in CATALOG}
    assert {
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "openai/gpt-oss-120b",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
    } <= ids
    assert load_model("Qwen/Qwen2.5-72B-Instruct").intermediate == 29696
    a3b = load_model("Qwen/Qwen3-30B-A3B")
    assert 30e9 < a3b.params < 31e9 and 3.0e9 < a3b.active_params < 3.6e9
    for model in CATALOG:  # every entry says where its numbers came from
        assert model.source.startswith("https://huggingface.co/" + model.hf_id)
        assert model.config["architectures"] and model.config["model_type"]


def test_missing_shape_number_names_the_model() -> None:
    with pytest.raises(ConfigError, match=r"x/y: config\.json lacks a usable 'hidden_size'"):
        spec_from_config("x/y", {"num_attention_heads": 4}, family="f")


@pytest.mark.parametrize(
    ("version", "outcome"),
    [
        ("0.9.2", "V0 engine asserts equal sizes"),
        ("0.15.0", "Target and draft model should have the same vocabulary size"),
        ("0.24.1", "Target and draft model should have the same vocabulary size"),
        ("0.25.0", None),
        ("0.32.0", None),
        ("0.33.0", None),
        ("0.34.0", "0.34 removed use_heterogeneous_vocab"),
    ],
)
def test_vocabulary_sizes_per_version(version: str, outcome: str | None) -> None:
    """Qwen2.5-32B has 152064 rows, the 0.5B draft 151936: fine only where vLLM can map them."""
    target = load_model("Qwen/Qwen2.5-32B-Instruct-AWQ")
    draft = load_model("Qwen/Qwen2.5-0.5B-Instruct")
    same_size = load_model("Qwen/Qwen2.5-7B-Instruct")
    check_pair(target, same_size, parse_version(version))
    if outcome is None:
        check_pair(target, draft, parse_version(version))
        return
    with pytest.raises(IncompatibleDraftError) as info:
        check_pair(target, draft, parse_version(version))
    message = str(info.value)
    assert outcome in message and "\n" not in message
    assert "151936" in message and "152064" in message
    fix = "an image up to vLLM 0.33" if version == "0.34.0" else "use vLLM 0.25 or later"
    assert fix in message and "or a draft with 152064 rows" in message


def test_a_mixture_of_experts_streams_only_the_routed_experts() -> None:
    a3b = load_model("Qwen/Qwen3-30B-A3B")
    dense = load_model("Qwen/Qwen3-32B")
    assert dense.weights_read(1) == dense.weights_read(512) == dense.weight_bytes
    assert 0.9 * a3b.weight_bytes < a3b.expert_weight_bytes < a3b.weight_bytes
    one = a3b.weights_read(1)  # 8 of 128 experts
    assert one == pytest.approx(a3b.weight_bytes - a3b.expert_weight_bytes * (120 / 128))
    assert one < a3b.weights_read(16) < a3b.weights_read(4096) <= a3b.weight_bytes
    assert a3b.weights_read(4096) == pytest.approx(a3b.weight_bytes)
