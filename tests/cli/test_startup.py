"""`spectune --help`, `space check` and `hardware` start without Optuna or SQLAlchemy: they
open no study, and importing those two is most of a second of CPU (benchmarks/startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

# Runs in a fresh interpreter: this test process has imported both long ago.
_SCRIPT = """
import json, sys
from typer.testing import CliRunner
from tuner.cli import app

runner = CliRunner()
codes = {}
for command in (["--help"], ["space", "check", "default"], ["hardware", "list"], ["models"]):
    codes[" ".join(command)] = runner.invoke(app, command).exit_code
light = {name: name in sys.modules for name in ("optuna", "sqlalchemy")}
import tuner.study.storage  # the commands with a study do load them: the check can tell
heavy = {name: name in sys.modules for name in ("optuna", "sqlalchemy")}
print(json.dumps({"codes": codes, "light": light, "heavy": heavy}))
"""


def test_commands_without_a_study_load_neither_optuna_nor_sqlalchemy() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["codes"] == {"--help": 0, "space check default": 0, "hardware list": 0, "models": 0}
    assert seen["light"] == {"optuna": False, "sqlalchemy": False}
    assert seen["heavy"] == {"optuna": True, "sqlalchemy": True}
