"""Which processes are still running: for tests asserting that a launcher left nothing behind.

Zombies do not count. A killed grandchild is reparented to PID 1, which reaps it when it gets
round to it (in some containers never): until then ``kill(pid, 0)`` still succeeds on it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["is_running", "running_in_group"]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def running_in_group(pgid: int) -> list[int]:
    """The non-zombie processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members
