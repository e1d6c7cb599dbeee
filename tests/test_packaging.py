"""What `pip install .` and a release install: every package of tuner/ and its data files."""

from __future__ import annotations

import tarfile
import tomllib
import zipfile
from pathlib import Path

import tuner
from tests.testbed.install import build_release

ROOT = Path(__file__).resolve().parents[1]
VERSION = tuner.__version__


def test_pyproject_lists_every_package() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "tuner").rglob("__init__.py")
    }
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_the_release_builds_and_ships_its_spaces_and_data(tmp_path: Path) -> None:
    """The sdist and the wheel built from it, as ``python -m build`` makes a release: the wheel
    holds every module, the shipped spaces, the GPU catalog and py.typed, and runs spectune."""
    sdist, wheel = build_release(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
        metadata = archive.read(f"spectune-{VERSION}.dist-info/METADATA").decode()
        entry_points = archive.read(f"spectune-{VERSION}.dist-info/entry_points.txt").decode()
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "tuner").rglob("*.py")}
    spaces = {f"tuner/search_spaces/{p.name}" for p in (ROOT / "search_spaces").glob("*.yaml")}
    assert len(spaces) >= 5 and "tuner/search_spaces/default.yaml" in spaces
    data = {"tuner/catalog/gpus.yaml", "tuner/py.typed"}
    assert modules | spaces | data <= shipped, sorted(modules | spaces | data - shipped)
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in shipped)
    assert "spectune = tuner.cli:app" in entry_points
    # What twine check reads: the README as the long description, rendered as Markdown.
    assert "Description-Content-Type: text/markdown" in metadata
    assert "## Quick start on a GPU host" in metadata
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "search_spaces/default.yaml"} <= names
    assert "tuner/catalog/gpus.yaml" in names
