"""An operator's call on many jobs on PostgreSQL: a cancel (R31) and a delete of dead
jobs (R32) run the same few statements whatever the number of ids (a row at a time they
were up to three and two round trips a row), each id answered as before, and a row a
pool's turn holds is read again as the turn left it. Round trips are counted in libpq's
trace of what the store's connection sent, never timed."""
from __future__ import annotations

import time

import pytest

import jobpool
from jobpool.lifecycle import DONE, ERROR, Outcome
from tests.conftest import beside_held_locks, sent_to_server, statements_run


@pytest.fixture
def store(pg_url):
    store = jobpool.connect(pg_url)
    yield store
    store.close()


def test_a_cancel_of_many_ids_sends_the_same_statements_as_one_of_few(store, tmp_path):
    ready = [store.enqueue_with("c.job").id for _ in range(40)]
    claimer = store.claimer("pool-a", ("c.job",), ("default",), {})
    running = [job.job_id for job in claimer.turn([], 6, time.time(), None)[1]]
    finished = running[:2]
    claimer.turn([Outcome(job_id, 1, DONE) for job_id in finished], 0, time.time(), None)
    claimer.close()
    running = running[2:]
    ready = [job_id for job_id in ready if job_id not in finished + running]
    asked = [*ready, *running, *finished, 2**70, 0]

    def cancel(ids):
        answers: dict[int, str] = {}
        return answers, sent_to_server(store, tmp_path,
                                       lambda: answers.update(store.cancel_many(ids)))
    few, few_sent = cancel([ready[0], running[0], finished[0]])
    assert few == {ready[0]: "cancelled", running[0]: "requested", finished[0]: "done"}
    many, many_sent = cancel(asked)
    assert many == {**{job_id: "cancelled" for job_id in ready[1:]}, ready[0]: "dead",
                    **{job_id: "requested" for job_id in running}, finished[0]: "done",
                    finished[1]: "done", 2**70: "no such job", 0: "no such job"}
    assert list(many) == asked  # in the order asked
    # 34 ready rows, 4 running and 4 others: as many statements as for one of each.
    assert statements_run(many_sent) == statements_run(few_sent)
    assert statements_run(many_sent) <= 6  # the clock, two locks, two moves, the statuses
    assert {store.get(job_id)["status"] for job_id in ready} == {"dead"}
    assert {store.get(job_id)["last_error"] for job_id in ready} == {"cancelled"}
    flagged = store.transaction("reading the flags", lambda conn: conn.execute(
        "SELECT id FROM jobs WHERE cancel_requested = 1 ORDER BY id").fetchall())
    assert [row[0] for row in flagged] == sorted(running)


def test_a_ready_row_a_turn_claims_while_the_cancel_waits_is_asked_to_stop(store, pg_url):
    # A pool's turn holds a ready row when the cancel comes and makes it running: the
    # cancel waits for it, reads it again as running, and asks its pool to stop it; it
    # neither moves a running row to the finished ones nor answers "running".
    job_id = store.enqueue_with("c.job").id
    other = jobpool.connect(pg_url)
    try:
        turn, answers = beside_held_locks(
            other, lambda conn: conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE",
                                             (job_id,)),
            lambda conn: conn.execute(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, "
                "lease_owner = 'pool-x', lease_expires_at = extract(epoch FROM now()) + 60, "
                "started_at = extract(epoch FROM now()) WHERE id = %s", (job_id,)),
            lambda: store.cancel_many([job_id]), waiting_like="%FOR UPDATE%")
    finally:
        other.close()
    assert turn is None
    assert answers == {job_id: "requested"}
    row = store.get(job_id)
    assert (row["status"], row["cancel_requested"]) == ("running", 1)


def test_a_cancel_never_holds_a_members_shard_while_it_waits_on_that_members_turn(
        store, pg_url, caplog):
    # R31, R34: a ready member Q and a running member R of one batch, in one shard. A
    # turn holds R and will end it (its statement's trigger then takes the shard). The
    # cancel of both locks every row it names before it moves any: it waits for R
    # holding no shard, so the turn ends R and the cancel goes on. Moving Q first took
    # the shard, then waited for R: a deadlock the server broke by failing one side.
    import logging
    from jobpool.store.postgres.statements import BATCH_SHARDS
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    with store.batch() as batch:
        ids = batch.add_many("c.job", [(i,) for i in range(BATCH_SHARDS + 1)]).ids
    claimer = store.claimer("pool-a", ("c.job",), ("default",), {})
    (running,) = [job.job_id for job in claimer.turn([], 1, time.time(), None)[1]]
    claimer.close()
    ready = next(i for i in ids if i != running and i % BATCH_SHARDS == running % BATCH_SHARDS)
    other = jobpool.connect(pg_url)
    shard_lock = ("SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s AND shard = %s "
                  "FOR UPDATE")
    try:
        turn, answers = beside_held_locks(
            other, lambda conn: conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE",
                                             (running,)),
            lambda conn: conn.execute(shard_lock, (batch.id, running % BATCH_SHARDS)),
            lambda: store.cancel_many([ready, running]), waiting_like="%FOR UPDATE%")
    finally:
        other.close()
    assert turn is None  # the turn was not the side the server failed
    assert answers == {ready: "cancelled", running: "requested"}
    assert "running it again" not in caplog.text  # nor was the cancel


def test_a_cancel_takes_a_ready_row_a_turn_claimed_before_a_running_row_it_settles(
        store, pg_url, caplog):
    # R31: a pool's turn claims first (a ready row, taken) and settles after (a running
    # row, older, so of a lower id). A cancel of both that took the running row first
    # waited for the claimed one while the turn waited for the running one: a deadlock.
    # It takes the ready rows first: it waits holding nothing the turn wants.
    import logging
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    first, second = (store.enqueue_with("c.job").id for _ in range(2))
    claimer = store.claimer("pool-a", ("c.job",), ("default",), {})
    (running,) = [job.job_id for job in claimer.turn([], 1, time.time(), None)[1]]
    claimer.close()
    ready = second if running == first else first
    assert running < ready
    other = jobpool.connect(pg_url)
    row_lock = "SELECT 1 FROM jobs WHERE id = %s FOR UPDATE"
    try:
        turn, answers = beside_held_locks(
            other, lambda conn: conn.execute(row_lock, (ready,)),  # the turn's claim
            lambda conn: conn.execute(row_lock, (running,)),      # then its settle
            lambda: store.cancel_many([running, ready]), waiting_like="%FOR UPDATE%")
    finally:
        other.close()
    assert turn is None
    assert answers == {running: "requested", ready: "cancelled"}
    assert "running it again" not in caplog.text


def test_a_delete_of_many_dead_ids_sends_the_same_statements_as_one_of_few(store, tmp_path):
    failed = [store.enqueue_with("c.job", max_attempts=1).id for _ in range(3)]
    claimer = store.claimer("pool-a", ("c.job",), ("default",), {})
    claimed = claimer.turn([], 3, time.time(), None)[1]
    claimer.turn([Outcome(job.job_id, job.attempt, ERROR, "boom") for job in claimed], 0,
                 time.time(), None)
    claimer.close()
    cancelled = [store.enqueue_with("c.job").id for _ in range(27)]
    store.cancel_many(cancelled)
    dead = [*failed, *cancelled]
    ready = store.enqueue_with("c.job").id
    assert sorted(store.dead.ids()) == sorted(dead)
    lines = "SELECT count(*) FROM attempts WHERE job_id = ANY(%s)"
    assert store.transaction("reading the attempts' lines", lambda conn: conn.execute(
        lines, (failed,)).fetchone()[0]) == 3  # a failure's line each: deleted with its row
    asked = [*dead[1:], ready, 2**70, dead[1]]

    def delete(ids):
        answers: dict[int, str] = {}
        return answers, sent_to_server(store, tmp_path,
                                       lambda: answers.update(store.dead.delete(ids)))
    few, few_sent = delete([dead[0], ready])
    assert few == {dead[0]: "deleted", ready: "not dead (ready)"}
    many, many_sent = delete(asked)
    assert many == {**{job_id: "deleted" for job_id in dead[1:]}, ready: "not dead (ready)",
                    2**70: "no such job"}
    assert list(many) == asked[:-1]  # in the order asked, once
    assert statements_run(many_sent) == statements_run(few_sent) <= 2
    assert store.dead.ids() == []
    assert store.dead.delete([dead[0]]) == {dead[0]: "no such job"}
    assert store.transaction("reading the attempts' lines", lambda conn: conn.execute(
        lines, (dead,)).fetchone()[0]) == 0
