"""How long the CLI takes to start, next to a bare ``import typer``, and what it loads.

    python benchmarks/startup.py [--runs 7]

Each command runs as a fresh process (``python -m tuner ...``) ``--runs`` times after one
warm-up; the table shows the median and the fastest wall time, and which heavy libraries the
command imported (read from ``sys.modules`` at exit in a separate run).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HEAVY = ("matplotlib", "docker", "httpx", "openai", "sqlalchemy", "optuna", "pydantic")

COMMANDS: dict[str, list[str]] = {
    'python -c "import typer"': [sys.executable, "-c", "import typer"],
    "spectune --help": [sys.executable, "-m", "tuner", "--help"],
    "spectune hardware": [sys.executable, "-m", "tuner", "hardware"],
}

_PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['spectune', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('tuner', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "heavy = [m for m in {heavy!r} if m in sys.modules]\n"
    "print('LOADED', ','.join(heavy) or '-', file=sys.stderr)\n"
)


def _time(argv: list[str], runs: int) -> list[float]:
    subprocess.run(argv, capture_output=True, check=True)  # warm-up: disk cache, .pyc files
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return times


def _loaded(argv: list[str]) -> str:
    if argv[1] != "-m":
        return "-"
    probe = [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *argv[3:]]
    err = subprocess.run(probe, capture_output=True, text=True, check=False).stderr
    line = next((x for x in err.splitlines() if x.startswith("LOADED ")), "LOADED ?")
    return line.removeprefix("LOADED ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"{'command':<28} {'median s':>9} {'min s':>7}  heavy libraries loaded")
    for label, argv in COMMANDS.items():
        times = _time(argv, args.runs)
        median, fastest = statistics.median(times), min(times)
        print(f"{label:<28} {median:>9.3f} {fastest:>7.3f}  {_loaded(argv)}")


if __name__ == "__main__":
    main()
