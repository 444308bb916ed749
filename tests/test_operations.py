"""Operating a pool through the CLI (R25, R27, R29a, R31, R32), on every store but where
the test reaches into SQLite's own tables (the retention sweep's dates)."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from jobpool.errors import JobNotFound

from .conftest import wait_for

APP = """
import os, time
from pathlib import Path
from jobpool import job, Fatal

HERE = Path(__file__).parent

@job(name="t.block", timeout=120)
def block(name):
    # Written whole, then renamed: a test that sees the file reads the pid, never ''.
    (HERE / f"{name}.pid").write_text(str(os.getpid()))
    (HERE / f"{name}.pid").replace(HERE / f"{name}.started")
    while not (HERE / f"{name}.go").exists():
        time.sleep(0.01)

@job(name="t.bad", max_attempts=1)
def bad(n):
    raise Fatal(f"bad input {n}")

@job(name="t.ok")
def ok(n):
    pass
"""


def cli_json(app, *args):
    return json.loads(app.cli(*args, "--db", str(app.db), "--json", check=True).stdout)


def test_cancel_a_ready_job_makes_it_dead(make_any_app):
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.ok", 1).id
    out = app.cli("jobs", "cancel", str(job_id), "--db", str(app.db), check=True)
    assert f"job {job_id}: cancelled" in out.stdout
    job = app.store().get(job_id)
    assert (job["status"], job["last_error"]) == ("dead", "cancelled")
    again = app.cli("jobs", "cancel", str(job_id), "--db", str(app.db))
    assert again.returncode == 1 and "already dead" in again.stderr


def test_cancel_a_running_job_kills_its_child_within_a_second(make_any_app):
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.block", "victim").id
    pool = app.spawn("--procs", "1")
    wait_for(lambda: (app.dir / "victim.started").exists())
    child = int((app.dir / "victim.started").read_text())
    asked = time.monotonic()
    app.cli("jobs", "cancel", str(job_id), "--db", str(app.db), check=True)
    wait_for(lambda: app.store().get(job_id)["status"] == "dead", timeout=10)
    assert time.monotonic() - asked < 3.0
    job = app.store().get(job_id)
    assert job["last_error"] == "cancelled" and job["attempts"] == 1  # not retried
    wait_for(lambda: not _alive(child), timeout=2)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=20) == 0


def test_dead_letters_list_show_retry_delete_and_purge(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    ids = [store.enqueue("t.bad", n).id for n in range(4)]
    app.start("--procs", "1")
    listed = cli_json(app, "dead", "list")
    assert sorted(j["id"] for j in listed) == ids
    assert listed[0]["last_error"].startswith("Fatal: bad input")
    shown = cli_json(app, "dead", "show", str(ids[0]))
    assert shown["attempt_log"][0]["outcome"] == "fatal"

    out = app.cli("dead", "retry", str(ids[0]), "--db", str(app.db), check=True)
    assert f"job {ids[0]}: retried" in out.stdout
    job = store.get(ids[0])
    assert (job["status"], job["attempts"]) == ("ready", 0)

    app.cli("dead", "delete", str(ids[1]), "--db", str(app.db), check=True)
    with pytest.raises(JobNotFound):
        store.get(ids[1])
    assert store.attempts(ids[1]) == []

    out = app.cli("dead", "purge", "--older-than", "1h", "--db", str(app.db), check=True)
    assert "purged 0" in out.stdout
    out = app.cli("dead", "purge", "--older-than", "0s", "--db", str(app.db), check=True)
    assert "purged 2 dead jobs" in out.stdout
    assert store.cancel(store.enqueue("t.bad", 9).id) == "cancelled"  # one dead job more
    out = app.cli("dead", "purge", "--older-than", "0s", "--db", str(app.db), check=True)
    assert out.stdout.strip() == "purged 1 dead job"
    assert store.stats()["dead"] == 0


def test_dead_retry_all_by_name(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    for n in range(3):
        store.enqueue("t.bad", n)
    app.start("--procs", "1")
    out = app.cli("dead", "retry", "--all", "--name", "t.bad", "--db", str(app.db), check=True)
    assert out.stdout.count("retried") == 3
    assert store.stats()["ready"] == 3


def test_dead_retry_refuses_ids_with_all(make_any_app):
    app = make_any_app(APP)
    app.store()
    result = app.cli("dead", "retry", "1", "--all", "--db", str(app.db))
    assert result.returncode == 1 and "not both" in result.stderr


def test_pools_lists_live_supervisors_and_stop_stops_them(make_any_app):
    app = make_any_app(APP)
    app.store()
    pool = app.spawn("--procs", "2")
    wait_for(lambda: app.store().pools())
    (listed,) = cli_json(app, "pools")
    assert (listed["pid"], listed["procs"]) == (pool.pid, 2)
    assert listed["counters"]["completed"] == 0
    out = app.cli("stop", "--wait", "20", "--db", str(app.db), check=True)
    assert "all pools stopped" in out.stdout
    assert pool.wait(timeout=5) == 0


def test_stop_wait_says_the_pools_stopped_only_once_their_processes_have_exited(make_any_app):
    # R25: a pool leaves the pools table before it closes its store and exits; `stop
    # --wait` says "stopped" when the processes are gone, not when the rows are.
    app = make_any_app(APP)
    app.store()
    pools = [app.spawn("--procs", "1") for _ in range(2)]
    wait_for(lambda: len(app.store().pools()) == 2)
    out = app.cli("stop", "--wait", "20", "--db", str(app.db), check=True)
    assert [pool.poll() for pool in pools] == [0, 0]  # exited, reaped here only now
    assert out.stdout.splitlines() == ["asked 2 pool(s) to stop",
                                       "all pools stopped: 2 pool(s), every process exited"]


def test_stop_wait_that_runs_out_names_the_pools_still_running(make_any_app):
    app = make_any_app(APP)
    job_id = app.store().enqueue("t.block", "slow").id
    pool = app.spawn("--procs", "1", "--drain", "30")
    wait_for(lambda: (app.dir / "slow.started").exists())
    (owner,) = [p["owner"] for p in app.store().pools()]
    out = app.cli("stop", "--wait", "0.5", "--db", str(app.db))
    assert (out.returncode, out.stdout) == (1, "asked 1 pool(s) to stop\n")
    assert out.stderr == f"1 of 1 pool(s) still running after --wait 0.5: {owner}\n"
    (app.dir / "slow.go").write_text("go")
    assert pool.wait(timeout=20) == 0
    assert app.store().get(job_id)["status"] == "done"


def test_stats_carry_the_counters_of_running_supervisors(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_many("t.ok", [(i,) for i in range(5)])
    store.enqueue("t.bad", 1)
    pool = app.spawn("--procs", "1")
    wait_for(lambda: store.stats()["done"] == 5 and store.stats()["dead"] == 1)
    status = cli_json(app, "status")
    wait_for(lambda: cli_json(app, "status")["supervisors"][0]["completed"] == 5, timeout=5)
    status = cli_json(app, "status")
    (counters,) = status["supervisors"]
    assert (counters["completed"], counters["dead"], counters["settle_failures"]) == (5, 1, 0)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=20) == 0


def test_scale_grows_at_once_and_shrinks_without_cancelling(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_many("t.block", [(f"b{i}",) for i in range(3)])
    pool = app.spawn("--procs", "1")
    wait_for(lambda: (app.dir / "b0.started").exists())
    app.cli("scale", "--procs", "3", "--db", str(app.db), check=True)
    wait_for(lambda: all((app.dir / f"b{i}.started").exists() for i in range(3)), timeout=10)
    assert store.stats()["running"] == 3

    app.cli("scale", "--procs", "1", "--db", str(app.db), check=True)
    wait_for(lambda: store.pools() and store.pools()[0]["procs"] == 1, timeout=10)
    assert store.stats()["running"] == 3  # nothing running was cancelled to shrink
    for i in range(3):
        (app.dir / f"b{i}.go").write_text("go")
    wait_for(lambda: store.stats()["done"] == 3, timeout=10)
    wait_for(lambda: len([s for s in store.pools()[0]["slots"] if s["pid"]]) == 1, timeout=10)
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=20) == 0


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGHUP])
def test_reload_applies_a_scale_request_at_once(make_any_app, signum):
    # R27: SIGUSR1 always; SIGHUP for a pool with no terminal (spawn starts a session).
    app = make_any_app(APP)
    store = app.store()
    env_pool = app.spawn("--procs", "1")
    wait_for(lambda: store.pools())
    store.request_scale(2)
    env_pool.send_signal(signum)
    wait_for(lambda: store.pools()[0]["procs"] == 2, timeout=5)
    env_pool.send_signal(signal.SIGTERM)
    assert env_pool.wait(timeout=20) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_top_once_prints_one_frame_of_a_store(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    store.enqueue_many("t.ok", [(i,) for i in range(3)])
    store.enqueue("t.bad", 7)
    app.start("--procs", "1")
    store.enqueue("t.ok", 99)
    out = app.cli("top", "--once", "--db", str(app.db), check=True).stdout
    assert "default" in out and "no live pool" in out
    assert "Fatal: bad input 7" in out  # the recent failure and its reason
    missing = app.cli("top", "--once", "--db", str(app.dir / "nope.db"))
    assert missing.returncode == 1 and "no jobpool store" in missing.stderr


def test_the_retention_sweep_keeps_recent_done_rows_and_the_newest_dead(make_app):
    from jobpool.store.sqlite import retention
    app = make_app(APP)
    store = app.store()
    for n in range(6):
        store.enqueue("t.bad", n)
    store.enqueue_many("t.ok", [(i,) for i in range(4)])
    app.start("--procs", "1")
    conn = store.conn
    conn.execute("UPDATE jobs SET finished_at = 1000 + id")
    now = 1000 + 3600 * 24 + 9  # done rows 7 and 8 are older than a day, 9 and 10 are not
    removed = retention.sweep(store, now, result_ttl=24 * 3600, dead_letter_limit=4)
    assert removed == 2 + 2
    left = app.rows("SELECT id, status FROM jobs ORDER BY id")
    assert [r["id"] for r in left if r["status"] == "dead"] == [3, 4, 5, 6]  # newest 4 kept
    assert [r["id"] for r in left if r["status"] == "done"] == [9, 10]
    assert app.rows("SELECT count(*) AS n FROM attempts WHERE job_id IN (1, 2, 7, 8)")[0]["n"] == 0
