"""In doubt on PostgreSQL: a transaction that committed while its reply was lost.
A claim so leaves rows running under the pool that no child runs; after its
connection comes back, the pool gives them back without spending their attempt
(R6, R9). A settle so is sent again, and its fence, closed by its own first commit,
matches no row: the attempt is what that commit made it, not lost (R26)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import pytest

import jobpool
from jobpool.config import PoolConfig
from jobpool.errors import StoreError
from jobpool.lifecycle import DONE, FATAL, Outcome
from jobpool.supervisor import Supervisor

from ..conftest import PG_URL, wait_for


@jobpool.job(name="doubt.noop")
def noop():
    return None


#: The text of a claim (its ``UPDATE … RETURNING``) and its command tag: the relay
#: loses the reply to the commit of the first turn that claims.
CLAIM_MARKER = ("RETURNING j.id, j.name, j.payload", "UPDATE")


@pytest.fixture
def lost_reply(pg_url, tmp_path):
    """A ``reply_relay`` in front of ``pg_url``'s server, in a process of its own (its
    threads would otherwise be in this process when a supervisor here forks); the
    file ``lost`` appears once it lost its reply (a finishing settle's commit)."""
    yield from _relay(pg_url, tmp_path)


@pytest.fixture
def lost_claim_reply(pg_url, tmp_path):
    """``lost_reply`` for the commit of a claim."""
    yield from _relay(pg_url, tmp_path, *CLAIM_MARKER)


def _relay(pg_url, tmp_path, *marker_and_tag: str):
    lost = tmp_path / "lost"
    target = urlsplit(pg_url)
    relay = subprocess.Popen(
        [sys.executable, "-m", "tests.contract.reply_relay", target.hostname,
         str(target.port or 5432), PG_URL, str(lost), *marker_and_tag],
        cwd=Path(__file__).parents[2], stdout=subprocess.PIPE, text=True)
    try:
        port = int(relay.stdout.readline())
        user, at, _server = target.netloc.rpartition("@")
        query = parse_qsl(target.query) + [("sslmode", "disable"), ("gssencmode", "disable")]
        yield LostReply(target._replace(netloc=f"{user}{at}127.0.0.1:{port}",
                                        query=urlencode(query)).geturl(), lost, relay.pid)
    finally:
        relay.terminate()
        relay.wait()
        relay.stdout.close()


class LostReply(NamedTuple):
    url: str    # the store through the relay (no SSL or GSS encryption: it reads messages)
    lost: Path  # there once the relay lost its reply
    pid: int    # the relay's process: a supervisor in this process must not kill it (R40)


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
                "                 AND datname = current_database()"
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


def test_a_held_job_whose_row_moved_to_its_next_attempt_is_given_back_too(pg_url):
    """A lease is held by job and attempt: a row of the pool's owner at an attempt the
    pool does not hold (a turn in doubt settled and claimed it again) is given back
    after the connection drops, not left running until its lease expires."""
    import psycopg
    store = jobpool.connect(pg_url)
    (job_id,) = (h.id for h in store.enqueue_many("c.job", [(1,)]))
    pool = store.claimer("host-a:1:1", ("c.job",), ("default",), {})
    try:
        (held,) = pool.turn([], 1, time.time(), None)[1]
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            schema = parse_qs(urlsplit(pg_url).query)["schema"][0]
            # What a retry and a new claim in one turn whose reply was lost leave.
            admin.execute(f"UPDATE {schema}.jobs SET attempts = attempts + 1 WHERE id = %s",
                          (job_id,))
            assert admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'jobpool-supervisor'"
                "   AND datname = current_database()").fetchone()[0] == 1
        with pytest.raises(StoreError):
            pool.lease_owners()
        # The outcome of the attempt the pool ran finds its fence closed: lost, not done.
        (settled,), _claimed, _expired = pool.turn(
            [Outcome(held.job_id, held.attempt, DONE)], 0, time.time(), None)
        assert settled.status == "lost"
    finally:
        pool.close()
    row = store.get(job_id)
    assert (row["status"], row["lease_owner"]) == ("ready", None)
    store.close()


@pytest.mark.parametrize("kind, status, line", [(DONE, "done", "done"), (FATAL, "dead", "fatal")])
def test_a_finishing_settle_whose_commit_reply_was_lost_is_what_it_made_not_lost(
        pg_url, lost_reply, kind, status, line):
    # R26, R8: the settle committed; the turn only saw its connection drop. R61: a
    # success's line is found in its finished row, a failure's in the attempt table.
    store = jobpool.connect(pg_url)
    job_id = store.enqueue("doubt.noop").id
    relayed = jobpool.connect(lost_reply.url)
    pool = relayed.claimer("host-a:1:1", ("doubt.noop",), ("default",), {})
    try:
        (claimed,) = pool.turn([], 1, time.time(), None)[1]
        outcome = Outcome(job_id, claimed.attempt, kind, None if kind == DONE else "boom")
        with pytest.raises(StoreError):
            pool.turn([outcome], 0, time.time(), None)
        assert lost_reply.lost.exists()
        assert store.get(job_id)["status"] == status  # the server did commit it
        # The supervisor sends the outcome again (R26): the fence matches no row now,
        # and the attempt is reported as that first commit made it.
        (settled,), claimed_now, _expired = pool.turn([outcome], 0, time.time(), None)
        assert (settled.job_id, settled.attempt, settled.status) == (job_id, 1, status)
        assert claimed_now == []
    finally:
        pool.close()
        relayed.close()
    assert [a["outcome"] for a in store.attempts(job_id)] == [line]
    store.close()


def test_a_pool_counts_a_job_done_once_when_its_settles_commit_reply_was_lost(pg_url,
                                                                              lost_reply):
    # R26, R29a: through a supervisor, the counters say done, not lost
    store = jobpool.connect(pg_url)
    job_id = store.enqueue("doubt.noop").id
    pool = Supervisor(PoolConfig(db=lost_reply.url, procs=1, burst=True, names=("doubt.noop",),
                                 poll_interval=0.05))
    pool.companions.add(lost_reply.pid)
    assert pool.run() == 0
    assert lost_reply.lost.exists()
    counters = pool.counters
    assert (counters["completed"], counters["lost"]) == (1, 0), counters
    assert counters["settle_failures"] == 1  # the settle in doubt, sent again
    row = store.get(job_id)
    assert (row["status"], row["attempts"]) == ("done", 1)
    assert [a["outcome"] for a in store.attempts(job_id)] == ["done"]
    store.close()


STOPPED_APP = """
from jobpool import job

@job(name="doubt.kept")
def kept():
    return None
"""


def test_a_pool_stopped_while_its_claim_is_in_doubt_gives_the_claim_back(
        pg_url, lost_claim_reply, make_app):
    """R26, R6: a pool asked to stop while its last claim is in doubt (the commit went
    through, its reply was lost with the connection) gives back the rows that claim
    took before it exits, their attempt unspent. It used to exit at once: the rows
    stayed running under an owner that had gone, for another pool to take back as a
    dead owner's with the attempt spent (dead, had it been the last)."""
    store = jobpool.connect(pg_url)
    job_id = store.enqueue("doubt.kept").id
    app = make_app(STOPPED_APP)
    app.db = lost_claim_reply.url
    # A long poll interval: the pause after the failure (R26) is the poll interval,
    # well past the stop asked below.
    pool = app.spawn("--procs", "1", "--poll-interval", "3")
    try:
        wait_for(lost_claim_reply.lost.exists, timeout=60)
        pool.send_signal(signal.SIGTERM)
        _out, err = pool.communicate(timeout=60)
    finally:
        if pool.poll() is None:
            pool.kill()
            pool.communicate()
    assert pool.returncode == 0, err[-3000:]
    row = store.get(job_id)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None), row
    store.close()
