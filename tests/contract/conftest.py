"""One contract, every store: each test here runs against SQLite and PostgreSQL.

PostgreSQL comes from ``$JOBPOOL_TEST_PG`` (default the local server CI runs);
each test gets a schema of its own, dropped after it (``pg_url`` in tests/conftest.py). Without a server the
PostgreSQL half is skipped, unless ``JOBPOOL_REQUIRE_PG=1`` (CI sets it), which
makes a missing server a failure.
"""
from __future__ import annotations

import pytest

import jobpool


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    """Where a store lives: a file for SQLite, a URL with a fresh schema for PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "jobpool.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def any_store(store_url):
    store = jobpool.connect(store_url)
    yield store
    store.close()
