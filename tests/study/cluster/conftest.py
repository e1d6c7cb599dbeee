"""A real Ray cluster of three nodes in containers on a docker network the test creates.

Ray advertises a machine's non-loopback address and refuses a multi-node cluster on loopback,
and tests may reach only 127.0.0.1 or hosts they create: so the head and two worker nodes run
in containers (the empty test image with the host's system, Python and this repository mounted
read-only, as for the docker tier) on a network of their own. The driver (a real ``spectune
optimize``) reaches the cluster with Ray Client through the head's port published on
127.0.0.1. Each worker declares two RTX 4090s (``--num-gpus 2`` and the ``spectune_gpu_4090``
resource; no GPU is needed) and runs the shipped fake server through the process backend.

One cluster per test module; containers and the network are removed however the tests end.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import docker
import pytest

from tests.study.cluster.ray_support import RAY, WORKERS, Cluster
from tests.testbed.docker_host import REPO, docker_or_skip, empty_image, host_volumes

if TYPE_CHECKING:
    import docker.models.containers

_CLIENT_PORT = 10001
_JOIN_S = 120.0


def _node_command(head: bool) -> list[str]:
    common = ["--block", "--disable-usage-stats", "--num-cpus", "1"]
    common += ["--object-store-memory", str(80 * 1024 * 1024)]
    if head:
        return [
            RAY,
            "start",
            "--head",
            "--port",
            "6379",
            "--num-gpus",
            "0",
            "--ray-client-server-port",
            str(_CLIENT_PORT),
            "--include-dashboard",
            "false",
            *common,
        ]
    resources = json.dumps({"spectune_gpu_4090": 2})
    return [
        RAY,
        "start",
        "--address",
        "HEAD:6379",
        "--num-gpus",
        "2",
        "--resources",
        resources,
        *common,
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Head plus two worker nodes with two declared RTX 4090s each; torn down afterwards."""
    client = docker_or_skip()
    image = empty_image(client)
    prefix = f"spectune-ray-{uuid.uuid4().hex[:6]}"
    network = client.networks.create(prefix, driver="bridge", labels={"spectune-test": prefix})
    made: list[docker.models.containers.Container] = []
    try:
        network.reload()
        subnet = ipaddress.ip_network(network.attrs["IPAM"]["Config"][0]["Subnet"])
        env = {
            "HOME": "/tmp",
            "RAY_USAGE_STATS_ENABLED": "0",
            # The nodes run this checkout's spectune, whichever venv it is installed in.
            "PYTHONPATH": str(REPO),
        }
        for role in ("head", *WORKERS):
            mounts = host_volumes(tmp_path_factory.mktemp(f"ray-{role}"))
            command = [
                part.replace("HEAD", f"{prefix}-head") for part in _node_command(role == "head")
            ]
            made.append(
                # Ignored: the docker stubs have no (address, None) port, which docker-py binds
                # to a free host port.
                client.containers.run(  # type: ignore[call-overload]
                    image,
                    command,
                    name=f"{prefix}-{role}",
                    hostname=f"{prefix}-{role}",
                    network=prefix,
                    detach=True,
                    environment=env,
                    volumes=[f"{host}:{spec}" for host, spec in mounts.items()],
                    shm_size="128m",
                    ports={f"{_CLIENT_PORT}/tcp": ("127.0.0.1", None)} if role == "head" else {},
                    labels={"spectune-test": prefix},
                )
            )
            if role == "head":  # workers that start before the head's GCS give up joining
                _wait_started(made)
        _wait_started(made)
        head = made[0]
        head.reload()
        port = head.attrs["NetworkSettings"]["Ports"][f"{_CLIENT_PORT}/tcp"][0]["HostPort"]
        address = f"ray://127.0.0.1:{port}"
        _wait_for_nodes(address, 1 + len(WORKERS), made)
        yield Cluster(client, prefix, prefix, subnet, address)
    finally:
        for container in made:
            container.remove(force=True)
        network.remove()
        client.close()


def _logs(containers: list[docker.models.containers.Container]) -> str:
    return "\n".join(
        f"== {c.name}\n" + c.logs(tail=15).decode(errors="replace") for c in containers
    )


def _wait_started(containers: list[docker.models.containers.Container]) -> None:
    """Waits until ``ray start`` says so in every container."""
    deadline = time.monotonic() + _JOIN_S
    while not all(b"Ray runtime started" in c.logs() for c in containers):
        for container in containers:
            container.reload()
            if container.status == "exited":
                pytest.fail(f"a Ray test node exited:\n{_logs(containers)}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"the Ray test nodes did not start:\n{_logs(containers)}", pytrace=False)
        time.sleep(0.5)


def _wait_for_nodes(
    address: str, count: int, containers: list[docker.models.containers.Container]
) -> None:
    """Waits until ``count`` nodes are alive, asked through Ray Client in a child process."""
    probe = (
        "import ray, time\n"
        f"ray.init({address!r}, logging_level='ERROR')\n"
        f"deadline = time.monotonic() + {_JOIN_S}\n"
        f"while sum(n['Alive'] for n in ray.nodes()) < {count}:\n"
        "    assert time.monotonic() < deadline, ray.nodes()\n"
        "    time.sleep(1)\n"
    )
    # The head starts a server process per Ray Client connection; on a busy 2-core machine
    # that start can pass Ray's 30 s wait for it ("Initialization failure"): try again.
    for attempt in (1, 2, 3):
        try:
            done = subprocess.run(
                [sys.executable, "-c", probe], capture_output=True, text=True, timeout=_JOIN_S * 2
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the Ray test cluster did not answer:\n{_logs(containers)}", pytrace=False)
        if done.returncode == 0:
            return
        if attempt == 3 or "Initialization failure" not in done.stderr:
            tail = done.stderr[-2000:]
            pytest.fail(f"the Ray test cluster did not come up: {tail}\n{_logs(containers)}")
