"""R66: a PostgreSQL turn in flight. The claimer sends a turn (its settles and its claim,
one statement) and returns; the answer is read later, and nothing is applied before.
A connection terminated while the statement is still on the server is R26's path: the
outcomes are sent again and settle as they would have, the claim in flight spent no
attempt, and no lease is left that the engine does not hold."""
from __future__ import annotations

import contextlib
import time

import pytest

import jobpool
from jobpool.errors import StoreError
from jobpool.lifecycle import DONE, Outcome

from ..conftest import PG_URL

psycopg = pytest.importorskip("psycopg")


@jobpool.job(name="flight.noop")
def noop(_n):
    return None


def _admin():
    return psycopg.connect(PG_URL, autocommit=True)


def _schema(pg_url: str) -> str:
    return pg_url.rsplit("=", 1)[1]


def _wait_until_blocked(admin, backend: int) -> None:
    """Until ``backend`` waits for a row lock (its turn is on the server, in flight)."""
    deadline = time.monotonic() + 30
    while admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                        (backend,)).fetchone()[0] != "Lock":
        assert time.monotonic() < deadline, "the turn never reached the row lock"
        time.sleep(0.01)


def _one_claimed(pg_url: str):
    """A store with two jobs and a claimer that holds the first: (store, first id,
    second id, claimer, the first's outcome done)."""
    store = jobpool.connect(pg_url)
    first, second = (h.id for h in store.enqueue_many("flight.noop", [(1,), (2,)]))
    claimer = store.claimer("host-a:1:1", ("flight.noop",), ("default",), {})
    (job,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
    assert job.job_id == first and claimer.inflight == 1
    return store, first, second, claimer, Outcome(first, job.attempt, DONE)


def test_a_turn_is_sent_and_applied_only_when_its_answer_is_read(pg_url):
    store, first, second, claimer, outcome = _one_claimed(pg_url)
    try:
        with _admin() as admin:
            admin.execute("BEGIN")
            # Another session holds the row the settle must write: the turn waits there.
            admin.execute(f"SELECT 1 FROM {_schema(pg_url)}.jobs WHERE id = %s FOR UPDATE",
                          (first,))
            flight = claimer.begin_turn([outcome], 1, time.time(), None)
            assert flight.fileno() is not None  # sent, not answered
            _wait_until_blocked(admin, claimer.driver._conn.info.backend_pid)
            assert not flight.ready()
            assert claimer.inflight == 1  # the engine's leases are as they were
            admin.execute("ROLLBACK")
        settled, claimed, _expired = claimer.finish_turn(flight)
        assert [(s.job_id, s.status) for s in settled] == [(first, "done")]
        assert [c.job_id for c in claimed] == [second] and claimer.inflight == 1
    finally:
        claimer.close()
    assert store.get(first)["status"] == "done" and store.get(second)["status"] == "running"
    store.close()


def test_a_connection_terminated_with_a_turn_in_flight_loses_and_spends_nothing(pg_url):
    store, first, second, claimer, outcome = _one_claimed(pg_url)
    try:
        backend = claimer.driver._conn.info.backend_pid
        with _admin() as admin:
            admin.execute("BEGIN")
            admin.execute(f"SELECT 1 FROM {_schema(pg_url)}.jobs WHERE id = %s FOR UPDATE",
                          (first,))
            flight = claimer.begin_turn([outcome], 1, time.time(), None)
            _wait_until_blocked(admin, backend)
            with _admin() as killer:
                assert killer.execute("SELECT pg_terminate_backend(%s)", (backend,)).fetchone()[0]
            admin.execute("ROLLBACK")
        with pytest.raises(StoreError):
            claimer.finish_turn(flight)
        assert claimer.inflight == 1  # nothing applied: the outcome waits with the caller
        # R26: sent again on a new connection, the outcome settles as it would have, and
        # the claim that never committed spent no attempt.
        settled, claimed, _expired = claimer.turn([outcome], 1, time.time(), None)
        assert [(s.job_id, s.status) for s in settled] == [(first, "done")]
        assert [(c.job_id, c.attempt) for c in claimed] == [(second, 1)]
    finally:
        claimer.close()
    assert (store.get(first)["status"], store.get(first)["attempts"]) == ("done", 1)
    assert store.stats()["running"] == 1
    assert [a["outcome"] for a in store.attempts(first)] == ["done"]
    store.close()


def test_a_connection_lost_after_the_turn_committed_is_in_doubt_not_lost(pg_url):
    # The turn committed on the server but its answer was never read: the connection
    # is gone when it is. Its settle is looked up (R26), its claim given back (R6).
    store, first, second, claimer, outcome = _one_claimed(pg_url)
    try:
        flight = claimer.begin_turn([outcome], 1, time.time(), None)
        deadline = time.monotonic() + 30
        while store.get(second)["status"] != "running":  # committed on the server
            assert time.monotonic() < deadline
            time.sleep(0.01)
        claimer.driver._conn.close()  # the connection goes before its answer is read
        with pytest.raises(StoreError):
            claimer.finish_turn(flight)
        settled, claimed, _expired = claimer.turn([outcome], 0, time.time(), None)
        assert [(s.job_id, s.status) for s in settled] == [(first, "done")]  # not lost
        assert claimed == []
    finally:
        claimer.close()
    row = store.get(second)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
    store.close()


STOP_APP = """
import time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="flight.first")
def first():
    (HERE / "first.started").touch()
    while not (HERE / "go").exists():
        time.sleep(0.02)

@job(name="flight.second")
def second():
    (HERE / "second.started").touch()
"""


def test_a_stop_while_a_turn_claims_gives_the_claimed_job_back_unstarted(make_app, pg_url):
    """R66, R6: a pool stopped (SIGTERM) while its turn is on the server with a claim
    for the slot its first job freed: the answer still settles that job, and the job
    the claim took is given back unstarted (ready, no attempt spent), never run."""
    import signal

    from ..conftest import wait_for
    app = make_app(STOP_APP)
    app.db = pg_url
    store = jobpool.connect(pg_url)
    first = store.enqueue_with("flight.first").id
    second = store.enqueue_with("flight.second").id
    pool = app.spawn("--procs", "1")
    try:
        wait_for(lambda: (app.dir / "first.started").exists(), timeout=60)
        with _admin() as admin:
            admin.execute("BEGIN")
            admin.execute(f"SELECT 1 FROM {_schema(pg_url)}.jobs WHERE id = %s FOR UPDATE",
                          (first,))
            (app.dir / "go").touch()  # the first ends; its turn (settle + claim) waits
            backend = wait_for(lambda: admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = "
                "'jobpool-supervisor' AND wait_event_type = 'Lock' "
                "AND datname = current_database()").fetchone(), timeout=60)[0]
            pool.send_signal(signal.SIGTERM)
            time.sleep(0.5)  # the pool has the signal while its turn is on the server
            assert admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                 (backend,)).fetchone()[0] == "Lock"
            admin.execute("ROLLBACK")
        assert pool.wait(timeout=60) == 0
    finally:
        if pool.poll() is None:
            pool.kill()
    assert store.get(first)["status"] == "done"
    row = store.get(second)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("ready", 0, None)
    assert not (app.dir / "second.started").exists()
    # It was claimed by the turn in flight (not merely left in line): its given-back
    # claim is in its attempt log.
    assert [a["outcome"] for a in store.attempts(second)] == ["unstarted"]
    store.close()


# -- the turns that went whole before: a crash, chunks, several queues -------------------


@jobpool.job(name="flight.other")
def other(_n):
    return None


def _held_turn(pg_url, claimer, held_id, outcomes, want, shares=None):
    """``claimer.begin_turn(outcomes, want)`` while another session holds the row of
    ``held_id``: the turn is sent and waits there on the server (it is in flight), then
    the row is let go and the turn finished: its ``(settled, claimed, expired)``."""
    with _admin() as admin:
        admin.execute("BEGIN")
        admin.execute(f"SELECT 1 FROM {_schema(pg_url)}.jobs WHERE id = %s FOR UPDATE",
                      (held_id,))
        flight = claimer.begin_turn(outcomes, want, time.time(), None, shares)
        assert flight.fileno() is not None  # sent, not answered
        _wait_until_blocked(admin, claimer.driver._conn.info.backend_pid)
        assert not flight.ready()
        admin.execute("ROLLBACK")
    return claimer.finish_turn(flight)


def test_a_crash_to_quarantine_reads_its_causes_first_and_goes_in_flight(pg_url):
    from jobpool.lifecycle import CRASH, Policy
    store = jobpool.connect(pg_url)
    first, second = (h.id for h in store.enqueue_many("flight.noop", [(1,), (2,)]))
    claimer = store.claimer("host-a:1:1", ("flight.noop",), ("default",),
                            {"flight.noop": Policy(max_crashes=1)})
    try:
        (job,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
        crash = Outcome(first, job.attempt, CRASH, "killed by signal 9")
        settled, claimed, _expired = _held_turn(pg_url, claimer, first, [crash], 1)
        assert [(s.job_id, s.status) for s in settled] == [(first, "dead")]
        assert "quarantined: killed its child 1 times (killed by signal 9)" in settled[0].reason
        assert [c.job_id for c in claimed] == [second]
    finally:
        claimer.close()
    assert store.get(first)["status"] == "dead"
    store.close()


def test_a_chunks_rows_are_claimed_once_the_turn_in_flight_lands(pg_url):
    store = jobpool.connect(pg_url)
    first, *rest = (h.id for h in store.enqueue_many("flight.noop", [(i,) for i in range(5)]))
    claimer = store.claimer("host-a:1:1", ("flight.noop",), ("default",), {})
    try:
        claimer.set_chunks({"flight.noop": 3})
        (head,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
        assert head.job_id == first
        assert [j.job_id for j in claimer.chunked[first]] == rest[:2]
        done = [Outcome(job_id, 1, DONE) for job_id in (first, *rest[:2])]
        settled, claimed, _expired = _held_turn(pg_url, claimer, first, done, 1)
        assert sorted(s.status for s in settled) == ["done"] * 3
        # The head came with the statement in flight, its chunk's rows after it.
        assert [c.job_id for c in claimed] == [rest[2]]
        assert [j.job_id for j in claimer.chunked[rest[2]]] == [rest[3]]
        assert claimer.inflight == 2
    finally:
        claimer.close()
    assert [store.get(i)["status"] for i in rest[2:]] == ["running", "running"]
    store.close()


def test_a_chunk_is_not_filled_for_a_name_limited_while_its_claim_was_in_flight(pg_url):
    # R64 with R66: the claim went out unlimited and was answered; a heartbeat then read
    # a limit on the name. The head it brought runs, but its chunk's rows, claimed when
    # it lands, are a claim made under the limit: none (they filled the chunk past it).
    from jobpool.limits import NameLimit
    store = jobpool.connect(pg_url)
    claimer = store.claimer("host-a:1:1", ("flight.noop",), ("default",), {})
    try:
        first, *rest = (h.id for h in store.enqueue_many("flight.noop", [(i,) for i in range(4)]))
        claimer.set_chunks({"flight.noop": 3})
        flight = claimer.begin_turn([], 1, time.time(), None)
        assert flight.fileno() is not None  # sent, not read
        _answered(flight)  # the claim ran before the limit existed
        store.limits.declare({"flight.noop": NameLimit("flight.noop", 2, None, 1, None)}, "test")
        claimer.set_limits(store.limits.plan().for_pool(("flight.noop",), ("default",)))
        (head,) = claimer.finish_turn(flight)[1]
        assert head.job_id == first and claimer.chunked == {}
        assert [store.get(i)["status"] for i in rest] == ["ready"] * 3
    finally:
        claimer.close()
        store.close()


def test_the_other_queues_are_claimed_once_the_turn_in_flight_lands(pg_url):
    from jobpool.queueplan import Share
    store = jobpool.connect(pg_url)
    first = store.enqueue_with("flight.noop", args=(1,), queue="a").id
    in_b = [store.enqueue_with("flight.other", args=(i,), queue="b").id for i in range(3)]
    claimer = store.claimer("host-a:1:1", ("flight.noop", "flight.other"), ("a", "b"), {})
    try:
        (job,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
        assert job.job_id == first
        # Queue a first (strict order): empty after the first job, so b gives the rest.
        settled, claimed, _expired = _held_turn(
            pg_url, claimer, first, [Outcome(first, 1, DONE)], 2)
        assert [(s.job_id, s.status) for s in settled] == [(first, "done")]
        assert [c.job_id for c in claimed] == in_b[:2]
        # Shares by weight: a's share is asked for first, in flight; b's after.
        settled, claimed, _expired = _held_turn(
            pg_url, claimer, in_b[0], [Outcome(in_b[0], 1, DONE)], 1,
            (Share("a", 1), Share("b", 0)))
        assert [c.job_id for c in claimed] == [in_b[2]]
    finally:
        claimer.close()
    store.close()


def test_the_first_claim_sent_is_the_first_a_turn_asks_for():
    """``first_claim`` is what ``claim_in_shares`` asks first, whatever the answers."""
    import itertools
    import random

    from jobpool.queueplan import Share, claim_in_shares, first_claim
    rng = random.Random(3)
    for _ in range(500):
        queues = [f"q{i}" for i in range(rng.randint(1, 3))]
        n = rng.randint(0, 4)
        shares = None if rng.random() < 0.3 else tuple(
            Share(q, rng.randint(0, 3)) for q in rng.sample(queues, rng.randint(0, len(queues))))
        asked: list[tuple[str, int]] = []
        answers = itertools.cycle([0, 1, 5])
        claim_in_shares(shares, queues, n, [], lambda q, w: asked.append((q, w)) or min(
            w, next(answers)))
        assert first_claim(shares, queues, n) == (asked[0] if asked else None)


# -- a turn under limits (R35, R36) ---------------------------------------------------------


def _limited_claimer(store, name, limit):
    from jobpool.limits import NameLimit
    store.limits.declare({name: NameLimit(name, limit, None, 1, "customer")}, "test")
    claimer = store.claimer("host-a:1:1", (name,), ("default",), {})
    claimer.set_limits(store.limits.plan().for_pool((name,), ("default",)))
    return claimer


@contextlib.contextmanager
def _limited_turn(pg_url, limit):
    """A store with three jobs of group "a" under ``limit`` and a claimer that holds
    the first: ``(store, their ids, claimer, the first's outcome done)``, both closed
    after."""
    store = jobpool.connect(pg_url)
    try:
        ids = [store.enqueue_with("flight.noop", args=(i,), group="a").id for i in range(3)]
        claimer = _limited_claimer(store, "flight.noop", limit)
        try:
            (job,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
            yield store, ids, claimer, Outcome(ids[0], job.attempt, DONE)
        finally:
            claimer.close()
    finally:
        store.close()


def _answered(flight) -> None:
    """Until the turn's answer is here (read, not yet applied)."""
    deadline = time.monotonic() + 30
    while not flight.ready():
        assert time.monotonic() < deadline, "the turn was never answered"
        time.sleep(0.01)


def _next_turn_settles(claimer, outcome, want: int) -> list[int]:
    """The turn after one that failed: ``outcome`` settles done; the ids it claimed."""
    settled, claimed, _expired = claimer.finish_turn(
        claimer.begin_turn([outcome], want, time.time(), None))
    assert [(s.job_id, s.status) for s in settled] == [(outcome.job_id, "done")]
    return [c.job_id for c in claimed]


def _outside_any_transaction(claimer) -> None:
    conn = claimer.driver._conn
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF


def _group_free(pg_url, name, group) -> bool:
    """Whether another session could lock ``group``'s row now (SKIP LOCKED: not held)."""
    with _admin() as admin:
        return bool(admin.execute(
            f"SELECT 1 FROM {_schema(pg_url)}.jobpool_groups WHERE name = %s AND grp = %s "
            "FOR UPDATE SKIP LOCKED", (name, group)).fetchall())


def test_a_limited_turn_goes_in_flight_holding_its_groups_until_it_lands(pg_url):
    # R66 with R35: the turn's settles and the groups' page go out in one pipeline that
    # opens a transaction; the page's locks are held, and nothing is claimed, until the
    # answer is read and the claim it decides commits.
    store = jobpool.connect(pg_url)
    ids = [store.enqueue_with("flight.noop", args=(i,), group="a").id for i in range(4)]
    claimer = _limited_claimer(store, "flight.noop", 2)
    try:
        (job,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
        assert job.job_id == ids[0] and _group_free(pg_url, "flight.noop", "a")
        flight = claimer.begin_turn([Outcome(ids[0], job.attempt, DONE)], 3, time.time(), None)
        assert flight.fileno() is not None  # sent, not read
        _answered(flight)
        # Answered, not landed: the group is held, its settle and claim not committed.
        assert not _group_free(pg_url, "flight.noop", "a")
        assert store.get(ids[0])["status"] == "running"
        settled, claimed, _expired = claimer.finish_turn(flight)
        assert [(s.job_id, s.status) for s in settled] == [(ids[0], "done")]
        # The settle went before the page: the group's one running job is gone, so
        # the limit of 2 takes two more.
        assert [c.job_id for c in claimed] == ids[1:3]
        assert _group_free(pg_url, "flight.noop", "a")
    finally:
        claimer.close()
    assert [store.get(i)["status"] for i in ids] == ["done", "running", "running", "ready"]
    store.close()


def test_a_connection_terminated_under_a_limited_turn_in_flight_applies_nothing(pg_url):
    # R66, R26: the transaction the limited turn opened dies with its connection; its
    # settle is sent again and its group was never charged.
    with _limited_turn(pg_url, 1) as (store, ids, claimer, outcome):
        flight = claimer.begin_turn([outcome], 1, time.time(), None)
        assert flight.fileno() is not None
        _answered(flight)
        assert not _group_free(pg_url, "flight.noop", "a")
        with _admin() as killer:
            assert killer.execute("SELECT pg_terminate_backend(%s)",
                                  (claimer.driver._conn.info.backend_pid,)).fetchone()[0]
        with pytest.raises(StoreError):
            claimer.finish_turn(flight)
        assert claimer.inflight == 1  # nothing applied: the outcome waits with the caller
        assert store.get(ids[0])["status"] == "running" and _group_free(
            pg_url, "flight.noop", "a")
        settled, claimed, _expired = claimer.turn([outcome], 1, time.time(), None)
        assert [(s.job_id, s.status) for s in settled] == [(ids[0], "done")]
        assert [(c.job_id, c.attempt) for c in claimed] == [(ids[1], 1)]
        assert [store.get(i)["status"] for i in ids] == ["done", "running", "ready"]
        assert [a["outcome"] for a in store.attempts(ids[0])] == ["done"]


def test_a_limited_turn_whose_statement_fails_in_flight_rolls_back_whole(pg_url, monkeypatch):
    # R66: an error in the transaction sent in flight (here its page) leaves nothing of
    # it applied, the connection usable, and the next turn settles and claims.
    from jobpool.store.postgres import statements as pg_sql
    with _limited_turn(pg_url, 1) as (store, ids, claimer, outcome):
        page = pg_sql.LANE_PAGE
        monkeypatch.setattr(pg_sql, "LANE_PAGE", page.replace("SELECT p.id,", "SELECT 1/0, p.id,"))
        flight = claimer.begin_turn([outcome], 1, time.time(), None)
        assert flight.fileno() is not None
        with pytest.raises(StoreError, match="division by zero"):
            claimer.finish_turn(flight)
        monkeypatch.setattr(pg_sql, "LANE_PAGE", page)
        assert store.get(ids[0])["status"] == "running" and claimer.inflight == 1
        assert _next_turn_settles(claimer, outcome, 1) == [ids[1]]


def test_a_limited_turn_that_fails_after_it_lands_leaves_its_connection_clean(pg_url):
    # R66, R26: a write of the claim's charge fails (here a trigger refuses the lane's
    # move to the back of the rotation; a lock timeout does the same) after the answer
    # was read: its COMMIT is refused. Nothing of the turn is applied, the connection
    # is left outside any transaction, and the turns after it (the clock read and a
    # statement prepared anew on the way) settle and claim.
    with _limited_turn(pg_url, 2) as (store, ids, claimer, outcome):
        schema = _schema(pg_url)
        with _admin() as admin:
            admin.execute(
                f"CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF NEW.served_at IS DISTINCT FROM OLD.served_at THEN "
                "RAISE EXCEPTION 'the lane may not move'; END IF; RETURN NEW; END $$; "
                f"CREATE TRIGGER refuse BEFORE UPDATE ON {schema}.jobpool_lanes "
                f"FOR EACH ROW EXECUTE FUNCTION {schema}.refuse()")
            with pytest.raises(StoreError, match="the lane may not move"):
                claimer.finish_turn(claimer.begin_turn([outcome], 2, time.time(), None))
            admin.execute(f"DROP TRIGGER refuse ON {schema}.jobpool_lanes")
        _outside_any_transaction(claimer)
        assert store.get(ids[0])["status"] == "running" and claimer.inflight == 1
        claimer.driver._clock_read_at = -float("inf")  # the clock is due again
        assert _next_turn_settles(claimer, outcome, 2) == ids[1:3]


def test_a_limited_turn_with_a_value_postgresql_refuses_sends_nothing(pg_url):
    # R66: an outcome whose error text PostgreSQL cannot hold (a NUL) fails its turn
    # before anything is sent; the connection is as it was, and the other outcomes
    # settle in the next turn.
    from jobpool.lifecycle import ERROR
    with _limited_turn(pg_url, 2) as (store, ids, claimer, outcome):
        (other,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
        bad = Outcome(other.job_id, other.attempt, ERROR, "ValueError: a\x00b")
        with pytest.raises(StoreError, match="NUL"):
            claimer.finish_turn(claimer.begin_turn([bad], 1, time.time(), None))
        _outside_any_transaction(claimer)
        _next_turn_settles(claimer, outcome, 1)


def test_a_claimer_connection_left_inside_a_transaction_is_rolled_back_before_its_turn(pg_url):
    # R26, R66: whatever left the claimer's connection inside a transaction (a failure
    # its own handling missed), the next turn does not build on it: it is rolled back.
    store = jobpool.connect(pg_url)
    (first,) = store.enqueue_many("flight.noop", [(1,)]).ids
    claimer = store.claimer("host-a:1:1", ("flight.noop",), ("default",), {})
    try:
        conn = claimer.driver._connection()
        conn.execute("BEGIN")
        conn.execute(f"UPDATE {_schema(pg_url)}.jobs SET priority = 7 WHERE id = %s", (first,))
        (job,) = claimer.finish_turn(claimer.begin_turn([], 1, time.time(), None))[1]
        assert job.job_id == first
        _outside_any_transaction(claimer)
    finally:
        claimer.close()
    assert store.get(first)["priority"] == 0  # the stray write was never committed
    store.close()
