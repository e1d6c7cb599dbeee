"""Who owns a container: cleanup removes only what a dead run left, never a live run's.

Containers carry their run's owner (host, PID, that process's start time). Two runs of one
study at once leave each other alone; a dead run's containers go at the next start, whatever
their study; another study's live container on our GPUs is named before any trial, and the
study is not created.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

from tests.testbed.docker_host import fake_server_image
from tuner.config.space import load_space
from tuner.config.trial import LaunchContext, ServerConfig
from tuner.errors import ConfigError
from tuner.launch.containers import list_containers
from tuner.launch.docker import LABEL_GPUS, LABEL_RUN, LABEL_STUDY, DockerLauncher
from tuner.launch.engine import RunOwner
from tuner.study.optimize import OptimizeRequest, optimize
from tuner.study.paths import default_storage
from tuner.study.storage import open_storage, study_names
from tuner.trial.backends import BackendOptions, DockerSettings

pytestmark = pytest.mark.docker

DRIVER = Path(__file__).with_name("signal_driver.py")
REPO = Path(__file__).resolve().parents[3]
Sleeper = Callable[[dict[str, str]], Container]


@pytest.fixture
def sleeper(
    docker_client: docker.DockerClient,
    test_image: str,
    host_volumes: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> Iterator[Sleeper]:
    """``sleeper(labels)``: a running container with those labels, removed after the test."""
    volumes = [f"{h}:{t}" for h, t in host_volumes(tmp_path / "sleeper-tmp").items()]
    made: list[Container] = []

    def make(labels: dict[str, str]) -> Container:
        container = docker_client.containers.create(
            test_image, ["/bin/sleep", "300"], labels=labels, volumes=volumes, detach=True
        )
        container.start()
        made.append(container)
        return container

    yield make
    for container in made:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def _dead_owner() -> RunOwner:
    child = subprocess.Popen(["true"])
    child.wait()
    return RunOwner(RunOwner.current().host, child.pid, 12345)  # a PID that is gone now


def _exists(client: docker.DockerClient, container: Container) -> bool:
    assert container.id is not None  # docker-py types it optional; a listed container has one
    try:
        client.containers.get(container.id)
    except docker.errors.NotFound:
        return False
    return True


def test_two_runs_of_one_study_leave_each_other_alone(
    fake_launcher: Callable[..., DockerLauncher],
    fake_launcher_kwargs: Callable[..., dict[str, Any]],
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    tmp_path: Path,
) -> None:
    first = fake_launcher()
    first.start(fake_server, context)
    kwargs = fake_launcher_kwargs(tmp_path)
    image = fake_server_image(test_image)
    spec = {
        "image": image.name,
        "study": study,  # the same study, from another process (another terminal)
        "log_dir": str(tmp_path / "second-logs"),
        "entrypoint": image.entrypoint,
        "subcommand": image.subcommand,
        "volumes": kwargs["files"].volumes,
        "environment": kwargs["files"].environment,
    }
    second = subprocess.Popen(
        [sys.executable, str(DRIVER), json.dumps(spec)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert second.stdout is not None
        assert second.stdout.readline().strip() == "READY", second.communicate()
        running = docker_client.containers.list(
            ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
        )
        assert len(running) == 2  # the second run's start removed nothing of the first's
        third = fake_launcher()  # and a third in this very process neither
        third.start(fake_server, context)
        assert (
            len(
                docker_client.containers.list(
                    ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
                )
            )
            == 3
        )
        third.close()
    finally:
        second.terminate()
        second.communicate(timeout=60)
    assert second.returncode == 143
    (left,) = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    assert left.labels[LABEL_RUN] == first.run_id and left.status == "running"


def test_a_dead_runs_containers_go_and_nobody_elses(
    fake_launcher: Callable[..., DockerLauncher],
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
    sleeper: Sleeper,
) -> None:
    dead = _dead_owner().labels()
    alive = RunOwner.current().labels()
    elsewhere = RunOwner("another-machine", 1, 1).labels()
    ours_dead = sleeper({LABEL_STUDY: study, LABEL_RUN: "dead1", LABEL_GPUS: "0", **dead})
    other_study_dead = sleeper({LABEL_STUDY: f"{study}-b", LABEL_RUN: "dead2", **dead})
    ours_before_owners = sleeper({LABEL_STUDY: study, LABEL_RUN: "old", LABEL_GPUS: "none"})
    ours_live = sleeper({LABEL_STUDY: study, LABEL_RUN: "live", LABEL_GPUS: "none", **alive})
    ours_on_gpu_3 = sleeper({LABEL_STUDY: study, LABEL_RUN: "w3", LABEL_GPUS: "3", **alive})
    unknown_host = sleeper({LABEL_STUDY: study, LABEL_RUN: "far", LABEL_GPUS: "none", **elsewhere})
    other_study_old = sleeper({LABEL_STUDY: f"{study}-c", LABEL_RUN: "x"})
    unlabelled = sleeper({})

    fake_launcher().start(fake_server, context)  # CPU only: --gpus none

    for gone in (ours_dead, other_study_dead, ours_before_owners):
        assert not _exists(docker_client, gone)
    for kept in (ours_live, ours_on_gpu_3, unknown_host, other_study_old, unlabelled):
        assert _exists(docker_client, kept)
        kept.reload()
        assert kept.status == "running"


def test_another_studys_live_container_on_our_gpus_is_named_before_anything_is_stored(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    tmp_path: Path,
    sleeper: Sleeper,
) -> None:
    other = sleeper(
        {
            LABEL_STUDY: "someone-elses",
            LABEL_RUN: "r1",
            LABEL_GPUS: "0,1",
            **RunOwner.current().labels(),
        }
    )
    request = OptimizeRequest(
        study=study,
        space=load_space(),
        backend="docker",
        trials=2,
        studies_dir=tmp_path,
        backend_options=BackendOptions(
            study="", gpus=(1,), settings=DockerSettings(image=test_image)
        ),
        prefetch=False,
    )
    with pytest.raises(ConfigError) as refused:
        optimize(request)
    message = str(refused.value)
    # Another run's containers on this engine (a second checkout's tests) may be named too.
    assert message.startswith("GPUs 1 are in use by ")
    assert f"{other.name} (study someone-elses, run pid " in message
    assert "choose other --gpus" in message and "\n" not in message
    assert study not in study_names(open_storage(default_storage(study, tmp_path)))
    other.reload()
    assert other.status == "running"


def test_a_container_removed_while_listed_is_left_out(
    docker_client: docker.DockerClient,
    sleeper: Sleeper,
    study: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine lists two containers, one is removed before it is inspected (a race CI met
    when a signal's cleanup and a trial's stop overlapped): the listing holds the other."""
    kept, removed = sleeper({LABEL_STUDY: study}), sleeper({LABEL_STUDY: study})
    summaries, to_remove = docker_client.api.containers, [removed]

    def list_then_remove(*args: Any, **kwargs: Any) -> Any:
        found = summaries(*args, **kwargs)
        for container in to_remove:  # once: the study's own clean-up lists again afterwards
            container.remove(force=True)
        to_remove.clear()
        return found

    monkeypatch.setattr(docker_client.api, "containers", list_then_remove)
    listed = list_containers(docker_client, f"{LABEL_STUDY}={study}")
    assert [c.id for c in listed] == [kept.id]
