#!/usr/bin/env bash
# Style gates: ruff (lint and format), mypy --strict on tuner/ and on the tests, and the docs build.
set -euo pipefail
cd "$(dirname "$0")/.."

ruff check .
ruff format --check .
mypy
# The docs site: a broken link, a page missing from nav or a stale API name fails it.
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet  # the variable: no end-of-life notice

# The tests, folder by folder: each has its own conftest.py and helpers that pytest puts on
# sys.path. A folder that is a package (tests/sim/twin, tests/testbed) is imported as one, so only
# tests/ goes on the path for it, not the folder itself (its scripts' sibling imports stay
# unresolved, as pytest never imports them). benchmarks/ is on the path too: tests/sim/twin imports
# worlds from there.
status=0
mypy --strict tests/*.py benchmarks/*.py || status=1
for folder in tests/*/; do
    [[ "$(basename "$folder")" == logs ]] && continue
    compgen -G "${folder}*.py" >/dev/null || continue
    path="$folder:tests:benchmarks"
    [[ -f "${folder}__init__.py" ]] && path="tests:benchmarks"
    MYPYPATH="$path" mypy --strict "$folder" || status=1
done
exit "$status"
