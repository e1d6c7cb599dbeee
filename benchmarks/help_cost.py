"""What ``--help`` costs in CPU time, next to a two-command typer app (issue 40's bar: 3x).

    python benchmarks/help_cost.py [--runs 15] [--limit 3]

Each command runs as a fresh process ``--runs`` times after one warm-up; the table shows the
median CPU time (user + system of the child: what a loaded machine makes a user wait for) and
that median over the typer app's ``--help``. The typer app is :data:`startup.TWO_COMMANDS`,
written to a temporary folder; its ``hello --help`` is shown too, since typer itself loads
pydantic for a command's page. Exits 1 when a spectune help costs more than ``--limit`` times
the app's ``--help``, so a change that makes ``--help`` import the search space again shows
here; ``python -X importtime -m tuner --help`` says which import did.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from startup import TWO_COMMANDS, time_command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--limit", type=float, default=3.0)
    args = parser.parse_args()
    spectune = [sys.executable, "-m", "tuner"]
    with tempfile.TemporaryDirectory() as folder:
        typer_app = Path(folder) / "two_commands.py"
        typer_app.write_text(TWO_COMMANDS)
        _, baseline = time_command([sys.executable, str(typer_app), "--help"], args.runs)
        print(f"{args.runs} runs each, median CPU seconds (user + sys of the child)")
        print(f"{'command':<26} {'CPU s':>7} {'x typer':>8}")
        print(f"{'typer app --help':<26} {baseline:>7.3f} {1:>7.1f}x")
        _, page = time_command([sys.executable, str(typer_app), "hello", "--help"], args.runs)
        print(f"{'typer app hello --help':<26} {page:>7.3f} {page / baseline:>7.1f}x")
        worst = 0.0
        for label, argv in (
            ("spectune --help", [*spectune, "--help"]),
            ("spectune optimize --help", [*spectune, "optimize", "--help"]),
        ):
            _, cpu = time_command(argv, args.runs)
            ratio = cpu / baseline
            worst = max(worst, ratio)
            print(f"{label:<26} {cpu:>7.3f} {ratio:>7.1f}x")
    verdict = "within" if worst <= args.limit else "over"
    print(f"worst {worst:.1f}x: {verdict} the {args.limit:g}x limit")
    return 0 if worst <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
