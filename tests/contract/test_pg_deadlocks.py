"""Lock orders on PostgreSQL. An operator's call that takes several rows in the order it
was given meets pools' turns that take theirs in their own order, and the server breaks
such a cycle by failing one transaction. A pool's turn is retried by its pool (R26); the
store runs the operator's transaction again (``DEADLOCK_TRIES``), so ``jobs cancel A B``
does not fail because a pool was at work on the same rows. Turns themselves take a
batch's shards and a group's lanes in one order (R34, R35): each test here holds locks
in a transaction the way another turn or call would, and checks nothing is aborted."""
from __future__ import annotations

import logging
import random
import time

import jobpool
from tests.conftest import beside_held_locks


def test_a_cancel_the_server_ends_to_break_a_deadlock_is_run_again(pg_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    store, other = jobpool.connect(pg_url), jobpool.connect(pg_url)
    first, second = (store.enqueue_with("t.member").id for _ in range(2))
    row_lock = "SELECT 1 FROM jobs WHERE id = %s FOR UPDATE"
    # Another transaction holds the second row, then asks for the first, which the
    # cancel took before it asked for the second: a cycle the server breaks by failing
    # the transaction that waited first (the cancel).
    other_seen, cancel_seen = beside_held_locks(
        other, lambda conn: conn.execute(row_lock, (second,)),
        lambda conn: conn.execute(row_lock, (first,)),
        lambda: store.cancel_many([first, second]))
    assert other_seen is None  # it got the first row once the cancel was ended
    assert cancel_seen == {first: "cancelled", second: "cancelled"}  # run again, whole
    assert "running it again" in caplog.text
    assert [store.get(i)["status"] for i in (first, second)] == ["dead", "dead"]
    store.close()
    other.close()


def test_turns_ending_members_of_one_batch_take_its_shards_in_one_order(pg_url):
    """R34 on PostgreSQL: a turn that ends several members of a batch counts each down in
    its shard (member id mod 16). Counted a row at a time, the turn took the shards in the
    order it ended the rows, so a turn ending ids 16k+15 and 16k+16 took shard 15, then 0,
    while another turn took 0, then 15: deadlock detected, one turn aborted and settled
    again by its pool (R26) after the server's second of waiting. The shards a statement
    ends members in are now taken in one order (shard, then batch), the order every
    writer of shards takes them in."""
    from jobpool.lifecycle import DONE, Outcome
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    batch = store.batch()
    ids = batch.add_many("t.member", [(n,) for n in range(32)]).ids
    batch.close()
    claimer = store.claimer("pool-a", ("t.member",), ("default",), {})
    running = {job.job_id: job for job in claimer.turn([], 32, time.time(), None)[1]}
    high = next(i for i in ids if i % 16 == 15 and i + 1 in running)  # shard 15, then 0
    low = high + 1
    shard_lock = ("SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s AND shard = %s "
                  "FOR UPDATE")
    other, turn = beside_held_locks(  # another turn: a member of shard 0 ended, then one of 15
        holder, lambda conn: conn.execute(shard_lock, (batch.id, 0)),
        lambda conn: conn.execute(shard_lock, (batch.id, 15)),
        lambda: claimer.turn([Outcome(job_id, running[job_id].attempt, DONE)
                              for job_id in (high, low)], 0, time.time(), random.Random(1)))
    assert other is None, other
    assert not isinstance(turn, Exception), turn
    assert [store.get(i)["status"] for i in (high, low)] == ["done", "done"]
    assert store.batch_status(batch.id).done == 2
    claimer.close()
    store.close()
    holder.close()


def test_members_an_older_release_moves_without_their_batch_count_in_it(pg_url):
    """R34 on PostgreSQL, a rolling restart: a pool of a release that does not know
    batches moves members to ``finished_jobs`` without their batch; the store's trigger
    puts the batch back on each finished row and counts them, both ended by one
    statement (each in its own shard), and the batch's callback follows its last."""
    store = jobpool.connect(pg_url)
    batch = store.batch(on_complete=jobpool.Signature("t.complete"))
    ids = batch.add_many("t.member", [(n,) for n in range(2)]).ids
    batch.close()
    old_release = jobpool.connect(pg_url)

    def move_as_an_older_release(conn):
        conn.execute("""
            WITH moved AS (DELETE FROM jobs WHERE id = ANY(%s) RETURNING *)
            INSERT INTO finished_jobs (id, queue, name, payload, serializer, priority, status,
                                       run_at, line_at, attempts, max_attempts, crashes,
                                       deferrals, created_at, finished_at)
            SELECT id, queue, name, payload, serializer, priority, 'done', run_at, line_at, 1,
                   max_attempts, 0, 0, created_at, extract(epoch FROM now()) FROM moved""",
                     (ids,))
    old_release.transaction("an older release's settle", move_as_an_older_release)
    assert [store.get(i)["batch_id"] for i in ids] == [batch.id, batch.id]
    status = store.batch_status(batch.id)
    assert (status.done, status.pending, status.finished) == (2, 0, True)
    assert [j["name"] for j in store.list_jobs(status="ready")] == ["t.complete"]
    old_release.close()
    store.close()


def test_a_retry_takes_two_batches_shards_in_the_order_members_ends_take_them(pg_url, caplog):
    """R34 on PostgreSQL: a dead retry reopened members by shard, then id; a statement's
    member ends take shards by shard, then batch. Two batches' members of one shard,
    the older batch's member the newer id: the retry held the newer batch's shard and
    waited for the older's, which a member's end held while it waited for the newer's:
    a deadlock, the retry ended by the server and run again. It now reopens them by
    shard, then batch."""
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    older, newer = store.batch(), store.batch()
    early = newer.add_many("t.member", [("n",)]).ids[0]
    late = next(i for i in older.add_many("t.member", [(n,) for n in range(16)]).ids
                if i % 16 == early % 16)
    assert late > early and older.id < newer.id
    assert store.cancel(early) == "cancelled" and store.cancel(late) == "cancelled"
    shard_lock = ("SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s AND shard = %s "
                  "FOR UPDATE")
    end, retry = beside_held_locks(  # members' ends: the older batch's shard, then the newer's
        holder, lambda conn: conn.execute(shard_lock, (older.id, early % 16)),
        lambda conn: conn.execute(shard_lock, (newer.id, early % 16)),
        lambda: store.dead.retry([early, late]), waiting_like="%jobpool_batch_shards%")
    assert end is None, end
    assert retry == {early: "retried", late: "retried"}
    assert "running it again" not in caplog.text  # no deadlock ended the retry
    assert (store.batch_status(older.id).pending, store.batch_status(newer.id).pending) == (16, 1)
    store.close()
    holder.close()


def test_turns_putting_back_rows_of_two_groups_take_their_lanes_in_one_order(pg_url):
    """R35 on PostgreSQL: a grouped row of a limited name moved back to ready (a retry,
    a defer, a release) remakes its group's lane. Remade a row at a time, in the order
    the turn updated its rows, a turn retrying a job of group b and one of group a took
    lane b, then a, while another turn took a, then b: deadlock detected. A statement's
    lanes are now remade at its end, in the lanes' key order."""
    from jobpool.lifecycle import RETRY, Outcome
    from jobpool.limits import NameLimit
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    store.limits.declare({"t.load": NameLimit("t.load", 5, None, 1, "customer")}, "test")
    b, a = (store.enqueue_with("t.load", kwargs={"customer": c}, group=c).id for c in "ba")
    claimer = store.claimer("pool-a", ("t.load",), ("default",), {})
    claimer.set_limits(store.limits.plan().for_pool(("t.load",), ("default",)))
    running = {job.job_id: job for job in claimer.turn([], 2, time.time(), None)[1]}
    assert set(running) == {a, b}
    lane = "SELECT 1 FROM jobpool_lanes WHERE name = 't.load' AND grp = %s FOR UPDATE"
    other, turn = beside_held_locks(  # another turn: group a's row put back, then b's
        holder, lambda conn: conn.execute(lane, ("a",)), lambda conn: conn.execute(lane, ("b",)),
        lambda: claimer.turn([Outcome(job_id, running[job_id].attempt, RETRY, "again", 0.0)
                              for job_id in (b, a)], 0, time.time(), random.Random(1)))
    assert other is None, other
    assert not isinstance(turn, Exception), turn
    assert [store.get(i)["status"] for i in (a, b)] == ["ready", "ready"]
    assert holder.transaction("reading", lambda conn: conn.execute(
        "SELECT grp FROM jobpool_lanes WHERE name = 't.load' ORDER BY grp").fetchall()) == [
        ("a",), ("b",)]  # both lanes there for the next claim
    assert {j.job_id for j in claimer.turn([], 2, time.time(), None)[1]} == {a, b}
    claimer.close()
    store.close()
    holder.close()


def test_a_turn_takes_the_lanes_it_remakes_before_the_batch_shards_it_counts_in(pg_url):
    """R34, R35 on PostgreSQL: a turn that puts a grouped row back to ready and ends a
    batch's member takes the row's lane and the member's shard. Remade and counted by
    two statement triggers, which of the two it took first depended on which of its
    settles PostgreSQL ran last, so a turn that took the shard first deadlocked with
    one that took the lane first. Every statement now remakes its lanes before it counts
    its members (as revision 15's row triggers did)."""
    from jobpool.lifecycle import DONE, RETRY, Outcome
    from jobpool.limits import NameLimit
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    store.limits.declare({"t.load": NameLimit("t.load", 5, None, 1, "customer")}, "test")
    grouped = store.enqueue_with("t.load", kwargs={"customer": "a"}, group="a").id
    batch = store.batch()
    member = batch.add_many("t.member", [(n,) for n in range(2)]).ids[0]
    names = ("t.load", "t.member")
    claimer = store.claimer("pool-a", names, ("default",), {})
    claimer.set_limits(store.limits.plan().for_pool(names, ("default",)))
    running = {job.job_id: job for job in claimer.turn([], 3, time.time(), None)[1]}
    assert {grouped, member} <= set(running)
    other, turn = beside_held_locks(  # another turn: its lanes, then its shards
        holder, lambda conn: conn.execute(
            "SELECT 1 FROM jobpool_lanes WHERE name = 't.load' AND grp = 'a' FOR UPDATE"),
        lambda conn: conn.execute(
            "SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s AND shard = %s FOR UPDATE",
            (batch.id, member % 16)),
        lambda: claimer.turn([Outcome(member, running[member].attempt, DONE),
                              Outcome(grouped, running[grouped].attempt, RETRY, "again", 0.0)],
                             0, time.time(), random.Random(1)))
    assert other is None, other
    assert not isinstance(turn, Exception), turn
    assert (store.get(member)["status"], store.get(grouped)["status"]) == ("done", "ready")
    assert store.batch_status(batch.id).done == 1
    claimer.close()
    store.close()
    holder.close()


@jobpool.job(name="t.grouped_copy", max_running=5, group_by="customer")
def grouped_copy(customer):
    return customer


def _lanes_made(store, name: str, groups: str) -> None:
    """A limited name's lanes for ``groups``, made by one row of each (R35)."""
    from jobpool.limits import NameLimit
    store.limits.declare({name: NameLimit(name, 5, None, 1, "customer")}, "test")
    for customer in groups:
        store.enqueue_with(name, kwargs={"customer": customer})


def _crossing_bulk_write(pg_url, name: str, caplog, write=None) -> None:
    """Another producer's transaction holds lane a and wants lane b while a write of rows
    of groups b, b, a, b (``write(store, items)``: their ids; ``enqueue_many`` by default)
    takes theirs: nothing is aborted (the store would run an aborted write again, saying
    so) and every row is written in its group."""
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    _lanes_made(store, name, "ab")
    lane = f"SELECT 1 FROM jobpool_lanes WHERE name = '{name}' AND grp = %s FOR UPDATE"
    items = [jobpool.Signature(name, (), {"customer": c}, None) for c in "bbab"]
    write = write or (lambda store, items: store.enqueue_many(name, items).ids)
    other, written = beside_held_locks(
        holder, lambda conn: conn.execute(lane, ("a",)), lambda conn: conn.execute(lane, ("b",)),
        lambda: write(store, items), waiting_like="%jobpool_lanes%")
    assert other is None, other
    assert not isinstance(written, Exception), written
    assert "running it again" not in caplog.text  # no deadlock ended the write
    assert holder.transaction("reading", lambda conn: conn.execute(
        "SELECT grp FROM jobs WHERE id = ANY(%s) ORDER BY id", (list(written),)).fetchall()) == [
        (c,) for c in "bbab"]
    store.close()
    holder.close()


def test_a_bulk_write_of_grouped_rows_takes_their_lanes_in_key_order(pg_url, caplog):
    """R35 on PostgreSQL: the rows of a per-group name written with their groups (COPY,
    the job's ``group_by`` known here) each made their lane as they were inserted, in
    item order, so two producers writing the same groups in different orders took the
    lanes in opposite orders: deadlock detected. The write now takes its lanes first,
    in their key order."""
    _crossing_bulk_write(pg_url, "t.grouped_copy", caplog)


def test_rows_adopting_their_groups_after_a_bulk_write_take_lanes_in_key_order(pg_url, caplog):
    """R35 on PostgreSQL: rows of a limited name written by name (no ``group_by`` known
    here, so a JSON batch) take their groups after the insert, and make their lanes in
    the lanes' key order."""
    _crossing_bulk_write(pg_url, "t.grouped_by_name", caplog)


def test_a_keyed_bulk_write_of_grouped_rows_takes_their_lanes_in_key_order(pg_url, caplog):
    """R35 on PostgreSQL: an ``enqueue_many`` with keys writes its rows one by one (each
    may be a duplicate of a live job): it takes their lanes first, in key order, too."""
    _crossing_bulk_write(pg_url, "t.grouped_copy", caplog, lambda store, items: store.enqueue_many(
        "t.grouped_copy", items, keys=[f"k{n}" for n in range(len(items))]).ids)


def test_a_members_adds_to_its_batch_take_their_lanes_in_key_order(pg_url, caplog):
    """R34, R35 on PostgreSQL: a running member's adds to its own batch are written one
    by one (each keyed by its place among the attempt's adds): their lanes first."""
    from jobpool.store import rows

    def add(store, items):
        batch = store.batch()
        member = batch.add_many("t.member", [(1,)]).ids[0]
        claimer = store.claimer("pool-a", ("t.member",), ("default",), {})
        (running,) = claimer.turn([], 1, time.time(), None)[1]
        options = rows.enqueue_options("t.grouped_copy", None, None, None, None, None, None, 0.0)
        added = store.add_to_own_batch("pool-a", member, running.attempt, 0,
                                       rows.new_jobs(options, items))
        claimer.close()
        return [job_id for job_id, _duplicate in added]
    _crossing_bulk_write(pg_url, "t.grouped_copy", caplog, add)


def test_a_dead_retry_takes_its_rows_lanes_before_their_batch_shards(pg_url, caplog):
    """R34, R35 on PostgreSQL: a dead retry of members of a batch of a limited name went
    id by id, each row's lane made as it went back in and its shard reopened, so it held
    one member's shard when it came to another member's lane, where a turn takes the
    lanes it remakes, then shards: the two deadlocked (the retry run again). The retry
    now takes all its rows' lanes first, in key order, then their shards."""
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    name = "t.grouped_by_name"
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    _lanes_made(store, name, "ab")
    batch = store.batch()
    groups = "ab" * 8
    ids = batch.add_many(name, [jobpool.Signature(name, (), {"customer": c}, None)
                                for c in groups]).ids
    # x of group a, then y of group b in a later shard: the retry goes x, then y.
    x, y = next((i, j) for (i, g), j in zip(zip(ids, groups), ids[1:]) if g == "a" and i % 16 < j % 16)
    assert store.cancel(x) == "cancelled" and store.cancel(y) == "cancelled"
    turn, retry = beside_held_locks(  # a turn: the lane of b's row it puts back, then x's shard
        holder, lambda conn: conn.execute(
            f"SELECT 1 FROM jobpool_lanes WHERE name = '{name}' AND grp = 'b' FOR UPDATE"),
        lambda conn: conn.execute(
            "SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s AND shard = %s FOR UPDATE",
            (batch.id, x % 16)),
        lambda: store.dead.retry([x, y]))
    assert turn is None, turn
    assert retry == {x: "retried", y: "retried"}
    assert "running it again" not in caplog.text  # no deadlock ended the retry
    assert store.batch_status(batch.id).pending == 16
    store.close()
    holder.close()
