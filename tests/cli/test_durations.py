"""``--time-budget``'s durations: what a user types, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.cli.durations import parse_duration

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "seconds"), [("2h", 7200), ("90m", 5400), ("1h30m", 5400), ("45s", 45), ("600", 600)]
)
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_budget_past_a_week_is_one_line_and_exit_2(tmp_path: Path) -> None:
    assert parse_duration("168h") == 7 * 24 * 3600
    result = runner.invoke(
        app,
        ["optimize", "--backend", "sim", "--plan", "--time-budget", "99999999999999h"],
        env={"SPECTUNE_OPTIMIZE_STUDIES_DIR": str(tmp_path)},
    )
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--time-budget '99999999999999h': at most 168h" in line
