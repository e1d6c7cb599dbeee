"""Weights before the clock: ``prefetch`` against a local stand-in for the Hugging Face Hub
(:mod:`tests.testbed.fake_hub`), with the real ``huggingface_hub`` client and a fresh cache each
test.

huggingface_hub copies some settings into ``huggingface_hub.constants`` when it is imported:
``HF_HUB_OFFLINE`` (its HTTP session refuses every request when true), ``ENDPOINT`` with its
``HUGGINGFACE_CO_URL_TEMPLATE`` (used where no endpoint is passed, e.g. for the agent registry
it fetches for its user agent; a passed endpoint replaces the template's prefix only if that
prefix is ``ENDPOINT``, so the two are patched together) and ``HF_TOKEN_PATH`` (a stored
login). spectune reads the environment at call time and passes endpoint, token and cache
itself, so the tests set the environment *and* patch those copies to match: nothing leaves
127.0.0.1 and no token of this machine is used.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import huggingface_hub.constants
import optuna
import pytest
from typer.testing import CliRunner

from tests.testbed.fake_hub import FakeHub, FakeRepo
from tests.trial.traffic_support import one_config_space
from tuner.cli import app
from tuner.config.space import load_space
from tuner.errors import ConfigError
from tuner.launch import engine, images
from tuner.results import StartupEvent
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.prefetch import models_to_fetch, prefetch, weight_files
from tuner.trial.backends import BackendOptions, ProcessSettings

TOKEN = "hf_test_secret_token_123"
CONFIG = json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}).encode()


def _safetensors(values: int) -> bytes:
    """A real safetensors file: one float32 tensor of ``values`` zeros."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [values], "data_offsets": [0, 4 * values]}})
    return struct.pack("<Q", len(header)) + header.encode() + bytes(4 * values)


def _tiny(values: int = 64) -> dict[str, bytes]:
    return {
        "config.json": CONFIG,
        "tokenizer.json": b'{"model": {"vocab": {"a": 0}}}',
        "model.safetensors": _safetensors(values),
        "pytorch_model.bin": b"pickled weights vLLM skips when safetensors exist" * 10,
        "original/consolidated.00.pth": b"meta's own checkpoint" * 10,
        "original/params.json": b"{}",
    }


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    fake = FakeHub(
        {
            "me/tiny": FakeRepo(_tiny()),
            "me/tiny-draft": FakeRepo(_tiny(16)),
            "me/gated": FakeRepo(_tiny(), gated=True, token=TOKEN),
            "me/sharded": FakeRepo(
                {
                    "config.json": CONFIG,
                    "model.safetensors.index.json": json.dumps(
                        {
                            "weight_map": {
                                "a": "model-00001-of-00002.safetensors",
                                "b": "model-00002-of-00002.safetensors",
                            }
                        }
                    ).encode(),
                    "model-00001-of-00002.safetensors": _safetensors(8),
                    "model-00002-of-00002.safetensors": _safetensors(8),
                    "model.safetensors": _safetensors(16),  # a duplicate the index does not name
                }
            ),
        }
    )
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # does not exist yet
    monkeypatch.setenv("HF_ENDPOINT", fake.url)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", fake.url)
    template = fake.url + "/{repo_id}/resolve/{revision}/{filename}"  # ENDPOINT's import-time twin
    monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    yield fake
    fake.close()


def _go_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def _one_line_error(names: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        prefetch(names)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_downloads_only_what_vllm_loads_into_an_empty_cache(hub: FakeHub, tmp_path: Path) -> None:
    events: list[StartupEvent] = []
    [model] = prefetch(["me/tiny"], events.append)
    snapshots = tmp_path / "hf-home" / "hub" / "models--me--tiny" / "snapshots"
    assert model.path == snapshots / hub.repos["me/tiny"].sha
    assert sorted(p.name for p in model.path.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert sorted(hub.downloads()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert (
        model.size_bytes
        == model.downloaded_bytes
        == sum(
            len(hub.repos["me/tiny"].files[f])
            for f in ("config.json", "model.safetensors", "tokenizer.json")
        )
    )
    # refs/main is what an offline container (HF_HUB_OFFLINE passed on) finds the snapshot by.
    assert (snapshots.parent / "refs" / "main").read_text() == hub.repos["me/tiny"].sha
    assert [e.phase for e in events] == ["downloading weights"] * 2
    assert {e.detail for e in events} == {"me/tiny"}
    assert events[-1].done == events[-1].total == model.size_bytes


def test_a_second_prefetch_downloads_nothing(hub: FakeHub) -> None:
    prefetch(["me/tiny"])
    hub.seen.clear()
    [model] = prefetch(["me/tiny"])
    assert [(s.method, s.path) for s in hub.seen] == [("GET", "/api/models/me/tiny/revision/main")]
    assert model.downloaded_bytes == 0 and model.size_bytes > 0


def test_only_the_shards_the_index_names(hub: FakeHub) -> None:
    [model] = prefetch(["me/sharded"])
    assert sorted(p.name for p in model.path.iterdir()) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]


def test_weight_files_follow_vllm() -> None:
    never: Callable[[str], list[str]] = lambda index: []  # noqa: E731  (no index in these repos)
    assert weight_files(["a.bin", "training_args.bin", "b.pt"], never) == ["a.bin"]
    assert weight_files(["x/model.safetensors", "b.pt"], never) == ["b.pt"]  # top folder only
    mistral = ["consolidated.safetensors", "model-00001-of-00001.safetensors", "params.json"]
    assert weight_files(mistral, never) == ["consolidated.safetensors"]
    assert weight_files(["config.json", "original/model.pth"], never) == []


def test_offline_with_an_empty_cache_is_one_line(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    _go_offline(monkeypatch)
    message = _one_line_error(["me/tiny"])
    assert message.startswith("model me/tiny is not in the Hugging Face cache")
    assert "HF_HUB_OFFLINE is set" in message
    assert hub.seen == []


def test_offline_uses_what_is_cached(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    prefetch(["me/tiny"])
    hub.seen.clear()
    _go_offline(monkeypatch)
    [model] = prefetch(["me/tiny"])
    assert (model.downloaded_bytes, hub.seen) == (0, [])
    (model.path / "model.safetensors").unlink()  # the weights gone, the config still there
    assert "weights are not (all) in the Hugging Face cache" in _one_line_error(["me/tiny"])


def test_gated_without_token_is_one_line_naming_the_fix(hub: FakeHub) -> None:
    message = _one_line_error(["me/tiny", "me/gated"])
    assert message.startswith("model me/gated is gated on the Hugging Face Hub")
    assert "https://huggingface.co/me/gated" in message and "export HF_TOKEN=..." in message
    assert "model.safetensors" not in hub.downloads()  # stopped before any weights moved


def test_the_token_is_sent_but_never_shown(
    hub: FakeHub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    [model] = prefetch(["me/gated"])
    assert (model.path / "model.safetensors").is_file()
    assert {s.authorization for s in hub.seen} == {f"Bearer {TOKEN}"}
    monkeypatch.setenv("HF_TOKEN", "hf_wrong_secret")
    hub.repos["me/gated"].files["extra.json"] = b"{}"  # a new commit: the wrong token is tried
    message = _one_line_error(["me/gated"])
    assert "the HF_TOKEN set was refused" in message and "hf_wrong_secret" not in message
    captured = capsys.readouterr()
    for text in (captured.out, captured.err, caplog.text, message):
        assert TOKEN not in text and "hf_wrong_secret" not in text
    assert not any(TOKEN in p.read_text(errors="ignore") for p in _files(model.path.parents[2]))


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def test_missing_repo_and_unreachable_hub_are_one_line(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _one_line_error(["me/nothing"]).startswith(
        "model 'me/nothing' is not on the Hugging Face Hub"
    )
    assert "neither a local folder nor a Hugging Face id" in _one_line_error(["./no/such/folder"])
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    message = _one_line_error(["me/tiny"])
    assert message.startswith("model me/tiny is not in the Hugging Face cache")
    assert f"the Hugging Face Hub (http://127.0.0.1:{port}) cannot be reached" in message


def test_local_folders_are_left_to_the_launcher(hub: FakeHub, tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    [model] = prefetch([str(folder)])
    assert model.local and model.path == folder and hub.seen == []


def test_a_space_fetches_its_target_and_every_draft() -> None:
    space = load_space("default")
    names = models_to_fetch(space)
    assert names[0] == space.target.hf_id
    drafts = {c.model for c in space.choices if c.model}
    assert set(names[1:]) == drafts and len(names) == len(set(names))


def test_cli_prefetch(hub: FakeHub, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["prefetch", "--model", "me/tiny", "--draft", "me/tiny-draft"])
    assert result.exit_code == 0, result.stderr
    cache = tmp_path / "hf-home" / "hub"
    assert str(cache / "models--me--tiny" / "snapshots") in result.stdout
    assert str(cache / "models--me--tiny-draft" / "snapshots") in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("ready:")
    bad = runner.invoke(app, ["prefetch", "--draft", "me/tiny-draft"])
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
    missing = runner.invoke(app, ["prefetch", "--model", "me/nothing"])
    assert missing.exit_code == 2
    assert missing.stderr.strip().splitlines() == [
        "error: model 'me/nothing' is not on the Hugging Face Hub (or is private: set HF_TOKEN): "
        "check the id, or use a local model directory or a catalog id (`spectune models`)"
    ]


def test_cli_prefetch_pulls_the_image_too(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    pulled: list[str] = []

    class Engine:
        def close(self) -> None:
            pulled.append("closed")

    def ensure_image(client: Engine, image: str, on_startup: object) -> bool:
        pulled.append(image)
        return True

    monkeypatch.setattr(engine, "check_engine", Engine)
    monkeypatch.setattr(images, "ensure_image", ensure_image)
    args = ["prefetch", "--model", "me/tiny", "--image", "vllm/vllm-openai:v0.8.5"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert pulled == ["vllm/vllm-openai:v0.8.5", "closed"]
    assert "image vllm/vllm-openai:v0.8.5: pulled" in result.stdout
    assert "and image vllm/vllm-openai:v0.8.5" in result.stdout.splitlines()[-1]


def test_a_study_fetches_its_weights_before_it_is_stored_and_before_the_first_start(
    hub: FakeHub, tmp_path: Path
) -> None:
    space = one_config_space("fetch")
    target = space.target.hf_id  # a catalog id the fake server knows, served here
    hub.repos[target] = FakeRepo(_tiny())
    events: list[StartupEvent] = []
    options = BackendOptions(
        study="",
        settings=ProcessSettings(
            vllm_command=(sys.executable, "-m", "tuner.sim.server"), ready_timeout_s=60
        ),
        on_startup=events.append,
    )
    request = OptimizeRequest(
        "fetch", space, "process", 1, tmp_path, backend_options=options, confirm_top=0
    )

    result = optimize(request)

    snapshot = tmp_path / "hf-home" / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots"
    assert sorted(p.name for p in (snapshot / hub.repos[target].sha).iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    phases = [e.phase for e in events]
    assert phases.index("downloading weights") < phases.index("starting")
    assert phases[-1] == "ready"
    assert result.trials == 1 and result.recommended is not None


def test_a_study_whose_weights_cannot_be_fetched_stores_nothing(
    hub: FakeHub, tmp_path: Path
) -> None:
    hub.repos["Qwen/Qwen2.5-14B-Instruct-AWQ"] = FakeRepo(_tiny(), gated=True, token=TOKEN)
    argv = [
        "optimize",
        "--space",
        "qwen2.5-14b-awq-4090x1",
        "--hardware",
        "4090x1",
        "--backend",
        "process",
        "--vllm-command",
        f"{sys.executable} -m tuner.sim.server",
        "--prefetch",
        "--studies-dir",
        str(tmp_path / "studies"),
        "--trials",
        "1",
    ]

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "gated" in lines[0] and "HF_TOKEN" in lines[0]
    for db in (tmp_path / "studies").glob("*.db"):  # opened, perhaps, but holding no study
        assert optuna.get_all_study_names(storage=f"sqlite:///{db}") == []
