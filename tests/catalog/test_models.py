import json
from pathlib import Path

import pytest

from tuner.catalog.models import CATALOG, check_draft, load_model
from tuner.errors import ConfigError, IncompatibleDraftError

GIB = 1024**3


def test_catalog_covers_the_families_and_quantizations() -> None:
    ids = {m.hf_id for m in CATALOG}
    for size in ("0.5B", "1.5B", "3B", "7B", "14B", "32B", "72B"):
        for suffix in ("", "-AWQ", "-GPTQ-Int4"):
            assert f"Qwen/Qwen2.5-{size}-Instruct{suffix}" in ids
    assert "meta-llama/Llama-3.2-1B-Instruct" in ids
    assert "meta-llama/Llama-3.3-70B-Instruct" in ids
    assert "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" in ids
    assert "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B" in ids


def test_weights_match_the_field_notes() -> None:
    # BRIEF: AWQ 4-bit 14B weighs ~9.5 GB, the 0.5B FP16 draft ~1.2 GB.
    awq14 = load_model("Qwen/Qwen2.5-14B-Instruct-AWQ").weight_bytes / 1e9
    assert 9.0 <= awq14 <= 10.5
    draft = load_model("qwen/qwen2.5-0.5b-instruct").weight_bytes / 1e9
    assert 0.9 <= draft <= 1.3
    bf16_32 = load_model("Qwen/Qwen2.5-32B-Instruct").weight_bytes / GIB
    assert 58 <= bf16_32 <= 63


def test_kv_bytes_per_token_follows_architecture() -> None:
    m = load_model("Qwen/Qwen2.5-32B-Instruct-AWQ")
    assert m.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2  # 256 KiB per token


def test_same_family_draft_is_accepted() -> None:
    check_draft(
        load_model("Qwen/Qwen2.5-32B-Instruct-AWQ"), load_model("Qwen/Qwen2.5-0.5B-Instruct")
    )


def test_mismatched_draft_is_rejected_with_reason() -> None:
    with pytest.raises(IncompatibleDraftError, match="tokenizer") as info:
        check_draft(
            load_model("Qwen/Qwen2.5-32B-Instruct-AWQ"),
            load_model("meta-llama/Llama-3.2-1B-Instruct"),
        )
    assert "Llama-3.2-1B" in str(info.value) and "qwen2.5" in str(info.value)
    with pytest.raises(IncompatibleDraftError, match="smaller"):
        check_draft(load_model("Qwen/Qwen2.5-7B-Instruct"), load_model("Qwen/Qwen2.5-14B-Instruct"))
    # DeepSeek's distills changed the special tokens: not a Qwen2.5 draft.
    with pytest.raises(IncompatibleDraftError):
        check_draft(
            load_model("Qwen/Qwen2.5-32B-Instruct"),
            load_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"),
        )


def _write_model(folder: Path, vocab: dict[str, int], **config: object) -> Path:
    folder.mkdir()
    base = {
        "hidden_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 256,
        "vocab_size": 2048,
        "model_type": "qwen2",
        "tie_word_embeddings": True,
    }
    (folder / "config.json").write_text(json.dumps({**base, **config}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    return folder


def test_local_directory_models(tmp_path: Path) -> None:
    target = load_model(str(_write_model(tmp_path / "t", {"a": 0, "b": 1})))
    assert target.layers == 2 and target.head_dim == 32 and target.kv_heads == 2
    assert target.params == pytest.approx(
        2 * (128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 256) + 2048 * 128
    )
    draft = load_model(str(_write_model(tmp_path / "d", {"a": 0, "b": 1}, num_hidden_layers=1)))
    check_draft(target, draft)
    other = load_model(str(_write_model(tmp_path / "o", {"x": 0}, num_hidden_layers=1)))
    with pytest.raises(IncompatibleDraftError):
        check_draft(target, other)


def test_unknown_model_and_broken_config(tmp_path: Path) -> None:
    # A Hub id outside the catalog is looked up in the (empty, offline) test cache.
    with pytest.raises(
        ConfigError,
        match="unknown model 'Qwen/Qwen9': not in the built-in catalog",
    ):
        load_model("Qwen/Qwen9")
    with pytest.raises(ConfigError, match="unknown model 'no/such/path'"):
        load_model("no/such/path")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json"):
        load_model(str(tmp_path))
