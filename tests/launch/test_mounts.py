"""What a container sees of the host: every bind-mount source is an absolute host path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config.trial import ServerConfig
from tuner.errors import ConfigError
from tuner.launch.mounts import ContainerFiles, default_hf_cache


def test_a_relative_source_is_refused_before_docker_reads_it_as_a_volume_name(
    tmp_path: Path,
) -> None:
    # The failure issue 23 found: `studies/NAME/vllm-cache` reached Docker as it was.
    with pytest.raises(ConfigError, match=r"studies/demo/vllm-cache is a relative path"):
        ContainerFiles(tmp_path / "hf", vllm_cache=Path("studies/demo/vllm-cache"))
    with pytest.raises(ConfigError, match="relative path"):
        ContainerFiles(tmp_path / "hf", volumes={"models": "/models:ro"})


def test_local_model_folders_mount_at_the_path_the_command_line_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real-model").mkdir()
    (tmp_path / "model").symlink_to(tmp_path / "real-model")
    files = ContainerFiles(tmp_path / "hf", vllm_cache=tmp_path / "cache")
    files.ensure()
    server = ServerConfig(
        model=str(tmp_path / "model"),
        tensor_parallel_size=1,
        max_model_len=512,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=512,
    )
    specs = files.volume_specs(server)
    assert f"{tmp_path / 'model'}:{tmp_path / 'model'}:ro" in specs  # the link, as named
    assert all(spec.startswith("/") for spec in specs)


def test_a_relative_hf_home_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", "hf-home")
    assert default_hf_cache() == tmp_path / "hf-home"
