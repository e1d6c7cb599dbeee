"""The distributed tier's storage on the real PostgreSQL server (``pg_url``: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import optuna
import pytest


@pytest.fixture
def pg_storage(pg_url: str) -> Iterator[optuna.storages.RDBStorage]:
    """One storage for the test's own reads, closed afterwards (no leaked connections)."""
    storage = optuna.storages.RDBStorage(pg_url)
    yield storage
    storage.engine.dispose()
