"""R62 on PostgreSQL: a claimer claims from its place in line (after the last row it
took in that queue) while it finds rows there, so it does not walk again the claim
index's entries of rows claimed since the oldest open transaction began; it keeps R7's
order for what it can know of (a higher priority, a row its own settle put back at its
old place) and walks from the front when a claim comes back short."""
from __future__ import annotations

import random
import time

import psycopg

import jobpool
from jobpool.lifecycle import DEFAULT_POLICY, DONE, LEASE_SLACK, Outcome
from jobpool.lifecycle import DEFER
from jobpool.store.postgres import statements as pg_sql

from ..conftest import PG_URL

NAME = "place.noop"
OWNER = "host-place:1:1"


def turn(claimer, outcomes, want):
    return claimer.turn(outcomes, want, time.time(), random.Random(7))


def test_a_claim_from_its_place_keeps_the_claim_order(pg_url):
    store = jobpool.connect(pg_url)
    ids = [h.id for h in store.enqueue_many(NAME, [(i,) for i in range(8)])]
    claimer = store.claimer(OWNER, (NAME,), ("default",), {})
    try:
        first = turn(claimer, [], 2)[1]
        assert [c.job_id for c in first] == ids[:2]
        assert claimer.driver.place("default") is not None  # a full claim: it has a place
        # A higher priority enqueued after the place is claimed first (R7).
        urgent = store.enqueue_with(NAME, args=(99,), priority=5).id
        done = [Outcome(c.job_id, c.attempt, DONE) for c in first]
        second = turn(claimer, done, 2)[1]
        assert [c.job_id for c in second] == [urgent, ids[2]]
        # A row this claimer's own settle puts back at its old place (a defer of no
        # delay) is claimed before the rows after it (R17, R7): the statement that puts
        # it back cannot see it, the next claim does, though it has a place.
        deferred, other = second
        third = turn(claimer, [Outcome(deferred.job_id, deferred.attempt, DEFER, delay=0.0),
                               Outcome(other.job_id, other.attempt, DONE)], 2)[1]
        assert [c.job_id for c in third] == ids[3:5]
        assert claimer.driver.place("default") is None
        rest = turn(claimer, [Outcome(c.job_id, c.attempt, DONE) for c in third], 8)[1]
        assert [c.job_id for c in rest] == [urgent, *ids[5:]]
        # a short claim: the next walks from the front
        assert claimer.driver.place("default") is None
    finally:
        claimer.close()
        store.close()


def _entries_read(conn, statement, params) -> int:
    """How many entries of the claim index a claim read, dead ones included (the
    server's statistics, flushed when asked); its run rolled back."""
    read = ("SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'jobs_claim_order'"
            " AND schemaname = current_schema()")
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    before = conn.execute(read).fetchone()[0]
    with conn.transaction(force_rollback=True):
        # the index walk the claimer's generic plan takes (tests/contract/test_pg_plans.py)
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        assert len(conn.execute(statement, params).fetchall()) == 64
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute(read).fetchone()[0] - before


def test_with_a_transaction_open_the_claim_from_its_place_skips_what_was_claimed(
        pg_url, monkeypatch):
    """The entries of the rows claimed since another session's transaction began stay
    in the claim index while it is open; the claim from the front walks them all, the
    claim from a place none of them."""
    # The claimer walks from the front again FRONT_EVERY seconds after it last did: on a
    # loaded machine the 61 turns below can take longer, which is not what is asked here.
    monkeypatch.setattr("jobpool.store.postgres.driver.FRONT_EVERY", 600.0)
    store = jobpool.connect(pg_url)
    store.enqueue_many(NAME, [(i,) for i in range(6000)])
    schema = pg_url.rsplit("schema=", 1)[1]
    forgetful = psycopg.connect(PG_URL)
    forgetful.execute("SELECT txid_current()")
    claimer = store.claimer(OWNER, (NAME,), ("default",), {})
    try:
        claimed = turn(claimer, [], 64)[1]
        for _ in range(60):
            claimed = turn(claimer, [Outcome(c.job_id, c.attempt, DONE) for c in claimed],
                           64)[1]
        place = claimer.driver.place("default")
        assert place is not None
        params = dict(pg_sql.claim_params([NAME], {}, DEFAULT_POLICY), owner="probe",
                      slack=LEASE_SLACK, queue="default", limit=64, now=time.time())
        with psycopg.connect(PG_URL, autocommit=True,
                             options=f"-c search_path={schema}") as probe:
            front = _entries_read(probe, pg_sql.CLAIM, params)
            after = _entries_read(probe, pg_sql.CLAIM_AFTER, dict(
                params, after_priority=place[0], after_line=place[1], after_id=place[2]))
    finally:
        claimer.close()
        forgetful.close()
        store.close()
    # 3 900 rows claimed since the transaction began: the front walk reads each one's
    # entry again; the walk from the place starts past them.
    assert front > 3000 and after < 200, (after, front)
