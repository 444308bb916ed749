"""Scenario 1 (R24, R24a): SIGKILL the supervisor with every slot busy and a backlog queued."""
from __future__ import annotations

import collections
import os
import re
import signal
import time


from .conftest import alive, slot_children, record_figure, wait_for

PROCS = 2
JOBS = 40
JOB_SECONDS = 0.2


def test_sigkill_supervisor_mid_run_loses_nothing_and_reruns_only_in_flight(fault_app):
    app = fault_app
    app.store().enqueue_many("f.work", [(i, JOB_SECONDS) for i in range(JOBS)])
    pool = app.spawn_pool("--procs", str(PROCS))
    # Every slot busy and a backlog left: kill when a few are done and PROCS run.
    wait_for(lambda: app.count("status = 'done'") >= 6 and app.count("status = 'running'") == PROCS,
             timeout=30, interval=0.01)
    kids = [pid for pid, state in slot_children(pool.pid).items() if state != "Z"]
    assert len(kids) == PROCS
    os.kill(pool.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    pool.wait()

    # R24a: the children die with their supervisor (PR_SET_PDEATHSIG).
    while any(alive(pid) for pid in kids) and time.monotonic() - killed_at < 1.0:
        time.sleep(0.005)
    orphan_gone_ms = (time.monotonic() - killed_at) * 1000
    orphans = [pid for pid in kids if alive(pid)]
    assert not orphans, f"children still running 1 s after their supervisor died: {orphans}"

    # The store is frozen now: running rows are exactly the jobs in flight at the kill.
    in_flight = {r["id"] for r in app.rows("SELECT id FROM jobs WHERE status = 'running'")}
    backlog = app.count("status = 'ready'")
    done_before = app.count("status = 'done'")
    assert len(in_flight) == PROCS and backlog > 0

    restart = time.monotonic()
    app.start("--procs", str(PROCS))
    restart_s = time.monotonic() - restart

    rows = app.rows("SELECT id, status, attempts, args FROM (SELECT id, status, attempts, "
                    "json_extract(payload, '$[0][0]') AS args FROM jobs) ORDER BY id")
    assert [r["status"] for r in rows] == ["done"] * JOBS
    rerun = {r["id"] for r in rows if r["attempts"] > 1}
    assert rerun == in_flight, (rerun, in_flight)  # every in-flight job, and nothing else
    id_of_arg = {int(r["args"]): r["id"] for r in rows}
    starts = collections.Counter(id_of_arg[int(a)] for tag, a, _ in app.effects() if tag == "start")
    ends = collections.Counter(id_of_arg[int(a)] for tag, a, _ in app.effects() if tag == "end")
    assert set(ends) == set(id_of_arg.values())  # none lost
    assert {i for i, n in starts.items() if n > 1} <= in_flight
    duplicated = sorted(i for i, n in ends.items() if n > 1)
    assert set(duplicated) <= in_flight
    reasons = {re.sub(r"supervisor \S+ died", "supervisor <owner> died", r["last_error"]) for r in app.rows(
        "SELECT last_error FROM jobs WHERE last_error IS NOT NULL")}
    record_figure("1. SIGKILL supervisor, all slots busy + backlog",
                  procs=PROCS, enqueued=JOBS, done_before_kill=done_before,
                  in_flight_at_kill=len(in_flight), backlog_at_kill=backlog,
                  completed=sum(r["status"] == "done" for r in rows),
                  lost=JOBS - len(ends), reran=len(rerun),
                  duplicated_side_effects=len(duplicated),
                  orphans_alive_after_1s=len(orphans), orphans_gone_ms=round(orphan_gone_ms, 1),
                  restart_to_drained_s=round(restart_s, 2),
                  rerun_reasons=sorted(reasons))


def test_a_reclaimed_attempt_is_in_the_attempt_log(fault_app):
    app = fault_app
    job_id = app.store().enqueue("f.fence", "r").id
    pool = app.spawn_pool("--procs", "1")
    wait_for(lambda: list(app.dir.glob("r.*.started")), timeout=20)
    os.kill(pool.pid, signal.SIGKILL)
    pool.wait()
    (app.dir / "r.go").write_text("go")
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert (job["status"], job["attempts"]) == ("done", 2)
    log = app.store().attempts(job_id)
    # Attempt 1 died with its supervisor; the job row says so in last_error, but the
    # attempt log, which `jobs show` prints as the job's history, has attempt 2 only.
    assert [a["attempt"] for a in log] == [1, 2], log
    assert "died" in (log[0]["error"] or "")
