"""MTP layers inside a target, as vLLM 0.32's hf_config_override finds them (catalog/mtp.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.catalog.mtp import FAMILIES, MTP_MODEL_TYPES, check_mtp, mtp_family, mtp_layers
from tuner.errors import IncompatibleDraftError


def test_every_family_drafts_with_a_type_vllm_knows() -> None:
    assert {f.drafter for f in FAMILIES} <= MTP_MODEL_TYPES
    assert len(MTP_MODEL_TYPES) == 27  # vLLM 0.32's MTPModelTypes


@pytest.mark.parametrize(
    ("config", "layers"),
    [
        (
            {
                "model_type": "deepseek_v3",
                "architectures": ["DeepseekV3ForCausalLM"],
                "num_nextn_predict_layers": 1,
            },
            1,
        ),
        ({"model_type": "deepseek_v3", "num_nextn_predict_layers": 0}, 0),  # Kimi-K2
        ({"model_type": "qwen3_5_moe", "mtp_num_hidden_layers": 1}, 1),
        ({"model_type": "qwen3_5", "text_config": {"mtp_num_hidden_layers": 2}}, 2),
        ({"model_type": "kimi_k3", "text_config": {"num_nextn_predict_layers": 1}}, 1),
        ({"model_type": "glm5_next", "num_nextn_predict_layers": 3}, 3),
        ({"architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash"}, 1),
        ({"model_type": "qwen3_next"}, 1),  # no count in its config: vLLM builds one layer
        ({"model_type": "inkling_model", "mtp_config": {"num_nextn_predict_layers": 2}}, 2),
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, 0),
    ],
)
def test_layers_are_counted_as_vllm_counts_them(config: dict[str, Any], layers: int) -> None:
    assert mtp_layers(config) == layers
    assert (mtp_family(config) is None) is (config.get("model_type") == "llama")


def test_deepseek_v41_is_told_to_use_dspark() -> None:
    with pytest.raises(IncompatibleDraftError, match="use method dspark"):
        check_mtp("deepseek-ai/DeepSeek-V4.1", {"model_type": "deepseek_v41"})
