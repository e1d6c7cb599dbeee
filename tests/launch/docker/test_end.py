"""One reading of a container's end, on the real engine: what killed it decides the kind.

A plain ``docker kill`` during start-up is a crash (no memory limit to learn); the kernel's
OOM killer ending the server mid-benchmark is an OOM constraint, read after the measurement
like a start-up's end. A host port the engine cannot bind is retried once on another.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import docker
import httpx
import pytest

from tuner.catalog.gpus import parse_hardware
from tuner.config.trial import ClientConfig, LaunchContext, ServerConfig, TrialConfig
from tuner.config.workload import WorkloadSpec
from tuner.errors import FailureKind, StartupFailure
from tuner.launch.container_spec import ContainerResources
from tuner.launch.docker import LABEL_STUDY, DockerLauncher
from tuner.trial.backends.docker import DockerBackend
from tuner.trial.runner import TrialRunner
from tuner.trial.scoring import Limits, TrialStatus

if TYPE_CHECKING:
    import docker.models.containers

pytestmark = pytest.mark.docker

LauncherFactory = Callable[..., DockerLauncher]
LONG = WorkloadSpec(prompt_set="chat", input_tokens=32, output_tokens=4096, requests=2, warmup=0)


def _running(client: docker.DockerClient, study: str) -> docker.models.containers.Container:
    deadline = time.monotonic() + 30
    while True:
        found = client.containers.list(
            ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
        )
        if found:
            return found[0]
        assert time.monotonic() < deadline, "no container started"
        time.sleep(0.1)


def _measuring(container: docker.models.containers.Container) -> None:
    """Returns once the server in ``container`` has a request running: the benchmark is under
    way (a fixed wait would kill a server a busy machine was still starting)."""
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline, "the benchmark never started"
        container.reload()
        bindings = [b for found in container.ports.values() if found for b in found]
        if bindings:
            url = f"http://127.0.0.1:{bindings[0]['HostPort']}/metrics"
            with contextlib.suppress(httpx.HTTPError):
                text = httpx.get(url, timeout=5).text
                running = re.search(r"^vllm:num_requests_running\{[^}]*\} ([0-9.]+)", text, re.M)
                if running and float(running.group(1)) > 0:
                    return
        time.sleep(0.2)


def test_a_plain_kill_during_start_up_is_a_crash(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
) -> None:
    launcher = fake_launcher("slow-start=120")
    killer = threading.Thread(target=lambda: _running(docker_client, study).kill())
    killer.start()
    with pytest.raises(StartupFailure) as failure:
        launcher.start(fake_server, context)
    killer.join()
    assert failure.value.kind is FailureKind.CRASH
    assert str(failure.value).startswith("vLLM did not start (crash, exit status 137")
    assert "OOM-killed" not in str(failure.value)


def test_an_oom_kill_mid_benchmark_is_an_oom_constraint(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
) -> None:
    limited = ContainerResources(gpus=(), mem_limit="400m")
    backend = DockerBackend(fake_launcher(resources=limited, env={"SPECTUNE_SIM_SPEED": "1"}))
    runner = TrialRunner(backend, parse_hardware("4090x1"), Limits(60_000))

    def memory_kill() -> None:
        container = _running(docker_client, study)
        _measuring(container)  # its requests take a minute at this speed
        # The server becomes the OOM killer's first choice, then the container runs out.
        container.exec_run(["/bin/sh", "-c", "echo 1000 > /proc/1/oom_score_adj"])
        hog = "b = []\nwhile True: b.append(bytearray(32 << 20))"
        container.exec_run([container.attrs["Path"], "-c", hog], detach=True)

    killer = threading.Thread(target=memory_kill)
    killer.start()
    try:
        outcome = runner.run(TrialConfig(fake_server, ClientConfig(0.0, LONG)), context, seed=1)
    finally:
        killer.join()
        runner.close()
    assert outcome.status is TrialStatus.OOM
    assert outcome.failure is not None
    assert outcome.failure.startswith(
        "vLLM died during measurement (oom, exit status 137, OOM-killed)"
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_host_port_the_engine_cannot_bind_is_retried_once_on_another(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    taken_port: int,
) -> None:
    launcher = fake_launcher(host_ports=iter([taken_port, 0]))
    endpoint = launcher.start(fake_server, context)
    assert not endpoint.base_url.endswith(f":{taken_port}")
    launcher.close()
