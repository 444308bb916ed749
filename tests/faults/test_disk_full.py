"""Scenarios 8 and 8b (R1, R4, R26a): enqueue onto a store whose disk fills up; a pool
whose own WAL would fill a small disk."""
from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

import jobpool
from jobpool.errors import StoreError

from .conftest import record_figure, remount

BLOB = "z" * 8000


def _fill_with_enqueues(store) -> tuple[int, StoreError]:
    ok = 0
    with pytest.raises(StoreError) as failure:
        for i in range(10_000):
            store.enqueue("f.work", i, BLOB)
            ok += 1
    return ok, failure.value


def test_enqueue_on_a_full_disk_raises_store_error_and_writes_nothing(fault_app, tmpfs):
    app = fault_app
    mnt = tmpfs("3m")
    db = mnt / "store.db"
    store = jobpool.connect(db)
    ok, error = _fill_with_enqueues(store)
    # Nothing half-written: exactly the acknowledged enqueues are there.
    count = store.conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    assert count == ok > 0
    with pytest.raises(StoreError):  # still full: a batch fails as a whole (R4)
        store.enqueue_many("f.work", [(n, BLOB) for n in range(50)])
    assert store.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == ok
    # The CLI says so in one line and exits non-zero. (A job as big as the others:
    # a tiny one may still fit in the space the store's files already hold.)
    cli = app.cli("enqueue", "f.work", "--db", str(db), "--args", json.dumps([1, BLOB]))
    cli_lines = cli.stderr.strip().splitlines()
    assert cli.returncode != 0 and len(cli_lines) == 1, cli.stderr
    assert cli_lines[0].startswith("jobpool: error:")
    store.close()
    check = sqlite3.connect(db)
    try:
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        ids = [r[0] for r in check.execute("SELECT id FROM jobs ORDER BY id")]
        assert ids == list(range(1, ok + 1))
    finally:
        check.close()
    # Space comes back: enqueue works again and every acknowledged job is there.
    remount(mnt, "size=16m")
    store = jobpool.connect(db)
    assert store.enqueue("f.work", -1).id == ok + 1
    store.close()
    record_figure("8. Disk full on enqueue (tmpfs 3 MiB, 8 kB payloads)",
                  acknowledged_enqueues=ok, rows_after=count, half_written=0,
                  error_type=type(error).__name__, error=str(error),
                  enqueue_many_when_full="StoreError, 0 rows", cli=cli_lines[0],
                  integrity_check="ok", enqueue_after_space_freed="ok")


def test_the_disk_full_error_names_the_cause(fault_app, tmpfs):
    mnt = tmpfs("3m")
    store = jobpool.connect(mnt / "store.db")
    _ok, error = _fill_with_enqueues(store)
    store.close()
    assert "full" in str(error), str(error)


def test_a_pool_whose_own_wal_would_fill_a_small_disk_keeps_it_bounded(fault_app, tmpfs):
    """Issue 22 item 5 (R26a): 3 000 jobs on a 3 MiB tmpfs. The WAL of a pool turning
    thousands of times a second grew by megabytes between two checkpoints, filled the
    disk, and then could never be checkpointed (the store must grow to take its pages
    back). On a tight disk the claimer checkpoints its own commits and the WAL is
    trimmed, so the pool drains: every job done once, the file sound."""
    app = fault_app
    mnt = tmpfs("3m")
    db = mnt / "store.db"
    store = jobpool.connect(db)
    store.enqueue_many("f.work", [(i,) for i in range(3000)])
    store.close()
    pool = app.spawn_pool("--procs", "2", "--burst", "-q", db=db)
    peak_wal, deadline = 0, time.monotonic() + 300
    while pool.poll() is None and time.monotonic() < deadline:
        try:
            peak_wal = max(peak_wal, os.path.getsize(f"{db}-wal"))
        except OSError:
            pass
        time.sleep(0.01)
    assert pool.wait(timeout=10) == 0, app.log_of(pool)
    starts = sorted(int(arg) for tag, arg, _pid in app.effects() if tag == "start")
    assert starts == list(range(3000))  # each ran once
    check = sqlite3.connect(db)
    try:
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        check.close()
    store = jobpool.connect(db)
    assert store.stats()["done"] == 3000
    store.close()
    record_figure("8b. A pool's own WAL on a small disk (tmpfs 3 MiB, 3 000 jobs)", jobs=3000,
                  completed=len(starts), lost=3000 - len(set(starts)),
                  duplicated=len(starts) - len(set(starts)), peak_wal_kib=peak_wal // 1024,
                  store_errors=app.log_of(pool).count("store_error"), integrity_check="ok")


def test_a_bulk_enqueue_on_a_disk_grown_tight_copies_its_own_pages(tmpfs):
    """R26a: beside a live pool a bulk enqueue leaves the copy of its WAL into the store
    to the pool's checkpointer, but not on a disk with little room, judged when it
    commits: here the store was opened while the disk had room, then the disk filled."""
    from jobpool.store.records import Heartbeat
    from jobpool.store.sqlite import statements as sql
    mnt = tmpfs("64m")
    db = mnt / "store.db"
    store = jobpool.connect(db)
    store.heartbeat(Heartbeat(owner="host:1:1", host="host", pid=1, procs=1,
                              queues=("other",), names=("f.work",), core="test",
                              counters_json="{}", slots_json="[]"), [], time.time())
    with open(mnt / "ballast", "wb") as fh:
        fh.write(b"\0" * (44 * 1024 * 1024))
    before = os.path.getsize(db) // sql.PAGE_SIZE
    store.enqueue_many("f.work", [(i,) for i in range(6000)])
    assert os.path.getsize(db) // sql.PAGE_SIZE > before + 60  # copied by the producer
    store.close()
