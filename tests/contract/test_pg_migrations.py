"""A PostgreSQL store made by an earlier release is brought up to date in place by the
commands that may write, and refused, with the command that upgrades it, by those
that only read (as SQLite's, tests/test_migrations.py); a newer revision that only
added things is used as it is, so old and new pools share a store during a rolling
restart."""
from __future__ import annotations

import time

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


def _indexes(pg_url, table="jobs"):
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        return {name for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema, table))}


def test_the_running_rows_expiry_index_is_dropped_and_leases_are_still_reclaimed(pg_url):
    """Issue 25: a store from before the step that drops ``jobs_leases`` loses it when
    a writer opens it, and an expired lease is still found (R23) through ``jobs_owners``."""
    step = next(n for n, statements in pg_sql.STEPS.items()
                if pg_sql.DROP_LEASE_INDEX in statements)
    store = jobpool.connect(pg_url)
    job = store.enqueue("c.job")
    store.close()
    assert "jobs_leases" not in _indexes(pg_url)  # a new store never has it
    _meta(pg_url, "CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status = 'running'",
          f"UPDATE jobpool_meta SET value = '{step - 1}' WHERE key = 'revision'",
          "UPDATE jobs SET status = 'running', lease_owner = 'gone-host:1:1', attempts = 1, "
          "started_at = 1, lease_expires_at = 2")
    store = jobpool.connect(pg_url)
    assert _meta(pg_url)["revision"] == pg_sql.SCHEMA_VERSION
    assert "jobs_leases" not in _indexes(pg_url) and "jobs_owners" in _indexes(pg_url)
    claimer = store.claimer("host:1:1", ("c.job",), ("default",), {})
    assert [settled[0] for settled in claimer.reclaim(time.time())] == [job.id]
    claimer.close()
    assert store.get(job.id)["status"] == "ready"
    store.close()


def test_a_revision_12_store_gets_the_cancel_index_and_a_cancel_still_reaches_its_pool(pg_url):
    """R31 (revision 14): a store made before ``jobs_cancels`` gains it when a writer
    opens it, and a cancel asked before the upgrade still reaches the pool running the
    job through it; an expired lease is still taken back (R23)."""
    step = next(n for n, statements in pg_sql.STEPS.items()
                if pg_sql.CREATE_CANCEL_INDEX in statements)
    store = jobpool.connect(pg_url)
    expired = store.enqueue("c.job")
    cancelled = store.enqueue("c.job")
    store.close()
    _meta(pg_url, "DROP INDEX jobs_cancels",
          f"UPDATE jobpool_meta SET value = '{step - 2}' WHERE key = 'revision'",
          "UPDATE jobs SET status = 'running', lease_owner = 'gone-host:1:1', attempts = 1, "
          f"started_at = 1, lease_expires_at = 2 WHERE id = {expired.id}",
          "UPDATE jobs SET status = 'running', lease_owner = 'host:1:1', attempts = 1, "
          f"started_at = 1, lease_expires_at = 1e12, cancel_requested = 1 "
          f"WHERE id = {cancelled.id}")
    assert "jobs_cancels" not in _indexes(pg_url)
    store = jobpool.connect(pg_url)
    try:
        assert _meta(pg_url)["revision"] == pg_sql.SCHEMA_VERSION
        assert {"jobs_owners", "jobs_cancels"} <= _indexes(pg_url)
        claimer = store.claimer("host:1:1", ("c.job",), ("default",), {})
        assert [settled[0] for settled in claimer.reclaim(time.time())] == [expired.id]
        claimer.close()
        assert store.get(expired.id)["status"] == "ready"
        schema = pg_url.rsplit("schema=", 1)[1]
        with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
            conn.execute(f"SET search_path TO {schema}")
            assert conn.execute(pg_sql.CANCELS_FOR_OWNER,
                                {"owner": "host:1:1"}).fetchall() == [(cancelled.id, 1)]
    finally:
        store.close()


def test_a_revision_8_store_gets_the_chain_indexes_and_lists_a_chain(pg_url):
    """R47: a writer upgrading a revision 8 store adds the chain indexes of ``jobs`` and
    ``finished_jobs``; a chain's steps in either table are listed in order."""
    jobpool.connect(pg_url).close()
    _meta(pg_url, "DROP INDEX jobs_chain, finished_jobs_chain",
          "UPDATE jobpool_meta SET value = '8' WHERE key = 'revision'",
          "INSERT INTO jobs (id, queue, name, payload, serializer, priority, status, run_at,"
          " line_at, created_at, chain_root) SELECT n, 'default', 'c.step', '[[],{}]', 'json',"
          " 0, 'ready', 0, 0, 0, CASE WHEN n > 10 THEN 10 END FROM generate_series(10, 20) n",
          "INSERT INTO finished_jobs (id, queue, name, payload, serializer, priority, status,"
          " run_at, line_at, attempts, crashes, deferrals, created_at, finished_at, chain_root)"
          " SELECT n, 'default', 'c.step', '[[],{}]', 'json', 0, 'done', 0, 0, 1, 0, 0, 0, 1,"
          " CASE WHEN n % 2 = 1 THEN 10 END FROM generate_series(21, 30) n")
    assert "jobs_chain" not in _indexes(pg_url)
    store = jobpool.connect(pg_url)
    try:
        assert _meta(pg_url)["revision"] == pg_sql.SCHEMA_VERSION
        assert "jobs_chain" in _indexes(pg_url)
        assert "finished_jobs_chain" in _indexes(pg_url, "finished_jobs")
        assert [j["id"] for j in store.list_jobs(chain=10)] == [*range(10, 21), *range(21, 31, 2)]
        assert [j["id"] for j in store.list_jobs(chain=10, after=21, newest_first=True,
                                                 limit=2)] == [20, 19]
    finally:
        store.close()


def test_a_revision_10_store_gets_the_status_and_batch_indexes_in_id_order(pg_url):
    """R47 (issue 27): a writer upgrading a revision 10 store adds the indexes of a
    finished status's rows, of the ready rows by due time and of a batch's rows in id
    order, and drops the batch indexes they replace; a batch's and a status's rows
    are listed as before."""
    step = next(n for n, statements in pg_sql.STEPS.items()
                if pg_sql.DROP_OLD_MEMBERS_INDEXES in statements)
    store = jobpool.connect(pg_url)
    with store.batch() as made:
        for n in range(3):
            made.add(jobpool.Signature("c.member", (n,)))
    late = store.enqueue_with("c.late", delay=3600)
    store.close()
    _meta(pg_url, "DROP INDEX finished_jobs_done, finished_jobs_dead, jobs_ready_due, "
                  "jobs_batch_ids, finished_jobs_batch_ids",
          "CREATE INDEX jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL",
          "CREATE INDEX finished_jobs_batch ON finished_jobs (batch_id, status)"
          " WHERE batch_id IS NOT NULL",
          f"UPDATE jobpool_meta SET value = '{step - 1}' WHERE key = 'revision'")
    store = jobpool.connect(pg_url)
    try:
        assert _meta(pg_url)["revision"] == pg_sql.SCHEMA_VERSION
        live, finished = _indexes(pg_url), _indexes(pg_url, "finished_jobs")
        assert {"jobs_ready_due", "jobs_batch_ids"} <= live and "jobs_batch" not in live
        assert {"finished_jobs_done", "finished_jobs_dead", "finished_jobs_batch_ids"} \
            <= finished and "finished_jobs_batch" not in finished
        assert [j["id"] for j in store.list_jobs(batch=made.id, newest_first=True)] == sorted(
            (j["id"] for j in store.list_jobs(batch=made.id)), reverse=True)
        assert len(store.list_jobs(batch=made.id)) == 3
        assert [j["id"] for j in store.list_jobs(status="scheduled")] == [late.id]
        assert store.batch_status(made.id).pending == 3
    finally:
        store.close()


def test_every_step_runs_twice_on_a_store_that_has_it(pg_url):
    """An upgrade runs the store's own revision's step again (a build made while the
    revision was being written labelled stores with it before its step was whole), so
    each step must be harmless on a store that already holds it, jobs included."""
    store = jobpool.connect(pg_url)
    handle = store.enqueue_with("t.kept", args=[1], key="k")
    store.close()
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        for step, statements in sorted(pg_sql.STEPS.items()):
            with conn.transaction():
                for statement in statements:
                    conn.execute(statement)
    store = jobpool.connect(pg_url)
    try:
        row = store.get(handle.id)
        assert (row["name"], row["status"], row["key"]) == ("t.kept", "ready", "k")
    finally:
        store.close()
