"""R28: ``list_jobs`` and ``count_jobs``, what ``jobpool jobs list`` shows: the newest
first, by name, queue, status and chain, each read through an index (PostgreSQL's
plans are read over 100 000 analyzed rows in tests/contract/test_pg_plans.py)."""
from __future__ import annotations

import itertools
import time

import pytest

import jobpool
from jobpool.store.sqlite import statements as sql
from jobpool.store.rows import LISTED_STATUSES
from jobpool.store.sqlite.store import SQLiteStore


def test_list_jobs_newest_first_by_queue_and_name_and_count_them(any_store):
    old = list(any_store.enqueue_many("l.one", [(n,) for n in range(5)]).ids)
    reports = list(any_store.enqueue_many("l.two", [(n,) for n in range(3)], queue="reports").ids)
    later = any_store.enqueue_with("l.one", args=[9], delay=3600).id
    assert [j["id"] for j in any_store.list_jobs(limit=3, newest_first=True)] == [
        later, reports[2], reports[1]]
    assert [j["id"] for j in any_store.list_jobs(limit=3)] == old[:3]  # the library's default
    assert [j["id"] for j in any_store.list_jobs(queue="reports", newest_first=True)] == \
        reports[::-1]
    assert [j["id"] for j in any_store.list_jobs(name="l.one", status="ready", limit=2,
                                                 newest_first=True)] == old[:-3:-1]
    assert [j["id"] for j in any_store.list_jobs(name="l.one", status="scheduled")] == [later]
    assert any_store.count_jobs(at_most=100) == 9
    assert any_store.count_jobs(at_most=4) == 4  # counting stops there
    assert any_store.count_jobs(name="l.one", at_most=100) == 6
    assert any_store.count_jobs(queue="reports", name="l.one", at_most=100) == 0
    assert any_store.count_jobs(status="scheduled", at_most=100) == 1


def test_list_jobs_pages_by_keyset_past_rows_that_came_since(any_store):
    """R28: ``after`` the last id shown, the next page holds the jobs below it (above
    it oldest first), with every filter; jobs enqueued meanwhile shift no page."""
    ones = list(any_store.enqueue_many("l.one", [(n,) for n in range(7)]).ids)
    twos = list(any_store.enqueue_many("l.two", [(n,) for n in range(3)], queue="reports").ids)
    newest = ones + twos
    pages, after = [], None
    while True:
        page = any_store.list_jobs(limit=4, newest_first=True, after=after)
        if not page:
            break
        pages.append([j["id"] for j in page])
        after = page[-1]["id"]
        any_store.enqueue_with("l.late")  # above every cursor: never listed below
    assert pages == [newest[:-5:-1], newest[-5:-9:-1], newest[-9::-1]]
    assert [j["id"] for j in any_store.list_jobs(name="l.one", limit=3, newest_first=True,
                                                 after=ones[4])] == ones[3::-1][:3]
    assert [j["id"] for j in any_store.list_jobs(queue="reports", after=twos[0])] == twos[1:]
    assert [j["id"] for j in any_store.list_jobs(status="ready", limit=2, newest_first=True,
                                                 after=twos[0])] == [ones[6], ones[5]]
    assert [j["id"] for j in any_store.list_jobs(chain=ones[0], after=ones[0])] == []
    assert any_store.count_jobs(name="l.one", after=ones[2], newest_first=True, at_most=100) == 2
    assert any_store.count_jobs(name="l.one", after=ones[2], at_most=100) == 4
    dead = any_store.enqueue_many("l.gone", [(n,) for n in range(3)]).ids
    for job_id in dead:
        any_store.cancel(job_id)
    assert [j["id"] for j in any_store.list_jobs(status="dead", newest_first=True,
                                                 after=dead[2])] == [dead[1], dead[0]]


def test_every_listing_of_sqlite_reads_through_an_index(tmp_path):
    """Any filter (a status, a name, a queue, a chain, or several), and any next page
    (``after``, a keyset), is served by an index: the plan has no ``SCAN jobs``. With
    no filter at all, the listing walks the table's own id order and stops at its
    limit, and the count stops at its cap; a next page of it searches the id order
    from its keyset on."""
    store = jobpool.connect(tmp_path / "jobs.db")
    try:
        for status, name, queue, chain, after in itertools.product(
                [None, *LISTED_STATUSES], [None, "l.one"], [None, "reports"], [None, 7],
                [None, 50]):
            where, params = SQLiteStore._listing(status, name, queue, chain, time.time(),
                                                 after=after, newest_first=True)
            index = SQLiteStore._index(status, name, queue, chain, {})  # as the store reads
            for statement, bound in ((sql.list_jobs(where, newest_first=True, index=index),
                                      {"limit": 100}),
                                     (sql.count_jobs(where, index), {"most": 1000})):
                plan = [row[3] for row in store.conn.execute("EXPLAIN QUERY PLAN " + statement,
                                                             dict(params, **bound))]
                # Running rows are read from all of ``jobs_leases``: as many as the slots.
                scans = [step for step in plan if step.startswith("SCAN jobs")
                         and step != "SCAN jobs USING INDEX jobs_leases"]
                if (status, name, queue, chain, after) == (None, None, None, None, None):
                    assert all(step == "SCAN jobs" or "COVERING INDEX" in step and "LIMIT" in
                               statement for step in scans), plan
                else:
                    assert not scans, (status, name, queue, chain, after, plan)
    finally:
        store.close()


def test_an_older_sqlite_store_gets_the_listing_indexes_when_upgraded(tmp_path):
    import sqlite3
    path = tmp_path / "old.db"
    jobpool.connect(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX jobs_name")
    conn.execute("DROP INDEX jobs_queue")
    conn.execute("ALTER TABLE jobs DROP COLUMN meta")  # schema 5 had none (R54 added it)
    for column, _field in sql.DONE_LINE_HERE:  # nor a success's line (R61)
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    conn.execute("UPDATE jobpool_meta SET value = '5' WHERE key = 'schema'")
    conn.commit()
    conn.close()
    jobpool.connect(path).close()
    conn = sqlite3.connect(path)
    try:
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"jobs_name", "jobs_queue"} <= indexes
        assert conn.execute("SELECT value FROM jobpool_meta WHERE key = 'schema'").fetchone() == (sql.SCHEMA_VERSION,)
    finally:
        conn.close()


@pytest.mark.parametrize("filters, named", [
    ({"name": "a\x00"}, "the name filter"), ({"name": "a\udcff"}, "the name filter"),
    ({"name": "l.one", "key": "k\x00"}, "the key filter"),
    ({"group": "g\x00", "newest_first": True}, "the group filter"),
    ({"error": "e\udcff", "newest_first": True}, "the error filter"),
    ({"args": "a\x00", "newest_first": True}, "the args filter"),
    ({"meta": {"k": "v\x00"}, "newest_first": True}, "the meta 'k' filter"),
])
def test_a_text_filter_no_store_can_compare_is_refused_alike(any_store, filters, named):
    # A NUL (PostgreSQL's text holds none: a StoreError there, nothing on SQLite) and a
    # lone surrogate (a raw UnicodeEncodeError on both) are a ValueError naming the filter.
    with pytest.raises(ValueError, match=named):
        any_store.list_jobs(**filters)
