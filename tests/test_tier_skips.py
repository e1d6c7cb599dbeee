"""Each marked tier skips, as docs/contributors/testing.md says, on a machine without its
component (outside CI).

Each tier runs in a pytest of its own with the component hidden: Ray made unimportable, the
Docker Engine, the vLLM build and PostgreSQL pointed at nothing. Every test must end skipped,
none errored: the ray tier's module-scoped cluster once started containers before its skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Runs pytest with the modules named in SPECTUNE_TEST_HIDE made unimportable.
_BOOT = (
    "import os, sys\n"
    "for name in filter(None, os.environ['SPECTUNE_TEST_HIDE'].split(',')):\n"
    "    sys.modules[name] = None\n"
    "import pytest\n"
    "raise SystemExit(pytest.main(sys.argv[1:]))\n"
)
NOWHERE = {
    "DOCKER_HOST": "unix:///nonexistent/docker.sock",
    "SPECTUNE_VLLM_VENV": "/nonexistent/vllm-venv",
    "SPECTUNE_TEST_PG_URL": "postgresql+psycopg://nobody:none@127.0.0.1:1/none",
}


@pytest.mark.parametrize(
    ("tier", "path", "hide"),
    [
        ("ray", "tests/study/cluster/test_cluster.py", "ray"),
        ("docker", "tests/launch/docker/test_launcher.py", ""),
        ("vllm", "tests/e2e/test_study_real_vllm.py", ""),
        ("postgres", "tests/study/test_workers_postgres.py", ""),
    ],
)
def test_a_tier_without_its_component_skips(tier: str, path: str, hide: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | NOWHERE
    env["SPECTUNE_TEST_HIDE"] = hide
    argv = [sys.executable, "-c", _BOOT, "-q", "-p", "no:cacheprovider", "-n", "0", "--setup-show"]
    argv += ["-m", tier, path]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.fullmatch(r"=* ?\d+ skipped(, \d+ deselected)? in [\d.]+s.*", summary), summary
    # Before any fixture: the ray tier's module-scoped cluster started three containers first.
    assert " M cluster" not in done.stdout
