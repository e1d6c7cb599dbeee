"""How long the CLI takes to start, next to a two-command typer app, and what it loads.

    python benchmarks/startup.py [--runs 21]

Each command runs as a fresh process ``--runs`` times after one warm-up (disk cache, ``.pyc``
files); the table shows the median wall time, the median CPU time (user + system of the child,
what a loaded machine makes you wait for), the median CPU time as a multiple of the two-command
typer app's ``--help`` (issue 28's bar: ``spectune --help`` within 3x), and which heavy
libraries the command imported (read from ``sys.modules`` at exit in a separate run). The typer
app is written to a temporary folder: two commands, one argument each, typer's defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("matplotlib", "docker", "httpx", "openai", "sqlalchemy", "optuna", "pydantic")

TWO_COMMANDS = '''
import typer

app = typer.Typer()


@app.command()
def hello(name: str) -> None:
    """Say hello."""
    print(f"hello {name}")


@app.command()
def bye(name: str) -> None:
    """Say goodbye."""
    print(f"bye {name}")


app()
'''

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


def _commands(typer_app: Path) -> dict[str, list[str]]:
    spectune = [sys.executable, "-m", "tuner"]
    return {
        "two-command typer app --help": [sys.executable, str(typer_app), "--help"],
        "spectune --help": [*spectune, "--help"],
        "spectune space check default": [*spectune, "space", "check", "default"],
        "spectune hardware list": [*spectune, "hardware", "list"],
        "spectune optimize --help": [*spectune, "optimize", "--help"],
    }


def _run(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` as a child process."""
    before = os.times()
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu


def time_command(argv: list[str], runs: int) -> tuple[float, float]:
    _run(argv)
    samples = [_run(argv) for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def _loaded(argv: list[str]) -> str:
    if argv[1] != "-m":
        return "-"
    probe = [sys.executable, "-c", _PROBE.format(heavy=HEAVY), *argv[3:]]
    err = subprocess.run(probe, capture_output=True, text=True, check=False).stderr
    line = next((x for x in err.splitlines() if x.startswith("LOADED ")), "LOADED ?")
    return line.removeprefix("LOADED ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        typer_app = Path(folder) / "two_commands.py"
        typer_app.write_text(TWO_COMMANDS)
        commands = _commands(typer_app)
        print(f"{args.runs} runs each, medians; x typer: CPU time over the typer app's")
        print(f"{'command':<30} {'wall s':>7} {'CPU s':>7} {'x typer':>8}  heavy libraries loaded")
        baseline = None
        for label, argv in commands.items():
            wall, cpu = time_command(argv, args.runs)
            baseline = baseline or cpu
            ratio = cpu / baseline
            print(f"{label:<30} {wall:>7.3f} {cpu:>7.3f} {ratio:>7.1f}x  {_loaded(argv)}")


if __name__ == "__main__":
    main()
