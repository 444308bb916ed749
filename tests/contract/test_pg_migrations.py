"""A PostgreSQL store made by an earlier release is brought up to date in place by the
commands that write, and refused, with the command that upgrades it, by those that only
read (as SQLite's, tests/test_migrations.py)."""
from __future__ import annotations

import psycopg
import pytest

import jobpool
from jobpool.errors import NotAStoreError
from jobpool.store import pg_sql


def _as_schema_1(pg_url):
    """Turn a fresh store into what the first PostgreSQL release made: no queues table."""
    jobpool.connect(pg_url).close()
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"DROP TABLE {schema}.jobpool_queues")
        conn.execute(f"UPDATE {schema}.jobpool_meta SET value = '1' WHERE key = 'schema'")


def test_a_schema_1_store_is_upgraded_by_a_writer_and_refused_by_a_reader(pg_url):
    _as_schema_1(pg_url)
    with pytest.raises(NotAStoreError, match="schema version 1; this jobpool reads version "
                                             f"{pg_sql.SCHEMA_VERSION}: jobpool start"):
        jobpool.connect(pg_url, readonly=True)
    store = jobpool.connect(pg_url)  # a writer upgrades, under the migration lock
    assert store.pause("reports") and store.paused_queues() == ["reports"]
    store.close()
    reader = jobpool.connect(pg_url, readonly=True)
    assert reader.paused_queues() == ["reports"]
    reader.close()


def test_a_store_newer_than_this_jobpool_is_refused(pg_url):
    jobpool.connect(pg_url).close()
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"UPDATE {schema}.jobpool_meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(NotAStoreError, match="schema version 99; this jobpool reads version"):
        jobpool.connect(pg_url)
