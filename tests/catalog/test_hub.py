"""Any model by its Hugging Face id: read from a laid-out cache, offline, gated, missing."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest

from tests.testbed import write_hf_cache
from tuner.catalog import models
from tuner.catalog.models import CATALOG, check_draft, load_model
from tuner.config.methods.draft_model import check_pair
from tuner.config.vllm_args import parse_version
from tuner.errors import ConfigError, IncompatibleDraftError

QWEN3_8B = next(m for m in CATALOG if m.hf_id == "Qwen/Qwen3-8B").config
TOKENIZER = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}}, "added_tokens": []}


@pytest.fixture(autouse=True)
def _fresh_lookups() -> Iterator[None]:
    models._from_hub.cache_clear()  # each test lays out its own cache
    yield
    models._from_hub.cache_clear()


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = write_hf_cache(
        tmp_path / "hub",
        {
            "me/qwen3-8b-finetune": QWEN3_8B,
            "me/qwen3-draft": {**QWEN3_8B, "num_hidden_layers": 2, "hidden_size": 512},
            "me/other-tokenizer": {**QWEN3_8B, "num_hidden_layers": 2},
        },
        {
            "me/qwen3-8b-finetune": TOKENIZER,
            "me/qwen3-draft": TOKENIZER,
            "me/other-tokenizer": {"model": {"vocab": {"x": 0}}},
        },
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_hub_id_is_read_from_the_cache(hub: Path) -> None:
    spec = load_model("me/qwen3-8b-finetune")
    assert (spec.layers, spec.hidden, spec.kv_heads, spec.head_dim) == (36, 4096, 8, 128)
    assert spec.vocab == 151936 and spec.quantization == "bf16"
    assert spec.params == pytest.approx(load_model("Qwen/Qwen3-8B").params)
    assert spec.tokenizer_family.startswith("tokenizer-")  # tokenizer.json's fingerprint
    assert "huggingface.co/me/qwen3-8b-finetune" in spec.source


def test_tokenizers_decide_compatibility_of_hub_models(hub: Path) -> None:
    target = load_model("me/qwen3-8b-finetune")
    check_pair(target, load_model("me/qwen3-draft"), parse_version("0.32.0"))
    with pytest.raises(IncompatibleDraftError, match="tokenizer"):
        check_draft(target, load_model("me/other-tokenizer"))


def test_offline_miss_is_one_line(hub: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model("me/not-downloaded")
    message = str(info.value)
    assert "\n" not in message
    assert "'me/not-downloaded'" in message and "HF_HUB_OFFLINE is set" in message
    assert "huggingface-cli download me/not-downloaded" in message


class _GatedHub(http.server.BaseHTTPRequestHandler):
    """Answers like the Hub does for a gated repo without an accepted licence."""

    def _gated(self) -> None:
        self.send_response(401)
        self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("X-Error-Message", "Access to model org/gated is restricted.")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = _gated
    do_GET = _gated

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def gated_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _GatedHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # huggingface_hub copied HF_HUB_OFFLINE when first imported, which may have been under an
    # earlier test's offline environment (spectune imports it only when it needs the Hub).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    yield "org/gated"
    server.shutdown()
    server.server_close()


def test_gated_repo_without_token_is_one_line(gated_hub: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(gated_hub)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("model org/gated is gated on the Hugging Face Hub")
    assert "set HF_TOKEN" in message
