"""Each backend's own settings: declared once with their flags, built for the chosen backend
only, handed to no other backend, and given to every command that runs servers alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from tuner.cli import app
from tuner.config.space import load_space
from tuner.errors import ConfigError
from tuner.launch.base import READY_TIMEOUT_S
from tuner.study.request import OptimizeRequest, check_request
from tuner.trial.backends import (
    BackendOptions,
    DockerSettings,
    ProcessSettings,
    SimSettings,
    backend_factory,
)
from tuner.trial.backends.settings import FLAGS, settings_from_flags

DEFAULTS: dict[str, Any] = {flag.param: flag.default for flag in FLAGS}


def test_each_backend_gets_its_own_settings_from_the_flags() -> None:
    given = {
        **DEFAULTS,
        "sim_speed": 4.0,
        "vllm_command": "/opt/vllm/bin/vllm --verbose",
        "image": "vllm/vllm-openai:v0.9.0",
        "docker_volume": ["/models:/models:ro"],
        "ready_timeout": 30.0,
    }

    assert settings_from_flags("sim", given) == SimSettings(speed=4.0)
    assert settings_from_flags("process", given) == ProcessSettings(
        vllm_command=("/opt/vllm/bin/vllm", "--verbose"), ready_timeout_s=30.0
    )
    docker = settings_from_flags("docker", given)
    assert isinstance(docker, DockerSettings)
    assert (docker.image, docker.volumes) == (
        "vllm/vllm-openai:v0.9.0",
        (("/models", "/models:ro"),),
    )
    assert docker.ready_timeout_s == 30.0


def test_the_ready_timeout_has_one_default() -> None:
    ready = next(flag for flag in FLAGS if flag.flag == "--ready-timeout")
    assert ready.default == READY_TIMEOUT_S
    assert ProcessSettings().ready_timeout_s == DockerSettings().ready_timeout_s == READY_TIMEOUT_S
    assert len([flag for flag in FLAGS if flag.flag == "--ready-timeout"]) == 1  # shared, once


def test_a_flag_no_backend_takes_is_refused_whichever_backend_runs() -> None:
    with pytest.raises(ConfigError, match="looks like a secret"):
        settings_from_flags("sim", {**DEFAULTS, "docker_env": ["HF_TOKEN=hf_abc"]})
    with pytest.raises(ConfigError, match="--vllm-command is empty"):
        settings_from_flags("docker", {**DEFAULTS, "vllm_command": " "})
    with pytest.raises(ConfigError, match="unknown backend 'podman'"):
        settings_from_flags("podman", DEFAULTS)


def test_a_backend_refuses_another_backends_settings() -> None:
    space = load_space()
    options = BackendOptions(study="s", settings=ProcessSettings())
    with pytest.raises(ConfigError, match="process backend settings given to the sim backend"):
        backend_factory("sim")(space, options)
    built = backend_factory("sim")(space, BackendOptions(study="s"))  # none: its defaults
    assert built.name == "sim"


def test_a_request_whose_settings_are_another_backends_is_refused(tmp_path: Path) -> None:
    options = BackendOptions(study="", settings=DockerSettings())
    request = OptimizeRequest("s", load_space(), "sim", 1, tmp_path, backend_options=options)
    with pytest.raises(ConfigError, match="--backend sim with docker backend settings"):
        check_request(request)


def _options(command: str) -> dict[str, Any]:
    """The command's options by flag (typer builds on its own copy of click: duck-typed)."""
    group: Any = typer.main.get_command(app)
    return {name: p for p in group.commands[command].params for name in p.opts}


@pytest.mark.parametrize("command", ["optimize", "worker", "confirm", "calibrate"])
def test_every_command_that_runs_servers_declares_every_backend_flag(command: str) -> None:
    options = _options(command)
    for flag in FLAGS:
        assert flag.flag in options, (command, flag.flag)
        assert options[flag.flag].name == flag.param  # SPECTUNE_<COMMAND>_<PARAM> stays
        assert options[flag.flag].help == flag.help
