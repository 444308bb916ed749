"""R26a: a bulk enqueue's commit leaves the copy of its WAL pages into the store to a live
pool's checkpointer, and copies them itself when no pool is live (or its disk is tight).
What is watched is where the pages are, the store file or only its WAL, never a time."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest

import jobpool
from jobpool.liveness import DEAD_AFTER
from jobpool.store.records import Heartbeat
from jobpool.store.sqlite import statements as sql
from jobpool.store.sqlite.checkpoint import RESTART_BYTES
from tests.conftest import wait_for

ROWS = 20_000  # well past BULK_ROWS, and past WAL_PRODUCER_PAGES of WAL


def _beat(store, at: float) -> None:
    """A pool's row in the store, its last beat at ``at``."""
    beat = Heartbeat(owner="host:1:1", host="host", pid=1, procs=2, queues=("other",),
                     names=("x.job",), core="test", counters_json="{}", slots_json="[]")
    store.heartbeat(beat, [], at)


def _file_pages(path) -> int:
    return os.path.getsize(path) // sql.PAGE_SIZE


@pytest.fixture
def beside(tmp_path):
    """``beside(at)``: a store whose one pool last beat at ``at`` (``time.time()`` if
    None), as ``(path, store)``; the store is closed after the test."""
    opened = []

    def make(at: float | None = None):
        path = tmp_path / "jobpool.db"
        store = jobpool.connect(path)
        opened.append(store)
        _beat(store, time.time() if at is None else at)
        return path, store
    yield make
    for store in opened:
        store.close()


def _bulk(store) -> None:
    store.enqueue_many("x.job", [(i,) for i in range(ROWS)])


def _copied(path, before: int) -> bool:
    """Whether a bulk's pages reached the store file (it grew by far more than a page)."""
    return _file_pages(path) > before + ROWS // 100


def test_a_bulk_enqueue_beside_a_live_pool_leaves_its_pages_in_the_wal(beside):
    path, store = beside()
    before = _file_pages(path)
    _bulk(store)
    assert _file_pages(path) == before  # not copied into the store by the producer
    assert os.path.getsize(f"{path}-wal") > sql.WAL_PRODUCER_PAGES * sql.PAGE_SIZE
    # The connection checkpoints its later commits as before.
    assert store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == sql.WAL_PRODUCER_PAGES
    assert store.stats()["ready"] == ROWS


def test_bulk_enqueues_one_after_another_never_pile_up_in_the_wal(beside):
    # The pool beats but has not copied the WAL (here it never checkpoints): the next
    # bulk finds more than RESTART_BYTES waiting and copies it into the store itself.
    path, store = beside()
    before = _file_pages(path)
    _bulk(store)
    assert _file_pages(path) == before
    assert os.path.getsize(f"{path}-wal") > RESTART_BYTES
    _bulk(store)
    assert _copied(path, before)


def test_a_bulk_enqueue_after_the_pool_copied_the_last_leaves_its_own_too(beside):
    # A WAL started over keeps its size: what decides is the frames not yet copied (the
    # wal-index's), so each bulk beside a pool that keeps up leaves its copy to it.
    path, store = beside()
    _bulk(store)
    assert os.path.getsize(f"{path}-wal") > RESTART_BYTES
    pool_side = sqlite3.connect(path)  # what the pool's checkpointer does
    assert pool_side.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0] == 0
    pool_side.close()
    before = _file_pages(path)
    assert os.path.getsize(f"{path}-wal") > RESTART_BYTES  # the file kept its size
    _bulk(store)
    assert _file_pages(path) == before  # left to the pool again


def test_a_bulk_enqueue_beside_a_pool_opens_none_of_the_stores_files(beside, monkeypatch):
    # R42: a descriptor of ours on the store's files, closed, drops every lock SQLite
    # holds on them in this process. What a bulk asks of the WAL goes through SQLite.
    import builtins
    path, store = beside()
    opened: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def watched_open(file, *args, **kwargs):
        opened.append(os.fspath(file) if isinstance(file, (str, os.PathLike)) else "")
        return real_open(file, *args, **kwargs)

    def watched_os_open(file, *args, **kwargs):
        opened.append(os.fspath(file))
        return real_os_open(file, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", watched_open)
    monkeypatch.setattr(os, "open", watched_os_open)
    _bulk(store)
    _bulk(store)
    monkeypatch.undo()
    assert [name for name in opened if name.startswith(str(path))] == []


def test_a_bulk_enqueue_with_no_live_pool_copies_its_pages_itself(beside):
    path, store = beside(time.time() - DEAD_AFTER - 5)  # a pool that stopped beating
    before = _file_pages(path)
    _bulk(store)
    assert _copied(path, before)


def test_a_running_pools_checkpointer_copies_a_bulk_enqueue_it_was_left(tmp_path):
    # A real pool (serving another queue, so it runs nothing) beats, and its
    # checkpointer copies the pages the enqueue left in the WAL: the WAL stays bounded.
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    (tmp_path / "bulk_app.py").write_text(
        "import jobpool\n\n@jobpool.job(name='x.job')\ndef job(i):\n    return None\n")
    pool = subprocess.Popen([sys.executable, "-m", "jobpool", "start", "--app", "bulk_app",
                             "--db", str(path), "--queues", "other", "--procs", "1",
                             "--no-dashboard", "-q"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: store.pools(), timeout=30)
        before = _file_pages(path)
        _bulk(store)  # left to the pool
        wait_for(lambda: _copied(path, before), timeout=30)
    finally:
        pool.terminate()
        _out, err = pool.communicate(timeout=30)
        assert pool.returncode == 0, err
    assert store.stats()["ready"] == ROWS
    store.close()
