"""What the CLI loads before it does anything. `spectune --help`, `space check` and `hardware`
start without Optuna or SQLAlchemy: they open no study, and importing those two is most of a
second of CPU (benchmarks/startup.py). `import tuner.cli`, and so every help page, loads
neither pydantic nor the search space's schema: options name their bounds instead of importing
them (benchmarks/help_cost.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# Run in a fresh interpreter: this test process has imported all of them long ago.
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

# The modules a help page must not pay for: the schema of a search space and of one server
# config (pydantic models), the YAML catalogs, the checked bounds, Optuna.
_SCHEMA = (
    "tuner.config.schema",
    "tuner.config.trial",
    "tuner.config.bounds",
    "tuner.catalog.gpus",
    "tuner.trial.backends.base",
    "optuna",
)

_HELP_SCRIPT = """
import json, sys
from typer.testing import CliRunner

import tuner.cli
seen = {"import tuner.cli": [m for m in sys.modules if m in MODULES]}
for command in (["--help"], ["optimize", "--help"]):
    result = CliRunner().invoke(tuner.cli.app, command)
    assert result.exit_code == 0, result.output
    seen[" ".join(command)] = [m for m in sys.modules if m in MODULES]
from tuner.config.bounds import Seed  # a schema module does show: the check can tell
seen["bounds"] = [m for m in sys.modules if m in MODULES]
print(json.dumps(seen))
"""


def _run(script: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_commands_without_a_study_load_neither_optuna_nor_sqlalchemy() -> None:
    seen = _run(_SCRIPT)
    assert seen["codes"] == {"--help": 0, "space check default": 0, "hardware list": 0, "models": 0}
    assert seen["light"] == {"optuna": False, "sqlalchemy": False}
    assert seen["heavy"] == {"optuna": True, "sqlalchemy": True}


def test_importing_the_cli_and_its_help_pages_load_no_schema() -> None:
    modules = (*_SCHEMA, "pydantic", "yaml")
    seen = _run(f"MODULES = {modules!r}\n{_HELP_SCRIPT}")
    assert seen["import tuner.cli"] == []  # not even pydantic or a YAML parser
    # typer itself loads pydantic to coerce a command's options, so a command's page may.
    assert not set(seen["--help"]) & set(_SCHEMA)
    assert not set(seen["optimize --help"]) & set(_SCHEMA)
    assert {"tuner.config.bounds", "pydantic"} <= set(seen["bounds"])
