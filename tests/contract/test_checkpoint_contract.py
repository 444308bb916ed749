"""R37, the same test for every store: a running attempt's state is saved fenced
like a settle, kept for the next attempt, given back with the attempt when the pool
interrupts the job, and cleared only where the rules say."""
from __future__ import annotations

import json
import random
import time

import pytest

from jobpool.errors import JobNotFound
from jobpool.lifecycle import DONE, ERROR, FATAL, INTERRUPTED, RESCHEDULE, Outcome, Policy

NAME = "c.job"


@pytest.fixture
def claimer(any_store):
    made = []

    def make(owner="pool-a", policies=None):
        made.append(any_store.claimer(owner, (NAME,), ("default",), policies or {}))
        return made[-1]
    yield make
    for c in made:
        c.close()


def claim_one(c):
    (job,) = c.turn([], 1, time.time(), None)[1]
    return job


def settle(c, outcome):
    return c.turn([outcome], 0, time.time(), random.Random(1))[0]


def test_a_state_is_saved_fenced_and_read_back_by_the_next_attempt(any_store, claimer):
    job_id = any_store.enqueue(NAME).id
    c = claimer(policies={NAME: Policy(backoff_base=0.0)})
    job = claim_one(c)
    assert any_store.read_state("pool-a", job_id, 1) is None
    assert any_store.save_state("pool-a", job_id, 1, json.dumps({"rows": 500})) is True
    assert any_store.save_state("pool-b", job_id, 1, '{"rows": 1}') is False  # not its lease
    assert any_store.save_state("pool-a", job_id, 2, '{"rows": 1}') is False  # not its attempt
    row = any_store.get(job_id)
    assert json.loads(row["state"]) == {"rows": 500} and row["state_at"] > 0
    settle(c, Outcome(job.job_id, 1, ERROR, "RuntimeError: crashed mid-way"))
    job = claim_one(c)
    assert json.loads(any_store.read_state("pool-a", job_id, 2)) == {"rows": 500}


def test_an_interrupted_attempt_is_given_back_with_its_place_and_state(any_store, claimer):
    job_id = any_store.enqueue(NAME).id
    later = any_store.enqueue(NAME).id
    c = claimer()
    job = claim_one(c)
    any_store.save_state("pool-a", job_id, 1, '{"chunk": 3}')
    (settled,) = settle(c, Outcome(job.job_id, 1, INTERRUPTED, "interrupted at a save point"))
    assert settled.status == "ready"
    row = any_store.get(job_id)
    assert (row["status"], row["attempts"], json.loads(row["state"])) == ("ready", 0, {"chunk": 3})
    assert [a["outcome"] for a in any_store.attempts(job_id)] == ["interrupted"]
    # It kept its place in line: it is claimed again before the job behind it.
    again = claim_one(c)
    assert (again.job_id, again.attempt) == (job_id, 1)
    assert claim_one(c).job_id == later


def test_a_reschedule_starts_afresh_and_a_dead_retry_keeps_the_state_unless_reset(any_store,
                                                                                  claimer):
    job_id = any_store.enqueue(NAME).id
    c = claimer()
    job = claim_one(c)
    any_store.save_state("pool-a", job_id, 1, '{"page": 7}')
    settle(c, Outcome(job.job_id, 1, RESCHEDULE, "Reschedule: next hour", 0.0))
    assert any_store.get(job_id)["state"] is None
    job = claim_one(c)
    any_store.save_state("pool-a", job_id, job.attempt, '{"page": 9}')
    settle(c, Outcome(job.job_id, job.attempt, FATAL, "Fatal: no"))
    assert any_store.dead.retry([job_id]) == {job_id: "retried"}
    assert json.loads(any_store.get(job_id)["state"]) == {"page": 9}
    job = claim_one(c)
    settle(c, Outcome(job.job_id, job.attempt, FATAL, "Fatal: no"))
    assert any_store.dead.retry([job_id], reset_state=True) == {job_id: "retried"}
    assert any_store.get(job_id)["state"] is None


def test_reset_state_forgets_a_state_once(any_store, claimer):
    job_id = any_store.enqueue(NAME).id
    c = claimer()
    job = claim_one(c)
    any_store.save_state("pool-a", job_id, 1, '{"n": 1}')
    settle(c, Outcome(job.job_id, 1, DONE))
    assert any_store.reset_state(job_id) is True   # a finished job's too (PostgreSQL: moved)
    assert any_store.reset_state(job_id) is False
    assert any_store.get(job_id)["state"] is None
    with pytest.raises(JobNotFound):
        any_store.get(999_999)


def test_several_interrupts_and_reschedules_in_one_turn(any_store, claimer):
    # PostgreSQL settles a turn's attempts in one statement (turn_statement): the same rules.
    ids = [any_store.enqueue(NAME).id for _ in range(2)]
    c = claimer()
    jobs = c.turn([], 2, time.time(), None)[1]
    for job in jobs:
        any_store.save_state("pool-a", job.job_id, 1, json.dumps({"at": job.job_id}))
    settled = settle_all(c, [Outcome(j.job_id, 1, INTERRUPTED, "interrupted") for j in jobs])
    assert [s.status for s in settled] == ["ready", "ready"]
    for job_id in ids:
        row = any_store.get(job_id)
        assert (row["attempts"], json.loads(row["state"])) == (0, {"at": job_id})
    jobs = c.turn([], 2, time.time(), None)[1]
    assert sorted((j.job_id, j.attempt) for j in jobs) == [(i, 1) for i in ids]
    settle_all(c, [Outcome(j.job_id, 1, RESCHEDULE, "Reschedule: later", 3600.0) for j in jobs])
    assert [any_store.get(i)["state"] for i in ids] == [None, None]


def settle_all(c, outcomes):
    return c.turn(list(outcomes), 0, time.time(), random.Random(1))[0]
