"""Make a store the way an older build of jobpool makes it, for the upgrade tests
(tests/test_old_stores.py). Run it with that build first on the path, never with this
checkout's, so the rows are what that build's code wrote:

    git archive REV | tar -x -C OLD
    cd / && JOBPOOL_PURE=1 PYTHONPATH=OLD python PATH/TO/make_old_store.py DB

where DB is a SQLite file or a PostgreSQL URL with ``?schema=``. It uses only the API
every build since 27792c2 (SQLite schema 5, PostgreSQL revision 4) has. Then dump it:
SQLite with ``sqlite3.Connection.iterdump``, PostgreSQL with ``pg_dump --inserts``.

The store it leaves holds a job in each state an upgrade must carry over (names in
``old.*``; the ones marked "left" are not registered here, so the drains leave them):

- ``old.ok`` done, with a stored JSON result holding non-ASCII text;
- ``old.fails`` dead, its error holding markup;
- ``old.retries`` waiting out a retry's backoff a day long (attempt 1 spent);
- ``old.first`` done, and its chain's next step ``old.second`` left ready with the
  rest of the chain (``old.third``) still to come;
- a batch of two ``old.member`` jobs, one done and one left ready under a name
  registered only here (``old.member_left``), with ``old.callback`` to run on success;
- ``old.ready`` left ready with a key; ``old.later`` left due in a year;
- ``old.killer`` left running: its drain's process was killed while it ran (SIGKILL),
  so its lease names an owner that is gone.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import jobpool
from jobpool import Retry, job
from jobpool.handles import Signature
from jobpool.testing import drain

YEAR = 365 * 86400.0


def register_jobs() -> None:
    """The jobs the main drain runs: registered in that process only."""
    @job(name="old.ok", store_result=True)
    def ok(n):
        return {"n": n, "text": "caf\u00e9 \u2603"}

    @job(name="old.fails", max_attempts=1)
    def fails():
        raise ValueError("boom <b>bold</b> [red]")

    @job(name="old.retries", max_attempts=5)
    def retries():
        raise Retry("try again tomorrow", after=86400)

    @job(name="old.first", store_result=True)
    def first(n):
        return n * 2

    @job(name="old.member")
    def member(n):
        return None


def kill_mid_run(db: str) -> None:
    """The drain that dies: it registers only ``old.killer``, whose body kills its own
    process, so the row stays ``running`` under this process's lease."""
    @job(name="old.killer")
    def killer():
        os.kill(os.getpid(), signal.SIGKILL)

    drain(jobpool.connect(db), max_jobs=1)


def make(db: str) -> None:
    register_jobs()
    store = jobpool.connect(db)
    store.enqueue_with("old.ok", args=[1])
    store.enqueue_with("old.fails")
    store.enqueue_with("old.retries")
    store.enqueue_with("old.first", args=[21],
                       then=[Signature("old.second", (1,)), Signature("old.third", (), {"k": "v"})])
    with store.batch(on_success=Signature("old.callback", ("sales",))) as batch:
        batch.add(Signature("old.member", (1,)))
        batch.add(Signature("old.member_left", (2,)))
    store.enqueue_with("old.ready", args=["r"], key="k1")
    store.enqueue_with("old.later", args=["l"], delay=YEAR)
    store.enqueue_with("old.killer")
    store.close()
    subprocess.run([sys.executable, __file__, db, "--kill-mid-run"], check=False)
    drain(jobpool.connect(db), max_jobs=20)


if __name__ == "__main__":
    if sys.argv[2:] == ["--kill-mid-run"]:
        kill_mid_run(sys.argv[1])
    else:
        make(sys.argv[1])
