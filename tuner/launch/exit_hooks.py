"""Makes launchers clean up when the process ends by a signal, not only by Ctrl-C.

SIGTERM's and SIGHUP's default action ends Python without running ``finally`` blocks or
``atexit``, which would leave vLLM processes and containers behind. :class:`Terminated` makes
them unwind like Ctrl-C instead: it is a ``KeyboardInterrupt``, so Optuna marks the running
trial FAIL (a plain ``SystemExit`` would leave it RUNNING) and the launchers' cleanup runs; and
it is a ``SystemExit`` with status 128 + the signal number (143 for SIGTERM), so a process that
does not catch it exits with the status a shell expects.

:func:`install_signal_handlers` claims both signals (the CLI does, at start);
:func:`run_at_exit` claims only those nobody has claimed. Handlers can only be set from the
main thread: a launcher used from a worker thread relies on ``atexit`` alone. SIGKILL runs
nothing at all; :mod:`tuner.launch.runfiles` covers it.
"""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["Terminated", "install_signal_handlers", "run_at_exit"]

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(SystemExit, KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; ``code`` is the exit status, 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    del frame
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """Makes SIGTERM and SIGHUP raise :class:`Terminated` (call from the main thread)."""
    for signum in _SIGNALS:
        signal.signal(signum, _raise_terminated)


def run_at_exit(cleanup: Callable[[], None]) -> None:
    """Registers ``cleanup`` with ``atexit`` and makes SIGTERM and SIGHUP reach it."""
    atexit.register(cleanup)
    if threading.current_thread() is threading.main_thread():
        for signum in _SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _raise_terminated)
