"""R69 (issue 28, item 5): ``Handle.result`` told of the job's end where the store can
tell. On PostgreSQL a waiter LISTENs and marks its job; whatever finishes a marked row
notifies its id at commit, and a row nobody waits for notifies nothing. SQLite looks
again on a timer."""
from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest
from psycopg import sql as pgsql

import jobpool
from jobpool import job
from jobpool.store.postgres.connection import parse_url
from jobpool.testing import drain


@job(name="rw.answer", store_result=True)
def answer(n):
    return n * 2


def _listen_raw(url: str):
    """A connection of the test's own on the store's finished-jobs channel."""
    target = parse_url(url)
    conn = psycopg.connect(target.conninfo, autocommit=True)
    conn.execute(f"SET search_path TO {target.schema}")
    [(channel,)] = conn.execute("SELECT 'jobpool_' || left(encode(sha256(convert_to("
                                "current_schema(), 'UTF8')), 'hex'), 24) || '_done'").fetchall()
    conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
    return conn


def _told(conn, seconds: float = 0.5) -> list[str]:
    return [note.payload for note in conn.notifies(timeout=seconds)]


def _waiters(url: str) -> int:
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                            "'jobpool-result' AND datname = current_database()").fetchone()[0]


def test_only_a_waited_job_is_told_when_it_finishes(pg_url):
    """R69: a settle of rows nobody waits for sends nothing; the waited one is told,
    once, by the statement that finished it."""
    store = jobpool.connect(pg_url)
    raw = _listen_raw(pg_url)
    try:
        quiet = store.enqueue_with("rw.answer", args=[1]).id
        waited = store.enqueue_with("rw.answer", args=[2]).id
        waiter = store.finish_waiter(waited, poll=60)
        try:
            drain(store)
            assert waiter.wait(10) is True
        finally:
            waiter.close()
        assert _told(raw) == [str(waited)]
        assert store.get(quiet)["status"] == "done"
    finally:
        raw.close()
        store.close()


def test_a_cancelled_job_tells_its_waiter(pg_url):
    """R69: a ready job cancelled (R31) ends too: its waiter is told."""
    store = jobpool.connect(pg_url)
    try:
        handle = store.enqueue_with("rw.answer", args=[3], delay=3600)
        waiter = store.finish_waiter(handle.id, poll=60)
        try:
            store.cancel(handle.id)
            assert waiter.wait(10) is True
        finally:
            waiter.close()
    finally:
        store.close()


def test_result_returns_when_a_pool_finishes_the_job_and_leaves_no_connection(
        make_any_app, monkeypatch):
    """R69 through the API: ``result`` and ``aresult`` wait for a real pool's run, and
    close the waiter's connection when they return (PostgreSQL: none left over). The
    look on a timer is put past the test's timeout, so on PostgreSQL only the
    notification can end the waits."""
    from jobpool.store.postgres import finish_wait
    monkeypatch.setattr(finish_wait, "LOOK_AGAIN", 600.0)
    app = make_any_app("""
from jobpool import job

@job(name="rw.slow", store_result=True)
def slow(n):
    import time
    time.sleep(0.3)
    return n + 1
""")
    store = app.store()
    first = store.enqueue_with("rw.slow", args=[1])
    second = store.enqueue_with("rw.slow", args=[2])
    got: dict = {}
    waiting = threading.Thread(target=lambda: got.update(first=first.result(timeout=60)))
    waiting.start()
    pool = app.spawn("--procs", "1", "--burst")
    assert asyncio.run(second.aresult(timeout=60)) == 3
    waiting.join(60)
    assert got == {"first": 2}
    assert pool.wait(60) == 0
    if str(app.db).startswith("postgresql"):
        assert _waiters(str(app.db)) == 0
    store.close()


def test_a_cancelled_aresult_closes_its_waiter(pg_url):
    store = jobpool.connect(pg_url)
    handle = store.enqueue_with("rw.answer", args=[4], delay=3600)

    async def cancel_it():
        task = asyncio.create_task(handle.aresult())
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_it())
        assert _waiters(pg_url) == 0
    finally:
        store.close()


def test_sqlite_looks_again_on_a_timer(tmp_path):
    """R69: nothing tells a SQLite waiter; it waits its poll and looks again."""
    store = jobpool.connect(str(tmp_path / "s.db"))
    try:
        waiter = store.finish_waiter(store.enqueue_with("rw.answer", args=[5]).id, poll=0.01)
        assert waiter.told is False and waiter.wait(None) is False
        waiter.close()
    finally:
        store.close()


def test_many_async_waits_share_the_loop_not_its_threads(pg_url, monkeypatch):
    """R69: an ``aresult`` waits on the loop itself; twenty at once (more than the
    loop's executor has threads) are all told when their jobs end."""
    from jobpool.store.postgres import finish_wait
    monkeypatch.setattr(finish_wait, "LOOK_AGAIN", 600.0)
    store = jobpool.connect(pg_url)
    handles = [store.enqueue_with("rw.answer", args=[n]) for n in range(20)]

    async def wait_all():
        waits = [asyncio.create_task(h.aresult(timeout=60)) for h in handles]
        await asyncio.sleep(1.0)  # every wait has its waiter open
        await asyncio.to_thread(drain, store)
        return await asyncio.gather(*waits)

    try:
        assert asyncio.run(wait_all()) == [n * 2 for n in range(20)]
        assert _waiters(pg_url) == 0
    finally:
        store.close()


def test_a_zero_timeout_opens_no_waiter(any_store, monkeypatch):
    """R69: ``result(timeout=0)`` ("is it done?") answers from one look."""
    handle = any_store.enqueue_with("rw.answer", args=[6])

    def refuse(*args):
        raise AssertionError("a waiter was opened")
    monkeypatch.setattr(any_store, "finish_waiter", refuse)
    with pytest.raises(TimeoutError):
        handle.result(timeout=0)
    with pytest.raises(TimeoutError):
        asyncio.run(handle.aresult(timeout=0))
