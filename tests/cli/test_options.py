"""The shared option declarations: each bounded option names a type of tuner.config.bounds
(checked only when a value is given, so declaring it loads no pydantic), and its help quotes
the same upper bound the type enforces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tuner.cli import app
from tuner.config import bounds, limits


def _options(group: Any) -> Iterator[tuple[str, Any]]:
    """Every option of every command under ``group`` with its command's name."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _options(command)
        for param in command.params:
            yield name, param


def _bounded() -> list[tuple[str, str, str]]:
    found = []
    for command, param in _options(typer.main.get_command(app)):
        bound = getattr(param.callback, "bound", None)
        if bound is not None:
            found.append((command, param.opts[0], bound))
    return found


def test_every_bounded_option_names_a_bounds_type() -> None:
    found = _bounded()
    assert len(found) > 20  # optimize's, confirm's, bench's, estimate's, the backend flags'
    assert ("optimize", "--seed", "Seed") in found
    assert ("optimize", "--ready-timeout", "Seconds") in found
    for command, flag, bound in found:
        assert hasattr(bounds, bound), f"{command} {flag}: no bounds.{bound}"


@pytest.mark.parametrize(
    ("flag", "high"),
    [("--seed", limits.MAX_SEED), ("--trials", limits.MAX_TRIALS)],
)
def test_a_bound_quoted_in_help_is_the_one_enforced(flag: str, high: int) -> None:
    runner = CliRunner(env={"COLUMNS": "1000", "TERMINAL_WIDTH": "1000"})
    assert f"to {high}" in runner.invoke(app, ["optimize", "--help"]).stdout
    refused = runner.invoke(app, ["optimize", flag, str(high + 1), "--plan"])
    assert refused.exit_code == 2
    assert f"{flag} {high + 1}: must be at most {high}" in refused.stderr
