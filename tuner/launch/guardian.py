"""Stops a server's whole process group when the spectune process that started it dies.

``PR_SET_DEATHSIG`` ends the server's leader with its owner, but not the leader's children
(vLLM's engine core, which holds the GPU): they would run on with parent 1. Each server gets a
guardian, a small process in a session of its own, started as
``python -m tuner.launch.guardian PGID START_TICKS RUN_FILE`` with its standard input a pipe
that only the owner holds. The kernel closes that pipe however the owner ends (SIGKILL
included); the guardian then stops what is left of the group, SIGTERM first, removes the
server's run file (nobody is left for the next run to stop) and exits. After a normal stop
the group is already empty and the guardian just exits.

It signals the group only while it is still the server's: the leader alive with the start time
recorded (``/proc``), or gone with members left (a group ID is not reused while any member lives).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tuner.launch.runfiles import (
    RunFile,
    group_members,
    signal_group,
    start_ticks,
    wait_group_empty,
)

__all__ = ["dismiss_guardian", "main", "spawn_guardian"]

_GRACE_S = 5.0  # SIGTERM first: a vLLM engine core frees its GPU memory cleanly


def spawn_guardian(pgid: int, run_file: Path) -> subprocess.Popen[bytes] | None:
    """Starts the guardian of group ``pgid`` (recorded in ``run_file``); None (the run file
    still covers a SIGKILL) when it cannot run. Closing its ``stdin`` (:func:`dismiss_guardian`)
    tells it the owner is done."""
    argv = [str(pgid), str(start_ticks(pgid)), str(run_file)]
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tuner.launch.guardian", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C or a killpg meant for the owner spares it
        )
    except OSError:
        return None


def dismiss_guardian(guardian: subprocess.Popen[bytes] | None) -> None:
    """Tells the guardian the server was stopped (its group is empty: it signals nobody)."""
    if guardian is None:
        return
    if guardian.stdin is not None:
        guardian.stdin.close()
    try:
        guardian.wait(timeout=_GRACE_S)
    except subprocess.TimeoutExpired:
        guardian.kill()
        guardian.wait()


def _still_the_servers(pgid: int, started: int | None) -> bool:
    now = start_ticks(pgid)
    if now is not None:
        return now == started
    return bool(group_members(pgid))


def main(argv: Sequence[str]) -> int:
    """Waits for the owner to close standard input, then stops what is left of the group."""
    pgid = int(argv[0])
    started = None if argv[1] == "None" else int(argv[1])
    run_file = Path(argv[2])
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    while sys.stdin.buffer.read(1):
        pass
    if _still_the_servers(pgid, started):
        signal_group(pgid, signal.SIGTERM)
        if not wait_group_empty(pgid, _GRACE_S):
            signal_group(pgid, signal.SIGKILL)
            wait_group_empty(pgid, _GRACE_S)
    record = RunFile.read(run_file)
    if record is not None and (record.pid, record.started) == (pgid, started):
        run_file.unlink(missing_ok=True)  # the owner's own stop may have removed it already
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
