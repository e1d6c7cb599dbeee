"""A study whose target is given only by a Hugging Face id, resolved in a laid-out cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from tests.testbed import write_hf_cache
from tuner.catalog import models
from tuner.catalog.models import CATALOG
from tuner.cli import app

HF_ID = "someone/qwen3-8b-support-bot"  # a fine-tune the catalog has never heard of
SPACE = {
    "name": "hf-id-study",
    "hardware": "4090x1",
    "target": HF_ID,
    "server": {"max_model_len": 4096},
    "vllm": {"image": "vllm/vllm-openai:v0.32.0"},
    "slo": {"ttft_ms": 2000},
    "workload": {"prompt_set": "code", "input_tokens": 256, "output_tokens": 64, "requests": 2},
    "search": {
        "draft": ["none", "ngram"],
        "num_speculative_tokens": {"low": 2, "high": 4},
        "gpu_memory_utilization": {"low": 0.85, "high": 0.92, "step": 0.01},
        "max_num_batched_tokens": [2048],
        "temperature": 0.0,
    },
}


@pytest.fixture(autouse=True)
def _fresh_lookups() -> Iterator[None]:
    models._from_hub.cache_clear()
    yield
    models._from_hub.cache_clear()


def _optimize(space: Path, studies: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--backend",
            "sim",
            "--space",
            str(space),
            "--trials",
            "3",
            "--studies-dir",
            str(studies),
            "--seed",
            "3",
        ],
    )
    return result.exit_code, result.stdout, result.stderr


def test_a_study_of_a_model_known_only_by_its_hub_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    qwen3 = next(m for m in CATALOG if m.hf_id == "Qwen/Qwen3-8B")
    cache = write_hf_cache(tmp_path / "hub", {HF_ID: dict(qwen3.config)})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))  # the fake server's process inherits it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))

    code, out, err = _optimize(space, tmp_path / "studies")

    assert code == 0, err + out
    db = tmp_path / "studies" / "hf-id-study.db"
    study = optuna.load_study(study_name="hf-id-study", storage=f"sqlite:///{db}")
    assert len(study.trials) == 3
    assert any(t.state is optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_the_same_id_offline_and_uncached_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))

    code, out, err = _optimize(space, tmp_path / "studies")

    assert code == 2
    lines = [line for line in (err or out).strip().splitlines() if line.strip()]
    assert len(lines) == 1, err + out
    assert f"unknown model {HF_ID!r}" in lines[0] and "HF_HUB_OFFLINE is set" in lines[0]
    assert not (tmp_path / "studies" / "hf-id-study.db").exists()
