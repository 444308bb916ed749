"""A store the pool cannot write (R26): refused at start when it never could be
written, and given up on by ``--burst`` after ``--store-timeout`` when it stops
answering; a long-running pool waits it out (tests/faults/test_store_outage.py)."""
from __future__ import annotations

import sqlite3
import subprocess
import time

import pytest

from tests.test_cli import one_line_error


@pytest.fixture
def immutable():
    """``immutable(path)``: even root cannot write it; undone at teardown."""
    made = []

    def make(path):
        result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"chattr +i is not available here: {result.stderr.strip()}")
        made.append(path)
    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_pool_on_a_store_it_cannot_write_refuses_to_start_in_one_line(fault_app, immutable):
    app = fault_app
    app.store().enqueue("f.work", 1)
    app.store().close()  # the WAL is checkpointed away: the file alone holds the job
    immutable(app.db)
    started = time.monotonic()
    result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst", timeout=60)
    line = one_line_error(result)
    assert "cannot be written" in line and str(app.db) in line
    assert time.monotonic() - started < 30  # it did not idle: it refused
    assert app.count("status = 'ready'") == 1


def test_burst_gives_up_after_the_store_timeout_of_continuous_errors(fault_app):
    app = fault_app
    app.store().enqueue_many("f.work", [(i,) for i in range(3)])
    holder = sqlite3.connect(app.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # every write of the pool now fails (locked)
    try:
        started = time.monotonic()
        result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst",
                         "--store-timeout", "2", timeout=90)
        took = time.monotonic() - started
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.returncode == 3, result.stderr
    assert "store_error" in result.stderr and "store_gave_up" in result.stderr
    assert took >= 2
    # Nothing was lost: the jobs wait for a pool that can write.
    assert app.count("status = 'ready'") == 3
