"""The Store protocol's contract (jobpool/store/base.py), the same test for every store:
what producers, operators and a supervisor's claimer may rely on wherever jobs live."""
from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest

import jobpool
from jobpool.errors import EnqueueError, JobNotFound, StoreError
from jobpool.lifecycle import DONE, ERROR, Outcome, Policy
from jobpool.store import Store
NAMES = ("c.job", "c.next")


@pytest.fixture
def claimers():
    """``claimers(store, owner, queues)``: a supervisor's claimer, closed after the test."""
    made = []

    def make(store, owner="pool-a", queues=("default",), policies=None):
        made.append(store.claimer(owner, NAMES, queues, policies or {}))
        return made[-1]
    yield make
    for c in made:
        c.close()


def claim(c, n):
    _settled, claimed, _expired = c.turn([], n, time.time(), None)
    return claimed


def settle(c, outcome):
    settled, _claimed, _expired = c.turn([outcome], 0, time.time(), random.Random(1))
    return settled


def test_every_store_implements_the_protocol(any_store):
    assert isinstance(any_store, Store)


def test_an_enqueued_job_reads_back_ready_with_its_arguments(any_store):
    # R1, R2
    handle = any_store.enqueue("c.job", 1, "two", three=3)
    job = any_store.get(handle.id)
    assert (job["name"], job["status"], job["queue"], job["attempts"]) == ("c.job", "ready",
                                                                          "default", 0)
    assert job["payload"] == '[[1,"two"],{"three":3}]'
    assert any_store.stats()["ready"] == 1


def test_a_delayed_job_is_scheduled_until_it_is_due(any_store, claimers):
    # R2, R7
    later = any_store.enqueue_with("c.job", delay=3600).id
    assert [j["id"] for j in any_store.list_jobs(status="scheduled")] == [later]
    assert any_store.stats()["scheduled"] == 1 and any_store.stats()["ready"] == 0
    assert claim(claimers(any_store), 5) == []


def test_a_key_is_unique_among_live_jobs_and_free_again_once_done(any_store, claimers):
    # R3
    first = any_store.enqueue_with("c.job", key="nightly")
    again = any_store.enqueue_with("c.job", key="nightly")
    assert (again.id, again.duplicate) == (first.id, True)
    c = claimers(any_store)
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, job.attempt, DONE))
    fresh = any_store.enqueue_with("c.job", key="nightly")
    assert fresh.id != first.id and not fresh.duplicate


def test_a_key_period_makes_a_recently_finished_key_a_duplicate(any_store, claimers):
    # R3 over a period ("import this file once a day"), as Oban's and River's unique periods
    first = any_store.enqueue_with("c.job", key="daily", key_period=86400).id
    c = claimers(any_store)
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, job.attempt, DONE))
    again = any_store.enqueue_with("c.job", key="daily", key_period=timedelta(days=1))
    assert (again.id, again.duplicate) == (first, True)
    # Without a period, only live jobs count: the key is free again.
    assert not any_store.enqueue_with("c.job", key="daily").duplicate
    # A job that finished before the period began does not count either.
    time.sleep(0.05)
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, job.attempt, DONE))
    time.sleep(0.1)
    assert not any_store.enqueue_with("c.job", key="daily", key_period=0.1).duplicate
    with pytest.raises(EnqueueError, match="key_period needs a key"):
        any_store.enqueue_with("c.job", key_period=60)
    with pytest.raises(EnqueueError, match="key_period must be more than 0"):
        any_store.enqueue_with("c.job", key="k", key_period=0)


def test_enqueue_many_is_all_or_nothing_and_keeps_item_order(any_store):
    # R4
    handles = any_store.enqueue_many("c.job", [(i,) for i in range(50)])
    assert [any_store.get(h.id)["payload"] for h in handles[:3]] == [
        "[[0],{}]", "[[1],{}]", "[[2],{}]"]
    assert len(handles) == 50 and len(set(handles.ids)) == 50
    with pytest.raises(EnqueueError, match="item 2"):
        any_store.enqueue_many("c.job", [(1,), (2,), (object(),)])
    assert any_store.stats()["ready"] == 50  # nothing of the bad batch was written


def test_a_claim_takes_at_most_n_in_priority_then_age_order(any_store, claimers):
    # R6, R7
    old = any_store.enqueue("c.job", "old").id
    urgent = any_store.enqueue_with("c.job", args=["urgent"], priority=10).id
    new = any_store.enqueue("c.job", "new").id
    c = claimers(any_store)
    assert [j.job_id for j in claim(c, 2)] == [urgent, old]
    assert [j.job_id for j in claim(c, 5)] == [new]
    assert any_store.get(urgent)["status"] == "running"
    assert any_store.get(urgent)["attempts"] == 1  # spent at claim (R9)


def test_queues_are_claimed_in_the_order_the_pool_lists_them(any_store, claimers):
    # R7
    bulk = any_store.enqueue_with("c.job", queue="bulk", priority=99).id
    first = any_store.enqueue_with("c.job", queue="interactive").id
    other = any_store.enqueue_with("c.job", queue="elsewhere").id
    c = claimers(any_store, queues=("interactive", "bulk"))
    assert [j.job_id for j in claim(c, 5)] == [first, bulk]
    assert any_store.get(other)["status"] == "ready"


def test_two_claimers_never_hold_one_job(any_store, claimers):
    # R8
    any_store.enqueue_many("c.job", [(i,) for i in range(20)])
    a, b = claimers(any_store, "pool-a"), claimers(any_store, "pool-b")
    got = claim(a, 7) + claim(b, 7) + claim(a, 7) + claim(b, 7)
    ids = [j.job_id for j in got]
    assert len(ids) == 20 and len(set(ids)) == 20


def test_a_settle_of_a_lease_taken_back_is_lost(any_store, claimers):
    # R8, R24: pool-b reclaims pool-a's lease; pool-a's late settle changes nothing
    job_id = any_store.enqueue("c.job").id
    a, b = claimers(any_store, "pool-a"), claimers(any_store, "pool-b")
    (job,) = claim(a, 1)
    (back,) = b.reclaim_owner("pool-a", "supervisor pool-a died", time.time())
    assert (back.job_id, back.status) == (job_id, "ready")
    (lost,) = settle(a, Outcome(job.job_id, job.attempt, DONE))
    assert lost.status == "lost"
    row = any_store.get(job_id)
    assert (row["status"], row["attempts"]) == ("ready", 1)
    assert row["last_error"] == "supervisor pool-a died"


def test_an_error_is_retried_after_its_backoff_then_dead_naming_the_budget(any_store, claimers):
    # R13, R16, R19a
    slow = any_store.enqueue_with("c.job", max_attempts=2).id
    c = claimers(any_store)
    (job,) = claim(c, 1)
    (first,) = settle(c, Outcome(job.job_id, job.attempt, ERROR, "RuntimeError: boom"))
    assert first.status == "ready"
    row = any_store.get(slow)
    assert row["run_at"] >= row["started_at"] + 0.75  # the default backoff: 1 s, less jitter
    assert claim(c, 1) == []  # not due yet
    # With no backoff, the second failure spends the budget: dead, naming it.
    quick = any_store.enqueue_with("c.next", max_attempts=2).id
    q = claimers(any_store, "pool-q", policies={"c.next": Policy(backoff_base=0.0)})
    for attempt in (1, 2):
        (job,) = claim(q, 1)
        assert (job.job_id, job.attempt) == (quick, attempt)
        (done,) = settle(q, Outcome(job.job_id, job.attempt, ERROR, "RuntimeError: boom"))
    assert done.status == "dead"
    row = any_store.get(quick)
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert row["last_error"] == "RuntimeError: boom; no attempts left after 2"
    assert [a["outcome"] for a in any_store.attempts(quick)] == ["error", "error"]

def test_a_completed_step_enqueues_the_next_in_the_same_transaction(any_store, claimers):
    # R12
    first = any_store.enqueue_with("c.job", args=["a"], then=[jobpool.Signature("c.next", ("b",))]).id
    c = claimers(any_store)
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, job.attempt, DONE, result='"a"'))
    (step,) = claim(c, 1)
    assert (step.name, step.payload) == ("c.next", b'[["b"],{}]')
    assert [j["id"] for j in any_store.list_jobs(chain=first)] == [first, step.job_id]
    assert any_store.get(first)["status"] == "done"


def test_cancel_kills_a_ready_job_and_flags_a_running_one(any_store, claimers):
    # R31
    ready = any_store.enqueue("c.job").id
    running = any_store.enqueue("c.job").id
    assert any_store.cancel(ready) == "cancelled"
    row = any_store.get(ready)
    assert (row["status"], row["last_error"]) == ("dead", "cancelled")
    c = claimers(any_store)
    (job,) = claim(c, 1)
    assert job.job_id == running
    assert any_store.cancel(running) == "requested"
    assert any_store.cancel(ready) == "dead"
    from jobpool.store.records import Heartbeat
    beat = Heartbeat(owner="pool-a", host="h", pid=1, procs=1, queues=("default",),
                     names=NAMES, core="test", counters_json="{}", slots_json="[]")
    assert any_store.heartbeat(beat, [], time.time()).cancels == ((running, 1),)


def test_many_jobs_are_cancelled_in_one_call_each_answered(any_store, claimers):
    # R31, R34: the web's "cancel all matching" (500 ids a call, not a transaction each)
    from jobpool.handles import Signature
    with any_store.batch() as batch:
        first, second, third = (batch.add(Signature("c.job")).id for _ in range(3))
    c = claimers(any_store)
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, job.attempt, DONE))
    (job,) = claim(c, 1)
    assert (job.job_id, any_store.get(first)["status"]) == (second, "done")
    assert any_store.cancel_many([]) == {}
    answers = any_store.cancel_many([second, 2**70, 0, second, third, first])
    assert answers == {second: "requested", 2**70: "no such job", 0: "no such job",
                       third: "cancelled", first: "done"}
    assert list(answers) == [second, 2**70, 0, third, first]  # in the order asked, once
    row = any_store.get(third)
    assert (row["status"], row["last_error"]) == ("dead", "cancelled")
    assert any_store.batch_status(batch.id).dead == 1  # the member's end is counted
    assert any_store.cancel_many([third]) == {third: "dead"}
    for wrong in ("12", [True], None, [1.0]):
        with pytest.raises(EnqueueError):
            any_store.cancel_many(wrong)
    with pytest.raises(ValueError):
        any_store.cancel_many([third], now="y")


def test_an_operator_stop_reaches_a_live_pool_once(any_store):
    # R25, R29
    from jobpool.store.records import Heartbeat
    beat = Heartbeat(owner="host:1:1", host="host", pid=1, procs=2, queues=("default",),
                     names=NAMES, core="test", counters_json='{"completed": 3}', slots_json="[]")
    assert any_store.heartbeat(beat, [], time.time()).stop is False
    assert [p["counters"]["completed"] for p in any_store.pools()] == [3]
    assert any_store.request_stop() == 1
    assert any_store.heartbeat(beat, [], time.time()).stop is True
    assert any_store.heartbeat(beat, [], time.time()).stop is False  # acted on once
    any_store.forget_pool("host:1:1")
    assert any_store.pools() == []


def test_a_periodic_occurrence_is_enqueued_once(any_store):
    # R33
    occurrence = float(int(time.time()) - 60)
    first = any_store.enqueue_occurrence("c.job", occurrence)
    assert first is not None
    assert any_store.enqueue_occurrence("c.job", occurrence) is None
    assert any_store.stats()["ready"] == 1


def test_a_dead_jobs_hook_is_taken_once(any_store):
    # R21
    job_id = any_store.enqueue("c.job").id
    any_store.cancel(job_id)
    assert any_store.pending_hooks(["c.job"]) == [job_id]
    assert any_store.take_hook(job_id) is True
    assert any_store.take_hook(job_id) is False
    assert any_store.pending_hooks(["c.job"]) == []


def test_the_sweep_removes_done_rows_past_their_ttl(any_store, claimers):
    # R32
    job_id = any_store.enqueue("c.job").id
    c = claimers(any_store)
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, job.attempt, DONE))
    assert any_store.sweep(time.time(), result_ttl=3600, dead_letter_limit=100) == 0
    assert any_store.sweep(time.time() + 1, result_ttl=-60, dead_letter_limit=100) == 1
    with pytest.raises(JobNotFound):
        any_store.get(job_id)
    assert any_store.attempts(job_id) == []


def test_dead_letters_are_listed_retried_under_their_id_and_deleted(any_store):
    # R32
    keyed = any_store.enqueue_with("c.job", key="k").id
    other = any_store.enqueue_with("c.next").id
    live = any_store.enqueue("c.job").id
    for job_id in (keyed, other):
        any_store.cancel(job_id)
    assert sorted(j["id"] for j in any_store.dead.list()) == [keyed, other]
    assert any_store.dead.ids(name="c.next") == [other]
    holder = any_store.enqueue_with("c.job", key="k").id  # a live job takes the key
    assert any_store.dead.retry([keyed, other, live, 999_999]) == {
        keyed: "key held by a live job", other: "retried", live: "not dead (ready)",
        999_999: "no such job"}
    row = any_store.get(other)
    assert (row["status"], row["attempts"]) == ("ready", 0)
    assert any_store.get(keyed)["status"] == "dead"
    assert any_store.dead.delete([keyed, holder]) == {keyed: "deleted",
                                                      holder: "not dead (ready)"}
    assert any_store.dead.list() == []


def test_a_purge_removes_dead_jobs_older_than_asked_with_their_attempts(any_store):
    # R32
    job_id = any_store.enqueue("c.job").id
    any_store.cancel(job_id)
    assert any_store.dead.purge(3600) == 0  # finished just now: kept
    # A negative age would take rows that end after the call's own clock too: refused,
    # with nothing deleted; a timedelta is an age too.
    for wrong in (-60, float("nan"), "3600", None, True):
        with pytest.raises(EnqueueError, match="older_than"):
            any_store.dead.purge(wrong)
    assert any_store.get(job_id)["status"] == "dead"
    assert any_store.dead.purge(timedelta(hours=1)) == 0
    assert any_store.dead.purge(10**400) == 0  # longer ago than any clock: nothing
    assert any_store.dead.purge(0) == 1
    with pytest.raises(JobNotFound):
        any_store.get(job_id)


@pytest.mark.parametrize("call", ["retry", "delete"])
def test_a_dead_letter_call_takes_a_list_of_ids_and_nothing_else(any_store, call):
    # A string is not its characters: "12" named dead jobs 1 and 2 (and b"\x03" job 3),
    # which a retry or a delete then changed for good.
    ids = [any_store.enqueue("c.job").id for _ in range(3)]
    for job_id in ids:
        any_store.cancel(job_id)
    act = getattr(any_store.dead, call)
    for wrong in ("12", b"\x01\x02", 1, None, [True], [1.0], ["1"]):
        with pytest.raises(EnqueueError, match=f"dead.{call}"):
            act(wrong)
    assert sorted(j["id"] for j in any_store.dead.list()) == ids  # nothing touched
    # An id no store can have names no job, as `get` answers it (the web's retry of job 0
    # was a 500 while it was refused).
    assert act([0, -1, 2**63, 10**30]) == dict.fromkeys([0, -1, 2**63, 10**30], "no such job")
    assert any_store.run_now([0, 2**63]) == {0: "no such job", 2**63: "no such job"}
    # An id named twice is answered once, for what the call did to it.
    answer = {"retry": "retried", "delete": "deleted"}[call]
    assert act([ids[0], ids[0]]) == {ids[0]: answer}
    assert act((i for i in ids[1:])) == {ids[1]: answer, ids[2]: answer}


def _callers_connection(store_url):
    """The application's own connection to the database the store lives in."""
    if store_url.startswith("postgresql"):
        import psycopg

        from psycopg.rows import dict_row

        from jobpool.store.postgres.connection import parse_url
        # Not autocommit (its own transaction), and rows as dicts, as many apps have them.
        return psycopg.connect(parse_url(store_url).conninfo, row_factory=dict_row)
    import sqlite3
    conn = sqlite3.connect(store_url, isolation_level=None)
    conn.execute("BEGIN")
    return conn


def test_an_enqueue_in_the_callers_transaction_exists_only_if_it_commits(store_url, any_store):
    # R5
    conn = _callers_connection(store_url)
    try:
        any_store.enqueue_with("c.job", args=(1,), connection=conn)
        conn.rollback() if store_url.startswith("postgresql") else conn.execute("ROLLBACK")
        assert any_store.stats()["ready"] == 0
        if not store_url.startswith("postgresql"):
            conn.execute("BEGIN")
        handle = any_store.enqueue_with("c.job", args=(2,), connection=conn)
        conn.commit() if store_url.startswith("postgresql") else conn.execute("COMMIT")
        assert any_store.get(handle.id)["payload"] == "[[2],{}]"
    finally:
        conn.close()
    # A connection that cannot take the row is a StoreError on both stores (sqlite3's
    # own errors, on SQLite, missed every `except StoreError`).
    with pytest.raises(StoreError, match="on the caller's connection failed"):
        any_store.enqueue_with("c.job", args=(3,), connection=conn)  # closed


def test_any_printable_job_name_is_claimed_and_settled(any_store, claimers):
    # R1: a name is any printable text; none of it is SQL (a % once broke a claim)
    name = "c.100%_done's\\step"
    job_id = any_store.enqueue(name).id
    c = any_store.claimer("pool-a", (name,), ("default",), {})
    try:
        (job,) = claim(c, 1)
        assert (job.job_id, job.name) == (job_id, name)
        settle(c, Outcome(job.job_id, job.attempt, DONE))
    finally:
        c.close()
    assert any_store.get(job_id)["status"] == "done"


def test_a_budget_too_large_to_store_is_refused_before_anything_is_written(any_store):
    # R1, R41
    with pytest.raises(EnqueueError, match="max_attempts must be at most 2147483647"):
        any_store.enqueue_with("c.job", max_attempts=2**31)
    assert any_store.stats()["ready"] == 0


def test_a_stop_or_scale_can_target_one_pool_or_one_host(any_store):
    # R25, R27 across a fleet: --pool OWNER, --host HOST
    from jobpool.store.records import Heartbeat

    def beat(owner, host):
        return any_store.heartbeat(Heartbeat(
            owner=owner, host=host, pid=1, procs=2, queues=("default",), names=NAMES,
            core="test", counters_json="{}", slots_json="[]"), [], time.time())
    for owner, host in (("a:1:1", "a"), ("a:2:1", "a"), ("b:1:1", "b")):
        beat(owner, host)
    assert any_store.request_stop(host="b") == 1
    assert [beat(o, h).stop for o, h in (("a:1:1", "a"), ("a:2:1", "a"), ("b:1:1", "b"))] == [
        False, False, True]
    assert any_store.request_scale(4, owner="a:2:1") == 1
    assert [beat(o, h).procs for o, h in (("a:1:1", "a"), ("a:2:1", "a"), ("b:1:1", "b"))] == [
        None, 4, None]
    assert any_store.request_scale(3, host="c") == 0
    assert any_store.request_scale(3) == 3


def test_enqueue_many_payloads_are_those_of_single_enqueues(any_store):
    # R4: the batch path writes each payload byte for byte as enqueue does
    sig = jobpool.Signature("c.job", (1, "a"), {"k": [2, 3]})
    single = any_store.enqueue_with("c.job", args=(1, "a"), kwargs={"k": [2, 3]}).id
    (batched, plain) = any_store.enqueue_many("c.job", [sig, (4,)])
    assert any_store.get(batched.id)["payload"] == any_store.get(single)["payload"]
    assert any_store.get(plain.id)["payload"] == "[[4],{}]"


def test_enqueue_many_with_keys_reports_duplicates_per_item(any_store):
    # R3, R4: a key per item; what a live job (or an earlier item) holds is not written
    held = any_store.enqueue_with("c.job", args=("old",), key="b").id
    handles = any_store.enqueue_many("c.job", [("a",), ("b",), ("c",), ("a again",), ("free",)],
                                     keys=["a", "b", "c", "a", None])
    assert handles.duplicates == [1, 3]
    assert [h.duplicate for h in handles] == [False, True, False, True, False]
    assert handles[1].id == held and handles[3].id == handles[0].id
    assert any_store.get(handles[2].id)["key"] == "c"
    assert any_store.stats()["ready"] == 4  # "old", "a", "c", "free"
    with pytest.raises(EnqueueError, match="keys: 2 keys for 3 items"):
        any_store.enqueue_many("c.job", [(1,), (2,), (3,)], keys=["x", "y"])
    with pytest.raises(EnqueueError, match=r"keys\[1\] must be a non-empty string"):
        any_store.enqueue_many("c.job", [(1,), (2,)], keys=["x", ""])
    assert any_store.stats()["ready"] == 4  # nothing of the refused batches


def test_the_dashboard_reads_counts_failures_and_running_jobs(any_store, claimers):
    # R29 on every store
    any_store.enqueue_many("c.job", [(i,) for i in range(3)])
    any_store.enqueue_with("c.job", queue="bulk", delay=3600)
    c = claimers(any_store, policies={"c.job": Policy(backoff_base=0.0)})
    first, second = claim(c, 2)
    settle(c, Outcome(first.job_id, first.attempt, ERROR, "RuntimeError: boom"))
    rows = any_store.dashboard(time.time())
    counts = {(q, status): (n, later) for q, status, n, later in rows.queue_counts}
    assert counts[("default", "ready")] == (2, 0) and counts[("default", "running")] == (1, 0)
    assert counts[("bulk", "ready")] == (1, 1)  # ready but not due: scheduled
    assert [f[0] for f in rows.failures] == [first.job_id]
    assert [r[0] for r in rows.running] == [second.job_id]
    assert rows.done == 0


@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_a_viewer_whose_clock_is_off_reads_postgresql_rows_by_the_servers_clock(
        pg_url, claimers, skew):
    # R7a, R29: PostgreSQL dates rows by its own clock, so the dashboard of a host an
    # hour off (`jobpool top`, the web's) splits ready from scheduled, counts the last
    # minute's done jobs and ages the running ones by it. Before, the viewer's clock
    # made the scheduled job due (or every job scheduled) and lost the minute's count.
    from jobpool.snapshot import read_snapshot
    store = jobpool.connect(pg_url)
    try:
        store.enqueue_with("c.job", delay=600)
        store.enqueue_many("c.job", [(1,), (2,), (3,)])
        c = claimers(store)
        done, running = claim(c, 2)
        settle(c, Outcome(done.job_id, done.attempt, DONE))
        before = time.time()
        snap = read_snapshot(store, now=before + skew)
        (queue,) = snap.queues
        assert (queue.ready, queue.scheduled, queue.running) == (1, 1, 1)
        assert snap.done_per_min == 1 == queue.done_per_min
        assert abs(snap.taken_at - before) < 60  # the frame is dated by the server
        rows = store.dashboard(before + skew)
        assert abs(rows.now - before) < 60
    finally:
        store.close()


def test_a_dashboard_on_one_host_reads_by_the_callers_clock(tmp_path, claimers):
    # R29 on SQLite: one host, one clock; the caller's `now` is the store's.
    store = jobpool.connect(str(tmp_path / "jobpool.db"))
    try:
        store.enqueue_with("c.job", delay=600)
        later = time.time() + 3600
        rows = store.dashboard(later)
        assert rows.now == later
        counts = {(q, status): (n, scheduled) for q, status, n, scheduled in rows.queue_counts}
        assert counts[("default", "ready")] == (1, 0)  # due by the caller's clock
    finally:
        store.close()


def test_a_paused_queue_reaches_every_pool_and_enqueues_still_succeed(any_store):
    # R38: kept in the store, read by every pool's heartbeat; pausing twice says so
    from jobpool.store.records import Heartbeat
    beat = Heartbeat(owner="host:1:1", host="host", pid=1, procs=2, queues=("default",),
                     names=NAMES, core="test", counters_json="{}", slots_json="[]")
    assert any_store.heartbeat(beat, [], time.time()).paused == frozenset()
    assert any_store.pause("reports") is True
    assert any_store.pause("reports") is False
    assert any_store.pause("default") is True
    assert any_store.paused_queues() == ["default", "reports"]
    assert any_store.next_due(NAMES, []) is None  # no queue claimed from: nothing is due
    assert any_store.heartbeat(beat, [], time.time()).paused == {"default", "reports"}
    assert any_store.enqueue_with("c.job", queue="reports").id  # enqueue is never refused
    assert any_store.dashboard(time.time()).paused == ["default", "reports"]
    assert any_store.resume("reports") is True
    assert any_store.resume("reports") is False
    assert any_store.heartbeat(beat, [], time.time()).paused == {"default"}
    with pytest.raises(EnqueueError, match="must not contain ':'"):
        any_store.pause("high:3")


def test_a_turn_claims_by_shares_and_gives_an_empty_queues_share_away(any_store, claimers):
    # R7 with weights and pauses: each queue up to its quota, then the rest in order
    from jobpool.queueplan import Share
    any_store.enqueue_many("c.job", [(i,) for i in range(6)], queue="high")
    any_store.enqueue_many("c.job", [(i,) for i in range(6)], queue="low")
    c = claimers(any_store, queues=("high", "low"))

    def turn(n, shares):
        return [j.queue for j in c.turn([], n, time.time(), None, shares)[1]]
    assert turn(4, (Share("high", 3), Share("low", 1))) == ["high"] * 3 + ["low"]
    assert turn(2, (Share("low", 2),)) == ["low", "low"]  # "high" paused: left out
    assert turn(3, (Share("high", 0), Share("low", 3))) == ["low"] * 3
    # "low" has nothing left: its quota goes to "high" in the same turn
    assert turn(4, (Share("low", 3), Share("high", 1))) == ["high"] * 3
    assert turn(2, ()) == []  # every queue paused


def test_a_turn_settles_several_successes_together_each_fenced(any_store, claimers):
    # R8, R12, R19a: one turn with four successes (one a chain's first step) and an
    # attempt this pool no longer holds: each is settled (or lost) as alone
    from jobpool.handles import Signature
    chained = any_store.enqueue_with("c.job", args=(0,), then=Signature("c.next", (9,), {})).id
    others = [any_store.enqueue("c.job", n).id for n in range(1, 4)]
    c = claimers(any_store)
    jobs = claim(c, 4)
    assert sorted(j.job_id for j in jobs) == sorted([chained, *others])
    stale = Outcome(jobs[0].job_id, jobs[0].attempt + 1, DONE)  # an attempt it never had
    outcomes = [Outcome(j.job_id, j.attempt, DONE, result='"ok"') for j in jobs] + [stale]
    settled, _claimed, _expired = c.turn(outcomes, 0, time.time(), random.Random(1))
    assert [s.status for s in settled] == ["done"] * 4 + ["lost"]
    for job_id in (chained, *others):
        assert any_store.get(job_id)["status"] == "done"
        assert [a["outcome"] for a in any_store.attempts(job_id)] == ["done"]
    (step,) = any_store.list_jobs(name="c.next")
    assert (step["status"], step["chain_root"]) == ("ready", chained)


def test_a_turn_settles_several_outcomes_of_each_kind_as_if_alone(any_store, claimers):
    # R8, R13, R15, R17, R18, R25, R19a: two attempts of every kind in one turn (a
    # store may send each kind as one statement), plus one it does not hold
    from jobpool.lifecycle import DEFER, FATAL, RELEASE, RESCHEDULE
    ids = [any_store.enqueue("c.job", n).id for n in range(10)]
    c = claimers(any_store)
    jobs = {j.job_id: j for j in claim(c, 10)}
    kinds = [ERROR, ERROR, DEFER, DEFER, FATAL, FATAL, RELEASE, RELEASE, RESCHEDULE, RESCHEDULE]
    outcomes = [Outcome(job_id, jobs[job_id].attempt, kind, error="boom" if kind == ERROR
                        else ("Fatal: no" if kind == FATAL else None), delay=0 if kind in (
                            DEFER, RESCHEDULE) else None, pid=4242)
                for job_id, kind in zip(ids, kinds)]
    outcomes.append(Outcome(ids[0], jobs[ids[0]].attempt + 5, ERROR, error="stale"))
    settled, _claimed, _expired = c.turn(outcomes, 0, time.time(), random.Random(1))
    assert [s.status for s in settled] == (["ready"] * 4 + ["dead"] * 2 + ["ready"] * 4
                                           + ["lost"])
    rows = [any_store.get(i) for i in ids]
    assert [(r["status"], r["attempts"]) for r in rows] == [
        ("ready", 1), ("ready", 1), ("ready", 0), ("ready", 0), ("dead", 1), ("dead", 1),
        ("ready", 1), ("ready", 1), ("ready", 0), ("ready", 0)]
    assert rows[0]["last_error"].startswith("boom") and rows[4]["last_error"].startswith("Fatal")
    assert [r["deferrals"] for r in rows[2:4]] == [1, 1]
    logged = [[(a["outcome"], a["pid"]) for a in any_store.attempts(i)] for i in ids]
    assert logged == [[(name, 4242)] for name in ("error", "error", "deferred", "deferred",
                                                  "fatal", "fatal", "released", "released",
                                                  "rescheduled", "rescheduled")]


@pytest.mark.parametrize("beyond", [2**63, -(2**63) - 1, 10**30])
def test_an_id_beyond_64_bits_names_no_row(any_store, beyond):
    # No store holds such an id: every call that takes one answers as for a missing
    # row, never with a driver's OverflowError (SQLite's binding raised it).
    from jobpool.errors import BatchNotFound
    any_store.enqueue("c.job", 1)
    for call in (any_store.get, any_store.cancel):
        with pytest.raises(JobNotFound):
            call(beyond)
    assert any_store.attempts(beyond) == []
    assert any_store.waiting_steps(beyond) == []
    assert any_store.reset_state(beyond) is False
    assert any_store.take_hook(beyond) is False
    for call in (any_store.batch_status, any_store.batches.close, any_store.batches.cancel):
        with pytest.raises(BatchNotFound):
            call(beyond)
    assert any_store.batches.members(beyond) == {}
    assert [job["status"] for job in any_store.list_jobs()] == ["ready"]  # nothing touched


@pytest.mark.parametrize("how", ["args", "kwargs", "chain", "meta", "many", "many signature",
                                 "many meta", "step meta"])
def test_a_dict_whose_keys_json_writes_as_one_is_refused_before_anything_is_written(
        any_store, how):
    # R1: {1: "a", "1": "b"} is written {"1":"a","1":"b"}: a job would get one of the two
    # values, and a chain step or metadata holding it was refused by the row checks
    # later (R44): the job before the step died without running, the metadata read as
    # malformed for good on SQLite.
    clash = {"n": {1: "a", "1": "b"}}
    step = jobpool.Signature("c.next", (), {}, None)
    calls = {
        "args": lambda: any_store.enqueue("c.job", clash),
        "kwargs": lambda: any_store.enqueue_with("c.job", kwargs={"x": [clash]}),
        "chain": lambda: any_store.enqueue_with("c.job", then=jobpool.Signature(
            "c.next", (clash,), {}, None)),
        "meta": lambda: any_store.enqueue_with("c.job", meta={"m": clash}),
        "many": lambda: any_store.enqueue_many("c.job", [(1,), (clash,)]),
        "many signature": lambda: any_store.enqueue_many("c.job", [jobpool.Signature(
            "c.job", (), {"x": {None: 1, "null": 2}}, None)]),
        "many meta": lambda: any_store.enqueue_many("c.job", [(1,)], meta={"m": clash}),
        "step meta": lambda: any_store.enqueue_with("c.job", then=step.with_meta({"m": clash})),
    }
    with pytest.raises(EnqueueError, match="are both written as the JSON key"):
        calls[how]()
    assert any_store.list_jobs() == []
    # Keys of other types that JSON writes apart are taken, as before.
    any_store.enqueue("c.job", {1: "a", 2: {True: "b", "x": [{None: 0}]}})
    assert len(any_store.list_jobs()) == 1



@pytest.mark.parametrize("wrong", [True, False, 1.0, "abc", "", b"1", None, [1], "1\x00"])
def test_an_id_that_is_not_a_whole_number_is_refused_naming_it_on_every_store(any_store, wrong):
    # `cancel(True)` cancelled job 1 on SQLite and was a refused comparison on
    # PostgreSQL; text was "no such job" on one and a store error on the other.
    from jobpool.errors import StoreError
    job_id = any_store.enqueue("c.job", 1).id
    assert job_id == 1
    calls = [any_store.get, any_store.cancel, any_store.attempts, any_store.waiting_steps,
             any_store.reset_state, any_store.batch_status, any_store.batches.close,
             any_store.batches.cancel, any_store.batches.members]
    for call in calls:
        with pytest.raises(ValueError, match="is a whole number, not") as caught:
            call(wrong)
        assert not isinstance(caught.value, StoreError)
    assert any_store.get(job_id)["status"] == "ready"  # nothing touched
    assert any_store.get(str(job_id))["id"] == job_id  # its digits name it, as before


@pytest.mark.parametrize("wrong", [float("inf"), float("nan"), "y", True, 10**400])
def test_a_now_that_is_not_a_unix_time_is_refused_before_anything_is_written(any_store, wrong):
    # SQLite wrote it into the rows: `dead.retry(now="y")` left a job due at 'y' for
    # ever, `now=inf` made rows its own row checks refuse (R44).
    dead = any_store.enqueue("c.job", 1).id
    any_store.cancel(dead)
    calls = [lambda: any_store.enqueue_with("c.job", now=wrong),
             lambda: any_store.enqueue_many("c.job", [(1,)], now=wrong),
             lambda: any_store.cancel(dead, now=wrong),
             lambda: any_store.dead.retry([dead], now=wrong)]
    calls += [lambda: any_store.stats(now=wrong), lambda: any_store.pools(now=wrong),
              lambda: any_store.unserved(now=wrong), lambda: any_store.list_jobs(now=wrong),
              lambda: any_store.count_jobs(at_most=5, now=wrong),
              lambda: any_store.dead.purge(0, now=wrong)]
    for call in calls:
        with pytest.raises(ValueError, match="now must be a Unix time"):
            call()
    assert [(j["id"], j["status"]) for j in any_store.list_jobs()] == [(dead, "dead")]


@pytest.mark.parametrize("filters, words", [
    # -1 listed every row on SQLite and was a store error on PostgreSQL; None the reverse.
    (dict(limit=-1), "limit must be a whole number from 0"),
    (dict(limit=None), "limit must be a whole number from 0"),
    (dict(limit=True), "limit must be a whole number from 0"),
    (dict(limit=1.5), "limit must be a whole number from 0"),
    (dict(after="x"), "after must be a job id"),
    (dict(chain=True), "a chain .its first job's id. is a whole number"),
    (dict(batch="b"), "a batch id is a whole number"),
    # A number compared on SQLite and was a store error on PostgreSQL.
    (dict(name=5), "the name filter must be text"),
    (dict(queue=5), "the queue filter must be text"),
    (dict(queue="a\x00"), "the queue filter must be valid Unicode text without NUL"),
    (dict(created=(1, 2, 3), newest_first=True), "the created filter must be .from, to."),
    (dict(created=(None, float("nan")), newest_first=True), "the created filter must be"),
    (dict(meta={"k": 2**63}), "a whole one within 64 bits"),
])
def test_a_listing_filter_neither_store_can_serve_is_a_value_error_naming_it(any_store, filters,
                                                                            words):
    from jobpool.errors import StoreError
    any_store.enqueue("c.job", 1)
    with pytest.raises(ValueError, match=words) as caught:
        any_store.list_jobs(**filters)
    assert not isinstance(caught.value, StoreError)
    if "limit" in filters:
        with pytest.raises(ValueError, match=words):
            any_store.dead.list(**filters)
        with pytest.raises(ValueError, match=words):
            any_store.batches.list(**filters)


def test_a_keyset_or_id_past_64_bits_lists_as_far_as_the_ids_go(any_store):
    ids = [any_store.enqueue("c.job", n).id for n in range(3)]
    listed = [j["id"] for j in any_store.list_jobs(after=2**70, newest_first=True)]
    assert listed == ids[::-1]
    assert any_store.list_jobs(after=2**70) == []
    assert any_store.list_jobs(chain=2**63) == [] and any_store.list_jobs(batch=2**63) == []
    # An empty name names no job: it lists none, where it listed every dead job.
    any_store.cancel(ids[0])
    assert any_store.dead.list(name="") == [] and any_store.dead.ids(name="") == []


def test_the_pools_own_calls_check_their_arguments_alike(any_store):
    # R32, R33, R29, R47: the calls a pool and the dashboards make, given what no pool
    # passes, answered one way on both stores (each was a store error on one, taken on
    # the other: -1 kept every dead row on SQLite, a NaN occurrence was written on
    # PostgreSQL and an infinite one on SQLite)
    now = time.time()
    for wrong in (dict(result_ttl="60", dead_letter_limit=10),
                  dict(result_ttl=60, dead_letter_limit=-1),
                  dict(result_ttl=float("nan"), dead_letter_limit=10)):
        with pytest.raises(ValueError):
            any_store.sweep(now, **wrong)
    assert any_store.sweep(now, result_ttl=60, dead_letter_limit=10) == 0
    for occurrence in (float("nan"), float("inf"), "soon"):
        with pytest.raises(ValueError):
            any_store.enqueue_occurrence("c.job", occurrence)
    assert any_store.list_jobs() == []
    for failures in (-1, 2**63, 1.5):
        with pytest.raises(ValueError):
            any_store.dashboard(now, failures=failures)
    with pytest.raises(ValueError):
        any_store.rollup_totals(0, by="minute", name=5)
    assert any_store.rollup_totals(0, by="minute", name="c.job") == []
