"""Fixtures for the result tests: one simulated study with several load levels, copied per test.

The study is built once per session (about 15 s) and each test gets its own copy of the
database, so tests that confirm or attach artifacts never see each other's writes. Headless
Chromium (Debian's ``/usr/bin/chromium``) renders the report and the dashboard; without it the
``browser`` tests skip, and in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.testbed.results import CHROMIUM, SPACE, STUDY, StudyCopy, build_study


@pytest.fixture(scope="session")
def levels_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("levels-study")
    build_study(folder, SPACE, trials=24)
    return folder


@pytest.fixture
def levels(levels_master: Path, tmp_path: Path) -> StudyCopy:
    """A fresh copy of the session's levels study (database and study folder)."""
    target = tmp_path / "studies"
    shutil.copytree(levels_master, target)
    return StudyCopy(target, STUDY)


@pytest.fixture
def chromium() -> Path:
    """Debian's headless Chromium; skips without it (fails in CI)."""
    if CHROMIUM.is_file():
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail(f"headless Chromium ({CHROMIUM}) is required in CI", pytrace=False)
    pytest.skip(f"headless Chromium not available at {CHROMIUM} (apt-get install chromium)")
