"""Makes launchers clean up when the process ends by a signal, not only by Ctrl-C.

SIGTERM's and SIGHUP's default action ends Python without running ``finally`` blocks or
``atexit``, which would leave vLLM processes and containers behind. :class:`Terminated` makes
them unwind like Ctrl-C instead: it is a ``KeyboardInterrupt``, so Optuna marks the running
trial FAIL (a plain ``SystemExit`` would leave it RUNNING) and the launchers' cleanup runs; and
it is a ``SystemExit`` with status 128 + the signal number (143 for SIGTERM), so a process that
does not catch it exits with the status a shell expects.

Signals cannot be swallowed. Python runs a signal's handler at whatever bytecode the main
thread is at, so the exception can be raised inside a garbage-collection or weakref callback
or a ``__del__``, where Python only prints "Exception ignored in ..." and carries on (and the
study would run to its end, or be SIGKILLed by ``docker stop`` with its containers orphaned).
The :data:`sys.unraisablehook` installed here catches exactly those (a ``Terminated`` or a
Ctrl-C's ``KeyboardInterrupt``) and delivers the signal to the main thread again, to be
handled at the next bytecode outside the callback; once a signal has been raised it also drops
the failure of a ``__del__`` (the signal may have left its object half built or half closed);
anything else goes to the previous hook.

:func:`signals_held` keeps the three signals out of an engine call whose interruption would lose
a resource: a container create cut short still completes in the engine, after the cleanup
looked for it.

:func:`install_signal_handlers` claims both signals (the CLI does, at start);
:func:`run_at_exit` claims only those nobody has claimed. Handlers can only be set from the
main thread: a launcher used from a worker thread relies on ``atexit`` alone. SIGKILL runs
nothing at all; :mod:`tuner.launch.runfiles` covers it.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = [
    "Terminated",
    "install_signal_handlers",
    "run_at_exit",
    "signal_raised",
    "signals_held",
]

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_REDELIVERY_DELAY_S = 0.01


class Terminated(SystemExit, KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; ``code`` is the exit status, 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    del frame
    _raised.append(signum)
    raise Terminated(signum)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    _raised.append(signum)
    signal.default_int_handler(signum, frame)  # Python's own Ctrl-C: KeyboardInterrupt


def signal_raised() -> int | None:
    """The first signal whose exception (:class:`Terminated`, or Ctrl-C's
    ``KeyboardInterrupt``) a handler raised since the handlers were installed.

    A library may catch the exception a handler raises inside its own code and raise its own
    error instead (pydantic turns it into a ``SchemaError`` while it builds a validator lazily);
    the process still ends by that signal, not with a traceback.
    """
    return _raised[0] if _raised else None


def _redeliver(unraisable: sys.UnraisableHookArgs) -> None:
    """A signal's exception swallowed by a callback is delivered again, not printed.

    Only a C call here (a queue put): any bytecode that checked for pending signals could run
    the handler inside this hook, whose exceptions Python ignores too.
    """
    error = unraisable.exc_value
    if isinstance(error, KeyboardInterrupt):  # Terminated included
        _pending.put(error.signum if isinstance(error, Terminated) else signal.SIGINT)
    elif not (_raised and _in_destructor(unraisable)):
        _previous_hook(unraisable)


def _in_destructor(unraisable: sys.UnraisableHookArgs) -> bool:
    """Whether a ``__del__`` failed. Once a signal's exception has been raised, it may have cut
    an object's constructor or ``close`` short, and the object's ``__del__`` then fails on
    what was never made or is half closed (asyncio's event loop does, when a signal lands
    while a measurement builds or closes one: an attribute never set, a self-pipe already
    gone). The process is stopping by that signal; such a traceback says nothing its own
    line does not."""
    return getattr(unraisable.object, "__name__", None) == "__del__"


def _deliver_again() -> None:
    while True:
        signum = _pending.get()
        time.sleep(_REDELIVERY_DELAY_S)  # the main thread is out of the callback by then
        _thread.interrupt_main(signal.Signals(signum))


_raised: list[int] = []
_pending: queue.SimpleQueue[int] = queue.SimpleQueue()
_previous_hook = sys.unraisablehook
_redelivery: threading.Thread | None = None


def _claim_unraisable() -> None:
    global _previous_hook, _redelivery
    if _redelivery is None:
        _redelivery = threading.Thread(target=_deliver_again, name="signal-redelivery", daemon=True)
        _redelivery.start()
    if sys.unraisablehook is not _redeliver:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _redeliver


def install_signal_handlers() -> None:
    """Makes SIGTERM and SIGHUP raise :class:`Terminated` (call from the main thread), notes
    each raised (Ctrl-C's too: :func:`signal_raised`), and makes no signal's exception
    swallowable."""
    _raised.clear()  # a new command (in-process runs share the module): its own signals only
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when ignored
        signal.signal(signal.SIGINT, _interrupt)
    for signum in _SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signum, _raise_terminated)
    _claim_unraisable()


def run_at_exit(cleanup: Callable[[], None]) -> None:
    """Registers ``cleanup`` with ``atexit`` and makes SIGTERM and SIGHUP reach it."""
    atexit.register(cleanup)
    if threading.current_thread() is threading.main_thread():
        _claim_unraisable()
        for signum in _SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _raise_terminated)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Holds SIGINT, SIGTERM and SIGHUP until the block ends, then delivers the first one.

    Outside the main thread (where handlers cannot be set) the block runs unguarded.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        del frame
        held.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, *_SIGNALS)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])
