"""A pool that died leaves a row; every reader sees it dead, a running pool buries it
(R24: same host, process gone; R24b: any host, heartbeat stale past ``dead_after``)."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import time

from .conftest import wait_for


def _pools(app) -> list[dict]:
    return json.loads(app.cli("pools", "--json", "--db", str(app.db), check=True).stdout)


def test_a_sigkilled_pool_is_shown_dead_never_counted_and_buried_by_the_next(fault_app):
    app = fault_app
    job_id = app.store().enqueue("f.fence", "k").id
    pool = app.spawn_pool("--procs", "1")
    wait_for(lambda: list(app.dir.glob("k.*.started")), timeout=20)
    wait_for(lambda: _pools(app), timeout=20)
    os.kill(pool.pid, signal.SIGKILL)
    pool.wait()

    # Its row stays, but every reader knows it is dead.
    [row] = _pools(app)
    assert row["dead"] == "process gone"
    human = app.cli("pools", "--db", str(app.db), check=True).stdout
    assert "dead: process gone" in human
    status = json.loads(app.cli("status", "--json", "--db", str(app.db), check=True).stdout)
    assert status["supervisors"] == []
    stop = app.cli("stop", "--wait", "5", "--db", str(app.db))
    assert stop.returncode == 0 and "no pools are running" in stop.stdout, stop
    scale = app.cli("scale", "--procs", "3", "--db", str(app.db))
    assert scale.returncode == 1 and "no pools are running" in scale.stderr, scale
    assert app.rows("SELECT stop_requested, desired_procs FROM pools") == [
        {"stop_requested": 0, "desired_procs": None}]

    # The next pool reclaims the lease at once and removes the row.
    (app.dir / "k.go").write_text("go")
    app.start("--procs", "1", "--log-format", "json")
    assert app.rows("SELECT status, attempts FROM jobs WHERE id = ?", (job_id,)) == [
        {"status": "done", "attempts": 2}]
    assert _pools(app) == []


def _foreign_pool(db, owner: str, heartbeat_at: float, job_id: int) -> None:
    """A pool on another host (no pid to check) that holds a long lease."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("INSERT INTO pools (owner, host, pid, procs, queues, core, started_at, "
                     "heartbeat_at) VALUES (?, 'elsewhere', 1, 1, 'default', 'pure', ?, ?)",
                     (owner, heartbeat_at, heartbeat_at))
        conn.execute("UPDATE jobs SET status = 'running', attempts = 1, lease_owner = ?, "
                     "lease_expires_at = ? WHERE id = ?", (owner, time.time() + 3600, job_id))
    finally:
        conn.close()


def test_a_pool_silent_past_dead_after_loses_its_leases_but_only_once_we_beat_that_long(
        fault_app):
    app = fault_app
    job_id = app.store().enqueue("f.work", 1).id
    owner = "elsewhere:1:1"
    _foreign_pool(app.db, owner, time.time() - 3600, job_id)
    dead_after = 2.0
    pool = app.spawn_pool("--procs", "1", "--dead-after", str(dead_after), "--log-format", "json",
                          env={"JOBPOOL_HEARTBEAT": "0.2"})
    wait_for(lambda: app.count(f"id = {job_id} AND status = 'done'"), timeout=30)
    os.kill(pool.pid, signal.SIGTERM)
    assert pool.wait(timeout=30) == 0
    events = [json.loads(line) for line in app.log_of(pool).splitlines() if line.startswith("{")]
    started = next(e["ts"] for e in events if e["event"] == "pool_started")
    [buried] = [e for e in events if e["event"] == "pool_dead"]
    assert buried["owner"] == owner and buried["jobs"] == 1
    assert buried["cause"].startswith("no heartbeat for")
    # R24b: it judged only after its own unbroken heartbeats for dead_after.
    assert buried["ts"] - started >= dead_after - 0.25
    [reclaimed] = [e for e in events if e["event"] == "leases_reclaimed" and e["owner"] == owner]
    assert reclaimed["jobs"] == 1
    assert app.rows("SELECT count(*) AS n FROM pools") == [{"n": 0}]
    log = app.store().attempts(job_id)
    assert [a["attempt"] for a in log] == [1, 2] and "is dead (no heartbeat" in log[0]["error"]
