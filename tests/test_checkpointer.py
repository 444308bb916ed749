"""R26a: the checkpointer's step, on a real store: it copies what was written, starts
the WAL over past its bound, and only looks at the file while nothing is written."""
from __future__ import annotations

import shutil
import sqlite3
import time

import pytest

import jobpool
from jobpool.store.sqlite import checkpoint
from jobpool.store.sqlite.checkpoint import Checkpoints


@pytest.fixture
def store(tmp_path):
    s = jobpool.connect(tmp_path / "ckpt.db")
    yield s
    s.close()


def _checkpointer(store) -> tuple[sqlite3.Connection, Checkpoints]:
    conn = sqlite3.connect(store.path, isolation_level=None, timeout=checkpoint.RESTART_WAIT)
    return conn, Checkpoints(conn, store.path, checkpoint.INTERVAL)


def _rows_in_file(path, tmp_path) -> int:
    """Jobs the store's own file holds, its WAL left out: what checkpoints copied."""
    copy = tmp_path / "file-alone.db"
    shutil.copyfile(path, copy)
    conn = sqlite3.connect(f"file:{copy}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    finally:
        conn.close()


def test_a_store_nobody_writes_to_is_only_looked_at(store, tmp_path):
    store.enqueue_many("ckpt.job", [(i,) for i in range(50)])
    conn, checkpoints = _checkpointer(store)
    try:
        assert checkpoints.step() == Checkpoints.COPIED  # the first look copies
        assert _rows_in_file(store.path, tmp_path) == 50
        for _ in range(3):
            assert checkpoints.step() == Checkpoints.IDLE
        # A later tick of the file system's clock than the last look (a kernel with
        # coarse file times may show two writes in one tick as one: see Checkpoints).
        time.sleep(0.05)
        store.enqueue("ckpt.job", 1)
        assert _rows_in_file(store.path, tmp_path) == 50  # in the WAL only
        assert checkpoints.step() == Checkpoints.COPIED
        assert _rows_in_file(store.path, tmp_path) == 51
        assert checkpoints.step() == Checkpoints.IDLE
        # A read changes nothing in the WAL: still idle.
        assert store.stats()["ready"] == 51
        assert checkpoints.step() == Checkpoints.IDLE
    finally:
        conn.close()


def test_a_wal_past_its_bound_starts_over(store, monkeypatch):
    monkeypatch.setattr(checkpoint, "RESTART_BYTES", 8 * 1024)
    conn, checkpoints = _checkpointer(store)
    try:
        checkpoints.step()
        store.enqueue_many("ckpt.job", [(i,) for i in range(2_000)])
        assert checkpoints.step() == Checkpoints.RESTARTED
        store.enqueue("ckpt.job", 1)  # the first write after a restart: the WAL's start
        _busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert 0 < frames < 64, frames
    finally:
        conn.close()


def test_a_failed_checkpoint_is_tried_again_without_a_write(store):
    store.enqueue("ckpt.job", 1)
    conn, checkpoints = _checkpointer(store)
    conn.close()  # every statement on it fails from now on
    assert checkpoints.step() == Checkpoints.FAILED
    assert checkpoints.step() == Checkpoints.FAILED  # not IDLE: the copy was never made
