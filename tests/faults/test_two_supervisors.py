"""Scenarios 10 and 11 (R9, R24, section 4's fencing): two supervisors on one store."""
from __future__ import annotations

import collections
import os
import signal
import sqlite3
import time

import pytest

from .conftest import ATTEMPT_LINES, record_figure, stop_pool, wait_for


def _ends(app) -> collections.Counter:
    return collections.Counter(int(a) for tag, a, _ in app.effects() if tag == "end")


def test_two_supervisors_without_faults_never_complete_a_job_twice(fault_app):
    """Both pools are up before the jobs come (one that started later, as a loaded
    machine makes it, found the queue drained by the other: the test then ran one
    pool), and each job takes 2 ms, so neither can drain them all alone in the time
    the other takes to wake."""
    app = fault_app
    jobs_n = 1000
    pools = [app.spawn_pool("--procs", "2", "-q") for _ in range(2)]
    wait_for(lambda: len(app.store().pools()) == 2, timeout=60)
    app.store().enqueue_many("f.work", [(i, 0.002) for i in range(jobs_n)])
    wait_for(lambda: app.count("status = 'done'") == jobs_n, timeout=120)
    for pool in pools:
        assert stop_pool(pool) == 0, app.log_of(pool)
    ends = _ends(app)
    assert sorted(ends) == list(range(jobs_n))
    doubles = sum(1 for n in ends.values() if n > 1)
    assert doubles == 0
    per_owner = collections.Counter(r["owner"] for r in app.rows(f"SELECT owner FROM {ATTEMPT_LINES}"))
    assert len(per_owner) == 2  # both really took part
    assert app.count("status = 'done' AND attempts = 1") == jobs_n
    record_figure("10a. Two supervisors, one store, no faults",
                  supervisors=2, procs_each=2, enqueued=jobs_n, completed=len(ends),
                  lost=jobs_n - len(ends), double_completions=doubles,
                  split=sorted(per_owner.values()))


@pytest.mark.slow
def test_two_supervisors_one_killed_and_restarted_finish_every_job(fault_app):
    app = fault_app
    jobs_n = 600
    app.store().enqueue_many("f.work", [(i, 0.01) for i in range(jobs_n)])
    a = app.spawn_pool("--procs", "2", "-q")
    b = app.spawn_pool("--procs", "2", "--burst", "-q")
    wait_for(lambda: app.count("status = 'done'") >= 150, timeout=60, interval=0.01)
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    held = {r["id"] for r in app.rows(
        "SELECT id FROM jobs WHERE status = 'running' AND lease_owner LIKE ?", (f"%:{a.pid}:%",))}
    restarted = app.spawn_pool("--procs", "2", "--burst", "-q")
    for pool in (b, restarted):
        assert pool.wait(timeout=120) == 0, app.log_of(pool)
    rows = app.rows("SELECT id, status, attempts, json_extract(payload, '$[0][0]') AS arg FROM jobs")
    assert [r["status"] for r in rows] == ["done"] * jobs_n
    rerun = {r["id"] for r in rows if r["attempts"] > 1}
    assert rerun == held  # only the killed supervisor's jobs in flight ran again
    arg_of = {r["id"]: int(r["arg"]) for r in rows}
    ends = _ends(app)
    assert sorted(ends) == list(range(jobs_n))
    doubles = {i for i, n in ends.items() if n > 1}
    assert doubles <= {arg_of[i] for i in held}
    owners = {r["owner"] for r in app.rows(f"SELECT DISTINCT owner FROM {ATTEMPT_LINES}")}
    assert len(owners) == 3
    record_figure("10b. Two supervisors, one SIGKILLed mid-run and restarted",
                  supervisors=2, procs_each=2, enqueued=jobs_n, completed=len(ends),
                  lost=jobs_n - len(ends), in_flight_on_killed=len(held),
                  reran=len(rerun), duplicated_side_effects=len(doubles),
                  double_completions_outside_killed_leases=0)


def test_a_stale_supervisor_cannot_settle_over_the_new_owner(fault_app):
    """SIGSTOP the owner, expire its lease, let a second pool take the job; on SIGCONT
    the stale settle matches no row (attempt number as fencing token)."""
    app = fault_app
    job_id = app.store().enqueue("f.fence", "s").id
    a = app.spawn_pool("--procs", "1")
    wait_for(lambda: list(app.dir.glob("s.*.started")), timeout=30)
    time.sleep(0.3)  # past the first heartbeat and retention sweep
    stops = 0
    try:
        while True:
            # A writer frozen inside its transaction would freeze every other writer
            # (SQLite has one write lock): stop it again if it was caught in one.
            stops += 1
            os.kill(a.pid, signal.SIGSTOP)
            conn = sqlite3.connect(app.db, isolation_level=None, timeout=0.5)
            try:
                conn.execute("UPDATE jobs SET lease_expires_at = 0 WHERE id = ?", (job_id,))
                break
            except sqlite3.OperationalError:
                assert stops < 10
                os.kill(a.pid, signal.SIGCONT)
                time.sleep(0.05)
            finally:
                conn.close()
        expired = time.monotonic()
        b = app.spawn_pool("--procs", "1")
        wait_for(lambda: len(list(app.dir.glob("s.*.started"))) == 2, timeout=30)
        takeover_ms = (time.monotonic() - expired) * 1000
        (app.dir / "s.go").write_text("go")
        wait_for(lambda: app.store().get(job_id)["status"] == "done", timeout=30)
        job = app.store().get(job_id, raw_result=True)
        b_child = int(job["result"])
    finally:
        os.kill(a.pid, signal.SIGCONT)
    wait_for(lambda: "job_lease_lost" in app.log_of(a), timeout=30)
    assert stop_pool(a) == 0 and stop_pool(b) == 0
    job = app.store().get(job_id, raw_result=True)
    assert (job["status"], job["attempts"], job["lease_owner"]) == ("done", 2, None)
    assert int(job["result"]) == b_child  # the new owner's result stands
    log = app.store().attempts(job_id)
    # The log holds the attempt the reclaim ended (no pid: the stale pool never
    # settled it) and the new owner's success; nothing from the stale settle.
    assert [(x["attempt"], x["outcome"], x["pid"]) for x in log] == [
        (1, "lease_expired", None), (2, "done", b_child)]
    a_log = app.log_of(a)
    assert a_log.count("job_lease_lost") == 1 and "job_completed" not in a_log
    bodies = sum(1 for tag, _a, _p in app.effects() if tag == "fence-s")
    record_figure("11. Stale supervisor (SIGSTOP past its lease, then SIGCONT)",
                  takeover_ms=round(takeover_ms), stale_settle_rejected=True,
                  row_keeps_new_owner_result=True, stale_lease_lost_lines=1,
                  job_bodies_run=bodies, attempts_logged=len(log), sigstops_needed=stops)
