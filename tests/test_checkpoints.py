"""R37 through real pools, on every store: a job that saves its state resumes from it
after a graceful stop (its attempt given back), after its child is killed, and a
cancel stops it at its next save point."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

import jobpool

from .conftest import default_recursion_limit, wait_for

APP = """
import os, time
from pathlib import Path
import jobpool
from jobpool import job

HERE = Path(__file__).parent

@job(name="k.count", backoff_base=0, max_attempts=3, timeout=60)
def count(to, force=False):
    state = jobpool.resume_state() or {"next": 0}
    with open(HERE / "starts.txt", "a") as fh:
        fh.write(f"{state['next']}\\n")
    (HERE / "pid.txt").write_text(str(os.getpid()))
    for i in range(state["next"], to):
        with open(HERE / "done.txt", "a") as fh:
            fh.write(f"{i}\\n")
        time.sleep(0.02)
        # The save point: i is done; a stop here resumes at i + 1.
        jobpool.save_state({"next": i + 1}, force=force)


@job(name="k.stubborn", timeout=60)
def stubborn():
    # Catches the interrupt and returns as if it had finished.
    for i in range(100_000):
        with open(HERE / "done.txt", "a") as fh:
            fh.write(f"{i}\\n")
        time.sleep(0.02)
        try:
            jobpool.save_state({"next": i + 1}, force=True)
        except jobpool.Interrupted:
            return "finished anyway"
"""


#: Steps of the job the stop and kill tests interrupt after its 20th: 20 ms each, so
#: it still has seconds to run when the signal comes, however loaded the machine.
STEPS = 200


def _numbers(app, name):
    path = app.dir / name
    return [int(n) for n in path.read_text().split()] if path.exists() else []


def test_a_graceful_stop_interrupts_at_a_save_point_and_the_job_resumes(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    job_id = store.enqueue("k.count", STEPS).id
    pool = app.spawn("--procs", "1", "--drain", "30", "--no-dashboard")
    wait_for(lambda: len(_numbers(app, "done.txt")) >= 20, timeout=60)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=60) == 0
    row = store.get(job_id)
    # Back in line at once, the attempt given back, the state kept (R25 amended by R37).
    assert (row["status"], row["attempts"]) == ("ready", 0)
    stopped_at = json.loads(row["state"])["next"]
    assert 20 <= stopped_at < STEPS
    assert [a["outcome"] for a in store.attempts(job_id)] == ["interrupted"]
    app.start("--procs", "1")
    row = store.get(job_id)
    assert (row["status"], row["attempts"]) == ("done", 1)
    # The second attempt started where the first stopped: every step once.
    assert _numbers(app, "starts.txt") == [0, stopped_at]
    assert _numbers(app, "done.txt") == list(range(STEPS))


def _running_burst_pool(app, steps: int, seen: int):
    """A job of ``steps`` steps saving its state at every one, run by a ``--burst``
    pool until ``seen`` steps are done: (store, job id, pool)."""
    store = app.store()
    job_id = store.enqueue_with("k.count", args=(steps,), kwargs={"force": True}).id
    pool = app.spawn("--procs", "1", "--burst", "--no-dashboard")
    wait_for(lambda: len(_numbers(app, "done.txt")) >= seen, timeout=60)
    return store, job_id, pool


def test_after_its_child_is_killed_the_next_attempt_resumes_from_the_last_state(make_any_app):
    app = make_any_app(APP)
    store, job_id, pool = _running_burst_pool(app, STEPS, 20)
    assert store.get(job_id)["status"] == "running"
    os.kill(int((app.dir / "pid.txt").read_text()), signal.SIGKILL)
    assert pool.wait(timeout=120) == 0
    row = store.get(job_id)
    assert (row["status"], row["attempts"]) == ("done", 2)
    starts = _numbers(app, "starts.txt")
    # 20 steps were written before the kill: step 18 had saved "next 19" at least.
    assert starts[0] == 0 and starts[1] >= 19  # not from the beginning
    done = _numbers(app, "done.txt")
    # Every step ran; at most the one in flight when the child died ran twice.
    assert sorted(set(done)) == list(range(STEPS)) and len(done) - STEPS <= 1


def test_a_cancel_stops_a_checkpointing_job_at_its_next_save_point(make_any_app):
    app = make_any_app(APP)
    store, job_id, pool = _running_burst_pool(app, 100_000, 5)
    assert app.cli("jobs", "cancel", str(job_id), "--db", str(app.db)).returncode == 0
    assert pool.wait(timeout=60) == 0
    row = store.get(job_id)
    assert (row["status"], row["last_error"]) == ("dead", "cancelled")
    assert [a["outcome"] for a in store.attempts(job_id)] == ["cancelled"]
    # Stopped at a save point, not killed: its last step is the one its state names.
    assert json.loads(row["state"])["next"] == _numbers(app, "done.txt")[-1] + 1


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_cancelled_job_that_returns_anyway_is_dead_and_its_pool_goes_idle(make_any_app):
    # R31 with R37: once a cancel is asked, however the attempt ends it is cancelled;
    # and the slot's grace ends with it (an idle pool does not spin).
    app = make_any_app(APP)
    store = app.store()
    job_id = store.enqueue("k.stubborn").id
    pool = app.spawn("--procs", "1", "--no-dashboard")
    wait_for(lambda: len(_numbers(app, "done.txt")) >= 5, timeout=60)
    assert app.cli("jobs", "cancel", str(job_id), "--db", str(app.db)).returncode == 0
    wait_for(lambda: store.get(job_id)["status"] == "dead", timeout=60)
    row = store.get(job_id)
    assert row["last_error"] == "cancelled"
    time.sleep(3.0)  # past the kill grace (2 s): the slot has no deadline left
    before = _cpu_seconds(pool.pid)
    time.sleep(2.0)
    assert _cpu_seconds(pool.pid) - before < 0.5  # a spinning loop burns ~2 s here
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=60) == 0


def test_the_cli_forgets_a_state_on_reset_and_on_a_retry_that_asks(make_any_app):
    # R37: `jobs reset-state ID`, and `dead retry --reset-state`.
    import random
    from jobpool.lifecycle import FATAL, Outcome
    app = make_any_app(APP)
    store = app.store()
    kept, reset = store.enqueue("k.count", 1).id, store.enqueue("k.count", 1).id
    claimer = store.claimer("pool-t", ("k.count",), ("default",), {})
    try:
        jobs = claimer.turn([], 2, time.time(), None)[1]
        for job in jobs:
            store.save_state("pool-t", job.job_id, 1, '{"next": 1}')
        claimer.turn([Outcome(j.job_id, 1, FATAL, "Fatal: no") for j in jobs], 0, time.time(),
                     random.Random(1))
    finally:
        claimer.close()
    db = str(app.db)
    assert app.cli("dead", "retry", str(kept), "--db", db, check=True).stdout.strip() == (
        f"job {kept}: retried")
    assert app.cli("dead", "retry", str(reset), "--reset-state", "--db", db,
                   check=True).stdout.strip() == f"job {reset}: retried"
    assert (store.get(kept)["state"], store.get(reset)["state"]) == ('{"next": 1}', None)
    assert app.cli("jobs", "reset-state", str(kept), "--db", db, check=True).stdout.strip() == (
        f"job {kept}: reset")
    again = app.cli("jobs", "reset-state", str(kept), "--db", db)
    assert (again.returncode, again.stderr.strip()) == (1, f"job {kept}: not reset: no saved state")
    assert store.get(kept)["state"] is None


def test_a_state_json_cannot_carry_as_it_is_refused_naming_why():
    # Checked before anything else (outside a pool it then does nothing).
    with pytest.raises(ValueError, match="are both written as the JSON key '1'"):
        jobpool.save_state({"seen": {1: True, "1": False}})
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"), default_recursion_limit():
        jobpool.save_state(deep)
