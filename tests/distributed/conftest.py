"""A real PostgreSQL server for the distributed tier (``.ci/services.sh`` starts one)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import optuna
import pytest
import sqlalchemy

DEFAULT_URL = "postgresql+psycopg://spectune:spectune@127.0.0.1:5432/spectune"


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get("SPECTUNE_TEST_PG_URL", DEFAULT_URL)
    try:
        engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect():
            pass
        engine.dispose()
    except Exception as exc:  # any reason the server is not usable
        if os.environ.get("CI"):
            pytest.fail(
                f"PostgreSQL is required in CI but not reachable at {url}: {exc}", pytrace=False
            )
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    return url


@pytest.fixture
def pg_storage(pg_url: str) -> Iterator[optuna.storages.RDBStorage]:
    """One storage for the test's own reads, closed afterwards (no leaked connections)."""
    storage = optuna.storages.RDBStorage(pg_url)
    yield storage
    storage.engine.dispose()
