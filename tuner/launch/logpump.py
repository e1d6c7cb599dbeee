"""Copies a server's output into its log file line by line, secrets redacted on the way.

The server writes into a pipe, never into the file: what it prints (its environment, a token)
reaches the disk, and so the database and the dashboard, only through
:meth:`~tuner.config.redact.Redactor.redact`. A thread drains the pipe so a chatty server
never blocks on a full pipe; :meth:`LogPump.sync` copies what is in the pipe now, so a reader
that saw the server exit then reads its last lines from the file.
"""

from __future__ import annotations

import os
import select
import threading
from pathlib import Path

from tuner.config.redact import Redactor

__all__ = ["LogPump"]

_CHUNK = 64 * 1024
_POLL_S = 0.05  # how soon the thread notices close()
_MAX_PARTIAL = 64 * 1024  # a line longer than this is written in pieces


class LogPump:
    """A pipe whose text lands, redacted, in ``path``.

    Args:
        path: the log file.
        redactor: what to remove from every line.
        header: written first (redacted too).
        append: add to ``path`` instead of replacing it.

    Raises:
        OSError: the log file cannot be opened or written.
    """

    def __init__(self, path: Path, redactor: Redactor, header: str, *, append: bool) -> None:
        self._redactor = redactor
        self._file = path.open("ab" if append else "wb")
        self._file.write(redactor.redact(header).encode())
        self._file.flush()
        self._read_fd, self.write_fd = os.pipe()  # both close-on-exec; Popen dups write_fd
        os.set_blocking(self._read_fd, False)
        self._partial = b""
        self._lock = threading.Lock()
        self._closed = False
        self._started = False
        self._thread = threading.Thread(target=self._run, name=f"log {path.name}", daemon=True)

    def start(self) -> None:
        """Closes this process's write end (the server holds its own) and starts draining."""
        os.close(self.write_fd)
        self._started = True
        self._thread.start()

    def sync(self) -> None:
        """Copies everything in the pipe now into the file, a last unfinished line included."""
        with self._lock:
            if not self._closed:
                self._drain()
                self._write_partial()

    def note(self, line: str) -> None:
        """Adds spectune's own ``line`` after what the server wrote so far (why it was killed)."""
        with self._lock:
            if not self._closed:
                self._drain()
                self._write_partial()
                self._write(f"{line}\n".encode())

    def close(self) -> None:
        """Copies what is left and closes the pipe and the file; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._drain()
            self._write_partial()
            self._closed = True
        if self._started:
            self._thread.join()
        else:  # the server was never spawned
            os.close(self.write_fd)
        os.close(self._read_fd)
        self._file.close()

    def _run(self) -> None:
        poller = select.poll()  # not select(): a busy process may hold descriptors past 1024
        poller.register(self._read_fd, select.POLLIN)
        while True:
            poller.poll(_POLL_S * 1000)
            with self._lock:
                if self._closed or self._drain():
                    return

    def _drain(self) -> bool:
        """Copies what the pipe holds; True once every writer has closed it."""
        while True:
            try:
                data = os.read(self._read_fd, _CHUNK)
            except BlockingIOError:
                return False
            if not data:
                self._write_partial()
                return True
            lines, newline, rest = (self._partial + data).rpartition(b"\n")
            self._partial = rest
            if newline:
                self._write(lines + newline)
            if len(self._partial) > _MAX_PARTIAL:
                self._write_partial()

    def _write_partial(self) -> None:
        partial, self._partial = self._partial, b""
        if partial:
            self._write(partial)

    def _write(self, data: bytes) -> None:
        text = self._redactor.redact(data.decode("utf-8", errors="replace"))
        try:
            self._file.write(text.encode())
            self._file.flush()
        except OSError:
            # A full disk: the lines are lost, but the pipe keeps draining, or the server
            # would block on its next write and the trial would hang instead of ending.
            pass
