"""The fake server as a process: ``main`` parses the flags, plays the start-up, then serves.

Start-up goes like vLLM's: the banner, ignored flags, the memory check of
:func:`~tuner.sim.server.startup.start_scheduler` (vLLM's messages and exit status 1 when the config
does not fit or is invalid), then :class:`~tuner.sim.server.app.FakeServer`. The process-level
faults of :mod:`tuner.sim.server.faults` (start-up crashes, memory, SIGTERM, a child process, a
logged secret) are played here, in the order a real server would meet them.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from tuner.sim.server.args import ConfigValidationError, parse_serve_args
from tuner.sim.server.faults import Faults
from tuner.sim.server.startup import (
    SIMULATED_BANNER,
    StartFailure,
    log,
    print_startup_failure,
    print_validation_failure,
    start_scheduler,
)

__all__ = ["main"]

_MIB = 1024 * 1024
_CHILD_SLEEP_S = 600  # a stand-in for vLLM's engine core; its group's sweep ends it sooner
_SLOW_PHASES = (
    ("Starting to load model", 0.5),
    ("Starting torch.compile", 0.25),
    ("Capturing CUDA graphs", 0.25),
)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _process_faults(faults: Faults) -> None:
    """The faults that happen to the process before it listens."""
    if faults.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child below
    for name in faults.log_env:
        log("DEBUG", f"environment {name}={os.environ.get(name, '')}")
    if faults.spawn_child:
        child = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({_CHILD_SLEEP_S})"],
            stdin=subprocess.DEVNULL,
        )
        log("INFO", f"spawned child process {child.pid} (simulated fault --sim-fault spawn-child)")
    if faults.alloc_at_start_mib:
        hog = []
        for _ in range(faults.alloc_at_start_mib):
            hog.append(bytearray(_MIB))  # zero-filled, so every page is touched: real RSS
        log("INFO", f"allocated {len(hog)} MiB (simulated fault --sim-fault alloc-at-start)")
    if faults.sigkill_at_start:
        log("INFO", "Loading weights (simulated fault --sim-fault sigkill-at-start)")
        sys.stdout.flush()
        signal.raise_signal(signal.SIGKILL)
    if faults.crash_at_start:
        print(
            "Traceback (most recent call last):\n"
            '  File "tuner/sim/server.py", in main (simulated vLLM start-up)\n'
            "KeyError: 'model_type' (simulated fault --sim-fault crash-at-start)",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(1)


def _compile_cache(argv: Sequence[str]) -> None:
    """Plays vLLM's torch.compile cache: a folder per config under ``$VLLM_CACHE_ROOT``, found
    again by a later start of the same config (vllm/compilation/backends.py logs both lines)."""
    root = os.environ.get("VLLM_CACHE_ROOT")
    if not root:
        return
    skip = {"--host", "--port"}
    kept = [a for i, a in enumerate(argv) if a not in skip and (i == 0 or argv[i - 1] not in skip)]
    folder = Path(root, "torch_compile_cache", hashlib.sha256(" ".join(kept).encode()).hexdigest())
    marker = folder / "compiled"
    if marker.exists():
        log("INFO", f"Directly load the compiled graph(s) from the cache in {folder} (simulated)")
        return
    folder.mkdir(parents=True, exist_ok=True)
    log("INFO", f"Using cache directory: {folder} for vLLM's torch.compile (simulated)")
    marker.write_text("simulated\n")


def _slow_start(seconds: float) -> None:
    """Spends ``seconds`` in vLLM's start-up phases, each begun with the line vLLM logs
    (where vLLM logs them: the markers in :mod:`tuner.launch.readiness`)."""
    for line, share in _SLOW_PHASES:
        log("INFO", f"{line} (simulated slow start: {share * seconds:g} of {seconds:g} s)")
        time.sleep(share * seconds)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the fake server; returns the process exit status.

    Args:
        argv: the arguments after the program name; ``sys.argv[1:]`` when None.

    Returns:
        0 after a signal, 1 when start-up fails like vLLM's (memory, invalid config, port in
        use, an injected crash); argparse exits with 2 on unknown or malformed flags.
    """
    # Before the event loop exists (slow start, config checks) a SIGTERM still exits cleanly.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = parse_serve_args(argv)
        sim = args.sim
        log(
            "INFO",
            f"{SIMULATED_BANNER}; timings from tuner.sim for {sim.hardware.label} at "
            f"{sim.speed:g}x real time, seed {sim.seed}",
        )
        if args.ignored:
            log("WARNING", f"flags ignored by the simulator: {' '.join(args.ignored)}")
        _process_faults(sim.faults)
        _compile_cache(argv)
        if sim.faults.slow_start_s:
            _slow_start(sim.faults.slow_start_s)
        scheduler = start_scheduler(args)
    except ConfigValidationError as exc:
        print_validation_failure(exc.config_class, str(exc))
        return 1
    except StartFailure as exc:
        print_startup_failure(str(exc))
        return 1
    # The HTTP stack (aiohttp, prometheus_client: about a second of imports on a busy core)
    # loads once start-up has passed, so a failed start-up reports as fast as before.
    from tuner.sim.server.app import FakeServer

    return asyncio.run(FakeServer(args, scheduler).serve())
