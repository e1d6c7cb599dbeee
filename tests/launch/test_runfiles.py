"""Run files: a dead run's servers are swept, a live run's and strangers' never are."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from tests.testbed.processes import is_running
from tuner.launch.runfiles import RunFile, remove_leftovers, start_ticks


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process in its own group, standing in for a server (or a stranger's process)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    yield proc
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


def _record(directory: Path, server: int, **changes: Any) -> Path:
    path = RunFile.write(directory, server, "127.0.0.1", 8000, "vllm serve m")
    assert path is not None
    written = RunFile.read(path)
    assert written is not None
    record = replace(written, **changes)
    path.write_text(json.dumps(asdict(record)))
    return path


def test_a_dead_owners_server_is_stopped_and_its_file_removed(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    path = _record(tmp_path, sleeper.pid, owner_pid=_dead_pid())
    (removed,) = remove_leftovers(tmp_path)
    assert removed.pid == sleeper.pid and removed.host == socket.gethostname()
    assert sleeper.wait(timeout=10) == -15  # SIGTERM first
    assert not path.exists()


def test_a_live_owners_server_is_left_alone(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    path = _record(tmp_path, sleeper.pid)  # owned by this test process, which lives
    assert remove_leftovers(tmp_path) == []
    assert is_running(sleeper.pid) and path.exists()


def test_a_reused_pid_is_never_signalled(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    started = start_ticks(sleeper.pid)
    assert started is not None
    # The recorded server started at another time: this PID now belongs to someone else.
    path = _record(tmp_path, sleeper.pid, owner_pid=_dead_pid(), started=started - 1)
    assert [r.pid for r in remove_leftovers(tmp_path)] == [sleeper.pid]
    assert is_running(sleeper.pid)
    assert not path.exists()


def test_other_hosts_and_broken_files(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    other = _record(tmp_path, sleeper.pid, owner_pid=_dead_pid(), host="elsewhere")
    other = other.rename(tmp_path / f"elsewhere-{sleeper.pid}.json")
    broken = tmp_path / f"{socket.gethostname()}-1.json"
    broken.write_text("{not json")
    assert remove_leftovers(tmp_path) == []
    assert other.exists() and not broken.exists()  # another machine's are its own business
    assert is_running(sleeper.pid)


def test_an_unwritable_folder_costs_only_the_record(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert RunFile.write(blocked / "sub", os.getpid(), "h", 1, "c") is None
