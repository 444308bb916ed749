"""R11a on PostgreSQL: an enqueue on any connection wakes an idle pool through
LISTEN/NOTIFY, long before its poll would, and a dropped listener comes back."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import jobpool

from ..conftest import ROOT, wait_for

APP = """
from pathlib import Path
from jobpool import job

@job(name="w.touch")
def touch(path):
    Path(path).write_text("ran")
"""

#: The pool's poll: far longer than any wait below, so only a wake-up explains a run.
POLL = "120"


def _terminate(application: str) -> int:
    import psycopg

    from ..conftest import PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        return admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                             " WHERE application_name = %s AND datname = current_database()",
                             (application,)).fetchone()[0]


def test_an_enqueue_wakes_an_idle_pool_and_a_dropped_listener_comes_back(pg_url, tmp_path):
    (tmp_path / "wake_app.py").write_text(textwrap.dedent(APP))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    store = jobpool.connect(pg_url)
    pool = subprocess.Popen([sys.executable, "-m", "jobpool", "start", "--app", "wake_app",
                             "--db", pg_url, "--procs", "1", "--poll-interval", POLL,
                             "--no-dashboard"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        (row,) = wait_for(lambda: store.pools(), timeout=30)  # registered, past its first claim
        assert row["core"] == "postgres"  # what claims, as `pools` and the dashboard show it
        first = tmp_path / "first"
        store.enqueue("w.touch", str(first))
        wait_for(first.exists, timeout=30)
        # The listener's connection dies (a failover, an operator's kill): the pool
        # reconnects it at its next heartbeat and claims what came meanwhile.
        cpu_before = _cpu_seconds(pool.pid)
        assert _terminate("jobpool-listener") == 1
        second = tmp_path / "second"
        store.enqueue("w.touch", str(second))
        wait_for(second.exists, timeout=30)
        time.sleep(1.0)
        # Reconnecting is no busy loop: a dead socket left watched would spin the loop.
        assert _cpu_seconds(pool.pid) - cpu_before < 0.5
        # The reconnected listener hears the next enqueue itself.
        third = tmp_path / "third"
        wait_for(_listening, timeout=30)
        store.enqueue("w.touch", str(third))
        wait_for(third.exists, timeout=30)
    finally:
        pool.send_signal(signal.SIGTERM)
        out, err = pool.communicate(timeout=60)
        store.close()
    assert pool.returncode == 0, err


def _cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far (/proc/PID/stat, in clock ticks)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _listening() -> bool:
    import psycopg

    from ..conftest import PG_URL
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        return admin.execute("SELECT count(*) FROM pg_stat_activity"
                             " WHERE application_name = 'jobpool-listener'"
                             " AND datname = current_database()").fetchone()[0] == 1
