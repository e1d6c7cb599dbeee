"""Run files: which servers a spectune run started, so the next run can remove a killed one's.

SIGKILL (the OOM killer, ``kill -9``, a lost terminal's hard stop) gives spectune no chance to
stop its server. The process launcher covers that twice over:

1. the server asks the kernel to SIGKILL it when spectune dies (``PR_SET_DEATHSIG``, Linux;
   see :func:`die_with_parent`), so the server's leader never outlives its owner;
2. its own children (vLLM's engine core and workers) share its process group, which outlives
   the leader; each start writes a run file (JSON: owner PID, server PID and group, start
   times, host, address, port, command) under :func:`state_dir`, removed again by ``stop``.
   The next run on the host (:func:`remove_leftovers`, at its first start) kills the group of
   every run file whose owner is dead, and never a live owner's.

A PID is only trusted together with its start time (``/proc/PID/stat``), so a PID the kernel
has since given to another process is never signalled. A group ID cannot be reused while any
member of the group lives, so members of a group whose leader is gone are still the server's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tuner.errors import ConfigError

__all__ = [
    "RunFile",
    "die_with_parent",
    "group_members",
    "remove_leftovers",
    "require_writable",
    "signal_group",
    "start_ticks",
    "state_dir",
    "wait_group_empty",
]

_log = logging.getLogger(__name__)

_PR_SET_DEATHSIG = 1  # from <linux/prctl.h>
_LEFTOVER_GRACE_S = 5.0  # SIGTERM first: a vLLM engine core frees its GPU memory cleanly

# Deeper than any server's process tree: a bound on walking /proc's parents.
_MAX_DEPTH = 64


def state_dir() -> Path:
    """Where run files live: ``$XDG_STATE_HOME/spectune/servers`` (``~/.local/state/...``)."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "spectune" / "servers"


def require_writable(directory: Path) -> None:
    """Refuses to go on when run files cannot be written in ``directory``.

    Checked before a server starts: without its run file, a SIGKILLed spectune would leave a
    server nobody could later find and stop. The probe file's name is unique, so runs and
    workers sharing the folder never remove each other's.

    Raises:
        ConfigError: the folder cannot be created or written.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"cannot record servers in {directory} ({exc.strerror or exc}): a killed run's "
            "server could not be stopped later; set XDG_STATE_HOME to a writable folder"
        ) from None


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from the state on (field 3), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None when it does not exist."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def descends_from(pid: int, root: int) -> bool:
    """Whether process ``pid`` is ``root`` or one of its descendants, read from /proc (a
    server's engine core and workers are its children, or theirs)."""
    seen = 0
    while pid > 1 and seen < _MAX_DEPTH:
        if pid == root:
            return True
        fields = _stat_fields(pid)
        if fields is None:
            return False
        pid, seen = int(fields[1]), seen + 1
    return pid == root


def signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is already empty
        os.killpg(pgid, signum)


def wait_group_empty(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when this process dies (Linux).

    The kernel sends it when the *thread* that forked the child exits, so a server must be
    started from a thread that lives as long as it should (spectune starts them from its main
    thread). Elsewhere than Linux it does nothing; the run files still cover a killed run.
    """
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return lambda: None

    def arm() -> None:
        prctl(_PR_SET_DEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return arm


@dataclass(frozen=True)
class RunFile:
    """One running server, as recorded on disk."""

    owner_pid: int
    owner_started: int | None
    pid: int  # the server's leader, also its process group ID
    started: int | None
    host: str  # the machine (a shared home holds several machines' run files)
    address: str  # where the server listens
    port: int
    command: str
    recorded_at: float  # time.time()

    @classmethod
    def write(cls, directory: Path, pid: int, address: str, port: int, command: str) -> Path | None:
        """Records server ``pid``, started by this process; returns the file (None: not written).

        A folder that cannot be written costs only the clean-up after a SIGKILL, which is
        logged; it never stops a start.
        """
        record = cls(
            owner_pid=os.getpid(),
            owner_started=start_ticks(os.getpid()),
            pid=pid,
            started=start_ticks(pid),
            host=socket.gethostname(),
            address=address,
            port=port,
            command=command,
            recorded_at=time.time(),
        )
        path = cls.path_of(directory, pid)
        tmp = path.with_suffix(".tmp")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(asdict(record)))
            tmp.replace(path)  # a reader never sees half a file
        except OSError as exc:
            _log.warning("cannot record server %d in %s (%s)", pid, directory, exc)
            return None
        return path

    @staticmethod
    def path_of(directory: Path, pid: int) -> Path:
        """Where server ``pid`` of this host is recorded in ``directory``."""
        return directory / f"{socket.gethostname()}-{pid}.json"

    @classmethod
    def read(cls, path: Path) -> RunFile | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def owner_alive(self) -> bool:
        started = start_ticks(self.owner_pid)
        return started is not None and started == self.owner_started

    def still_ours(self) -> bool:
        """Whether signalling group ``pid`` reaches this server and nobody else."""
        started = start_ticks(self.pid)
        if started is not None:
            return started == self.started  # a live leader: the same process, or a reused PID
        return bool(group_members(self.pid))  # a gone leader: its group can't have been reused


def remove_leftovers(directory: Path | None = None) -> list[RunFile]:
    """Kills the servers of this host's dead spectune runs and deletes their run files.

    Returns:
        The run files whose servers were removed (or found gone).
    """
    directory = directory or state_dir()
    host = socket.gethostname()
    removed = []
    for path in sorted(directory.glob(f"{host}-*.json")):
        record = RunFile.read(path)
        if record is None:
            path.unlink(missing_ok=True)
            continue
        if record.owner_alive():
            continue
        if record.still_ours():
            _log.warning(
                "stopping %s (pid %d, port %d), left running by a spectune run that died",
                record.command.split()[0],
                record.pid,
                record.port,
            )
            signal_group(record.pid, signal.SIGTERM)
            if not wait_group_empty(record.pid, _LEFTOVER_GRACE_S):
                signal_group(record.pid, signal.SIGKILL)
                wait_group_empty(record.pid, _LEFTOVER_GRACE_S)
        path.unlink(missing_ok=True)
        removed.append(record)
    return removed
