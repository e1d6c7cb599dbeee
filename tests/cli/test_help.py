"""``spectune --help`` and every command's help: the main command first, options in panels,
and every help text printed as written (Rich markup would eat "GPU[xCOUNT]")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tuner.cli import app
from tuner.cli.app import COMMAND_ORDER

# Wide enough that no help text wraps: each is then one run of text in the output.
runner = CliRunner(env={"COLUMNS": "1000", "TERMINAL_WIDTH": "1000"})


def _help(*path: str) -> str:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command under ``group`` with its path (typer builds on its own copy of click)."""
    for name, command in group.commands.items():
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def _plain(text: str) -> str:
    """Help as written, as a reader sees it: no code backticks, one space between words."""
    return " ".join(text.replace("`", "").split())


def test_optimize_comes_first_and_the_commands_follow_the_order_a_user_meets_them() -> None:
    listed = re.findall(r"^│ (\w+) ", _help().split("Commands")[1], re.MULTILINE)
    assert listed[0] == "optimize"
    assert listed == [name for name in COMMAND_ORDER if name in listed]
    assert set(listed) == set(COMMAND_ORDER)  # every command is placed


def test_optimize_groups_its_options_in_panels() -> None:
    text = _help("optimize")
    panels = re.findall(r"╭─ ([A-Za-z ]+?) ─", text)
    assert panels == ["Options", "Study", "Search space", "Backend", "Budget", "Output"]
    sections = dict(zip(panels, re.split(r"╭─ [A-Za-z ]+? ─", text)[1:], strict=True))
    expected = {
        "Study": ["--study", "--storage", "--studies-dir", "--sampler", "--seed"],
        "Search space": ["--hardware", "--space", "--slo-ttft-ms", "--vllm-version"],
        "Backend": ["--backend", "--gpus", "--image", "--docker-volume", "--ready-timeout"],
        "Budget": ["--trials", "--confirm-top", "--confirm-repeats", "--time-budget"],
        "Output": ["--plan", "--json"],
    }
    for panel, flags in expected.items():
        assert all(f"│ {flag} " in sections[panel] for flag in flags), panel


@pytest.mark.parametrize(
    ("path", "literal"),
    [
        (("optimize",), "GPUs as GPU[xCOUNT], e.g. 4090x2"),
        (("optimize",), "needs pip install 'spectune[ray]'"),
        (("optimize",), "extra HOST:CONTAINER[:ro] mount"),
    ],
)
def test_brackets_in_help_are_printed_as_written(path: tuple[str, ...], literal: str) -> None:
    assert literal in _help(*path)


def test_every_help_text_of_every_command_is_printed_as_written() -> None:
    root = typer.main.get_command(app)
    checked = 0
    for path, command in _commands(root):
        shown = _plain(_help(*path))
        texts = [command.help or ""] + [
            p.help for p in command.params if p.param_type_name == "option" and p.help
        ]
        for text in filter(None, texts):
            assert _plain(text) in shown, (path, text)
            checked += 1
    assert checked > 150  # every option of every command, not a handful
