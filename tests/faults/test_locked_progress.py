"""R26: a progress report written while another connection holds the store's write
lock is a store error like any other; it never takes the supervisor down."""
from __future__ import annotations

import signal
import sqlite3
import time

from .conftest import wait_for

APP = """
import time
from pathlib import Path
import jobpool
from jobpool import job

HERE = Path(__file__).parent

@job(name="t.reports")
def reports():
    jobpool.progress(50, "halfway")
    (HERE / "reported").write_text("x")
    while not (HERE / "go").exists():
        time.sleep(0.01)
    jobpool.progress(90, "almost")
"""


def test_progress_and_a_finish_under_a_held_write_lock_do_not_kill_the_pool(make_app):
    app = make_app(APP)
    job = app.store().enqueue("t.reports")
    pool = app.spawn("--procs", "1")
    wait_for(lambda: (app.dir / "reported").exists(), timeout=30)
    holder = sqlite3.connect(app.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # The job reports and finishes while the lock is held: the pool writes the
        # last report as the slot frees, and the store says "locked".
        (app.dir / "go").write_text("x")
        time.sleep(2.0)
        assert pool.poll() is None, pool.stderr.read()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(lambda: app.rows("SELECT status FROM jobs WHERE id = ?", (job.id,))[0]["status"]
             == "done", timeout=30)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=30) == 0
