"""The backend contract's cases: each backend built as a study builds it, on a fake server.

A module of its own (not ``conftest``) so the test files can import it by a unique name. The
``case`` fixture runs a test once per backend: ``sim`` (the simulator in this process), ``process``
(the shipped fake server ``python -m tuner.sim.server`` as a child process) and ``docker``
(the same fake server in a container of the empty test image, on the real Docker Engine).
Faults are the fake server's ``--sim-fault`` names, passed through ``SPECTUNE_SIM_FAULT``.

``case.leftovers()`` lists what of the test's servers still runs: processes carrying the
test's marker variable (children inherit it), or containers carrying its study label.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from tests.testbed.docker_host import FAKE_SERVER, empty_image, fake_server_image, host_volumes
from tuner.catalog.gpus import parse_hardware
from tuner.config.trial import ClientConfig, ServerConfig, TrialConfig
from tuner.config.vllm_args import NEWEST_KNOWN
from tuner.config.workload import WorkloadSpec
from tuner.launch.container_spec import ContainerResources, ContainerTiming
from tuner.launch.containers import LABEL_STUDY
from tuner.launch.docker import DockerLauncher
from tuner.launch.mounts import ContainerFiles
from tuner.launch.process import ProcessLauncher
from tuner.trial.backends import Backend
from tuner.trial.backends.docker import DockerBackend
from tuner.trial.backends.process import ProcessBackend
from tuner.trial.backends.sim import SimBackend

HARDWARE = parse_hardware("4090x1")
FITS = ServerConfig("Qwen/Qwen2.5-14B-Instruct-AWQ", 1, 8192, 0.9, 2048, served_model_name="qwen")
TOO_BIG = ServerConfig("Qwen/Qwen2.5-32B-Instruct", 1, 8192, 0.9, 2048, served_model_name="qwen")
SMALL = WorkloadSpec(prompt_set="chat", input_tokens=32, output_tokens=16, requests=4, warmup=0)
CONFIG = TrialConfig(FITS, ClientConfig(0.2, SMALL))
_MARKER = "SPECTUNE_CONTRACT_RUN"
_SPEED = "50"  # simulated seconds per real second: a 16-token request takes milliseconds


@dataclass
class Case:
    """One backend under contract; ``make(*faults, ...)`` builds one, closed after the test."""

    name: str
    build: Callable[..., Backend]
    leftovers: Callable[[], list[str]]
    made: list[Backend] = field(default_factory=list)

    def make(
        self, *faults: str, ready_timeout_s: float = 30.0, stop_timeout_s: float = 5.0
    ) -> Backend:
        backend = self.build(faults, ready_timeout_s, stop_timeout_s)
        self.made.append(backend)
        return backend


def _marked_processes(marker: str) -> list[int]:
    needle = f"{_MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                stat = (entry / "stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def _fake_env(faults: tuple[str, ...], marker: str) -> dict[str, str]:
    return {"SPECTUNE_SIM_SPEED": _SPEED, "SPECTUNE_SIM_FAULT": ",".join(faults), _MARKER: marker}


def sim_case() -> Case:
    return Case("sim", lambda faults, ready, stop: SimBackend(HARDWARE), lambda: [])


def process_case(tmp_path: Path) -> Case:
    marker = uuid.uuid4().hex

    def build(faults: tuple[str, ...], ready: float, stop: float) -> Backend:
        launcher = ProcessLauncher(
            FAKE_SERVER,
            version=NEWEST_KNOWN,
            env=_fake_env(faults, marker),
            ready_timeout_s=ready,
            stop_timeout_s=stop,
            poll_s=0.05,
            run_dir=tmp_path / "run-files",
        )
        return ProcessBackend(launcher, request_timeout_s=30)

    return Case("process", build, lambda: [f"pid {p}" for p in _marked_processes(marker)])


def docker_case(tmp_path: Path, client: docker.DockerClient, study: str) -> Case:
    image = empty_image(client)

    def build(faults: tuple[str, ...], ready: float, stop: float) -> Backend:
        launcher = DockerLauncher(
            fake_server_image(image),
            study=study,
            client=client,
            resources=ContainerResources(gpus=()),
            files=ContainerFiles(
                hf_cache=tmp_path / "no-hf-cache",
                volumes=host_volumes(tmp_path / "container-tmp"),
                environment=_fake_env(faults, study),
            ),
            timing=ContainerTiming(ready_timeout_s=ready, stop_timeout_s=stop, poll_s=0.1),
        )
        return DockerBackend(launcher, request_timeout_s=30)

    def leftovers() -> list[str]:
        found = client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"{LABEL_STUDY}={study}"}
        )
        return [c.name or "" for c in found]

    return Case("docker", build, leftovers)
