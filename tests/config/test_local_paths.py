"""User paths are absolute from where they enter: a space's local models and prompt files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.config.local_paths import absolute, absolute_space_paths
from tuner.config.space import load_space

# A config.json load_model reads as a local model folder (a tiny Qwen2).
_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 2048,
    "max_position_embeddings": 512,
    "torch_dtype": "bfloat16",
}


def _model(folder: Path, layers: int = 1) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**_CONFIG, "num_hidden_layers": layers}))
    return folder


def test_absolute_expands_home_and_keeps_links(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert absolute("~/x") == Path.home() / "x"
    assert absolute(tmp_path / "link" / ".." / "link") == tmp_path / "link"  # not resolved
    assert absolute("relative").is_absolute()


def test_local_models_and_prompt_files_become_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "models" / "target")
    _model(tmp_path / "models" / "draft")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    raw = {
        "target": "models/target",
        "workload": {"prompt_set": "prompts.jsonl", "requests": 3},
        "search": {
            "draft": ["none", "ngram", "./models/draft", "Qwen/Qwen2.5-0.5B-Instruct"],
            "methods": [
                "none",
                {"method": "draft_model", "model": ["models/draft", "org/draft"]},
                {"method": "eagle3", "model": "models/draft"},
            ],
        },
    }
    made = absolute_space_paths(raw)
    draft = str(tmp_path / "models" / "draft")
    assert made["target"] == str(tmp_path / "models" / "target")
    assert made["workload"] == {"prompt_set": str(tmp_path / "prompts.jsonl"), "requests": 3}
    assert made["search"]["draft"] == ["none", "ngram", draft, "Qwen/Qwen2.5-0.5B-Instruct"]
    assert made["search"]["methods"] == [
        "none",
        {"method": "draft_model", "model": [draft, "org/draft"]},
        {"method": "eagle3", "model": draft},
    ]
    assert raw["target"] == "models/target"  # the caller's dict is left as it was


def test_built_in_prompt_sets_and_malformed_values_are_left_to_the_schema() -> None:
    raw = {"target": 3, "workload": {"prompt_set": "code"}, "search": {"methods": "none"}}
    assert absolute_space_paths(raw) == raw
    assert absolute_space_paths(["not", "a", "mapping"]) == ["not", "a", "mapping"]


def test_a_space_file_loaded_from_a_relative_path_stores_absolute_model_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _model(tmp_path / "target", layers=4)
    _model(tmp_path / "draft")
    space = {
        "name": "local",
        "hardware": "4090x1",
        "target": "target",
        "server": {"max_model_len": 512},
        "workload": {"input_tokens": 32, "output_tokens": 16},
        "search": {"draft": ["none", "draft"], "num_speculative_tokens": 2},
    }
    Path("space.yaml").write_text(yaml.safe_dump(space))
    loaded = load_space("space.yaml")
    assert loaded.target.hf_id == str(tmp_path / "target")
    assert loaded.source["target"] == str(tmp_path / "target")  # the copy a study stores
    assert loaded.source["search"]["draft"] == ["none", str(tmp_path / "draft")]
    server = loaded.config(loaded.speculative(str(tmp_path / "draft"), 2), 0.9, 2048, 0.0).server
    assert server.model == str(tmp_path / "target")
    assert server.draft_model == str(tmp_path / "draft")
