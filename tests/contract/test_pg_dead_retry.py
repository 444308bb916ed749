"""A dead retry of many rows on PostgreSQL (R32): a savepoint only where a row's key may
be held by a live job (R3), one wake-up a queue (R11a), and nothing reported retried
that was not kept. Round trips are counted in libpq's trace of what the store's
connection sent, never timed."""
from __future__ import annotations

import pytest

import jobpool
from jobpool.errors import StoreError
from jobpool.store.postgres import retention
from tests.conftest import beside_held_locks, sent_to_server, statements_run


@pytest.fixture
def store(pg_url):
    store = jobpool.connect(pg_url)
    yield store
    store.close()


def test_a_retry_of_rows_without_keys_takes_no_savepoint_and_wakes_each_queue_once(
        store, tmp_path):
    ids = [store.enqueue_with("c.job", queue=queue).id for queue in ("a", "b") * 10]
    store.cancel_many(ids)
    answers: dict[int, str] = {}
    sent = sent_to_server(store, tmp_path, lambda: answers.update(store.dead.retry(ids)))
    assert set(answers.values()) == {"retried"}
    assert {store.get(job_id)["status"] for job_id in ids} == {"ready"}
    assert sent.count("SAVEPOINT") == 0
    assert sent.count("pg_notify") == 2  # one a queue, not one a row
    # In no batch they take no shard: moved together, as few statements as for one
    # (the server's clock, the lanes, the rows read, the move, a wake-up a queue).
    assert statements_run(sent) <= 6
    one = store.enqueue_with("c.job", queue="a").id
    store.cancel(one)
    assert statements_run(sent_to_server(store, tmp_path, lambda: store.dead.retry([one]))) \
        <= statements_run(sent)


def test_a_retry_of_rows_with_keys_moves_them_together_under_one_savepoint(store, tmp_path):
    # Dead with a key and in no batch: one statement under one savepoint, whatever their
    # number; a row whose key a live job holds, and two dead rows sharing a key, are
    # still answered one by one (one of the two is retried, the other refused).
    ids = [store.enqueue_with("c.job", key=f"k{i}").id for i in range(12)]
    store.cancel_many(ids)
    held = store.enqueue_with("c.job", key="held").id
    store.cancel(held)
    store.enqueue_with("c.job", key="held")  # live: the dead row's key is taken
    twins = [store.enqueue_with("c.job", key="twin").id]
    store.cancel(twins[0])
    twins.append(store.enqueue_with("c.job", key="twin").id)
    store.cancel(twins[1])
    answers: dict[int, str] = {}
    sent = sent_to_server(store, tmp_path, lambda: answers.update(store.dead.retry(ids)))
    assert set(answers.values()) == {"retried"}
    assert {store.get(job_id)["status"] for job_id in ids} == {"ready"}
    assert sent.count("SAVEPOINT") == 1
    # As few as for one row: the server's clock, the lanes, the rows read, the
    # savepoint, the move, its release, the queue's wake-up.
    assert statements_run(sent) <= 7
    one = store.enqueue_with("c.job", key="one").id
    store.cancel(one)
    assert statements_run(sent_to_server(store, tmp_path, lambda: store.dead.retry([one]))) \
        == statements_run(sent)
    answers = store.dead.retry([held, *twins])
    assert answers[held] == "key held by a live job"
    assert sorted(answers[twin] for twin in twins) == ["key held by a live job", "retried"]
    assert store.get(held)["status"] == "dead"


def test_a_key_taken_while_keyed_rows_move_together_sends_them_one_by_one(store, pg_url):
    # An enqueue holding a key (its transaction open) when the retry's move of the rows
    # with keys inserts it: the move waits, the enqueue commits, and the move fails
    # whole. Rolled back to its savepoint, each row is moved alone: the one whose key
    # was taken is refused, the others retried, nothing lost.
    ids = [store.enqueue_with("c.job", key=key).id for key in ("k1", "k2", "k3")]
    store.cancel_many(ids)
    holder = jobpool.connect(pg_url)
    try:
        held, answers = beside_held_locks(
            holder, lambda conn: holder.enqueue_with("c.job", key="k2", connection=conn),
            lambda conn: None, lambda: store.dead.retry(ids), waiting_like="%g.key = f.key%")
    finally:
        holder.close()
    assert not isinstance(held, Exception), held
    assert answers == {ids[0]: "retried", ids[1]: "key held by a live job", ids[2]: "retried"}
    assert [store.get(job_id)["status"] for job_id in ids] == ["ready", "dead", "ready"]


def test_a_retry_of_many_members_of_batches_reopens_each_shard_by_its_count(store, tmp_path):
    # R34: the dead members of two unfinished batches (each keeps a live member), more
    # than one in most shards (id mod 16): their shards are locked in one statement and
    # the members moved in one, each shard's count reopened by its members moved, as
    # few statements as for one member.
    batches, dead = [], []
    for _ in range(2):
        batch = store.batch()
        ids = batch.add_many("c.job", [(i,) for i in range(40)]).ids
        batch.close()
        store.cancel_many(ids[1:])
        batches.append(batch.id)
        dead.extend(ids[1:])
    assert [store.batch_status(b)[2:5] for b in batches] == [(1, 0, 39)] * 2
    report = None

    def retry():
        nonlocal report
        report = store.dead.retry_report(dead)
    sent = sent_to_server(store, tmp_path, retry)
    assert set(report.answers.values()) == {"retried"} and report.alone == {} == report.cancelled
    assert [store.batch_status(b)[2:5] for b in batches] == [(40, 0, 0)] * 2
    assert {store.get(job_id)["status"] for job_id in dead} == {"ready"}
    assert sent.count("SAVEPOINT") == 0
    # The server's clock, the lanes, the rows read, the shards locked, the move, the
    # queue's wake-up, and each batch reopened read again once (its callbacks, R34):
    # as for one member of each batch, where a row at a time took three a member.
    assert statements_run(sent) <= 6 + len(batches)
    batch = store.batch()
    one = batch.add_many("c.job", [(1,), (2,)]).ids
    batch.close()
    store.cancel(one[0])
    assert statements_run(sent_to_server(store, tmp_path, lambda: store.dead.retry([one[0]]))) \
        <= 6 + 1
    assert store.batch_status(batch.id)[2:5] == (2, 0, 0)


def test_a_retry_of_a_finished_batchs_member_waits_for_no_lock_on_its_shard(store, pg_url):
    # R34: a finished batch's shards are never reopened, so a retry of its members
    # locks none of them (it did, and met the sweep deleting them in the other order).
    import threading
    batch = store.batch()
    (member,) = batch.add_many("c.job", [(1,)]).ids
    batch.close()
    store.cancel(member)
    assert store.batch_status(batch.id).finished
    holder = jobpool.connect(pg_url)
    held, release = threading.Event(), threading.Event()

    def hold(conn):  # the sweep's delete of the batch's shards, not yet committed
        conn.execute("SELECT 1 FROM jobpool_batch_shards WHERE batch_id = %s FOR UPDATE",
                     (batch.id,))
        held.set()
        assert release.wait(60)
    holding = threading.Thread(target=holder.transaction, args=("holding shards", hold))
    holding.start()
    try:
        assert held.wait(30)
        answers: dict = {}
        retrying = threading.Thread(target=lambda: answers.update(
            report=store.dead.retry_report([member])))
        retrying.start()
        retrying.join(60)  # never ends while the shard is held, if it waits for it
        assert not retrying.is_alive()
    finally:
        release.set()
        holding.join(60)
        holder.close()
    assert answers["report"] == ({member: "retried"}, {batch.id: [member]}, {})


def test_a_retry_answers_each_row_as_it_finds_it_when_the_loose_move_misses_one(
        store, pg_url, monkeypatch):
    # A row read dead without a key and in no batch is deleted by another caller before
    # the retry's one move of such rows: it is answered as it is found (no such job),
    # and the others are retried.
    ids = [store.enqueue_with("c.job").id for _ in range(3)]
    store.cancel_many(ids)
    other = jobpool.connect(pg_url)
    gone: list[int] = []

    class Statements:
        def __getattr__(self, name):
            if name == "RETRY_DEAD_LOOSE" and not gone:
                gone.extend(job_id for job_id, what in other.dead.delete([ids[1]]).items()
                            if what == "deleted")
            return getattr(statements, name)
    statements = retention.pg_sql
    monkeypatch.setattr(retention, "pg_sql", Statements())
    try:
        answers = store.dead.retry(ids)
    finally:
        other.close()
    assert gone == [ids[1]]
    assert answers == {ids[0]: "retried", ids[1]: "no such job", ids[2]: "retried"}
    assert [store.get(i)["status"] for i in (ids[0], ids[2])] == ["ready", "ready"]


def test_a_row_that_dies_and_loses_its_key_while_a_retry_runs_is_refused_alone(
        store, pg_url, monkeypatch):
    # X is live when the retry reads which of its rows have no key; before X's turn it
    # dies and another job takes its key. X is refused; Y, retried in the same
    # transaction, is kept (without a savepoint round X, X's refusal had failed the
    # transaction, and its commit, a rollback, had left Y dead though called retried).
    y = store.enqueue_with("c.job").id
    store.cancel(y)
    x = store.enqueue_with("c.job", key="k").id
    other = jobpool.connect(pg_url)
    taken: list[int] = []

    class Statements:
        def __getattr__(self, name):
            if name == "RETRY_DEAD" and not taken:
                other.cancel(x)
                taken.append(other.enqueue_with("c.job", key="k").id)
            return getattr(statements, name)
    statements = retention.pg_sql
    monkeypatch.setattr(retention, "pg_sql", Statements())
    try:
        answers = store.dead.retry([x, y])
    finally:
        other.close()
    assert taken, "the key was never taken"
    assert answers == {x: "key held by a live job", y: "retried"}
    assert store.get(y)["status"] == "ready"
    assert store.get(x)["status"] == "dead"


def test_a_transaction_left_failed_raises_rather_than_commit(store):
    # A statement fails and the work goes on without a savepoint: the server would turn
    # the commit into a rollback, so the transaction says so instead of answering.
    import psycopg
    kept: list[str] = []

    def work(conn):
        conn.execute("SELECT 1")
        try:
            conn.execute("SELECT 1 / 0")
        except psycopg.errors.DivisionByZero:
            pass
        kept.append("answered")
        return "done"
    with pytest.raises(StoreError, match="a statement in it failed, and nothing of it was kept"):
        store.transaction("a test's work", work)
    assert kept == ["answered"]
    assert store.transaction("the next", lambda conn: conn.execute("SELECT 2").fetchone()[0]) == 2
