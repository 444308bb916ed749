"""R34, the same test for every store: batches count their members' ends in the
transactions that end them, and enqueue their callbacks exactly once, from the
transaction that ends the last member of a closed batch."""
from __future__ import annotations

import json
import random
import threading
import time

import pytest

import jobpool
from jobpool import Signature
from jobpool.errors import BatchNotFound, EnqueueError, LeaseLostError
from jobpool.lifecycle import DONE, ERROR, FATAL, Outcome, Policy
from jobpool.store import rows
MEMBER, SUCCESS, COMPLETE = "c.job", "c.success", "c.complete"
NAMES = (MEMBER, SUCCESS, COMPLETE)


@pytest.fixture
def claimer(any_store):
    made = []

    def make(owner="pool-a", policies=None):
        made.append(any_store.claimer(owner, NAMES, ("default",), policies or {}))
        return made[-1]
    yield make
    for c in made:
        c.close()


def claim(c, n):
    return c.turn([], n, time.time(), None)[1]


def settle(c, *outcomes):
    return c.turn(list(outcomes), 0, time.time(), random.Random(1))[0]


def run_all(c, kind=DONE, error=None):
    """Claim every due member and settle each as ``kind``; the claimed jobs."""
    jobs = claim(c, 100)
    settle(c, *[Outcome(j.job_id, j.attempt, kind, error) for j in jobs])
    return jobs


def callbacks(store):
    """The callback rows, each as (name, its kwargs)."""
    found = []
    for name in (SUCCESS, COMPLETE):
        for job in store.list_jobs(name=name):
            found.append((name, json.loads(job["payload"])[1]))
    return found


def new_batch(store):
    return store.batch(on_success=Signature(SUCCESS, ("s",)),
                       on_complete=Signature(COMPLETE, (), {"run": "r1"}))


def test_callbacks_fire_once_after_close_when_the_last_member_ends(any_store, claimer):
    batch = new_batch(any_store)
    first = batch.add(Signature(MEMBER, ("a",)))
    batch.add_many(MEMBER, [("b",), ("c",)])
    c = claimer()
    # Members are claimable at once; their ends count before close() ...
    assert [j.job_id for j in claim(c, 1)] == [first.id]
    status = any_store.batch_status(batch.id)
    assert (status.total, status.pending, status.done, status.closed) == (3, 3, 0, False)
    settle(c, Outcome(first.id, 1, DONE))
    run_all(c)
    status = any_store.batch_status(batch.id)
    assert (status.pending, status.done, status.dead, status.finished) == (0, 3, 0, False)
    # ... but nothing fires before close().
    assert callbacks(any_store) == []
    status = batch.close()
    assert status.finished and status.closed
    fired = callbacks(any_store)
    info = {"id": batch.id, "total": 3, "done": 3, "dead": 0, "dead_ids": [],
            "dead_ids_truncated": False}
    assert fired == [(SUCCESS, {"batch": info}), (COMPLETE, {"run": "r1", "batch": info})]
    assert {status.success_job, status.complete_job} == {
        j["id"] for name in (SUCCESS, COMPLETE) for j in any_store.list_jobs(name=name)}
    # Closing again changes nothing; the callbacks are there once.
    batch.close()
    assert len(callbacks(any_store)) == 2


def test_a_dead_member_skips_on_success_and_is_named_to_on_complete(any_store, claimer):
    batch = new_batch(any_store)
    batch.add_many(MEMBER, [("a",), ("b",), ("c",)])
    batch.close()
    c = claimer()
    good, bad, cancelled = claim(c, 2) + [None]
    settle(c, Outcome(good.job_id, 1, DONE), Outcome(bad.job_id, 1, FATAL, "Fatal: no"))
    assert callbacks(any_store) == []
    # The last one is cancelled while ready: it counts as dead too (R31).
    (last,) = [j["id"] for j in any_store.list_jobs(name=MEMBER, status="ready")]
    assert any_store.cancel(last) == "cancelled"
    ((name, kwargs),) = callbacks(any_store)
    assert name == COMPLETE
    assert kwargs["batch"]["dead_ids"] == sorted([bad.job_id, last])
    assert (kwargs["batch"]["done"], kwargs["batch"]["dead"]) == (1, 2)


def test_a_retry_does_not_count_and_the_last_retry_spent_does(any_store, claimer):
    batch = new_batch(any_store)
    member = batch.add(Signature(MEMBER)).id
    batch.close()
    c = claimer(policies={MEMBER: Policy(max_attempts=2, backoff_base=0.0)})
    (job,) = claim(c, 1)
    settle(c, Outcome(member, 1, ERROR, "RuntimeError: once"))
    assert any_store.batch_status(batch.id).pending == 1
    assert callbacks(any_store) == []
    (job,) = claim(c, 1)
    (settled,) = settle(c, Outcome(member, 2, ERROR, "RuntimeError: twice"))
    assert settled.status == "dead"
    assert [name for name, _ in callbacks(any_store)] == [COMPLETE]


def test_an_empty_batch_fires_when_it_is_closed(any_store):
    batch = new_batch(any_store)
    assert batch.close().finished
    assert [name for name, _ in callbacks(any_store)] == [SUCCESS, COMPLETE]


def one_running_member(store, claimer):
    """A closed batch of one member, claimed: (batch, the member's id, its claimer)."""
    batch = new_batch(store)
    member = batch.add(Signature(MEMBER)).id
    batch.close()
    c = claimer()
    (job,) = claim(c, 1)
    assert job.job_id == member
    return batch, member, c


def test_a_callback_keeps_the_batchs_place_in_line(any_store, claimer):
    batch, member, c = one_running_member(any_store, claimer)
    backlog = any_store.enqueue_many(MEMBER, [()] * 5)  # enqueued after the batch was made
    settle(c, Outcome(member, 1, DONE))
    first_two = [j.name for j in claim(c, 2)]
    assert first_two == [SUCCESS, COMPLETE]
    assert len(claim(c, 10)) == len(backlog)


def test_cancelling_a_batch_cancels_its_members_and_fires_nothing(any_store, claimer):
    batch = new_batch(any_store)
    batch.add_many(MEMBER, [("a",), ("b",)])
    c = claimer()
    (running,) = claim(c, 1)
    status = batch.cancel()
    assert status.cancelled and not status.finished
    assert (status.dead, status.pending) == (1, 1)   # the ready one is dead now
    assert any_store.get(running.job_id)["cancel_requested"] == 1
    settle(c, Outcome(running.job_id, 1, DONE))      # its pool's late success still counts
    status = any_store.batch_status(batch.id)
    assert status.finished and status.pending == 0
    assert callbacks(any_store) == []
    with pytest.raises(EnqueueError, match=f"batch {batch.id} is cancelled"):
        batch.add(Signature(MEMBER))


def test_a_batch_left_by_an_exception_is_cancelled(any_store):
    with pytest.raises(RuntimeError):
        with new_batch(any_store) as batch:
            batch.add(Signature(MEMBER))
            raise RuntimeError("the producer failed")
    status = any_store.batch_status(batch.id)
    assert (status.cancelled, status.finished, status.dead) == (True, True, 1)
    assert callbacks(any_store) == []


def test_dead_retry_reopens_an_unfired_batch_only(any_store, claimer):
    batch = new_batch(any_store)
    first, second = batch.add_many(MEMBER, [("a",), ("b",)]).ids
    batch.close()
    c = claimer()
    jobs = claim(c, 1)
    settle(c, Outcome(jobs[0].job_id, 1, FATAL, "Fatal: no"))
    dead_one = jobs[0].job_id
    assert any_store.batch_status(batch.id).dead == 1
    assert any_store.dead.retry([dead_one]) == {dead_one: "retried"}
    status = any_store.batch_status(batch.id)
    assert (status.dead, status.pending) == (0, 2)
    run_all(c)
    assert [name for name, _ in callbacks(any_store)] == [SUCCESS, COMPLETE]
    # After the callbacks fired, a retried member runs alone: the batch stays as it was.
    any_store.cancel(any_store.enqueue(MEMBER).id)  # (an unrelated dead job)
    settled_status = any_store.batch_status(batch.id)
    assert settled_status.finished and settled_status.done == 2


def test_a_retried_member_of_a_cancelled_batch_counts_again_and_is_reported(any_store, claimer):
    """R34: a batch cancelled while a member ran is unfinished until that member ends; a
    dead member retried meanwhile counts in it again (so the batch ends when both have
    ended, each counted once), and ``retry_report`` names it: no callback follows it,
    where "retried" alone left an operator waiting for one."""
    batch = new_batch(any_store)
    first, second = batch.add_many(MEMBER, [("a",), ("b",)]).ids
    c = claimer()
    (running,) = claim(c, 1)
    assert running.job_id == first
    assert not batch.cancel().finished  # the ready member dead now, the running one flagged
    report = any_store.dead.retry_report([second])
    assert report == ({second: "retried"}, {}, {batch.id: [second]})
    status = any_store.batch_status(batch.id)
    assert (status.pending, status.dead, status.finished) == (2, 0, False)
    settle(c, Outcome(first, 1, DONE))
    assert not any_store.batch_status(batch.id).finished  # the retried member still counts
    run_all(c, FATAL, "Fatal: again")
    status = any_store.batch_status(batch.id)
    assert (status.done, status.dead, status.pending, status.finished) == (1, 1, 0, True)
    assert callbacks(any_store) == []
    # Retried once more, the batch being finished now, it runs alone.
    assert any_store.dead.retry_report([second]) == ({second: "retried"}, {batch.id: [second]}, {})


def test_cancelling_a_cancelled_batch_again_cancels_what_of_it_is_unfinished(any_store, claimer):
    """R34: a batch cancelled while a member ran is unfinished until that member ends; a
    member retried meanwhile counts in it again, and cancelling the batch again cancels
    it (on PostgreSQL, the same call reaches members a first cancel could not)."""
    batch = new_batch(any_store)
    first, second = batch.add_many(MEMBER, [("a",), ("b",)]).ids
    c = claimer()
    (running,) = claim(c, 1)
    assert running.job_id == first
    batch.cancel()
    assert any_store.dead.retry([second]) == {second: "retried"}
    status = batch.cancel()
    assert (status.cancelled, status.finished, status.dead, status.pending) == (True, False, 1, 1)
    assert any_store.get(second)["status"] == "dead"
    settle(c, Outcome(first, 1, DONE))
    assert any_store.batch_status(batch.id).finished and callbacks(any_store) == []


def test_a_retry_meeting_its_batchs_end_runs_alone_on_postgres(pg_url):
    """R34 on PostgreSQL: a retry read its batch unfinished from its statement's
    snapshot while another member's end, not yet committed, was finishing it; the
    member was counted again (its shard pending) in a batch whose callbacks had fired,
    and the retry's report said nothing. The retry now reads the batch again under its
    lock, after that end, and takes its count back: the member runs alone."""
    from tests.conftest import _pg_admin, lock_waits, wait_for
    store, ender = jobpool.connect(pg_url), jobpool.connect(pg_url)
    batch = store.batch(on_complete=Signature(COMPLETE))
    first, second = batch.add_many(MEMBER, [("a",), ("b",)]).ids
    batch.close()
    assert store.cancel(first) == "cancelled"
    held, release = threading.Event(), threading.Event()

    def end_second(conn):  # the last member's end, its transaction held open
        ender._cancel_one(conn, second, ender.server_now(conn))
        held.set()
        assert release.wait(30)
    ending = threading.Thread(target=ender.transaction, args=("ending a member", end_second))
    ending.start()
    assert held.wait(30)
    answer = {}
    retrying = threading.Thread(target=lambda: answer.update(
        report=store.dead.retry_report([first])))
    retrying.start()
    admin = _pg_admin()
    try:
        # Until the retry waits for the member's end (or ends without waiting for it).
        wait_for(lambda: not retrying.is_alive() or lock_waits(
            admin, "%FROM jobpool_batches WHERE id = %FOR SHARE%"), timeout=30, interval=0.01)
    finally:
        admin.close()
        release.set()
        ending.join(30)
        retrying.join(30)
    report = answer["report"]
    assert report == ({first: "retried"}, {batch.id: [first]}, {})
    status = store.batch_status(batch.id)
    assert (status.finished, status.pending, status.dead) == (True, 0, 2)
    assert [name for name, _ in callbacks(store)] == [COMPLETE]
    store.close()
    ender.close()


def test_a_retry_of_several_members_takes_no_batch_lock_before_their_shards_on_postgres(pg_url):
    """R34 on PostgreSQL: a retry of several members of a batch read the batch FOR SHARE
    after each member's reopen, so it held the batch's row while it waited for the next
    member's shard; a member's end holding that shard and then writing the batch's row
    (its shard emptied) waited for the retry: a deadlock, one side aborted. The retry
    now takes the shards first, in shard order, and the batch's row after them."""
    from tests.conftest import beside_held_locks
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    batch = store.batch(on_complete=Signature(COMPLETE))
    first, second = batch.add_many(MEMBER, [("a",), ("b",)]).ids  # two shards (id mod 16)
    assert store.cancel(first) == "cancelled" and store.cancel(second) == "cancelled"
    end, retry = beside_held_locks(  # a member's end of the second's shard, held open
        holder, lambda conn: conn.execute(
            "SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s AND shard = %s FOR UPDATE",
            (batch.id, second % 16)),
        lambda conn: conn.execute("UPDATE jobpool_batches SET changed_at = changed_at "
                                  "WHERE id = %s", (batch.id,)),
        lambda: store.dead.retry_report([first, second]), waiting_like="%jobpool_batch_shards%")
    assert end is None  # the end wrote the batch's row: no deadlock aborted it
    assert retry == ({first: "retried", second: "retried"}, {}, {})
    status = store.batch_status(batch.id)
    assert (status.pending, status.dead, status.finished) == (2, 0, False)
    store.close()
    holder.close()


def test_a_batch_cancel_waits_on_no_members_row_while_pools_end_members_on_postgres(pg_url):
    """R34 on PostgreSQL: a batch cancel holds the batch's shards while it cancels its
    members; it waited for a member's row a pool held (a claim in flight), then for the
    row of a member a pool's turn was settling, and that turn waited for a shard the
    cancel held: deadlock detected, the cancel or the turn aborted, and with a big batch
    and pools at work the cancel failed every time. It now passes over rows a pool holds
    and comes back for them in transactions of their own."""
    from tests.conftest import _pg_admin, lock_waits, outcome_of, rows_held, wait_for
    store, canceller, watcher = (jobpool.connect(pg_url) for _ in range(3))
    batch = new_batch(store)
    ids = batch.add_many(MEMBER, [(n,) for n in range(4)]).ids
    c = store.claimer("pool-a", NAMES, ("default",), {})
    running = claim(c, 2)
    ready = [i for i in ids if i not in {j.job_id for j in running}]
    seen = {}
    cancelling = threading.Thread(target=lambda: seen.update(cancel=outcome_of(
        lambda: canceller.batches.cancel(batch.id))))
    ending = threading.Thread(target=lambda: seen.update(turn=outcome_of(
        lambda: settle(c, Outcome(running[0].job_id, running[0].attempt, DONE)))))
    admin = _pg_admin()
    try:
        with rows_held(watcher, ready[-1]):  # a claim in flight holds a ready member's row
            cancelling.start()
            # Until the cancel waits for the held row, or has cancelled the batch without it.
            wait_for(lambda: lock_waits(admin, "%FROM jobs WHERE%batch_id%") or store.batch_status(
                batch.id).cancelled, timeout=30, interval=0.01)
            ending.start()
            # Until the turn ends, or waits too (for a shard the cancel holds).
            wait_for(lambda: not ending.is_alive() or lock_waits(admin) >= 2, timeout=30,
                     interval=0.01)
    finally:
        for thread in (cancelling, ending):
            if thread.ident is not None:
                thread.join(60)
        admin.close()
    assert not isinstance(seen["cancel"], Exception), seen["cancel"]
    assert not isinstance(seen["turn"], Exception), seen["turn"]
    status = store.batch_status(batch.id)
    assert status.cancelled and (status.done, status.dead) == (1, 2)  # both ready ones dead
    still = store.get(running[1].job_id)
    assert (still["status"], still["cancel_requested"]) == ("running", 1)  # its pool stops it
    assert callbacks(store) == []
    c.close()
    for each in (store, canceller, watcher):
        each.close()


def test_a_batch_cancel_names_the_members_it_could_not_reach_on_postgres(pg_url, monkeypatch):
    """R34 on PostgreSQL: a member's row held past the cancel's patience is left, and the
    cancel says how many and how to reach them; the batch stays cancelled."""
    from jobpool.store import batch_store
    from tests.conftest import rows_held
    monkeypatch.setattr(batch_store, "CANCEL_PATIENCE", 0.2)
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    batch = new_batch(store)
    kept, other = batch.add_many(MEMBER, [("a",), ("b",)]).ids
    with rows_held(holder, kept), pytest.raises(jobpool.errors.StoreError, match=(
            f"batch {batch.id} is cancelled, but 1 of its members was held by other "
            r"transactions for 0.2 s and is not: cancel the batch again, or it by id "
            r"\(jobpool jobs cancel\)")):
        store.batches.cancel(batch.id)
    assert store.batch_status(batch.id).cancelled and store.get(other)["status"] == "dead"
    assert store.get(kept)["status"] == "ready"
    status = store.batches.cancel(batch.id)  # the cancel again reaches it
    assert store.get(kept)["status"] == "dead"
    assert status.finished and callbacks(store) == []
    store.close()
    holder.close()


def test_a_finished_or_unknown_batch_takes_no_members(any_store):
    batch = new_batch(any_store)
    batch.close()
    with pytest.raises(EnqueueError, match="is finished"):
        batch.add(Signature(MEMBER))
    with pytest.raises(EnqueueError, match="no batch with id 999999"):
        any_store.enqueue_with(MEMBER, batch=999_999)
    with pytest.raises(EnqueueError, match="key"):
        any_store.enqueue_with(MEMBER, batch=batch.id, key="k")
    with pytest.raises(BatchNotFound):
        any_store.batch_status(999_999)
    assert any_store.batch_status(batch.id).total == 0


def test_a_running_member_adds_to_its_own_batch_once_per_position(any_store, claimer):
    batch, member, c = one_running_member(any_store, claimer)
    # As a child makes them: on a clock of 0, which the store moves to its own.
    options = rows.enqueue_options(MEMBER, None, None, None, None, None, None, 0.0)
    more = rows.new_jobs(options, [("x",), ("y",)])
    added = any_store.add_to_own_batch("pool-a", member, 1, 0, more)
    assert [dup for _id, dup in added] == [False, False]
    # The same adds again (a retried attempt) are the same jobs; a new position is new.
    again = any_store.add_to_own_batch("pool-a", member, 1, 0, more[:1])
    assert again == [(added[0][0], True)]
    assert any_store.batch_status(batch.id).total == 3
    with pytest.raises(LeaseLostError):
        any_store.add_to_own_batch("pool-b", member, 1, 2, more[:1])
    settle(c, Outcome(member, 1, DONE))
    assert callbacks(any_store) == []  # its adds are still to run
    run_all(c)
    assert [name for name, _ in callbacks(any_store)] == [SUCCESS, COMPLETE]
    run_all(c)  # the callbacks
    loner = any_store.enqueue(MEMBER).id
    (job,) = claim(c, 1)
    with pytest.raises(EnqueueError, match=f"job {loner} is not a member of a batch"):
        any_store.add_to_own_batch("pool-a", loner, 1, 0, more[:1])


def test_finished_batches_are_swept_with_done_rows(any_store):
    kept, swept = new_batch(any_store), new_batch(any_store)
    swept.close()
    kept.add(Signature(MEMBER))
    kept.close()
    any_store.sweep(time.time() + 1, result_ttl=-60, dead_letter_limit=100)
    with pytest.raises(BatchNotFound):
        any_store.batch_status(swept.id)
    assert any_store.batch_status(kept.id).pending == 1
    assert [b.id for b in any_store.batches.list(open_only=True)] == [kept.id]


def test_members_are_listed_by_status(any_store, claimer):
    batch = new_batch(any_store)
    batch.add_many(MEMBER, [("a",), ("b",), ("c",)])
    c = claimer()
    (job,) = claim(c, 1)
    settle(c, Outcome(job.job_id, 1, DONE))
    (job,) = claim(c, 1)
    assert any_store.batches.members(batch.id) == {"done": 1, "running": 1, "ready": 1}


def test_a_batch_given_up_is_deleted_when_empty_and_cancelled_otherwise(any_store):
    # R34: what `enqueue --from F --on-success N` does with its batch when the enqueue
    # fails: one no member joined is not kept; one a member joined fires nothing.
    empty = any_store.batch(on_complete=Signature(COMPLETE))
    empty.give_up()
    with pytest.raises(BatchNotFound):
        any_store.batch_status(empty.id)
    joined = any_store.batch(on_complete=Signature(COMPLETE))
    joined.add(Signature(MEMBER))
    joined.give_up()
    status = any_store.batch_status(joined.id)
    assert status.cancelled and status.complete_job is None
