"""A misspelt flag or command is one line naming it and the closest valid name, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app

SPECTUNE = str(Path(sys.executable).with_name("spectune"))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["optimize", "--trails", "3"], "has no option --trails; did you mean --trials?"),
        (["estimate", "--concurency", "8"], "no option --concurency; did you mean --concurrency?"),
        (["--debgu", "studies"], "has no option --debgu; did you mean --debug?"),
        (["optimize", "--zzzzzz"], "has no option --zzzzzz (see"),
        (["optimze"], "No such command 'optimze'. Did you mean 'optimize'?"),
        (["optimize", "--trials"], "Option '--trials' requires an argument."),
        (["report", "a", "b", "c"], "Got unexpected extra argument"),
    ],
)
def test_a_bad_command_line_is_one_line(argv: list[str], says: str) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line
    assert line.endswith("--help)")
    assert "╭" not in result.output and "Usage:" not in result.output


def test_the_installed_command_names_itself_and_the_flag() -> None:
    done = subprocess.run(
        [SPECTUNE, "optimize", "--trails", "3"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: spectune optimize has no option --trails; did you mean --trials? "
        "(see spectune optimize --help)"
    ]
    assert done.stdout == ""
