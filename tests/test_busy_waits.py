"""A producer waits for a lock another process holds in short sleeps (R26a).

Python's ``sqlite3`` leaves a connection with SQLite's own busy handler, whose sleeps
are 1, 2, 5, 10 ... 100 ms: a producer beside a pool that turns thousands of times a
second kept meeting the next turn and slept ever longer (its enqueues ten times
slower, some waiting a second; BENCHMARKS.md). With the compiled core every store
connection waits in the core's short sleeps, up to the same busy timeout."""
from __future__ import annotations

import sqlite3
import threading
import time

import pytest

import jobpool
from jobpool import core, job
from jobpool.errors import StoreError

pytestmark = pytest.mark.c_extension


@job(name="bw.noop")
def noop(i):
    return None


@pytest.fixture
def store_path(compiled_core, tmp_path):
    if core.NAME != "compiled":  # the stores of this process use the pure twins
        pytest.skip("JOBPOOL_PURE=1: store connections keep SQLite's own busy handler")
    path = tmp_path / "busy.db"
    jobpool.connect(path).close()
    return path


def _hold_write_lock(path) -> sqlite3.Connection:
    """Another writer holding the store's write lock (its transaction open)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_an_enqueue_meeting_a_held_lock_waits_in_short_sleeps(store_path, compiled_core):
    """The producer's connection waits in the core's handler (it counts its sleeps;
    SQLite's own would not), and its enqueue is written once the lock is let go."""
    store = jobpool.connect(store_path)
    other = _hold_write_lock(store_path)
    before = compiled_core.busy_sleeps()
    done: list = []
    producer = threading.Thread(target=lambda: done.append(store.enqueue("bw.noop", 1)))
    producer.start()
    waited_for = time.monotonic() + 30
    while compiled_core.busy_sleeps() < before + 3 and time.monotonic() < waited_for:
        time.sleep(0.005)
    sleeps = compiled_core.busy_sleeps() - before
    other.execute("ROLLBACK")
    other.close()
    producer.join(30)
    assert sleeps >= 3, "the producer did not wait in the core's short sleeps"
    assert len(done) == 1 and store.stats()["ready"] == 1
    store.close()


def test_the_wait_still_ends_at_the_stores_busy_timeout(store_path, compiled_core):
    """R26a: short sleeps, the same timeout: a lock held past it is a StoreError that
    says the store is locked, and not before the timeout has passed."""
    store = jobpool.connect(store_path, busy_timeout=0.3)
    store.stats()  # this thread's connection, opened before the lock is taken
    other = _hold_write_lock(store_path)
    before = compiled_core.busy_sleeps()
    began = time.monotonic()
    with pytest.raises(StoreError, match="locked"):
        store.enqueue("bw.noop", 1)
    waited = time.monotonic() - began
    other.execute("ROLLBACK")
    other.close()
    assert waited >= 0.3
    assert compiled_core.busy_sleeps() > before
    assert store.stats()["ready"] == 0
    store.close()


def test_no_view_or_trigger_a_store_holds_can_change_its_waits(store_path):
    """The function that sets a connection's waits is for its own code only: a view
    (or trigger) written into the store by hand that calls it is refused."""
    raw = sqlite3.connect(store_path, isolation_level=None)
    raw.execute("CREATE VIEW jobpool_hostile AS SELECT jobpool_busy_waits(0) AS waits")
    raw.close()
    store = jobpool.connect(store_path)
    with pytest.raises(sqlite3.OperationalError, match="unsafe use of jobpool_busy_waits"):
        store.conn.execute("SELECT waits FROM jobpool_hostile").fetchall()
    store.close()


def test_other_connections_of_the_process_are_left_alone(store_path, tmp_path):
    """Only connections to a store through the core's VFS get the function: the
    application's own SQLite connections in the same process do not."""
    jobpool.connect(store_path).close()
    own = sqlite3.connect(tmp_path / "app.db")
    with pytest.raises(sqlite3.OperationalError, match="no such function"):
        own.execute("SELECT jobpool_busy_waits(10)")
    own.close()


@pytest.mark.parametrize("timeout", [float("nan"), -1, "5", True])
def test_a_busy_timeout_that_is_no_time_is_refused_naming_it(tmp_path, timeout):
    with pytest.raises(ValueError, match="busy_timeout must be a number of seconds"):
        jobpool.connect(tmp_path / "t.db", busy_timeout=timeout)
    assert not (tmp_path / "t.db").exists()


def test_an_endless_busy_timeout_waits_as_long_as_sqlite_can(tmp_path):
    """An infinite (or huge) timeout opens the store, its waits capped at SQLite's own
    longest (a C int of milliseconds)."""
    for timeout in (float("inf"), 1e12):
        store = jobpool.connect(tmp_path / "t.db", busy_timeout=timeout)
        assert store.enqueue("bw.noop", 1).id >= 1
        store.close()
