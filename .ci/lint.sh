#!/usr/bin/env bash
# Style gates: ruff (lint and format), mypy --strict on tuner/, the tests and benchmarks/ (one
# call: the files are in pyproject's [tool.mypy]), and the docs build.
set -euo pipefail
cd "$(dirname "$0")/.."

ruff check .
ruff format --check .
mypy
# The docs site: a broken link, a page missing from nav or a stale API name fails it.
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet  # the variable: no end-of-life notice
