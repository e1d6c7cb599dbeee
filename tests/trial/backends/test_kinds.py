"""What a study asks of a backend besides running it, asked of its kind, never of its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.results import Source
from tuner.trial.backends import BACKENDS, BackendKind, backend_factory


def test_each_kind_names_its_backend_and_says_where_its_numbers_come_from() -> None:
    assert BACKENDS == ("sim", "process", "docker")
    for name in BACKENDS:
        kind = BackendKind.parse(name)
        assert kind == name  # stored and compared as its name
        assert callable(backend_factory(name))
        assert kind.on_gpus is (kind.source is Source.MEASURED)
    assert BackendKind.SIM.source is Source.SIMULATED and not BackendKind.SIM.on_gpus


def test_an_unknown_backend_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"^unknown backend 'cloud': choose one of sim, process, docker$"
    ):
        BackendKind.parse("cloud")


def test_no_module_outside_the_backends_compares_a_backend_by_its_name() -> None:
    """A new backend is one kind in tuner/trial/backends/, not a hunt for string tests."""
    root = Path(__file__).parents[3] / "tuner"
    names = "|".join(BACKENDS)
    compared = re.compile(
        rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)|in\s*[(\[{{][^)\]}}]*["']({names})["']"""
    )
    found = [
        f"{path.relative_to(root.parent)}:{number}: {line.strip()}"
        for path in root.rglob("*.py")
        if "trial/backends" not in path.as_posix()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if compared.search(line)
    ]
    assert found == []
