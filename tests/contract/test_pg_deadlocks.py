"""On PostgreSQL, an operator's call that takes several rows in the order it was given
meets pools' turns that take theirs in their own order, and the server breaks such a
cycle by failing one transaction. A pool's turn is retried by its pool (R26); the
store runs the operator's transaction again (``DEADLOCK_TRIES``), so ``jobs cancel
A B`` does not fail because a pool was at work on the same rows."""
from __future__ import annotations

import logging
import threading

import jobpool
from tests.conftest import _pg_admin, lock_waits, outcome_of, wait_for


def test_a_cancel_the_server_ends_to_break_a_deadlock_is_run_again(pg_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.store.postgres.store")
    store, other = jobpool.connect(pg_url), jobpool.connect(pg_url)
    first, second = (store.enqueue_with("t.member").id for _ in range(2))
    holding, go_on, seen = threading.Event(), threading.Event(), {}

    def hold_then_take(conn):
        # Another transaction holds the second row, then asks for the first, which the
        # cancel took before it asked for the second: a cycle the server breaks by
        # failing the transaction that waited first (the cancel).
        conn.execute("SET LOCAL lock_timeout = '20s'")
        conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (second,))
        holding.set()
        assert go_on.wait(30)
        conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (first,))
    taking = threading.Thread(target=lambda: seen.update(other=outcome_of(
        lambda: other.transaction("holding rows", hold_then_take))))
    taking.start()
    assert holding.wait(30)
    cancelling = threading.Thread(target=lambda: seen.update(cancel=outcome_of(
        lambda: store.cancel_many([first, second]))))
    cancelling.start()
    admin = _pg_admin()
    try:
        # The cancel holds the first and waits for the second.
        wait_for(lambda: lock_waits(admin) >= 1, timeout=30, interval=0.01)
    finally:
        admin.close()
        go_on.set()
        taking.join(60)
        cancelling.join(60)
    assert seen["other"] is None  # it got the first row once the cancel was ended
    assert seen["cancel"] == {first: "cancelled", second: "cancelled"}  # run again, whole
    assert "running it again" in caplog.text
    assert [store.get(i)["status"] for i in (first, second)] == ["dead", "dead"]
    store.close()
    other.close()
