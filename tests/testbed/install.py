"""spectune as a user installs it: built from a copy of this checkout, as a release builds it.

No network: ``python -m build --no-isolation`` builds with the project venv's own setuptools
(the ``dev`` extra pins what ``[build-system]`` asks for), and a venv of its own gets the
result with ``pip install --no-deps --no-index``; its dependencies come from the project venv
through a ``.pth`` file (site-packages' own ``.pth`` files, such as this checkout's editable
install, are not read from such a path, so ``import tuner`` finds the installed copy only).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = ["RELEASE_INPUTS", "build_release", "copy_checkout", "install_checkout"]

ROOT = Path(__file__).resolve().parents[2]
# What a release is built from (pyproject.toml's packages and package data, and the README it
# takes as the long description); tests, benchmarks and CI scripts are not shipped.
RELEASE_INPUTS = ("pyproject.toml", "README.md", "tuner", "search_spaces")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def copy_checkout(dest: Path) -> Path:
    """The release inputs of this checkout, copied to ``dest`` (a build writes into its source)."""
    dest.mkdir(parents=True)
    for name in RELEASE_INPUTS:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=_IGNORED)
        else:
            shutil.copy2(source, dest / name)
    return dest


def build_release(dest: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it, as ``python -m build`` makes them for a release.

    Raises:
        AssertionError: the build failed; its output is in the message.
    """
    source = copy_checkout(dest / "source")
    out = dest / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout}\n{done.stderr}"
    (sdist,) = out.glob("spectune-*.tar.gz")
    (wheel,) = out.glob("spectune-*.whl")
    return sdist, wheel


def install_checkout(dest: Path) -> Path:
    """README's ``pip install .`` from a copy of this checkout, into a venv of its own (offline:
    ``--no-deps --no-index --no-build-isolation``); returns the venv's ``bin`` folder."""
    venv = dest / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    target = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (target / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = copy_checkout(dest / "checkout")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    offline = ["--no-deps", "--no-index", "--no-build-isolation", "--quiet"]
    done = subprocess.run(
        [*pip, *offline, "."], cwd=source, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"pip install . failed:\n{done.stdout}\n{done.stderr}"
    return venv / "bin"
