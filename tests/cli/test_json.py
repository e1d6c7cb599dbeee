"""``--json`` prints JSON on standard output wherever a command offers it, errors included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tuner.cli import app

runner = CliRunner()
SPACE = ["--space", "qwen2.5-14b-awq-4090x1"]


def _offering_json(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        if any("--json" in getattr(p, "opts", ()) for p in command.params):
            yield (*path, name)
        if hasattr(command, "commands"):
            yield from _offering_json(command, (*path, name))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A studies folder with one simulated study, ``j``, confirmed once."""
    studies = tmp_path_factory.mktemp("studies")
    args = ["optimize", "--backend", "sim", *SPACE, "--trials", "3", "--study", "j"]
    made = runner.invoke(
        app, [*args, "--confirm-top", "1", "--confirm-repeats", "1", "--studies-dir", str(studies)]
    )
    assert made.exit_code == 0, made.stderr
    return studies


def _argv(folder: Path) -> dict[tuple[str, ...], list[str]]:
    """One run of each command that offers --json (an error is a run too: it must be JSON)."""
    where = ["--studies-dir", str(folder)]
    return {
        ("optimize",): ["--backend", "sim", "--study", "j", "--trials", "1", *where],
        ("studies",): where,
        ("report",): ["j", *where],
        ("export",): ["j", *where],
        ("confirm",): ["j", "--top", "1", "--repeats", "1", *where],
        ("estimate",): ["--hardware", "4090x1", "--model", "Qwen/Qwen2.5-14B-Instruct-AWQ"],
        ("calibrate",): ["--backend", "sim", *SPACE, *where],
        ("bench",): ["--url", "http://127.0.0.1:9", "--requests", "1"],  # nothing listens
        ("hardware",): [],
        ("hardware", "list"): [],
        ("hardware", "detect"): [],  # no NVIDIA driver here: an error, as JSON
        ("models",): [],
    }


def test_every_command_offering_json_prints_only_json(folder: Path) -> None:
    argv = _argv(folder)
    assert set(_offering_json(typer.main.get_command(app))) == set(argv)  # none forgotten
    for path, args in argv.items():
        result = runner.invoke(app, [*path, *args, "--json"])
        try:
            data = json.loads(result.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"spectune {' '.join(path)} --json printed {result.stdout[:300]!r}")
        if result.exit_code != 0:
            assert result.exit_code == 2 and set(data) == {"error"}, (path, data)
            assert data["error"] in result.stderr  # the one line a reader sees, too


def test_an_error_under_json_is_one_json_object_and_exit_code_2(folder: Path) -> None:
    result = runner.invoke(app, ["export", "missing", "--studies-dir", str(folder), "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error.startswith("no study 'missing' in sqlite:///") and "\n" not in error


def test_a_usage_error_under_json_is_json_too() -> None:
    # A misspelt flag or a value typer cannot convert is refused before the command runs.
    for path in _offering_json(typer.main.get_command(app)):
        result = runner.invoke(app, [*path, "--json", "--no-such-flag"])
        assert result.exit_code == 2, (path, result.output)
        error = json.loads(result.stdout)["error"]
        assert "--no-such-flag" in error and error in result.stderr, (path, error)
    bad_value = runner.invoke(app, ["optimize", "--json", "--trials", "many"])
    assert bad_value.exit_code == 2
    assert json.loads(bad_value.stdout)["error"].startswith("Invalid value for '--trials'")
