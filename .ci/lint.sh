#!/usr/bin/env bash
# Style gates: ruff (lint and format) and mypy, strict on tuner/ and on the tests.
# The test folders are checked one by one: each has its own conftest.py and helper modules that
# pytest puts on sys.path (rootdir-relative imports), which one mypy run would see as duplicates.
set -euo pipefail
cd "$(dirname "$0")/.."

ruff check .
ruff format --check .
mypy
mypy --strict tests/*.py benchmarks/*.py
for folder in tests/*/; do
    [[ "$(basename "$folder")" == logs ]] && continue
    compgen -G "${folder}*.py" >/dev/null || continue
    MYPYPATH="$folder" mypy --strict "$folder"
done
