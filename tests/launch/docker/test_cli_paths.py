"""``spectune optimize`` on the docker backend with the default relative studies folder.

Issue 23: every trial failed on a real engine with ``create studies/<study>/vllm-cache: ...
includes invalid characters for a local volume name``, because the study's vLLM cache reached
Docker as a relative path, which it takes for a volume name. Every other docker test passes an
absolute temporary folder. The fake server runs in the empty test image.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.launch.docker import LABEL_STUDY

pytestmark = pytest.mark.docker


def test_a_study_run_from_its_folder_with_the_default_studies_dir_runs_its_trials(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    test_image: str,
    study: str,
    project_python: str,
    host_volumes: Callable[..., dict[str, str]],
    docker_client: docker.DockerClient,
) -> None:
    space = {
        "name": study,
        "hardware": "4090x1",
        "target": "Qwen/Qwen2.5-7B-Instruct",
        "server": {"max_model_len": 4096, "extra_flags": {"sim-speed": 200}},
        "vllm": {"version": "0.32.0"},
        "workload": {"input_tokens": 64, "output_tokens": 16, "requests": 3, "warmup": 0},
        "search": {"draft": ["none", "ngram"], "num_speculative_tokens": 3},
    }
    monkeypatch.chdir(tmp_path)
    Path("space.yaml").write_text(yaml.safe_dump(space))
    mounts = host_volumes(tmp_path / "container-tmp")
    volumes = [
        arg for host, spec in mounts.items() for arg in ("--docker-volume", f"{host}:{spec}")
    ]
    entrypoint = f"{project_python} -m tuner.sim.server"
    options = {
        "--space": "space.yaml",
        "--trials": "2",
        "--confirm-top": "0",
        "--image": test_image,
        "--gpus": "none",
        "--ready-timeout": "60",
        "--docker-entrypoint": entrypoint,
    }
    args = [item for pair in options.items() for item in pair]
    result = CliRunner().invoke(app, ["optimize", *args, "--no-prefetch", "--json", *volumes])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["trials"] == 2 and data["recommended"] is not None, data
    assert data["storage"] == f"sqlite:///{tmp_path / 'studies' / f'{study}.db'}"
    assert (tmp_path / "studies" / study / "vllm-cache").is_dir()  # mounted, so it was made
    logs = sorted(p.name for p in (tmp_path / "studies" / study / "logs").iterdir())
    assert logs == ["trial-0.log", "trial-1.log"]
    left = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    assert left == []
