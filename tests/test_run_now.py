"""R51: run now. A job waiting for its time (scheduled, or out a retry's backoff)
becomes claimable at once, keeping its attempts and its place rules (R7); a running,
done or dead job is refused naming its status. Through the store on both stores, the
CLI, and a real pool."""
from __future__ import annotations

import random
import time

import pytest

from jobpool.errors import EnqueueError
from jobpool.lifecycle import DEFER, ERROR, FATAL, Outcome, Policy

APP = """
from jobpool import job

@job(name="t.later")
def later(n):
    return n * 2
"""


def _claim(claimer, n):
    return [job.job_id for job in claimer.turn([], n, time.time(), None)[1]]


def test_waiting_jobs_run_now_and_the_rest_are_refused_naming_their_status(any_store):
    store = any_store
    scheduled = store.enqueue_with("t.later", args=[1], delay=3600).id
    backing_off = store.enqueue_with("t.later", args=[2], max_attempts=3).id
    deferred = store.enqueue_with("t.later", args=[3]).id
    running = store.enqueue_with("t.later", args=[4]).id
    dead = store.enqueue_with("t.later", args=[5]).id
    due = store.enqueue_with("t.later", args=[6]).id
    claimer = store.claimer("pool-r", ["t.later"], ["default"],
                            {"t.later": Policy(backoff_base=3600.0, backoff_max=3600.0)})
    try:
        assert _claim(claimer, 4) == [backing_off, deferred, running, dead]
        claimer.turn([Outcome(backing_off, 1, ERROR, "boom"),
                      Outcome(deferred, 1, DEFER, delay=3600.0),
                      Outcome(dead, 1, FATAL, "no")], 0, time.time(), random.Random(1))
        assert _claim(claimer, 5) == [due]          # the others wait an hour
        before = {job_id: store.get(job_id) for job_id in (backing_off, deferred)}
        answers = store.run_now([scheduled, backing_off, deferred, running, dead, due, 999_999])
        assert answers == {scheduled: "due now", backing_off: "due now", deferred: "due now",
                           running: "running", dead: "dead", due: "running",
                           999_999: "no such job"}
        # Attempts kept: the retry is still its second attempt, the deferral its first.
        assert store.get(backing_off)["attempts"] == before[backing_off]["attempts"] == 1
        assert store.get(backing_off)["last_error"] == "boom"
        assert store.get(deferred)["attempts"] == 0
        # R7: the deferred job kept its earlier place in line; the others are in line
        # from now, in id order.
        assert sorted(_claim(claimer, 5)) == sorted([deferred, scheduled, backing_off])
        assert store.get(backing_off)["attempts"] == 2
    finally:
        claimer.close()
    assert store.run_now([scheduled]) == {scheduled: "running"}


def test_a_deferred_job_run_now_is_claimed_before_younger_jobs(any_store):
    # R7, R17: its place in line is where it was when it was first due.
    store = any_store
    deferred = store.enqueue("t.later", 1).id
    claimer = store.claimer("pool-r", ["t.later"], ["default"], {})
    try:
        assert _claim(claimer, 1) == [deferred]
        claimer.turn([Outcome(deferred, 1, DEFER, delay=3600.0)], 0, time.time(), None)
        younger = store.enqueue("t.later", 2).id
        assert store.run_now([deferred]) == {deferred: "due now"}
        assert _claim(claimer, 1) == [deferred]
        assert _claim(claimer, 1) == [younger]
    finally:
        claimer.close()


def test_run_now_matching_moves_only_waiting_jobs_of_the_name_and_queue(any_store):
    store = any_store
    chosen = store.enqueue_with("t.later", args=[1], delay=3600, queue="q1").id
    other_queue = store.enqueue_with("t.later", args=[2], delay=3600, queue="q2").id
    other_name = store.enqueue_with("t.other", delay=3600, queue="q1").id
    store.enqueue_with("t.later", args=[3], queue="q1")          # due already: not counted
    assert store.run_now_matching(name="t.later", queue="q1") == 1
    assert store.get(chosen)["run_at"] <= time.time()
    assert store.get(other_queue)["run_at"] > time.time() + 3000
    assert store.get(other_name)["run_at"] > time.time() + 3000
    assert store.run_now_matching() == 2
    assert store.run_now_matching() == 0


@pytest.mark.parametrize("ids", ["12", [True], [1.5], ["1"], None])
def test_run_now_refuses_what_is_not_a_list_of_job_ids(any_store, ids):
    with pytest.raises(EnqueueError, match="run_now"):
        any_store.run_now(ids)


def test_run_now_answers_an_id_no_store_can_have_as_no_such_job(any_store):
    # As `get` answers it, and as the dead letters' calls do (0 was refused here alone).
    assert any_store.run_now([0, -5, 2**63]) == dict.fromkeys([0, -5, 2**63], "no such job")


def test_jobs_run_now_on_the_cli_and_a_pool_runs_the_job_at_once(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    waiting = store.enqueue_with("t.later", args=[21], delay=3600).id
    done = store.enqueue_with("t.later", args=[1]).id
    app.start("--procs", "1")
    assert store.get(done)["status"] == "done"
    assert store.get(waiting)["status"] == "ready"           # a burst leaves it waiting
    out = app.cli("jobs", "run-now", str(waiting), str(done), "999999", "--db", str(app.db))
    assert out.returncode == 1
    assert out.stdout == f"job {waiting}: due now\n"
    # An unknown id is said as every command on ids says it (cancel, dead retry...).
    assert out.stderr == f"job {done}: not due now: it is done\njob 999999: not due now: no such job\n"
    cancelled = app.cli("jobs", "cancel", "999999", "--db", str(app.db))
    assert cancelled.stderr == "job 999999: not cancelled: no such job\n"
    app.start("--procs", "1")
    row = store.get(waiting)
    assert (row["status"], row["attempts"]) == ("done", 1)
    later = store.enqueue_with("t.later", args=[2], delay=3600).id
    out = app.cli("jobs", "run-now", "--all-scheduled", "--name", "t.later", "--db", str(app.db),
                  check=True)
    assert out.stdout == "1 waiting job due now\n"
    assert store.get(later)["run_at"] <= time.time()


@pytest.mark.parametrize("args, needle", [
    ((), "job ids or --all-scheduled, not neither"),
    (("1", "--all-scheduled"), "not both"),
    (("1", "--name", "x"), "--name and --queue choose jobs for --all-scheduled"),
])
def test_jobs_run_now_mistakes_are_one_line(make_app, args, needle):
    app = make_app(APP)
    app.store().enqueue("t.later", 1)
    result = app.cli("jobs", "run-now", *args, "--db", str(app.db))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert needle in result.stderr
