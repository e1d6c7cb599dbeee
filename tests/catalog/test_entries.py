"""The model, head, drafter and MTP catalogs as data: YAML files shipped with the code, each
entry validated by a pydantic model, read once; a broken entry is one line naming it."""

from __future__ import annotations

from importlib.resources import files

import pytest

from tuner.catalog import entries
from tuner.catalog.entries import HeadEntry, ModelEntry, MtpFamily, parse_entries
from tuner.catalog.heads import HEADS
from tuner.catalog.models import CATALOG, load_model
from tuner.catalog.mtp import FAMILIES
from tuner.catalog.seed import SEED
from tuner.catalog.seed_drafters import DRAFTERS
from tuner.errors import ConfigError

_QWEN = """
- hf_id: Org/Base-7B
  family: demo
  params: 7_000_000_000
  config:
    architectures: [Qwen2ForCausalLM]
    model_type: qwen2
    hidden_size: 3584
    intermediate_size: 18944
    num_attention_heads: 28
    num_hidden_layers: 28
    vocab_size: 152064
"""


def test_every_catalog_file_ships_with_the_package_and_reads_once() -> None:
    for name in ("models.yaml", "heads.yaml", "drafters.yaml", "mtp.yaml"):
        assert files("tuner.catalog").joinpath(name).is_file(), name
    assert entries.model_entries() is entries.model_entries() is SEED
    assert entries.head_entries() is HEADS
    assert entries.drafter_entries() is DRAFTERS
    assert entries.mtp_families() is FAMILIES
    assert len(CATALOG) == len(SEED) + len(HEADS) + len(DRAFTERS)


def test_a_like_entry_is_its_base_with_its_own_config_keys_laid_over() -> None:
    base = next(e for e in SEED if e.hf_id == "Qwen/Qwen2.5-7B-Instruct")
    awq = next(e for e in SEED if e.hf_id == "Qwen/Qwen2.5-7B-Instruct-AWQ")
    assert awq.family == base.family and awq.params == base.params
    assert awq.config == {
        **base.config,
        "torch_dtype": "float16",
        "quantization_config": awq.config["quantization_config"],
    }
    assert awq.config["quantization_config"]["quant_method"] == "awq"
    assert load_model("Qwen/Qwen2.5-7B-Instruct-AWQ").quantization == "awq"
    assert load_model("Qwen/Qwen2.5-7B-Instruct").quantization == "bf16"


def test_every_head_and_drafter_targets_catalog_models() -> None:
    models = {e.hf_id for e in SEED}
    for entry in (*HEADS, *DRAFTERS):
        assert set(entry.targets) <= models, entry.hf_id
        assert entry.where.startswith("https://huggingface.co/" + entry.hf_id)


def test_parsed_text_gives_validated_records() -> None:
    text = _QWEN + "- {hf_id: Org/Base-7B-AWQ, like: Org/Base-7B, config: {torch_dtype: f16}}\n"
    base, awq = parse_entries(text, "models.yaml", ModelEntry)
    assert base.params == 7e9 and awq.params == 7e9
    assert awq.config["vocab_size"] == 152064 and awq.config["torch_dtype"] == "f16"
    assert awq.where == "https://huggingface.co/Org/Base-7B-AWQ/blob/main/config.json"
    (family,) = parse_entries("- {drafter: x_mtp, model_types: [x]}", "mtp.yaml", MtpFamily)
    assert family.layers_key == "num_nextn_predict_layers" and family.default == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_QWEN.replace("family: demo", "family: demo\n  size: 7"), "entry 1 (Org/Base-7B): size"),
        (_QWEN.replace("  family: demo\n", ""), "entry 1 (Org/Base-7B): family: Field required"),
        (_QWEN.replace("vocab_size: 152064", "vocab_size: many"), "whole numbers for vocab_size"),
        (_QWEN.replace("    model_type: qwen2\n", ""), "architectures (a list) and model_type"),
        (_QWEN.replace("7_000_000_000", "-1"), "entry 1 (Org/Base-7B): params"),
        ("- {hf_id: Org/X-AWQ, like: Org/X}", "entry 1 (Org/X-AWQ) is like 'Org/X'"),
        ("hf_id: Org/X", "must be a list of entries"),
        ("- [unclosed", "is not valid YAML at line"),
    ],
)
def test_a_broken_entry_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_entries(text, "models.yaml", ModelEntry)
    assert message in str(caught.value)
    assert str(caught.value).startswith("models.yaml")
    assert "\n" not in str(caught.value)


def test_a_head_names_its_method_and_targets() -> None:
    head = _QWEN.replace("family: demo", "method: medusa\n  targets: [Org/Target]")
    with pytest.raises(
        ConfigError, match=r"entry 1 \(Org/Base-7B\): method: Input should be 'eagle' or 'eagle3'$"
    ):
        parse_entries(head.replace("  params: 7_000_000_000\n", ""), "heads.yaml", HeadEntry)
    no_targets = head.replace("medusa", "eagle3").replace("[Org/Target]", "[]")
    with pytest.raises(ConfigError, match="targets"):
        parse_entries(no_targets.replace("  params: 7_000_000_000\n", ""), "heads.yaml", HeadEntry)
