"""One contract, every store: each test here runs against SQLite and PostgreSQL.

PostgreSQL comes from ``$JOBPOOL_TEST_PG`` (default the local server CI runs);
each test gets a schema of its own, dropped after it. Without a server the
PostgreSQL half is skipped, unless ``JOBPOOL_REQUIRE_PG=1`` (CI sets it), which
makes a missing server a failure.
"""
from __future__ import annotations

import os
import uuid

import pytest

import jobpool

PG_URL = os.environ.get("JOBPOOL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_admin():
    try:
        import psycopg
        return psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # noqa: BLE001 - no driver or no server: skip or fail below
        if os.environ.get("JOBPOOL_REQUIRE_PG") == "1":
            pytest.fail(f"JOBPOOL_REQUIRE_PG=1 but PostgreSQL at {PG_URL} is not usable: {exc}")
        pytest.skip(f"no PostgreSQL at {PG_URL}: {exc}")


@pytest.fixture
def pg_url():
    """A PostgreSQL store URL with a fresh schema, dropped after the test."""
    admin = _pg_admin()
    schema = "jp_test_" + uuid.uuid4().hex[:12]
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}schema={schema}"
    finally:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()


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
