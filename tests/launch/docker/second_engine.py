"""A second Docker Engine of the test's own, on its own socket, that a test may stop and start.

Stopping the machine's dockerd would disturb every other test; this one has its own socket,
data and exec roots, pid file and bridge (``spt-br0``, 10.213.0.1/24, no iptables: port
publishing goes through docker-proxy). The empty test image is loaded into it with
``docker save | docker load``. Needs root, as dockerd does.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

import docker
import docker.errors

__all__ = ["SecondEngine"]

_BRIDGE = "spt-br0"


class SecondEngine:
    """``start()``, ``stop()``, ``url`` and ``client()`` of one extra dockerd under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"unix://{root / 'docker.sock'}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Starts it; a no-op while it runs (a second dockerd would leak the first one)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        if subprocess.run(["ip", "link", "show", _BRIDGE], capture_output=True).returncode:
            subprocess.run(["ip", "link", "add", _BRIDGE, "type", "bridge"], check=True)
            subprocess.run(["ip", "addr", "add", "10.213.0.1/24", "dev", _BRIDGE], check=True)
        subprocess.run(["ip", "link", "set", _BRIDGE, "up"], check=True)
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / "dockerd.log").open("ab") as log:
            self._proc = self._spawn(log)
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "-H", self.url, "version"], capture_output=True).returncode:
            assert self._proc.poll() is None, (self.root / "dockerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the second dockerd did not answer"
            time.sleep(0.5)

    def _spawn(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                "dockerd",
                "--host",
                self.url,
                "--data-root",
                str(self.root / "data"),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "docker.pid"),
                "--bridge",
                _BRIDGE,
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=log,
            stderr=log,
        )

    def stop(self) -> None:
        """SIGTERM, as ``systemctl stop docker`` sends; waits until it has exited."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(timeout=90)
            self._proc = None

    def log_tail(self) -> str:
        """The end of its log: why it could not run a container."""
        return (self.root / "dockerd.log").read_text(errors="replace")[-3000:]

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url)

    def load(self, image: str) -> None:
        pipeline = f"docker save {shlex.quote(image)} | docker -H {shlex.quote(self.url)} load"
        subprocess.run(["sh", "-c", pipeline], check=True, capture_output=True)

    def remove(self) -> None:
        """Stops it and removes its containers and folders."""
        if self._proc is None:
            self.start()
        client = self.client()
        for container in client.containers.list(ignore_removed=True, all=True):
            container.remove(force=True)
        client.close()
        self.stop()
        subprocess.run(["ip", "link", "del", _BRIDGE], capture_output=True)
        subprocess.run(["umount", "-R", str(self.root / "exec")], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
