"""R11c on PostgreSQL: a producer's plain enqueues close behind one that notified
send no notification of their own, and a listening pool still runs them at once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest

import jobpool
from jobpool.store.postgres import store as pg_store

from ..conftest import ROOT, wait_for

APP = """
import time
from pathlib import Path
from jobpool import job

@job(name="q.touch")
def touch(path):
    Path(path).write_text("ran")

@job(name="q.wait_for", store_result=True)
def wait_for(started, other):
    # Runs until the other job has run beside it (or gives up): which one it saw says
    # whether the pool claimed the other while this one held a slot.
    Path(started).write_text("started")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if Path(other).exists():
            return "saw it"
        time.sleep(0.01)
    return "gave up"
"""


def _notifications(listening) -> int:
    return sum(1 for _ in listening.notifies(timeout=0.5, stop_after=50))


@pytest.fixture
def listening(pg_url):
    """A connection LISTENing on the store's channel, as a pool's listener does."""
    store = jobpool.connect(pg_url)
    channel = pg_store.channel_name(store.target.schema)
    store.close()
    conn = psycopg.connect(pg_url.split("?")[0], autocommit=True)
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    yield conn
    conn.close()


@pytest.fixture
def quiet_store(pg_url):
    """A store whose quiet window outlasts the test: where each enqueue falls is certain."""
    store = jobpool.connect(pg_url)
    store.notify_quiet = 3600.0
    yield store
    store.close()


def test_an_enqueue_close_behind_a_notified_one_sends_none(quiet_store, listening, monkeypatch):
    monkeypatch.setattr(pg_store, "LOOK_AGAIN", 3600.0)
    store = quiet_store
    for arg in "abc":
        store.enqueue_with("q.touch", args=(arg,))
    assert _notifications(listening) == 1
    # Another queue, a delayed job: each notifies as before.
    store.enqueue_with("q.touch", args=("d",), queue="other")
    store.enqueue_with("q.touch", args=("e",), delay=60)
    assert _notifications(listening) == 2
    store.notify_quiet = 0.0  # off: every enqueue notifies
    for arg in "fg":
        store.enqueue_with("q.touch", args=(arg,))
    assert _notifications(listening) == 2
    assert store.stats()["ready"] == 6


def test_a_quiet_enqueue_committed_too_late_notifies_after_all(quiet_store, listening,
                                                                monkeypatch):
    # The pool's second look comes at once: a quiet enqueue is always later than it.
    monkeypatch.setattr(pg_store, "LOOK_AGAIN", 0.0)
    for arg in "ab":
        quiet_store.enqueue_with("q.touch", args=(arg,))
    assert _notifications(listening) == 2
    assert quiet_store.stats()["ready"] == 2


def _pool(pg_url, tmp_path):
    (tmp_path / "quiet_app.py").write_text(textwrap.dedent(APP))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    return subprocess.Popen([sys.executable, "-m", "jobpool", "start", "--app", "quiet_app",
                             "--db", pg_url, "--procs", "2", "--poll-interval", "120",
                             "--no-dashboard"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_quiet_enqueue_after_the_pools_claim_still_runs_at_once(pg_url, tmp_path):
    """The job a quiet enqueue wrote after the woken pool claimed is found by the pool's
    second look, or (committed later than that) by the notification it sends after
    all; either way while the first job still holds its slot, never at the poll."""
    store = jobpool.connect(pg_url)
    store.notify_quiet = 3600.0  # the second enqueue always counts on the first's
    pool = _pool(pg_url, tmp_path)
    try:
        wait_for(lambda: store.pools(), timeout=30)  # registered, past its first claim
        started, other = tmp_path / "started", tmp_path / "other"
        first = store.enqueue("q.wait_for", str(started), str(other))
        wait_for(started.exists, timeout=30)  # claimed: the pool looked before the next
        store.enqueue("q.touch", str(other))
        assert first.result(timeout=60) == "saw it"
    finally:
        pool.send_signal(signal.SIGTERM)
        out, err = pool.communicate(timeout=60)
        store.close()
    assert pool.returncode == 0, err


def test_an_idle_pool_runs_a_burst_of_enqueues_long_before_its_poll(pg_url, tmp_path):
    store = jobpool.connect(pg_url)
    pool = _pool(pg_url, tmp_path)
    try:
        wait_for(lambda: store.pools(), timeout=30)  # registered, past its first claim
        for burst in range(3):
            paths = [tmp_path / f"ran-{burst}-{i}" for i in range(6)]
            for path in paths:  # one after another: all but the first within 5 ms, mostly
                store.enqueue("q.touch", str(path))
            # Only a wake-up or the second look after it explains a run before the poll.
            wait_for(lambda: all(p.exists() for p in paths), timeout=60)
    finally:
        pool.send_signal(signal.SIGTERM)
        out, err = pool.communicate(timeout=60)
        store.close()
    assert pool.returncode == 0, err


def test_a_quiet_enqueue_counts_from_when_the_notification_was_sent(quiet_store, listening,
                                                                    monkeypatch):
    # The reply to the notifying enqueue comes late (a slow network, a paused producer):
    # a pool woke on its notification then, so its second look is 25 ms after that, not
    # after this process read the reply. An enqueue 25 ms after the sending notifies after
    # all, however soon after the reply it comes.
    statement = quiet_store.statement
    replies = []

    def late_reply(what, fn):
        answer = statement(what, fn)
        if not replies:
            time.sleep(2 * pg_store.LOOK_AGAIN)  # the first reply, read late
        replies.append(what)
        return answer

    monkeypatch.setattr(quiet_store, "statement", late_reply)
    quiet_store.enqueue_with("q.touch", args=("a",))
    quiet_store.enqueue_with("q.touch", args=("b",))  # at once after the first's reply
    assert _notifications(listening) == 2
    assert quiet_store.stats()["ready"] == 2


def test_a_quiet_enqueue_behind_another_producers_notification_runs_at_once(pg_url, tmp_path):
    # Two producers: the second notifies while the pool's second look for the first's
    # notification is pending, then enqueues quietly, counting on its own. The pool's
    # second look follows its latest wake-up, so the quiet job is found then, never at
    # the 120 s poll.
    producers = [jobpool.connect(pg_url), jobpool.connect(pg_url)]
    for producer in producers:
        producer.notify_quiet = 3600.0
    pool = _pool(pg_url, tmp_path)
    try:
        wait_for(lambda: producers[0].pools(), timeout=30)
        first, second, quiet = (tmp_path / name for name in ("first", "second", "quiet"))
        producers[0].enqueue("q.touch", str(first))
        time.sleep(pg_store.LOOK_AGAIN * 0.6)
        producers[1].enqueue("q.touch", str(second))
        time.sleep(pg_store.LOOK_AGAIN * 0.6)
        producers[1].enqueue("q.touch", str(quiet))  # no notification: counts on "second"'s
        wait_for(quiet.exists, timeout=20)
        assert first.exists() and second.exists()
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.communicate(timeout=60)
        for producer in producers:
            producer.close()
