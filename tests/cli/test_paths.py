"""Paths on the command line are absolute once parsed: a study run from any folder, with the
default relative ``--studies-dir studies``, names its files by absolute paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.study.paths import absolute_storage

runner = CliRunner()


def test_the_default_studies_folder_is_absolute_from_where_the_command_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["optimize", "--backend", "sim", "--trials", "2", "--confirm-top", "0", "--json"]
    result = runner.invoke(app, [*args, "--study", "here"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["storage"] == f"sqlite:///{tmp_path / 'studies' / 'here.db'}"
    assert data["best_yaml"] == str(tmp_path / "studies" / "here" / "best.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # another folder finds it through the absolute path
    studies = str(tmp_path / "studies")
    found = runner.invoke(app, ["export", "here", "--studies-dir", studies, "--json"])
    assert found.exit_code == 0, found.stderr
    assert json.loads(found.stdout)["source"] == "simulated"


def test_a_relative_sqlite_storage_is_absolute_and_other_urls_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_storage("sqlite:///db/x.db") == f"sqlite:///{tmp_path / 'db' / 'x.db'}"
    assert absolute_storage("sqlite:////srv/x.db") == "sqlite:////srv/x.db"
    assert absolute_storage("sqlite:///:memory:") == "sqlite:///:memory:"
    pg = "postgresql+psycopg://user:secret@db.example/spectune"
    assert absolute_storage(pg) == pg  # the password kept: it is the URL to connect with
    assert absolute_storage("not a url") == "not a url"  # open_storage refuses it, in one line
    args = ["optimize", "--backend", "sim", "--trials", "1", "--confirm-top", "0", "--json"]
    result = runner.invoke(app, [*args, "--storage", "sqlite:///db/x.db", "--study", "s"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["storage"] == f"sqlite:///{tmp_path / 'db' / 'x.db'}"


def test_paths_in_output_are_printed_as_written(tmp_path: Path) -> None:
    """Rich would take "[ray]" in a folder name for a style tag and print "st"."""
    folder = tmp_path / "st[ray]"
    args = ["optimize", "--backend", "sim", "--trials", "1", "--confirm-top", "0"]
    result = runner.invoke(app, [*args, "--studies-dir", str(folder), "--study", "b"])
    assert result.exit_code == 0, result.stderr
    assert f"Wrote {folder / 'b' / 'best.yaml'} (vllm serve --config)" in result.stdout
    listed = CliRunner(env={"COLUMNS": "300"}).invoke(
        app, ["studies", "--studies-dir", str(folder)]
    )
    assert str(folder) in listed.stdout
