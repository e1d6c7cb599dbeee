"""The user-path tier (marker ``userpath``): README's commands run as written.

spectune is installed as README says (``pip install .`` from a copy of this checkout, into a
venv of its own: :mod:`tests.testbed.install`), and every command runs in a fresh, empty folder as
the current directory, so the default relative ``--studies-dir studies`` is what a user gets.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed.install import install_checkout
from tests.userpath.userpath_support import User


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a venv that got this checkout by ``pip install .``."""
    return install_checkout(tmp_path_factory.mktemp("installed"))


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
