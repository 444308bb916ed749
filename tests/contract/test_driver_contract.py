"""The driver contract (``store.base.Driver`` and ``Turn``), the same tests for each
dialect's driver under the engine: a claim takes at most the rows asked; a batch of
fenced settles answers each item in order, held or lost; a reclaim reads an owner's
leases; a body that fails leaves nothing applied (R6, R8, R24, R26)."""
from __future__ import annotations

import time

import pytest

from jobpool.lifecycle import DEFAULT_POLICY, DONE, Outcome, Settled, decide
from jobpool.store import row_codec
from jobpool.store.base import Fenced

OWNER = "host-d:1:1"
NAME = "d.job"


@pytest.fixture
def driver(any_store):
    if any_store.__class__.__name__ == "PostgresStore":
        from jobpool.store.postgres.driver import PgDriver
        made = PgDriver(any_store.target)
    else:
        from jobpool.store.sqlite.driver import SqliteDriver
        made = SqliteDriver(any_store.path)
    made.serve(OWNER, (NAME,), {})
    yield made
    made.close()


def claim(driver, want):
    """One turn that only claims: the rows, decoded (none refused)."""
    found: list = []

    def body(turn):
        found.extend(turn.claim("default", want))
        return [], []
    driver.turn(time.time(), {}, body)
    decoded, refused = row_codec.decode_claims(found, "default", time.time())
    assert refused == []
    return decoded


def test_a_claim_takes_at_most_the_rows_asked_and_leases_them(any_store, driver):
    ids = [h.id for h in any_store.enqueue_many(NAME, [(i,) for i in range(3)])]
    decoded = claim(driver, 2)
    assert [d.job.job_id for d in decoded] == ids[:2]  # R7: in line
    for job_id in ids[:2]:
        row = any_store.get(job_id)
        assert (row["status"], row["lease_owner"], row["attempts"]) == ("running", OWNER, 1)
    assert any_store.get(ids[2])["status"] == "ready"


def test_a_batch_of_settles_answers_each_in_order_held_or_lost(any_store, driver):
    any_store.enqueue_many(NAME, [(i,) for i in range(3)])
    first, second, third = claim(driver, 3)
    refused = Settled(999, NAME, 1, "lost", "not leased by this supervisor")

    def body(turn):
        def fenced(lease):
            return Fenced(lease, Outcome(lease.job_id, lease.attempt, DONE),
                          decide(lease, Outcome(lease.job_id, lease.attempt, DONE),
                                 DEFAULT_POLICY, turn.now, None, turn.crash_causes), OWNER)
        # The third's fence names an attempt that is not the row's: it holds nothing.
        stale = third.lease._replace(attempt=third.lease.attempt + 1)
        return turn.settle([fenced(first.lease), refused, fenced(second.lease),
                            fenced(stale)]), []
    settled, expired = driver.turn(time.time(), {}, body)
    assert [(s.job_id, s.status) for s in settled] == [
        (first.job.job_id, "done"), (999, "lost"), (second.job.job_id, "done"),
        (third.job.job_id, "lost")]
    assert expired == []
    assert [any_store.get(d.job.job_id)["status"] for d in (first, second, third)] == [
        "done", "done", "running"]
    assert [a["outcome"] for a in any_store.attempts(first.job.job_id)] == ["done"]
    assert any_store.attempts(third.job.job_id) == []


def test_a_reclaim_reads_the_leases_of_an_owner(any_store, driver):
    (job_id,) = [h.id for h in any_store.enqueue_many(NAME, [(1,)])]
    claim(driver, 1)
    found: dict = {}

    def body(turn):
        found[OWNER] = turn.reclaimable(OWNER)
        found["nobody"] = turn.reclaimable("nobody:1:1")
        return []
    assert driver.transaction("reclaim", time.time(), body) == []
    ((read_id, name, attempt, *_rest, owner),) = found[OWNER]
    assert (read_id, name, attempt, owner) == (job_id, NAME, 1, OWNER)
    assert found["nobody"] == []


def test_a_body_that_fails_leaves_nothing_applied(any_store, driver):
    (job_id,) = [h.id for h in any_store.enqueue_many(NAME, [(1,)])]

    def body(turn):
        assert len(turn.claim("default", 1)) == 1
        raise RuntimeError("the engine failed mid-turn")
    with pytest.raises(RuntimeError):
        driver.turn(time.time(), {}, body)
    row = any_store.get(job_id)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
    assert len(claim(driver, 1)) == 1  # the driver goes on
