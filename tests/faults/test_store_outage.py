"""Scenario 7 (R26): the store stops taking writes mid-run, twice, then takes them again.

A read-only remount is impossible while SQLite holds the file open for writing
(the kernel answers EBUSY), so writes are made to fail for real in two ways:
another connection holds the write lock (``BEGIN EXCLUSIVE``) past every busy
timeout, and the file system the store lives on fills up.
"""
from __future__ import annotations

import collections
import json
import signal
import sqlite3
import subprocess
import time

import pytest

from jobpool.store.sqlite.options import CLAIM_BUSY_TIMEOUT

from .conftest import alive, slot_children, cpu_seconds, record_figure, stop_pool, wait_for

JOBS = 200
#: Seconds the store refuses writes: six of the supervisor's busy timeouts, so each of
#: its calls really fails, again and again, for the whole outage.
OUTAGE = 6 * CLAIM_BUSY_TIMEOUT
#: The supervisor's CPU while the store is down, as a share of one core: a pool that
#: waits spends next to nothing, a hot loop spends the whole core.
IDLE_CPU_SHARE = 0.075


def _counters(app) -> dict:
    rows = app.rows("SELECT counters FROM pools")
    return json.loads(rows[0]["counters"]) if rows else {}


@pytest.mark.slow
def test_a_locked_store_pauses_the_pool_without_a_hot_loop_and_settles_everything_after(fault_app):
    app = fault_app
    app.store().enqueue_many("f.work", [(i, 0.03) for i in range(JOBS)])
    pool = app.spawn_pool("--procs", "2")
    episodes = []
    for threshold in (30, 110):
        wait_for(lambda t=threshold: app.count("status = 'done'") >= t, timeout=60, interval=0.02)
        locker = sqlite3.connect(app.db, isolation_level=None, timeout=30)
        locker.execute("BEGIN EXCLUSIVE")
        t0, cpu0 = time.monotonic(), cpu_seconds(pool.pid)
        done_at_start = app.count("status = 'done'")
        time.sleep(OUTAGE)
        cpu = cpu_seconds(pool.pid) - cpu0
        done_at_end = app.count("status = 'done'")
        locker.execute("ROLLBACK")
        locker.close()
        released = time.monotonic()
        # Work resumes once the store answers.
        wait_for(lambda d=done_at_end: app.count("status = 'done'") > d, timeout=30, interval=0.01)
        episodes.append(dict(outage_s=round(released - t0, 2), supervisor_cpu_s=round(cpu, 3),
                             done_during_outage=done_at_end - done_at_start,
                             resumed_after_ms=round((time.monotonic() - released) * 1000)))
        assert pool.poll() is None, app.log_of(pool)
        assert cpu < IDLE_CPU_SHARE * OUTAGE, episodes  # no hot loop while the store is down
        assert done_at_end == done_at_start  # nothing can be settled while it is down
    wait_for(lambda: app.count("status = 'done'") == JOBS, timeout=60, interval=0.05)
    counters = _counters(app)
    assert stop_pool(pool) == 0
    log = app.log_of(pool)

    rows = app.rows("SELECT attempts, status FROM jobs")
    assert [r["status"] for r in rows] == ["done"] * JOBS
    assert all(r["attempts"] == 1 for r in rows)  # no lease was lost or re-run
    ends = collections.Counter(a for tag, a, _ in app.effects() if tag == "end")
    assert set(ends) == {str(i) for i in range(JOBS)} and max(ends.values()) == 1
    # One store_error per episode, not a flood. (An episode can also pass unlogged when
    # the heartbeat's 10 s busy wait, not a core call, is what sat out the lock.)
    assert 1 <= log.count("store_error") <= len(episodes), log
    assert log.count("store_recovered") == log.count("store_error"), log
    assert "job_lease_lost" not in log
    record_figure(f"7a. Store write-locked mid-run (BEGIN EXCLUSIVE {OUTAGE} s, twice)",
                  enqueued=JOBS, completed=JOBS, lost=0, duplicated=0,
                  episodes=len(episodes), store_error_lines=log.count("store_error"),
                  store_recovered_lines=log.count("store_recovered"),
                  settle_failures=counters.get("settle_failures"),
                  supervisor_cpu_s_per_outage=[e["supervisor_cpu_s"] for e in episodes],
                  resumed_after_ms=[e["resumed_after_ms"] for e in episodes])


#: R26: another writer's lock held this long, with the pool polling every ``LONG_POLL`` s:
#: a pause doubled through the holding (0.1, 0.2 ... 6.4 s) would have the pool's next
#: try come seconds after the lock is let go.
LONG_HOLD = 14 * CLAIM_BUSY_TIMEOUT
LONG_POLL = 0.1


@pytest.mark.slow
def test_a_lock_held_long_is_tried_again_each_poll_so_work_resumes_when_it_goes(fault_app):
    """R26: a lock another writer holds for many busy timeouts (a bulk enqueue of a
    million rows) is no failure of the store: the pool tries again every poll interval,
    not after a pause that doubled while the lock was held, so work resumes about as
    soon as the lock is let go (here within a second, where doubling left it idle for
    more than two)."""
    app = fault_app
    app.store().enqueue_many("f.work", [(i, 0.01) for i in range(400)])
    pool = app.spawn_pool("--procs", "2", env={"JOBPOOL_POLL_INTERVAL": str(LONG_POLL)})
    wait_for(lambda: app.count("status = 'done'") >= 20, timeout=60, interval=0.02)
    locker = sqlite3.connect(app.db, isolation_level=None, timeout=30)
    locker.execute("BEGIN EXCLUSIVE")
    time.sleep(LONG_HOLD)
    done_held = app.count("status = 'done'")
    locker.execute("ROLLBACK")
    locker.close()
    released = time.monotonic()
    wait_for(lambda: app.count("status = 'done'") > done_held, timeout=30, interval=0.01)
    resumed = time.monotonic() - released
    assert pool.poll() is None, app.log_of(pool)
    assert resumed < 1.0, (resumed, app.log_of(pool)[-2000:])
    log = app.log_of(pool)
    assert log.count("store_error") == 1 and "database is locked" in log, log
    assert stop_pool(pool) == 0


def _fill(directory) -> int:
    """Write a filler file until the file system is full; returns its size."""
    written = 0
    # Unbuffered, so closing has nothing left to flush onto the full disk.
    with open(directory / "filler", "wb", buffering=0) as fh:
        try:
            while True:
                written += fh.write(b"\0" * 65536)
        except OSError:
            pass
    return written


@pytest.mark.slow
def test_a_full_disk_under_the_store_pauses_the_pool_and_it_resumes_when_space_returns(
        fault_app, tmpfs):
    app = fault_app
    mnt = tmpfs("24m")
    db = mnt / "store.db"
    jobs_n = 60
    import jobpool
    store = jobpool.connect(db)
    store.enqueue_many("f.bulky", [(i, 0.03) for i in range(jobs_n)])
    store.close()
    pool = app.spawn_pool("--procs", "2", db=db)
    wait_for(lambda: app.count("status = 'done'", db=db) >= 10, timeout=60, interval=0.02)
    filler = _fill(mnt)
    # The pool goes on while the WAL file it reuses has room (at most its 4 MiB
    # bound: ~20 of these jobs); then a settle needs new space and fails.
    done_at_fill = app.count("status = 'done'", db=db)
    wait_for(lambda: "store_error" in app.log_of(pool), timeout=30, interval=0.02)
    cpu0, done0 = cpu_seconds(pool.pid), app.count("status = 'done'", db=db)
    time.sleep(OUTAGE)
    cpu = cpu_seconds(pool.pid) - cpu0
    done_while_full = app.count("status = 'done'", db=db) - done0
    (mnt / "filler").unlink()
    freed = time.monotonic()
    wait_for(lambda: app.count("status = 'done'", db=db) > done0 + done_while_full, timeout=60,
             interval=0.01)
    resumed_ms = (time.monotonic() - freed) * 1000
    wait_for(lambda: app.count("status = 'done'", db=db) == jobs_n, timeout=60, interval=0.05)
    drained_after = time.monotonic() - freed
    assert stop_pool(pool) == 0
    log = app.log_of(pool)
    assert done_while_full == 0  # writes really failed
    assert cpu < IDLE_CPU_SHARE * OUTAGE
    # R26: one store_error per outage, not one per failed try. The disk may give a
    # settle room for a moment (a page freed in the WAL), so one fill can make more
    # than one outage; each must end in a recovery before the next is reported.
    assert "database or disk is full" in log, log
    episodes = [tag for line in log.splitlines() for tag in line.split()[1:2]
                if tag in ("store_error", "store_recovered")]
    assert episodes and episodes == ["store_error", "store_recovered"] * (len(episodes) // 2), log
    assert len(episodes) // 2 <= 3, log  # one fill, not one report per retry
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT status, attempts, count(*) FROM jobs GROUP BY 1, 2").fetchall() \
            == [("done", 1, jobs_n)]
    finally:
        conn.close()
    ends = collections.Counter(a for tag, a, _ in app.effects() if tag == "end")
    assert len(ends) == jobs_n and max(ends.values()) == 1
    record_figure(f"7b. Disk under the store full mid-run (tmpfs 24 MiB, 200 kB results, {OUTAGE} s)",
                  enqueued=jobs_n, completed=jobs_n, lost=0, duplicated=0,
                  filler_bytes=filler, done_in_wal_room=done0 - done_at_fill,
                  done_while_full=done_while_full,
                  supervisor_cpu_s_while_full=round(cpu, 3),
                  store_error_lines=log.count("store_error"), integrity_check="ok",
                  resumed_after_ms=round(resumed_ms),
                  drained_after_space_freed_s=round(drained_after, 2))


# -- the loop must stay responsive while the store is down (R11, R20, R25, R26) --------------

@pytest.mark.slow
def test_sigterm_during_a_locked_store_stops_within_the_drain_budget(fault_app):
    app = fault_app
    app.store().enqueue_many("f.work", [(i, 0.05) for i in range(100)])
    pool = app.spawn_pool("--procs", "2", "--drain", "0.5")
    wait_for(lambda: app.count("status = 'done'") >= 10, timeout=30, interval=0.02)
    locker = sqlite3.connect(app.db, isolation_level=None, timeout=30)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        time.sleep(1.0)
        sent = time.monotonic()
        pool.send_signal(signal.SIGTERM)
        # Budget: one store busy timeout (0.5 s) to notice, the drain (0.5 s), then the
        # 5 s the loop gives unsettled outcomes before it gives up on them (R25, R26),
        # and slack for a loaded machine.
        bound = 5 + 0.5 + 5 + 2
        try:
            pool.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            pass
        took = time.monotonic() - sent
        record_figure("7c. SIGTERM while the store is write-locked (--drain 0.5)",
                      bound_s=bound, exited=pool.poll() is not None,
                      stop_took_s=round(took, 1) if pool.poll() is not None else f">{bound}")
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert pool.poll() is not None, f"still running {took:.1f} s after SIGTERM"


@pytest.mark.slow
def test_hard_timeouts_fire_on_time_while_the_store_is_locked(fault_app):
    app = fault_app
    app.store().enqueue("f.sleep_forever")
    pool = app.spawn_pool("--procs", "1")
    kid = wait_for(lambda: app.rows("SELECT started_at FROM jobs WHERE status = 'running'"),
                   timeout=30, interval=0.01)[0]
    started = kid["started_at"]
    (child,) = [p for p, s in slot_children(pool.pid).items() if s != "Z"]
    locker = sqlite3.connect(app.db, isolation_level=None, timeout=30)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        end = time.monotonic() + 8
        while alive(child) and time.monotonic() < end:
            time.sleep(0.01)
        late = time.time() - started - 1.0
        record_figure("7d. Hard timeout (1 s) while the store is write-locked",
                      killed=not alive(child), late_by_ms=round(late * 1000))
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert late < 1.0, f"the 1 s timeout fired {late:.1f} s late"
