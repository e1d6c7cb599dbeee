"""Helpers of the traffic tests: small spaces, and studies whose server is the shipped fake one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from tuner.config.space import SearchSpace, load_space, space_from_dict
from tuner.study.optimize import OptimizeRequest
from tuner.trial.backends import BackendOptions, ProcessSettings

FAKE_VLLM = (sys.executable, "-m", "tuner.sim.server")
SMALL_SPACE: dict[str, Any] = {
    "name": "traffic",
    "hardware": "4090x1",
    "target": "Qwen/Qwen2.5-14B-Instruct-AWQ",
    "vllm": {"version": "0.32.0"},
    "slo": {"ttft_ms": 5000},
    "workload": {
        "prompt_set": "chat",
        "input_tokens": 64,
        "output_tokens": 16,
        "concurrency": [{"level": 1, "weight": 0.5}, {"level": 4, "weight": 0.5}],
        "temperature": [{"value": 0.2, "weight": 0.7}, {"value": 0.8, "weight": 0.3}],
        "requests": 6,
        "warmup": 1,
    },
    "search": {
        "draft": ["none", "ngram"],
        "num_speculative_tokens": 3,
        "gpu_memory_utilization": 0.9,
        "max_num_batched_tokens": [2048, 4096],
    },
}


def small_space(tmp_path: Path, **sections: Any) -> SearchSpace:
    """:data:`SMALL_SPACE` with ``sections`` merged in, loaded from a file like a user's."""
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in SMALL_SPACE.items()}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values} if isinstance(values, dict) else values
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_space(str(path))


def one_config_space(name: str, extra_flags: dict[str, Any] | None = None) -> SearchSpace:
    """A space with one config in it (prompt lookup at K=3) on one GPU, served quickly by the
    shipped fake server (``extra_flags``: more of its flags, such as a fault)."""
    return space_from_dict(
        {
            "name": name,
            "hardware": "4090x1",
            "target": "Qwen/Qwen2.5-7B-Instruct",  # a catalog id the fake server knows
            "server": {
                "max_model_len": 4096,
                "extra_flags": {"sim-speed": 200, **(extra_flags or {})},
            },
            "vllm": {"version": "0.32.0"},
            "workload": {
                "input_tokens": 64,
                "output_tokens": 16,
                "concurrency": [1],
                "requests": 2,
                "warmup": 0,
            },
            "search": {
                "draft": ["ngram"],
                "num_speculative_tokens": 3,
                "gpu_memory_utilization": 0.9,
                "max_num_batched_tokens": [2048],
                "temperature": 0.0,
            },
        }
    )


def fake_request(tmp_path: Path, space: SearchSpace, trials: int) -> OptimizeRequest:
    """A process-backend study whose ``vllm serve`` is the fake server."""
    return OptimizeRequest(
        study="traffic",
        space=space,
        backend="process",
        trials=trials,
        studies_dir=tmp_path / "studies",
        sampler="random",
        confirm_top=0,
        prefetch=False,  # the fake server loads no weights
        backend_options=BackendOptions(
            study="",
            settings=ProcessSettings(
                vllm_command=FAKE_VLLM, request_timeout_s=5.0, ready_timeout_s=60.0
            ),
        ),
    )
