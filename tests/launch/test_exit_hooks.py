"""A signal the shell ignored stays ignored: a study started under ``nohup`` survives the
terminal's hang-up, as it asked to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap


def test_an_ignored_sighup_stays_ignored() -> None:
    # A child of its own: handlers are per process, and pytest's main thread keeps its own.
    script = textwrap.dedent(
        """
        import os, signal, time
        from tuner.launch.exit_hooks import install_signal_handlers
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup hands its command
        install_signal_handlers()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.2)
        print("still here")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "still here"


def test_a_sighup_that_is_not_ignored_still_ends_the_run_with_129() -> None:
    script = textwrap.dedent(
        """
        import os, signal, sys, time
        from tuner.launch.exit_hooks import Terminated, install_signal_handlers
        install_signal_handlers()
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        except Terminated as ended:
            sys.exit(ended.code)
        """
    )
    env = {**os.environ}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 128 + signal.SIGHUP, done.stderr
