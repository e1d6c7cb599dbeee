"""The docker launcher and backend on a real Docker Engine, with the fake server in the image.

What every backend must do is the backend contract (tests/trial/backends); here: what a container
gets (labels, name, mounts, argv, secrets), memory limits, images and their versions, and the
docker backend's GPU memory (ownership and leftovers: test_ownership.py).
Each start takes about a second.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest

from tuner.catalog import nvml
from tuner.catalog.gpu_state import GpuState
from tuner.catalog.nvml import NvmlMonitor, open_gpu_monitor
from tuner.config.trial import (
    ClientConfig,
    LaunchContext,
    ServerConfig,
    SpecMethod,
    SpeculativeConfig,
    TrialConfig,
)
from tuner.config.vllm_args import NEWEST_KNOWN, server_argv
from tuner.config.workload import WorkloadSpec
from tuner.errors import ConfigError, FailureKind, StartupFailure
from tuner.launch.container_spec import ContainerResources, ContainerTiming, VllmImage
from tuner.launch.docker import (
    CONTAINER_PORT,
    LABEL_GPUS,
    LABEL_RUN,
    LABEL_STUDY,
    LABEL_TRIAL,
    DockerLauncher,
)
from tuner.launch.engine import LABEL_HOST, LABEL_PID, LABEL_STARTED
from tuner.launch.runfiles import start_ticks
from tuner.sim.server.app import SIMULATED_BANNER
from tuner.trial.backends.docker import DockerBackend

pytestmark = pytest.mark.docker

LauncherFactory = Callable[..., DockerLauncher]
SMALL = WorkloadSpec(prompt_set="chat", input_tokens=32, output_tokens=8, requests=2, warmup=0)


def _containers(client: docker.DockerClient, study: str) -> list[str]:
    found = client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    return [c.name or "" for c in found]


def test_runs_the_server_config_in_a_labelled_container_and_removes_it_on_stop(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    fake_launcher_kwargs: Callable[..., dict[str, Any]],
    docker_client: docker.DockerClient,
    study: str,
    tmp_path: Path,
) -> None:
    hf_cache = tmp_path / "hf"
    hf_cache.mkdir()
    files = replace(fake_launcher_kwargs(tmp_path)["files"], hf_cache=hf_cache)
    launcher = fake_launcher(files=files)
    draft = SpeculativeConfig(SpecMethod.DRAFT_MODEL, 4, model="Qwen/Qwen2.5-0.5B-Instruct")
    server = ServerConfig(**{**fake_server.__dict__, "speculative": draft})

    endpoint = launcher.start(server, context)

    assert endpoint.model == "tiny"
    assert endpoint.base_url.startswith("http://127.0.0.1:")
    with httpx.Client(base_url=endpoint.base_url, trust_env=False, timeout=30) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny"]
        body = {"model": "tiny", "prompt": "def f(x):", "max_tokens": 4, "temperature": 0}
        assert client.post("/v1/completions", json=body).json()["usage"]["completion_tokens"] == 4
    (container,) = docker_client.containers.list(
        ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    assert container.name == f"spectune-{study}-t3-{launcher.run_id}"
    assert container.labels == {
        LABEL_STUDY: study,
        LABEL_TRIAL: "3",
        LABEL_RUN: launcher.run_id,
        LABEL_GPUS: "none",
        LABEL_HOST: socket.gethostname(),
        LABEL_PID: str(os.getpid()),
        LABEL_STARTED: str(start_ticks(os.getpid())),
    }
    assert container.attrs["HostConfig"]["IpcMode"] == "host"
    binding = container.attrs["NetworkSettings"]["Ports"][f"{CONTAINER_PORT}/tcp"][0]
    assert binding["HostIp"] == "127.0.0.1"
    assert endpoint.base_url.endswith(f":{binding['HostPort']}")
    # The fake server parses vLLM's flags: the argv the launcher wrote works end to end.
    argv = server_argv(server, NEWEST_KNOWN, host="0.0.0.0", port=CONTAINER_PORT)
    # ... and asks for each response's own TTFT and queue time (a measurement flag).
    assert container.attrs["Config"]["Cmd"] == [*argv, "--enable-per-request-metrics"]
    mounts = {m["Destination"]: m["Source"] for m in container.attrs["Mounts"]}
    assert mounts["/root/.cache/huggingface"] == str(hf_cache)
    assert "HF_HOME=/root/.cache/huggingface" in container.attrs["Config"]["Env"]

    launcher.stop()
    launcher.stop()  # idempotent

    assert _containers(docker_client, study) == []
    assert endpoint.log_path == context.log_dir / "trial-3.log"
    log = endpoint.log_path.read_text()
    assert SIMULATED_BANNER in log
    assert "Shutting down (signal received)" in log  # stopped with SIGTERM, not killed
    assert "ignored SIGTERM" not in log


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_and_its_log_says_so(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
) -> None:
    launcher = fake_launcher("ignore-sigterm", timing=ContainerTiming(stop_timeout_s=2))
    endpoint = launcher.start(fake_server, context)

    launcher.stop()

    assert _containers(docker_client, study) == [] and endpoint.log_path is not None
    log = endpoint.log_path.read_text()
    assert log.rstrip().endswith(
        f"spectune: container spectune-{study}-t3-{launcher.run_id} ignored SIGTERM for 2 s; "
        "docker killed it (SIGKILL)"
    )
    assert "Shutting down (signal received)" not in log


def test_hf_token_reaches_the_container_but_no_label_log_or_endpoint(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = "hf_pytestSECRETtoken0123456789"
    monkeypatch.setenv("HF_TOKEN", token)
    launcher = fake_launcher("log-env=HF_TOKEN")  # a server that prints its token

    endpoint = launcher.start(fake_server, context)
    (container,) = docker_client.containers.list(
        ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    labels = str(container.labels) + str(container.name)
    launcher.stop()

    log = context.log_dir.joinpath("trial-3.log").read_text()
    assert "environment HF_TOKEN=[redacted]" in log  # it arrived, and its value was redacted
    assert token not in log
    assert token not in labels
    assert token not in repr(endpoint)
    assert all(token not in p.read_text() for p in context.log_dir.iterdir())


def test_a_missing_hf_cache_is_created_and_mounted(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
    tmp_path: Path,
) -> None:
    launcher = fake_launcher()  # hf_cache points at a folder that does not exist yet
    launcher.start(fake_server, context)
    (container,) = docker_client.containers.list(
        ignore_removed=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    mounts = {m["Destination"]: m["Source"] for m in container.attrs["Mounts"]}
    assert mounts["/root/.cache/huggingface"] == str(tmp_path / "no-hf-cache")
    assert (tmp_path / "no-hf-cache").is_dir()


def test_a_container_killed_at_its_memory_limit_is_oom(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    docker_client: docker.DockerClient,
    study: str,
) -> None:
    launcher = fake_launcher(
        "alloc-at-start=2048", resources=ContainerResources(gpus=(), mem_limit="128m")
    )

    with pytest.raises(StartupFailure) as failure:
        launcher.start(fake_server, context)

    assert failure.value.kind is FailureKind.OOM
    assert failure.value.exit_code == 137
    assert "OOM-killed" in str(failure.value)
    assert _containers(docker_client, study) == []


def test_an_image_that_cannot_be_pulled_is_a_config_error_naming_it(
    docker_client: docker.DockerClient, fake_server: ServerConfig, context: LaunchContext
) -> None:
    image = "spectune-test-absent:0.8.5"  # Docker Hub is unreachable here, or has no such image
    launcher = DockerLauncher(
        VllmImage(image),
        study=context.study,
        client=docker_client,
        resources=ContainerResources(gpus=()),
    )

    with pytest.raises(ConfigError, match=re.escape(image)):
        launcher.start(fake_server, context)


def test_more_tensor_parallelism_than_allowed_gpus_is_a_config_error(
    fake_launcher: LauncherFactory, fake_server: ServerConfig, context: LaunchContext
) -> None:
    launcher = fake_launcher(resources=ContainerResources(gpus=(0,)))
    server = ServerConfig(**{**fake_server.__dict__, "tensor_parallel_size": 2})

    with pytest.raises(ConfigError, match="tensor-parallel-size 2 needs 2 GPUs"):
        launcher.start(server, context)


def test_a_tag_that_names_no_version_is_asked_of_the_image(
    fake_launcher: LauncherFactory,
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
) -> None:
    image = f"{test_image}:{study}-build"  # a tag, but no version
    docker_client.images.get(test_image).tag(image)
    try:
        launcher = fake_launcher(image=image, version=None)
        assert launcher.version == NEWEST_KNOWN  # what the fake server's --version prints
    finally:
        docker_client.images.remove(image)
    assert _containers(docker_client, study) == []


class SettableMonitor:
    """A GPU monitor whose reading the test sets; the first read (the baseline) is 1 GiB."""

    def __init__(self) -> None:
        self.reads = 0
        self.value = 5.0

    def memory_used_gib(self) -> list[float] | None:
        self.reads += 1
        return [1.0] if self.reads == 1 else [self.value]

    def state(self) -> list[GpuState] | None:
        return [GpuState(time.monotonic(), 0, self.value)]


def test_the_backend_waits_for_gpu_memory_to_return_and_records_peaks(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = SettableMonitor()
    backend = DockerBackend(fake_launcher(), gpu_monitor=monitor, baseline_timeout_s=30)
    config = TrialConfig(fake_server, ClientConfig(0.0, SMALL))

    backend.start(fake_server, context)  # baseline 1.0, then 5.0 while it runs
    monitor.value = 3.0
    assert backend.measure(config, 1, seed=0).peak_memory_gib == (5.0,)
    assert backend.measure(config, 1, seed=0).peak_memory_gib == (3.0,)  # a window each
    monitor.value = 9.0  # memory not released yet after the stop
    backend.stop()
    release = threading.Timer(1.0, setattr, (monitor, "value", 1.2))
    release.start()
    started = time.monotonic()
    backend.start(fake_server, context)
    release.join()
    assert time.monotonic() - started >= 1.0  # waited for memory back within 0.5 GiB
    backend.close()

    # Bounded: memory that never comes back delays a start, never blocks it.
    backend = DockerBackend(fake_launcher(), gpu_monitor=SettableMonitor(), baseline_timeout_s=0.5)
    backend.start(fake_server, context)
    with caplog.at_level(logging.WARNING, logger="tuner.catalog.nvml"):
        backend.start(fake_server, context)
    assert "still above its baseline" in caplog.text
    backend.close()


def test_without_nvml_memory_is_not_recorded_and_that_is_said_once(
    fake_launcher: LauncherFactory,
    fake_server: ServerConfig,
    context: LaunchContext,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if isinstance(open_gpu_monitor(None), NvmlMonitor):
        pytest.skip("this host has NVML")
    monkeypatch.setitem(nvml._said, "unavailable", False)  # a fresh run
    caplog.clear()
    config = TrialConfig(fake_server, ClientConfig(0.0, SMALL))
    with caplog.at_level(logging.WARNING, logger="tuner.catalog.nvml"):
        backend = DockerBackend(fake_launcher())  # --gpus none: no GPU to read, no warning
        backend.start(fake_server, context)
        assert backend.measure(config, 1, seed=0).peak_memory_gib == ()
        backend.close()
        # Only NVML's own words count: a start may also log the leftovers it swept.
        assert [r.message for r in caplog.records if r.name == "tuner.catalog.nvml"] == []
        open_gpu_monitor([0])  # a run on GPUs opens NVML for its trials...
        open_gpu_monitor([0])  # ...and again to confirm the best
    assert caplog.text.count("NVML not available") == 1
