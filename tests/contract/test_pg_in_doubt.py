"""In-doubt claims on PostgreSQL: a claim that committed while its reply was lost
leaves rows running under the pool that no child runs; after its connection comes
back, the pool gives them back without spending their attempt (R6, R9)."""
from __future__ import annotations

import time

import pytest

import jobpool
from jobpool.errors import StoreError
from jobpool.lifecycle import DONE, Outcome

from ..conftest import PG_URL


def test_after_a_dropped_connection_a_pool_gives_back_claims_it_does_not_hold(pg_url):
    import psycopg
    store = jobpool.connect(pg_url)
    held_id, lost_id = (h.id for h in store.enqueue_many("c.job", [(1,), (2,)]))
    pool = store.claimer("host-a:1:1", ("c.job",), ("default",), {})
    # A claim the pool's code never saw: made under its owner on another connection,
    # as a claim whose reply was lost would be.
    ghost = store.claimer("host-a:1:1", ("c.job",), ("default",), {})
    try:
        (held,) = pool.turn([], 1, time.time(), None)[1]
        (lost,) = ghost.turn([], 1, time.time(), None)[1]
        assert (held.job_id, lost.job_id) == (held_id, lost_id)
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            # The pool's connection is the older of the two.
            assert admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE pid = (SELECT pid FROM pg_stat_activity"
                "               WHERE application_name = 'jobpool-supervisor'"
                "               ORDER BY backend_start LIMIT 1)").fetchone()[0] == 1
        with pytest.raises(StoreError):
            pool.lease_owners()  # the pool finds its connection gone
        # Reconnected, the pool's next turn gives back what it does not hold, first.
        (done,), claimed, _expired = pool.turn([Outcome(held.job_id, held.attempt, DONE)], 0,
                                              time.time(), None)
        assert done.status == "done" and claimed == []
    finally:
        pool.close()
        ghost.close()
    row = store.get(lost_id)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
    store.close()
