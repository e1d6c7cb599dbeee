"""The Ray test cluster's handle and the connection checks (shared by conftest and tests).

A module of its own (not conftest) so test files can import it by an unambiguous name.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import docker

if TYPE_CHECKING:
    import docker.models.containers

__all__ = ["RAY", "WORKERS", "Cluster", "process_targets", "tcp_targets"]

RAY = str(Path(sys.executable).with_name("ray"))
WORKERS = ("w1", "w2")


@dataclass
class Cluster:
    """The running test cluster."""

    client: docker.DockerClient
    prefix: str
    network: str
    subnet: ipaddress.IPv4Network | ipaddress.IPv6Network
    address: str  # ray://127.0.0.1:PORT

    def host(self, worker: str) -> str:
        """A worker node's container (and host) name."""
        return f"{self.prefix}-{worker}"

    def container(self, name: str) -> docker.models.containers.Container:
        return self.client.containers.get(name)

    def processes(self, worker: str, pattern: str) -> list[str]:
        """Command lines of the processes matching ``pattern`` inside a worker's container."""
        done = self.container(self.host(worker)).exec_run(["pgrep", "-af", pattern])
        lines = cast(bytes, done.output).decode(errors="replace").splitlines()  # not streamed
        return [line for line in lines if "pgrep" not in line]

    def connection_targets(self, name: str) -> set[str]:
        """The remote addresses of every TCP connection inside container ``name``."""
        done = self.container(name).exec_run(["cat", "/proc/net/tcp", "/proc/net/tcp6"])
        return tcp_targets(cast(bytes, done.output).decode())  # not streamed


def tcp_targets(table: str, inodes: set[str] | None = None) -> set[str]:
    """Remote IPs of connected sockets in ``/proc/net/tcp{,6}`` text (of ``inodes`` only)."""
    targets = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[0] == "sl" or fields[3] == "0A":  # header, LISTEN
            continue
        if inodes is not None and fields[9] not in inodes:
            continue
        address = fields[2].split(":")[0]
        raw = bytes.fromhex(address)
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address
        if len(raw) == 4:
            ip = ipaddress.IPv4Address(raw[::-1])
        else:  # IPv6 is four little-endian words
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
            v6 = ipaddress.IPv6Address(words)
            ip = v6.ipv4_mapped or v6
        if not ip.is_unspecified:
            targets.add(str(ip))
    return targets


def process_targets(pid: int) -> set[str]:
    """Remote IPs of the TCP connections process ``pid`` holds (host network namespace)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        tables = [Path(f"/proc/{pid}/net/{n}") for n in ("tcp", "tcp6")]
        table = "".join(t.read_text() for t in tables if t.exists())
    except OSError:  # it ended meanwhile
        return set()
    return tcp_targets(table, inodes)
