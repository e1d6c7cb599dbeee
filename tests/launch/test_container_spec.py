"""The docker launcher's records: its defaults, and the docker backend building them from its
settings in one place. Making a launcher asks nothing of a Docker Engine, so no engine is needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config.space import load_space
from tuner.config.vllm_args import VllmVersion
from tuner.launch.base import READY_TIMEOUT_S
from tuner.launch.container_spec import ContainerResources, ContainerTiming, VllmImage
from tuner.launch.docker import DockerLauncher
from tuner.launch.mounts import ContainerFiles
from tuner.trial.backends import BackendOptions, DockerSettings
from tuner.trial.backends.docker import DockerBackend


def test_a_launcher_given_only_an_image_keeps_the_defaults_a_study_relies_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    launcher = DockerLauncher(VllmImage("vllm/vllm-openai:v0.8.5"), study="s")

    assert (launcher.image.entrypoint, launcher.image.subcommand) == (("vllm",), ("serve",))
    assert launcher.version == VllmVersion(0, 8, 5)  # from the tag, the image never asked
    assert launcher.resources == ContainerResources(gpus=None, mem_limit=None, shm_size=None)
    assert launcher.files == ContainerFiles(hf_cache=tmp_path / "hf-home", secrets=("HF_TOKEN",))
    assert launcher.timing == ContainerTiming(READY_TIMEOUT_S, stop_timeout_s=30.0, poll_s=0.5)


def test_the_docker_backend_hands_every_setting_to_the_launcher_s_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    settings = DockerSettings(
        ready_timeout_s=42.0,
        request_timeout_s=7.0,
        image="vllm/vllm-openai:v0.9.0",
        entrypoint=("/opt/vllm/bin/vllm",),
        volumes=(("/models", "/models:ro"),),
        env=(("NCCL_P2P_DISABLE", "1"),),
        secrets=("HF_TOKEN", "WANDB_API_KEY"),
        vllm_cache=tmp_path / "vllm-cache",
    )
    options = BackendOptions(study="s", gpus=(1, 2), settings=settings)

    backend = DockerBackend.build(load_space(), options)

    launcher = backend.launcher
    assert launcher.study == "s"
    assert launcher.image == VllmImage(
        "vllm/vllm-openai:v0.9.0", entrypoint=("/opt/vllm/bin/vllm",), subcommand=("serve",)
    )
    assert launcher.resources == ContainerResources(gpus=(1, 2))
    assert launcher.gpus == (1, 2)
    assert launcher.files == ContainerFiles(
        hf_cache=tmp_path / "hf-home",
        vllm_cache=tmp_path / "vllm-cache",
        volumes={"/models": "/models:ro"},
        environment={"NCCL_P2P_DISABLE": "1"},
        secrets=("HF_TOKEN", "WANDB_API_KEY"),
    )
    assert launcher.timing == ContainerTiming(ready_timeout_s=42.0)
    assert backend.request_timeout_s == 7.0
