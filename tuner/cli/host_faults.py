"""Faults below spectune (a full disk, a database that went away) as one line for the user.

They surface as the OS's or the database driver's exceptions, wrapped by SQLAlchemy and
Optuna, from wherever the write happened. None is a bug in spectune, and each has the same
remedy: fix the host, then run the same command again, which resumes the study (a trial cut
short was marked FAIL where the database could still be written, or is failed by the next run
once its heartbeat is stale).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator

__all__ = ["describe_host_fault"]

_FULL = (errno.ENOSPC, errno.EDQUOT)
_RESUME = "then run the same command again to resume the study"
# What SQLite and PostgreSQL's drivers say when the disk is full or the server went away.
_DISK_FULL_WORDS = ("database or disk is full", "no space left on device")


def describe_host_fault(exc: BaseException) -> str | None:
    """The one line for a host fault somewhere in ``exc``'s chain; None for anything else."""
    # Looked up, not imported: a command that never loaded SQLAlchemy met none of its errors,
    # and commands without a study start without it (tests/cli/test_startup.py).
    sqlalchemy_errors = sys.modules.get("sqlalchemy.exc")
    database_error = getattr(sqlalchemy_errors, "OperationalError", None)
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in _FULL:
            where = f" writing {link.filename}" if link.filename else ""
            return f"no space left on the device{where}: free some, {_RESUME}"
        if isinstance(link, OSError) and link.errno == errno.EROFS:
            return f"{link.filename or 'a file'} is on a read-only file system: {_RESUME}"
        if database_error is not None and isinstance(link, database_error):
            said = " ".join(str(getattr(link, "orig", link)).split())
            if any(word in said.lower() for word in _DISK_FULL_WORDS):
                return f"the study's database cannot grow ({said}): free some space, {_RESUME}"
            return (
                f"the study's database went away ({said[:160]}): start it (or check the "
                f"network), {_RESUME}"
            )
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__
