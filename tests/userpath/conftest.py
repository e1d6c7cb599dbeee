"""The user-path tier (marker ``userpath``): README's commands run as written.

spectune is installed as README says (``pip install .`` from a copy of this checkout, into a
venv of its own: :mod:`testbed.install`), and every command runs in a fresh, empty folder as the
current directory, so the default relative ``--studies-dir studies`` is what a user gets.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from testbed.install import install_checkout

__all__ = ["User", "recommended"]


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a venv that got this checkout by ``pip install .``."""
    return install_checkout(tmp_path_factory.mktemp("installed"))


@dataclass
class User:
    """A shell in a fresh folder with the installed ``spectune`` first on PATH."""

    home: Path
    env: dict[str, str] = field(default_factory=dict)
    started: list[subprocess.Popen[str]] = field(default_factory=list)

    def run(self, line: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """``line`` as bash runs it here."""
        return subprocess.run(
            ["bash", "-c", line],
            cwd=self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, line: str) -> subprocess.Popen[str]:
        """``line`` in the background (stopped at the end of the test if still running)."""
        process = subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=self.home,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        return process


@pytest.fixture
def user(tmp_path: Path, installed: Path) -> Iterator[User]:
    """A fresh folder to work in; caches and state of the test's own."""
    home = tmp_path / "work"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPECTUNE_")}
    env.update(
        PATH=f"{installed}{os.pathsep}{env.get('PATH', '')}",
        HF_HOME=str(tmp_path / "hf-home"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        COLUMNS="200",  # Rich wraps at 80 columns when it prints to a pipe
    )
    shell = User(home, env)
    yield shell
    for process in shell.started:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def recommended(output: str) -> tuple[int, str, float]:
    """The trial ``optimize`` recommends, where its numbers come from, and its first objective
    (the confirmed mean where it was confirmed), from the lines it prints at the end."""
    trial = re.search(r"^Recommended \(.*?\): trial (\d+):", output, re.MULTILINE)
    numbers = re.search(r"^  (measured|simulated): ([\d.]+)", output, re.MULTILINE)
    assert trial is not None and numbers is not None, output[-3000:]
    return int(trial.group(1)), numbers.group(1), float(numbers.group(2))
