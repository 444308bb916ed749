"""Scenario 7 (R26): the store stops taking writes mid-run, twice, then takes them again.

A read-only remount is impossible while SQLite holds the file open for writing
(the kernel answers EBUSY), so writes are made to fail for real in two ways:
another connection holds the write lock (``BEGIN EXCLUSIVE``) past every busy
timeout, and the file system the store lives on fills up.
"""
from __future__ import annotations

import collections
import json
import os
import sqlite3
import time

import pytest

from .conftest import cpu_seconds, record_figure, stop_pool, wait_for

JOBS = 200
OUTAGE = 6.5  # seconds: past the core's 5 s busy timeout, so its writes really fail


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
        wait_for(lambda: app.count("status = 'done'") >= threshold, timeout=60, interval=0.02)
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
        wait_for(lambda: app.count("status = 'done'") > done_at_end, timeout=30, interval=0.01)
        episodes.append(dict(outage_s=round(released - t0, 2), supervisor_cpu_s=round(cpu, 3),
                             done_during_outage=done_at_end - done_at_start,
                             resumed_after_ms=round((time.monotonic() - released) * 1000)))
        assert pool.poll() is None, app.log_of(pool)
        assert cpu < 0.5, episodes  # no hot loop while the store is down
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
    assert log.count("store_error") == len(episodes), log  # one per episode, not a flood
    assert log.count("store_recovered") == len(episodes), log
    assert "job_lease_lost" not in log
    record_figure("7a. Store write-locked mid-run (BEGIN EXCLUSIVE 6.5 s, twice)",
                  enqueued=JOBS, completed=JOBS, lost=0, duplicated=0,
                  episodes=len(episodes), store_error_lines=log.count("store_error"),
                  store_recovered_lines=log.count("store_recovered"),
                  settle_failures=counters.get("settle_failures"),
                  supervisor_cpu_s_per_outage=[e["supervisor_cpu_s"] for e in episodes],
                  resumed_after_ms=[e["resumed_after_ms"] for e in episodes])
