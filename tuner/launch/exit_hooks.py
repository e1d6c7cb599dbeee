"""Makes launchers clean up when the process ends by a signal, not only by Ctrl-C.

SIGTERM's and SIGHUP's default action ends Python without running ``finally`` blocks or
``atexit``, which would leave vLLM processes and containers behind. As ``SystemExit`` they
unwind like Ctrl-C. A handler someone else installed (the CLI installs its own) is left alone,
and handlers can only be set from the main thread: a launcher used from a worker thread relies
on ``atexit`` alone.
"""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["run_at_exit"]


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


def run_at_exit(cleanup: Callable[[], None]) -> None:
    """Registers ``cleanup`` with ``atexit`` and makes SIGTERM and SIGHUP reach it."""
    atexit.register(cleanup)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _exit_on_signal)
