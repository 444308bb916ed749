"""R66 through real PostgreSQL pools: the turns that used to run whole (a crash to settle,
chunks, several queues) go in flight too, and so the pool acts while their statement is
on the server. Each test makes the turn wait there (in flight) for another session that
holds the key of the finished row its settle writes, and meanwhile stops the pool,
terminates the turn's connection, or shrinks the pool. A job claimed for a slot that went meanwhile comes back
unstarted (ready, no attempt spent, ``unstarted`` in its log) and never runs; a turn
whose connection was terminated spent nothing, and its outcomes settle once."""
from __future__ import annotations

import contextlib
import signal
import time

import jobpool

from ..conftest import wait_for
from .test_pg_turn_in_flight import _admin, _schema

APP = """
import os
import time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent


def _wait(name):
    while not (HERE / name).exists():
        time.sleep(0.02)


def _ran(name):
    with open(HERE / "ran", "a") as log:
        log.write(name + "\\n")


@job(name="fl.block")
def block(tag):
    _ran(tag)
    _wait(tag + ".go")


@job(name="fl.crash")
def crash():
    _ran("crash")
    _wait("crash.go")
    os._exit(3)


@job(name="fl.chunky", chunk=3)
def chunky(n):
    _ran(f"chunky{n}")


@job(name="fl.second")
def second():
    _ran("second")


@job(name="fl.limited", max_running=1, group_by="tag")
def limited(tag):
    _ran("limited-" + tag)
"""


def _app(make_app, pg_url: str):
    """The app on the store ``pg_url``, and that store."""
    app = make_app(APP)
    app.db = pg_url
    return app, jobpool.connect(pg_url)


def _a_job_then_a_chunk(make_app, pg_url: str):
    """``_app`` with a job that runs until ``first.go`` and then three rows of a
    chunked name: (app, store, that job's id, the rows' ids)."""
    app, store = _app(make_app, pg_url)
    first = store.enqueue_with("fl.block", args=("first",)).id
    chunk = [h.id for h in store.enqueue_many("fl.chunky", [(i,) for i in range(3)])]
    return app, store, first, chunk


def _ran(app) -> list[str]:
    path = app.dir / "ran"
    return path.read_text().split() if path.exists() else []


@contextlib.contextmanager
def _turn_held(pg_url: str, job_id: int, go):
    """From another session, insert (uncommitted) the finished row that the settle of
    ``job_id`` must write, then ``go.touch()``: the job ends, and the pool's turn that
    settles it waits on that session's key, in flight, while nothing else the pool does
    waits (its heartbeat goes on). Yields the waiting backend's pid; the row is rolled
    back at the end of the block."""
    with _admin() as admin:
        admin.execute("BEGIN")
        admin.execute(
            f"INSERT INTO {_schema(pg_url)}.finished_jobs (id, queue, name, payload, serializer,"
            " priority, status, run_at, line_at, attempts, crashes, deferrals, created_at,"
            " finished_at) VALUES (%s, 'default', 'held', '', 'json', 0, 'dead', 0, 0, 0, 0, 0,"
            " 0, 0)", (job_id,))
        go.touch()
        backend = wait_for(lambda: admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobpool-supervisor'"
            " AND pg_blocking_pids(pid) @> ARRAY[pg_backend_pid()]").fetchone(), timeout=60)[0]
        yield backend
        admin.execute("ROLLBACK")


def _still_waiting(backend: int) -> bool:
    """Whether the turn's backend still waits for the session holding the key."""
    with _admin() as admin:
        return admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                             (backend,)).fetchone()[0] == "Lock"


def _given_back_unstarted(store, job_id: int) -> None:
    row = store.get(job_id)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
    # Claimed by the turn in flight (not merely left in line): its log says so.
    assert [a["outcome"] for a in store.attempts(job_id)] == ["unstarted"]


def _stop_mid_turn(app, pg_url: str, pool, row_id: int, go) -> None:
    """SIGTERM while the turn settling ``row_id`` waits on the server; the pool exits 0."""
    try:
        with _turn_held(pg_url, row_id, go) as backend:
            pool.send_signal(signal.SIGTERM)
            time.sleep(0.5)  # the pool has the signal while its turn is on the server
            assert _still_waiting(backend)
        assert pool.wait(timeout=60) == 0
    finally:
        if pool.poll() is None:
            pool.kill()


def test_a_crash_settled_in_flight_and_the_job_its_turn_claimed_given_back(make_app, pg_url):
    """R19 with R66: the crash's causes are read before the turn goes; its quarantine
    settles with the answer, and the job the same turn claimed goes back unstarted."""
    app, store = _app(make_app, pg_url)
    crashed = store.enqueue_with("fl.crash").id
    second = store.enqueue_with("fl.second").id
    pool = app.spawn("--procs", "1", "--max-crashes", "1")
    wait_for(lambda: _ran(app) == ["crash"], timeout=60)
    _stop_mid_turn(app, pg_url, pool, crashed, app.dir / "crash.go")
    row = store.get(crashed)
    assert row["status"] == "dead" and "quarantined: killed its child 1 times" in row["last_error"]
    _given_back_unstarted(store, second)
    assert _ran(app) == ["crash"]
    store.close()


def test_a_chunk_claimed_in_flight_for_a_stopping_pool_comes_back_whole(make_app, pg_url):
    """R63 with R66: the chunk's head comes with the answer and its rows after it; the
    pool stopped meanwhile, so every row of the chunk goes back unstarted."""
    app, store, first, chunk = _a_job_then_a_chunk(make_app, pg_url)
    pool = app.spawn("--procs", "1")
    wait_for(lambda: _ran(app) == ["first"], timeout=60)
    _stop_mid_turn(app, pg_url, pool, first, app.dir / "first.go")
    assert store.get(first)["status"] == "done"
    for job_id in chunk:
        _given_back_unstarted(store, job_id)
    assert _ran(app) == ["first"]
    store.close()


def test_the_next_queues_claim_follows_the_turn_in_flight(make_app, pg_url):
    """Several queues with R66: the first queue's claim goes with the turn; the next
    queue is claimed once its answer (nothing in queue a) is read, and that job, claimed
    for a slot that went with the stop, goes back unstarted."""
    app, store = _app(make_app, pg_url)
    first = store.enqueue_with("fl.block", args=("first",), queue="a").id
    second = store.enqueue_with("fl.second", queue="b").id
    pool = app.spawn("--procs", "1", "--queues", "a,b")
    wait_for(lambda: _ran(app) == ["first"], timeout=60)
    _stop_mid_turn(app, pg_url, pool, first, app.dir / "first.go")
    assert store.get(first)["status"] == "done"
    _given_back_unstarted(store, second)
    assert _ran(app) == ["first"]
    store.close()


def test_a_connection_terminated_mid_turn_with_a_chunk_spends_nothing(make_app, pg_url):
    """R26 with R66 and R63: the turn (the first job's settle, the chunk's head) is
    on the server when its backend is terminated. Nothing of it applied: the pool
    reconnects, settles the first job once, and runs every row of the chunk once, each
    on its first attempt."""
    app, store, first, chunk = _a_job_then_a_chunk(make_app, pg_url)
    pool = app.spawn("--procs", "1")
    try:
        wait_for(lambda: _ran(app) == ["first"], timeout=60)
        with _turn_held(pg_url, first, app.dir / "first.go") as backend:
            with _admin() as killer:
                assert killer.execute("SELECT pg_terminate_backend(%s)",
                                      (backend,)).fetchone()[0]
        wait_for(lambda: store.stats()["done"] == 4, timeout=60)
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(timeout=60) == 0
    finally:
        if pool.poll() is None:
            pool.kill()
    assert sorted(_ran(app)) == ["chunky0", "chunky1", "chunky2", "first"]
    for job_id in (first, *chunk):
        row = store.get(job_id)
        assert (row["status"], row["attempts"]) == ("done", 1)
        assert [a["outcome"] for a in store.attempts(job_id)] == ["done"]
    store.close()


def test_a_pool_shrunk_while_its_claim_is_in_flight_gives_that_job_back(make_app, pg_url):
    """R27 with R66 and R6: the heartbeat goes on while a turn is in flight, and a scale
    request retires the idle slot the turn claims for; the job claimed for it goes back
    unstarted, then runs once, in the slot that is left, on its first attempt."""
    app, store = _app(make_app, pg_url)
    # In claim order: "kept" goes to slot 0, "freed" to slot 1 (the one a shrink retires).
    store.enqueue_with("fl.block", args=("kept",))
    freed = store.enqueue_with("fl.block", args=("freed",)).id
    # Polls come due while the turn waits: R23's look for expired leases, due with each,
    # waits for no turn in flight (it follows it), so nothing holds the heartbeat back.
    pool = app.spawn("--procs", "2", "--poll-interval", "0.1")
    try:
        wait_for(lambda: sorted(_ran(app)) == ["freed", "kept"], timeout=60)
        third = store.enqueue_with("fl.second").id
        with _turn_held(pg_url, freed, app.dir / "freed.go") as backend:
            app.cli("scale", "--procs", "1", "--db", pg_url, check=True)

            def shrunk() -> bool:
                pool.send_signal(signal.SIGUSR1)  # R27: read the request now
                return store.pools()[0]["procs"] == 1
            wait_for(shrunk, timeout=30, interval=0.2)
            assert _still_waiting(backend)  # shrunk while the turn is on the server
        wait_for(lambda: store.attempts(third), timeout=60)
        _given_back_unstarted(store, third)
        assert "second" not in _ran(app)
        (app.dir / "kept.go").touch()
        wait_for(lambda: store.get(third)["status"] == "done", timeout=60)
        pool.send_signal(signal.SIGTERM)
        assert pool.wait(timeout=60) == 0
    finally:
        if pool.poll() is None:
            pool.kill()
    assert sorted(_ran(app)) == ["freed", "kept", "second"]
    assert store.get(third)["attempts"] == 1
    assert [a["outcome"] for a in store.attempts(third)] == ["unstarted", "done"]
    store.close()


def test_a_limited_claim_in_flight_for_a_stopping_pool_gives_its_job_back(make_app, pg_url):
    """R35 with R66: a pool under limits sends its settle and the groups' page in one
    transaction and goes on; the pool stopped while that turn waited on the server, so
    the limited job its claim took goes back unstarted, and its group is not left
    held."""
    app, store = _app(make_app, pg_url)
    first = store.enqueue_with("fl.block", args=("first",)).id
    held = store.enqueue_with("fl.limited", args=("a",)).id
    pool = app.spawn("--procs", "1")
    wait_for(lambda: _ran(app) == ["first"], timeout=60)
    _stop_mid_turn(app, pg_url, pool, first, app.dir / "first.go")
    assert store.get(first)["status"] == "done"
    _given_back_unstarted(store, held)
    assert _ran(app) == ["first"]
    assert store.limits.listing()["limits"]  # the pool ran under the job's limit
    # A pool started again runs it: the group's row was let go with the transaction.
    again = app.spawn("--procs", "1", "--burst")
    assert again.wait(timeout=60) == 0
    assert store.get(held)["status"] == "done" and _ran(app) == ["first", "limited-a"]
    store.close()
