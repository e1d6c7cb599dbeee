"""Builds and closes asyncio event loops back to back, as measurements do, until signalled.

A signal's exception landing inside a loop's constructor or ``close`` leaves the loop half
built or half closed, and its ``__del__`` then fails at exit ("Exception ignored in:
BaseEventLoop.__del__", a traceback): about one signal in twenty here before
``tuner.launch.exit_hooks`` dropped such failures once a signal is raised.

Usage: ``python loop_driver.py``; prints READY, then loops for 20 s and prints SURVIVED,
which a signalled run must never reach.
"""

from __future__ import annotations

import asyncio
import signal
import time

from tuner.launch.exit_hooks import install_signal_handlers


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as churn_driver.py says why
    install_signal_handlers()
    print("READY", flush=True)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        asyncio.new_event_loop().close()
    print("SURVIVED", flush=True)


if __name__ == "__main__":
    main()
