"""A PostgreSQL store made by an earlier release is brought up to date in place by the
commands that may write, and refused, with the command that upgrades it, by those
that only read (as SQLite's, tests/test_migrations.py); a newer revision that only
added things is used as it is, so old and new pools share a store during a rolling
restart."""
from __future__ import annotations

import psycopg
import pytest

import jobpool
from jobpool.errors import NotAStoreError
from jobpool.store.postgres import statements as pg_sql
def _meta(pg_url, *statements):
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        for statement in statements:
            conn.execute(statement)
        return dict(conn.execute("SELECT key, value FROM jobpool_meta").fetchall())


def _as_revision_1(pg_url):
    """What the first PostgreSQL release made: no queues table, one version key."""
    jobpool.connect(pg_url).close()
    _meta(pg_url, "DROP TABLE jobpool_queues", "DELETE FROM jobpool_meta WHERE key = 'revision'")


def test_a_revision_1_store_is_upgraded_by_a_writer_and_refused_by_a_reader(pg_url):
    _as_revision_1(pg_url)
    with pytest.raises(NotAStoreError, match="schema version 1; this jobpool reads version "
                                             f"{pg_sql.SCHEMA_VERSION}: jobpool start"):
        jobpool.connect(pg_url, readonly=True)
    store = jobpool.connect(pg_url, create=False)  # pause, stop, scale... upgrade too
    assert store.pause("reports") and store.paused_queues() == ["reports"]
    store.close()
    # the key the first release checks still says 1: its pools go on using the store
    assert _meta(pg_url) == {"schema": pg_sql.READABLE_FROM, "revision": pg_sql.SCHEMA_VERSION}
    reader = jobpool.connect(pg_url, readonly=True)
    assert reader.paused_queues() == ["reports"]
    reader.close()


def test_a_newer_revision_is_used_unless_it_needs_a_newer_jobpool(pg_url):
    jobpool.connect(pg_url).close()
    _meta(pg_url, "UPDATE jobpool_meta SET value = '99' WHERE key = 'revision'")
    store = jobpool.connect(pg_url)  # revision 99 says revision 1 can still use it
    assert store.enqueue("c.job").id
    store.close()
    _meta(pg_url, "UPDATE jobpool_meta SET value = '98' WHERE key = 'schema'")
    with pytest.raises(NotAStoreError, match="schema version 99, which needs at least version "
                                             "98; this jobpool reads version"):
        jobpool.connect(pg_url)
