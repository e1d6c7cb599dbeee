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

import docker
import pytest
from ray_support import RAY, WORKERS, Cluster
from testbed.docker_host import REPO, docker_or_skip, empty_image, host_volumes

_CLIENT_PORT = 10001
_JOIN_S = 120.0


def _node_command(head: bool) -> list[str]:
    common = ["--block", "--disable-usage-stats", "--num-cpus", "1"]
    common += ["--object-store-memory", str(80 * 1024 * 1024)]
    if head:
        return [RAY, "start", "--head", "--port", "6379", "--num-gpus", "0",
                "--ray-client-server-port", str(_CLIENT_PORT), "--include-dashboard", "false",
                *common]  # fmt: skip
    resources = json.dumps({"spectune_gpu_4090": 2})
    return [RAY, "start", "--address", "HEAD:6379", "--num-gpus", "2",
            "--resources", resources, *common]  # fmt: skip


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
            name = f"{prefix}-{role}"
            mounts = host_volumes(tmp_path_factory.mktemp(f"ray-{role}"))
            volumes = [f"{host}:{spec}" for host, spec in mounts.items()]
            command = [
                part.replace("HEAD", f"{prefix}-head") for part in _node_command(role == "head")
            ]
            made.append(
                client.containers.run(
                    image,
                    command,
                    name=name,
                    hostname=name,
                    network=prefix,
                    detach=True,
                    environment=env,
                    volumes=volumes,
                    shm_size="128m",
                    ports={f"{_CLIENT_PORT}/tcp": ("127.0.0.1", None)} if role == "head" else {},
                    labels={"spectune-test": prefix},
                )
            )
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


def _wait_for_nodes(
    address: str, count: int, containers: list[docker.models.containers.Container]
) -> None:
    """Waits until ``count`` nodes are alive, asked through Ray Client in a child process."""
    probe = (
        "import ray, sys, time\n"
        f"ray.init({address!r}, logging_level='ERROR')\n"
        f"deadline = time.monotonic() + {_JOIN_S}\n"
        f"while sum(n['Alive'] for n in ray.nodes()) < {count}:\n"
        "    assert time.monotonic() < deadline, ray.nodes()\n"
        "    time.sleep(1)\n"
    )
    deadline = time.monotonic() + _JOIN_S
    while True:  # the client server starts a few seconds after the head's container
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=_JOIN_S + 30
        )
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            logs = "\n".join(c.logs(tail=20).decode(errors="replace") for c in containers)
            pytest.fail(f"the Ray test cluster did not come up: {done.stderr[-2000:]}\n{logs}")
        time.sleep(2)
