"""Pulling a missing image from a real registry, and the one line when it cannot be pulled.

A real ``docker-registry`` runs on loopback (:mod:`tests.testbed.registry`); each test pushes an
image of its own there and removes it from the host, so the study (or the launcher) has to
pull it. The fake server then runs in it through the host's bind mounts, as in the other
docker tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from tests.testbed.docker_host import PYTHON
from tests.testbed.registry import Registry, push_payload_image, remove_image, start_registry
from tuner.cli import app
from tuner.config.space import space_from_dict
from tuner.config.vllm_args import detect_version
from tuner.errors import ConfigError, LaunchError
from tuner.launch.docker import DockerLauncher
from tuner.launch.images import PULLING, ensure_image
from tuner.results import StartupEvent
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.trial.backends import BackendOptions, DockerSettings

pytestmark = pytest.mark.docker


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    running = start_registry(tmp_path / "registry")
    yield running
    running.stop()


@pytest.fixture
def pushed(docker_client: docker.DockerClient, registry: Registry) -> Iterator[str]:
    """An image on the registry only; removed from the host again afterwards."""
    image = push_payload_image(docker_client, registry)
    yield image
    remove_image(docker_client, image)


def _space() -> dict[str, Any]:
    return {
        "name": "pull-study",
        "hardware": "4090x1",
        "target": "Qwen/Qwen2.5-7B-Instruct",
        "server": {"max_model_len": 4096, "extra_flags": {"sim-speed": 200}},
        "vllm": {"version": "0.32.0"},
        "slo": {"ttft_ms": 2000},
        "workload": {
            "prompt_set": "code",
            "input_tokens": 64,
            "output_tokens": 16,
            "concurrency": [1],
            "requests": 2,
            "warmup": 0,
        },
        "search": {
            "draft": ["none"],
            "gpu_memory_utilization": 0.9,
            "max_num_batched_tokens": [2048],
            "temperature": {"low": 0.0, "high": 1.0, "step": 0.5},
        },
    }


def _has(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def _stored_studies(tmp_path: Path, study: str) -> list[str]:
    db = tmp_path / f"{study}.db"
    if not db.exists():
        return []
    return optuna.get_all_study_names(default_storage(study, tmp_path))


def test_a_study_pulls_a_missing_image_before_it_stores_anything(
    docker_client: docker.DockerClient,
    pushed: str,
    study: str,
    tmp_path: Path,
    host_volumes: Callable[..., dict[str, str]],
) -> None:
    events: list[StartupEvent] = []
    stored_while_pulling: list[list[str]] = []

    def on_startup(event: StartupEvent) -> None:
        events.append(event)
        if event.phase == PULLING:
            stored_while_pulling.append(_stored_studies(tmp_path, study))

    options = BackendOptions(
        study="",
        gpus=(),
        settings=DockerSettings(
            image=pushed,
            entrypoint=(PYTHON, "-m", "tuner.sim.server"),
            volumes=tuple(host_volumes(tmp_path / "container-tmp").items()),
            env=(("SPECTUNE_SIM_FAULT", "slow-start=2"),),
            ready_timeout_s=60,
            request_timeout_s=5,
        ),
        on_startup=on_startup,
    )
    optimize(
        OptimizeRequest(
            study=study,
            space=space_from_dict(_space()),
            backend="docker",
            trials=2,
            studies_dir=tmp_path,
            backend_options=options,
            confirm_top=0,
            prefetch=False,  # the fake server loads no weights
        )
    )
    assert _has(docker_client, pushed)
    pulls = [e for e in events if e.phase == PULLING]
    assert pulls and pulls[-1].done == pulls[-1].total and (pulls[-1].total or 0) >= 2_000_000
    assert pulls[-1].detail.endswith("of 2.0 MB, 1 of 1 layers")
    assert stored_while_pulling and all(s == [] for s in stored_while_pulling)
    # The pull came first; then each start reported its phases, from "starting" to "ready".
    phases = [e.phase for e in events]
    assert phases.index("starting") > max(i for i, p in enumerate(phases) if p == PULLING)
    assert "loading weights" in phases and phases[-1] == "ready"
    trials = optuna.load_study(
        study_name=study, storage=default_storage(study, tmp_path)
    ).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2


def _optimize_cli(tmp_path: Path, image: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        app,
        [
            "optimize",
            "--backend",
            "docker",
            "--image",
            image,
            "--hardware",
            "4090x1",
            "--gpus",
            "none",
            "--trials",
            "1",
            "--study",
            "pull-fails",
            "--studies-dir",
            str(tmp_path),
        ],
    )
    return result.exit_code, result.stderr


def test_an_unreachable_registry_is_one_line_and_stores_nothing(
    docker_client: docker.DockerClient, registry: Registry, pushed: str, tmp_path: Path
) -> None:
    registry.stop()
    code, err = _optimize_cli(tmp_path, pushed)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"cannot reach registry {registry.host} to pull image {pushed}" in err
    assert "connection refused" in err and "start the registry" in err
    assert "Traceback" not in err
    assert _stored_studies(tmp_path, "pull-fails") == []
    assert not _has(docker_client, pushed)


def test_a_missing_tag_is_one_line_naming_the_tag(registry: Registry, tmp_path: Path) -> None:
    image = f"{registry.host}/spectune-test:no-such-tag"
    code, err = _optimize_cli(tmp_path, image)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"image {image} is not on registry {registry.host}" in err and "check the tag" in err
    assert _stored_studies(tmp_path, "pull-fails") == []


def test_a_registry_that_wants_a_login_says_docker_login(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    guarded = start_registry(tmp_path / "guarded", login=True)
    try:
        image = f"{guarded.host}/spectune-test:any"
        with pytest.raises(ConfigError, match=f"docker login {guarded.host}") as caught:
            ensure_image(docker_client, image)
        assert "\n" not in str(caught.value) and image in str(caught.value)
    finally:
        guarded.stop()


def test_an_error_inside_the_stream_is_raised(
    docker_client: docker.DockerClient, registry: Registry, pushed: str
) -> None:
    """A registry that lost a layer answers the manifest, then fails inside the stream."""
    for blob in registry.blobs():
        if (blob / "data").stat().st_size >= 1_000_000:  # the payload layer
            for part in blob.iterdir():
                part.unlink()
            blob.rmdir()
    with pytest.raises(LaunchError, match=f"could not pull image {pushed}: .*blob"):
        ensure_image(docker_client, pushed, lambda event: None)
    assert not _has(docker_client, pushed)


def test_the_version_is_asked_of_an_image_just_pulled(
    docker_client: docker.DockerClient,
    pushed: str,
    fake_launcher: Callable[..., DockerLauncher],
) -> None:
    launcher = fake_launcher(image=pushed, version=None)  # the tag names no version
    # The container's fake server imitates its default release (the test bed's 0.32 is this
    # process's environment, not the container's).
    env = {k: v for k, v in os.environ.items() if k != "SPECTUNE_SIM_VLLM_VERSION"}
    assert launcher.version == detect_version((PYTHON, "-m", "tuner.sim.server"), env=env)
    assert _has(docker_client, pushed)
