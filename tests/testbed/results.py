"""Shared pieces of the result tests: the levels study, Chromium, free ports, image ink.

A module of its own (not conftest) so test files can import it by an unambiguous name.
"""

from __future__ import annotations

import os
import socket
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml

from tuner import serde
from tuner.analysis.k_table import K_TABLE_ATTR, KTableVerdict, planned_table
from tuner.analysis.picks import DEFAULT_PICK, pick_candidate
from tuner.config.space import SearchSpace, load_space
from tuner.results import Source
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage
from tuner.study.study import open_study

STUDY = "levels"
CHROMIUM = Path(os.environ.get("SPECTUNE_CHROMIUM", "/usr/bin/chromium"))

# A 4090x2 study of the 32B AWQ target measured at 1, 8 and 128 concurrent requests: enough
# load that speculation loses at the top level in the simulator (since its calibration against
# public figures, a 0.5B draft still pays at 32 on two 4090s).
SPACE: dict[str, Any] = {
    "name": STUDY,
    "hardware": "4090x2",
    "target": "Qwen/Qwen2.5-32B-Instruct-AWQ",
    "server": {"max_model_len": 8192, "quantization": "awq"},
    "vllm": {"image": "vllm/vllm-openai:v0.32.0"},
    "slo": {"ttft_ms": 30000},  # held at every level: 128 at once queue for seconds
    "workload": {
        "prompt_set": "code",
        "input_tokens": 256,
        "output_tokens": 96,
        "concurrency": [1, 8, 128],
        "requests": 128,
        "warmup": 1,
    },
    "search": {
        "draft": ["none", "ngram", "Qwen/Qwen2.5-0.5B-Instruct"],
        "num_speculative_tokens": {"low": 1, "high": 8},
        "gpu_memory_utilization": {"low": 0.80, "high": 0.98, "step": 0.02},
        "max_num_batched_tokens": [1024, 2048, 4096],
        "temperature": {"low": 0.0, "high": 1.0, "step": 0.1},
    },
}


@dataclass(frozen=True)
class StudyCopy:
    """A private copy of the session's study."""

    studies_dir: Path
    name: str

    @property
    def url(self) -> str:
        return default_storage(self.name, self.studies_dir)

    @property
    def folder(self) -> Path:
        return self.studies_dir / self.name

    def open(self) -> tuple[optuna.Study, SearchSpace]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return open_study(
                self.name, open_storage(self.url), None, optuna.samplers.RandomSampler()
            )


def judge_table(study: optuna.Study, space: SearchSpace, *, wins: bool) -> KTableVerdict:
    """Stores a verdict on the recommended config's K table as confirm_k_table would, without
    its runs: for tests of how exports render a verdict (the runs are tested on their own, in
    tests/analysis/test_k_table.py)."""
    candidate = pick_candidate(study, DEFAULT_PICK)
    _, table = planned_table(study, space, candidate)
    assert table, "the levels study proposes a K table"
    fixed = candidate.throughput
    verdict = KTableVerdict(
        candidate.number, table, Source.SIMULATED, (), fixed * (1.05 if wins else 0.95), fixed
    )
    study.set_user_attr(K_TABLE_ATTR, serde.dump(verdict))
    return verdict


def build_study(studies_dir: Path, space: dict[str, object], trials: int, seed: int = 3) -> None:
    """Runs a simulated study of ``space`` into ``studies_dir``, unconfirmed (tests confirm)."""
    path = studies_dir / "space.yaml"
    studies_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(space))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        optimize(
            OptimizeRequest(
                str(space["name"]),
                load_space(str(path)),
                "sim",
                trials,
                studies_dir,
                seed=seed,
                confirm_top=0,
                sampler="tpe",  # the trials these tests were written against
            )
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_chromium(
    chromium: Path, profile: Path, url: str, *args: str, timeout_s: float = 90
) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run against ``url`` with a private profile and no network noise."""
    argv = [
        str(chromium),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        *args,
        url,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)


def ink(png: Path, box: tuple[int, int, int, int] | None = None) -> float:
    """The fraction of coloured pixels in ``box``: drawn data, not axes, text or background.

    Markers, lines and bars are drawn in colour; frames, grids and labels are grey or black.
    """
    import numpy as np
    from PIL import Image

    with Image.open(png) as image:
        region = image.convert("RGB").crop(box) if box else image.convert("RGB")
        pixels = np.asarray(region, dtype=np.int16)
    if pixels.size == 0:
        return 0.0
    chroma = pixels.max(axis=2) - pixels.min(axis=2)
    return float((chroma > 60).mean())
