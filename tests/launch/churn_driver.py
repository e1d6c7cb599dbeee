"""Spends half its time inside weakref callbacks, where a signal's exception is swallowable.

Half, not all: a re-delivered signal lands inside a callback again as often as the first one
did, so a driver that never left its callbacks would swallow every retry too (real garbage
collection callbacks are short).

Usage: ``python churn_driver.py``; prints READY, then churns for 20 s and prints SURVIVED,
which a signalled run must never reach.
"""

from __future__ import annotations

import signal
import time
import weakref

from tuner.launch.exit_hooks import install_signal_handlers


class _Thing:
    pass


def _busy() -> None:
    started = time.perf_counter()
    while time.perf_counter() - started < 0.002:
        pass


def main() -> None:
    # Ctrl-C as a terminal delivers it: a test run started in the background (CI, nohup)
    # passes SIGINT on ignored, and Python then never turns it into KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    install_signal_handlers()
    print("READY", flush=True)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        thing = _Thing()
        weakref.finalize(thing, _busy)
        del thing  # the callback runs now, in the main thread
        _busy()  # and as long outside one
    print("SURVIVED", flush=True)


if __name__ == "__main__":
    main()
