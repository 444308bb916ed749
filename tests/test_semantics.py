"""Job semantics through real pools (R3, R7, R11, R12, R21, R22, R33), on every store but
where the rule is SQLite's own (wake-up sockets); R10, R17 and R18 are driven in-process
in tests/test_supervisor_inprocess.py, on a clock the test sets."""
from __future__ import annotations

import json
import time

from .conftest import wait_for

APP = """
import json, os, time
from pathlib import Path
import jobpool
from jobpool import job, Fatal

HERE = Path(__file__).parent

def record(*items):
    with open(HERE / "order.txt", "a") as fh:
        fh.write(json.dumps(items) + "\\n")

@job(name="t.record")
def rec(tag):
    record(tag)

@job(name="t.step", store_result=True)
def step(tag):
    record(tag)
    return tag

@job(name="t.fail_step")
def fail_step(tag):
    record(tag)
    raise Fatal("step failed")

def on_dead(job, reason):
    record("on_dead", job["id"], job["name"], reason)

@job(name="t.dies", on_dead=on_dead, backoff_base=0, max_attempts=2)
def dies():
    raise RuntimeError("boom")

def bad_hook(job, reason):
    raise RuntimeError("the hook itself fails")

@job(name="t.dies_badly", on_dead=bad_hook)
def dies_badly():
    raise Fatal("no")


@job(name="t.progress")
def reports_progress():
    jobpool.progress(10, "reading")
    time.sleep(0.15)
    jobpool.progress(60, "writing")
    time.sleep(0.15)
    raise Fatal("broke while writing")
"""


def order(app) -> list:
    path = app.dir / "order.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tags(app) -> list:
    return [item[0] for item in order(app)]


def test_priority_then_age_decides_the_order(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue("t.record", "old")
    store.enqueue_with("t.record", args=["urgent"], priority=10)
    store.enqueue("t.record", "new")
    app.start("--procs", "1")
    assert tags(app) == ["urgent", "old", "new"]


def test_queues_are_served_in_the_order_given(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_with("t.record", args=["bulk"], queue="bulk", priority=99)
    store.enqueue_with("t.record", args=["interactive"], queue="interactive")
    store.enqueue_with("t.record", args=["ignored"], queue="elsewhere")
    app.start("--procs", "1", "--queues", "interactive,bulk")
    assert tags(app) == ["interactive", "bulk"]
    assert store.stats()["ready"] == 1  # the queue nobody serves is left alone


def test_unknown_job_names_stay_queued_untouched(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    job_id = store.enqueue("a.newer.deployment.job").id
    store.enqueue("t.record", "known")
    app.start("--procs", "1")
    job = store.get(job_id)
    assert (job["status"], job["attempts"], job["last_error"]) == ("ready", 0, None)


def test_a_chain_runs_its_steps_in_order_and_lists_together(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_with("t.step", args=["a"], then=[
        _sig("t.step", "b"), _sig("t.step", "c")]).id
    app.start("--procs", "2")
    assert tags(app) == ["a", "b", "c"]
    chain = [store.get(j["id"], raw_result=True) for j in store.list_jobs(chain=first)]
    assert [(r["status"], r["chain_root"], bytes(r["result"]).decode()
             if not isinstance(r["result"], str) else r["result"]) for r in chain] == [
        ("done", None, '"a"'), ("done", first, '"b"'), ("done", first, '"c"')]
    store.enqueue("t.step", "unrelated")
    listed = json.loads(app.cli("jobs", "list", "--chain", str(first), "--json", "--db",
                                str(app.db), check=True).stdout)
    assert [j["id"] for j in listed] == [r["id"] for r in chain]


def test_a_failed_step_enqueues_nothing_after_it(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_with("t.fail_step", args=["a"], then=_sig("t.step", "never"))
    app.start("--procs", "1")
    assert tags(app) == ["a"]
    assert len(store.list_jobs()) == 1


def test_on_dead_runs_exactly_once_per_dead_job(make_any_app):
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.dies").id
    app.start("--procs", "1")
    hooks = [o for o in order(app) if o[0] == "on_dead"]
    assert len(hooks) == 1
    _, hooked_id, name, reason = hooks[0]
    assert (hooked_id, name) == (job_id, "t.dies")
    assert reason.startswith("RuntimeError: boom; no attempts left after 2")
    # A second pool on the same store does not run it again.
    app.start("--procs", "1")
    assert len([o for o in order(app) if o[0] == "on_dead"]) == 1


def test_a_failing_on_dead_hook_does_not_hurt_the_pool(make_any_app):
    app = make_any_app(APP)
    app.store().enqueue("t.dies_badly")
    app.store().enqueue("t.record", "after")
    result = app.start("--procs", "1")
    assert "after" in tags(app)
    assert "pool_stopped" in result.stderr


PERIODIC_APP = """
import time
from jobpool import job

@job(name="t.tick", every=0.5)
def tick():
    pass

@job(name="t.cron", cron="* * * * *")
def every_minute():
    pass
"""


def test_periodic_jobs_are_enqueued_once_per_occurrence_across_pools(make_any_app):
    app = make_any_app(PERIODIC_APP)
    pools = [app.spawn("--procs", "1") for _ in range(2)]
    time.sleep(2.2)
    for pool in pools:
        pool.terminate()
        assert pool.wait(timeout=20) == 0
    store = app.store()
    keys = [r["key"] for r in store.list_jobs(name="t.tick")]
    assert 3 <= len(keys) <= 6
    assert len(keys) == len(set(keys))  # each occurrence once, though two pools raced
    # The cron job's latest occurrence (this minute) was enqueued once, not per pool.
    crons = store.list_jobs(name="t.cron")
    assert 1 <= len(crons) <= 2 and len({r["key"] for r in crons}) == len(crons)


ON_START_APP = """
import jobpool

@jobpool.job(name="t.record")
def rec(tag):
    pass

@jobpool.on_start
def rederive(store):
    store.enqueue_with("t.record", args=["from on_start"], key="rederived")
"""


def test_on_start_hooks_run_in_each_supervisor_and_stay_idempotent(make_any_app):
    app = make_any_app(ON_START_APP)
    app.start("--procs", "1")
    app.start("--procs", "1")
    done = [j for j in app.store().list_jobs(name="t.record") if j["key"] == "rederived"]
    assert len(done) == 2 and all(r["status"] == "done" for r in done)


def test_progress_is_stored_and_kept_with_the_error(make_any_app):
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.progress").id
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert job["status"] == "dead"
    assert (job["progress"], job["stage"]) == (60, "writing")


def test_progress_closes_at_100_on_success(make_any_app):
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.record", "x").id
    app.start("--procs", "1")
    assert app.store().get(job_id)["progress"] == 100


def test_an_enqueue_wakes_an_idle_pool_at_once(make_any_app):
    """R11: pickup without waiting for the poll tick (set to 30 s here)."""
    app = make_any_app(APP)
    pool = app.spawn("--procs", "1", "--poll-interval", "30")
    store = app.store()
    wait_for(lambda: store.pools())
    time.sleep(0.3)
    assert_woken_well_before_the_poll_tick(store, pool)


def test_a_pool_left_alone_above_a_gap_is_still_woken(make_app):
    """R11: when the first of two pools exits, the second moves its wake-up socket
    down at its next heartbeat, so enqueues keep waking it (poll tick 30 s here)."""
    app = make_app(APP)
    first = app.spawn("--procs", "1", "--poll-interval", "30")
    store = app.store()
    wait_for(lambda: len(store.pools()) == 1)
    second = app.spawn("--procs", "1", "--poll-interval", "30")
    wait_for(lambda: len(store.pools()) == 2)
    first.terminate()
    assert first.wait(timeout=20) == 0
    time.sleep(2.5)  # two heartbeats
    assert_woken_well_before_the_poll_tick(store, second)


def assert_woken_well_before_the_poll_tick(store, pool):
    """Enqueue one job into an idle pool polling every 30 s; it must run within 5 s."""
    started = time.time()
    job_id = store.enqueue("t.record", "wake").id
    wait_for(lambda: store.get(job_id)["status"] == "done", timeout=10)
    assert time.time() - started < 5
    pool.terminate()
    assert pool.wait(timeout=20) == 0


def _sig(name, *args):
    from jobpool import Signature
    return Signature(name, args, {})
