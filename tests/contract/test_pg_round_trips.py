"""A PostgreSQL turn is one round trip (issue 25 item 1): its settles of every kind,
their attempt lines and the claim for its free slots go to the server as one statement
sent with one Sync, with no BEGIN, COMMIT or Flush around it. Counted in libpq's trace
of what the pool's connection sends, never timed. A turn that needs more (a job put
back in line due now, which its own claim cannot see) sends more, and still syncs once
per claim (R6-R9, R26)."""
from __future__ import annotations

import random
import re
import time
from collections import Counter

import pytest

import jobpool
from jobpool.lifecycle import DONE, ERROR, FATAL, RETRY, Outcome

OWNER = "host-rt:1:1"
NAME = "rt.noop"


@pytest.fixture
def traced(pg_url, tmp_path):
    """A store, a claimer on it, and ``sent()``: the messages its connection sent
    since the last call, counted by type (Execute, Sync, Flush, Parse...), with the
    statements' first words."""
    import psycopg
    store = jobpool.connect(pg_url)
    claimer = store.claimer(OWNER, (NAME,), ("default",), {})
    path = tmp_path / "trace"
    trace = open(path, "w")
    read = 0

    def start() -> None:
        conn = claimer.driver._conn
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS
                                    | psycopg.pq.Trace.REGRESS_MODE)

    def sent() -> tuple[Counter, list[str]]:
        nonlocal read
        trace.flush()
        text = path.read_text()
        lines, read = text[read:].splitlines(), len(text)
        kinds = Counter(line.split("\t")[2] for line in lines if line.startswith("F\t"))
        parsed = [m.group(1).split()[0].upper() for m in
                  (re.search(r'Parse\t "[^"]*" "\s*(\S+)', line) for line in lines) if m]
        return kinds, parsed

    try:
        yield store, claimer, start, sent
    finally:
        claimer.close()
        trace.close()
        store.close()


def turn(claimer, outcomes, want):
    return claimer.turn(outcomes, want, time.time(), random.Random(7))


def test_a_turn_that_settles_every_kind_and_claims_is_one_statement_and_one_sync(traced):
    store, claimer, start, sent = traced
    ids = [h.id for h in store.enqueue_many(NAME, [(i,) for i in range(60)])]
    # Given four running jobs (the first turn also reads the server's clock, R7a).
    _settled, claimed, _expired = turn(claimer, [], 4)
    assert [c.job_id for c in claimed] == ids[:4]
    start()
    # When one turn settles a done, a retry, a dead and another done, and claims four.
    done_a, retry, dead, done_b = claimed
    outcomes = [Outcome(done_a.job_id, done_a.attempt, DONE),
                Outcome(retry.job_id, retry.attempt, ERROR, "boom"),
                Outcome(dead.job_id, dead.attempt, FATAL, "no"),
                Outcome(done_b.job_id, done_b.attempt, DONE)]
    settled, claimed, _expired = turn(claimer, outcomes, 4)
    kinds, parsed = sent()
    # Then it sent one statement and one Sync: one round trip, nothing else.
    assert (kinds["Execute"], kinds["Sync"], kinds["Flush"]) == (1, 1, 0), kinds
    assert all(word == "WITH" for word in parsed), parsed  # no BEGIN, no COMMIT
    assert [(s.job_id, s.status) for s in settled] == [
        (done_a.job_id, "done"), (retry.job_id, "ready"), (dead.job_id, "dead"),
        (done_b.job_id, "done")]
    assert [c.job_id for c in claimed] == ids[4:8]
    assert [store.get(i)["status"] for i in ids[:4]] == ["done", "ready", "dead", "done"]
    assert [a["outcome"] for a in store.attempts(retry.job_id)] == ["error"]
    # And so does every turn once its statement is prepared (psycopg prepares one the
    # fifth time it runs, which takes that turn a Sync more, once).
    syncs = []
    for _ in range(10):
        outcomes = [Outcome(c.job_id, c.attempt, DONE) for c in claimed]
        _settled, claimed, _expired = turn(claimer, outcomes, len(outcomes))
        kinds, parsed = sent()
        assert (kinds["Execute"], kinds["Flush"]) == (1, 0), kinds
        syncs.append(kinds["Sync"])
    assert syncs.count(1) == 9 and syncs[-3:] == [1, 1, 1], str(syncs)


def test_a_turn_that_only_settles_or_only_claims_is_one_statement_and_one_sync(traced):
    store, claimer, start, sent = traced
    ids = [h.id for h in store.enqueue_many(NAME, [(i,) for i in range(3)])]
    (first,) = turn(claimer, [], 1)[1]
    start()
    _settled, claimed, _expired = turn(claimer, [], 2)
    kinds, parsed = sent()
    assert (kinds["Execute"], kinds["Sync"], kinds["Flush"]) == (1, 1, 0), kinds
    assert parsed in ([], ["WITH"]), parsed
    settled, _claimed, _expired = turn(claimer, [Outcome(first.job_id, first.attempt, DONE)], 0)
    kinds, _parsed = sent()
    assert (kinds["Execute"], kinds["Sync"], kinds["Flush"]) == (1, 1, 0), kinds
    assert [(s.job_id, s.status) for s in settled] == [(ids[0], "done")]
    assert [c.job_id for c in claimed] == ids[1:]


def test_a_job_put_back_due_now_is_claimed_again_in_the_same_turn(traced):
    # Its own statement's claim cannot see it (one snapshot): a second claim takes it,
    # in the same turn, as a turn on SQLite would (no wait for the poll).
    store, claimer, start, sent = traced
    (job_id,) = [h.id for h in store.enqueue_many(NAME, [(1,)])]
    (claimed,) = turn(claimer, [], 1)[1]
    start()
    settled, again, _expired = turn(
        claimer, [Outcome(job_id, claimed.attempt, RETRY, "once more", delay=0.0)], 1)
    kinds, _parsed = sent()
    assert [(s.job_id, s.status) for s in settled] == [(job_id, "ready")]
    assert [(c.job_id, c.attempt) for c in again] == [(job_id, 2)]
    assert (kinds["Execute"], kinds["Sync"]) == (2, 2), kinds
    row = store.get(job_id)
    assert (row["status"], row["attempts"], row["lease_owner"]) == ("running", 2, OWNER)


def test_a_numbered_statement_names_each_parameter_once_in_order():
    from jobpool.store.postgres import statements as pg_sql
    text, names = pg_sql.numbered("SELECT %(a)s::int, %(b)s, %(a)s WHERE x = %(c)s")
    assert (text, names) == ("SELECT $1::int, $2, $1 WHERE x = $3", ("a", "b", "c"))
    with pytest.raises(ValueError):
        pg_sql.numbered("SELECT %(a)s LIKE 'x%'")
    # The turn statement the driver sends: every parameter of the named text, once.
    named = pg_sql.turn_statement(tuple(pg_sql.TURN_KINDS), True)
    text, names = pg_sql.numbered(named)
    assert set(names) == set(re.findall(r"%\((\w+)\)s", named)) and "%(" not in text


def test_a_chains_next_step_is_claimed_in_the_turn_that_finished_its_first(traced):
    # R12: the done settle enqueues the next step in its own statement, whose claim
    # cannot see it: a second claim in the same turn takes it.
    store, claimer, start, sent = traced
    first = store.enqueue_with(NAME, args=(1,), then=jobpool.Signature(NAME, (2,))).id
    (claimed,) = turn(claimer, [], 1)[1]
    assert claimed.job_id == first
    start()
    settled, claimed_now, _expired = turn(claimer, [Outcome(first, claimed.attempt, DONE)], 1)
    assert [(s.job_id, s.status) for s in settled] == [(first, "done")]
    (next_step,) = claimed_now
    assert next_step.job_id != first and store.get(next_step.job_id)["status"] == "running"
    assert sent()[0]["Sync"] == 2


def _bound(lines_text: str) -> list[int]:
    """How many parameter values each Bind in a libpq trace carries."""
    counts = []
    for line in lines_text.splitlines():
        if line.startswith("F\t") and line.split("\t")[2] == "Bind":
            words = re.sub(r'"[^"]*"', "name", line.split("\t", 3)[3]).split()
            formats = int(words[2])
            counts.append(int(words[3 + formats]))
    return counts


def test_a_success_sends_fewer_values_than_a_failure(traced, tmp_path):
    # R61: a turn that settles successes only binds their own arrays (id, attempt,
    # result, pid and the line's measures), not a failure's due time, error, crash
    # count, outcome and exit status.
    store, claimer, start, sent = traced
    store.enqueue_many(NAME, [(i,) for i in range(4)])
    done, failed = turn(claimer, [], 2)[1]
    start()
    turn(claimer, [Outcome(done.job_id, done.attempt, DONE)], 0)
    sent()
    trace = (tmp_path / "trace").read_text()
    turn(claimer, [Outcome(failed.job_id, failed.attempt, ERROR, "boom")], 0)
    sent()
    success, failure = _bound((tmp_path / "trace").read_text()[:len(trace)]), _bound(
        (tmp_path / "trace").read_text()[len(trace):])
    assert len(success) == len(failure) == 1, (success, failure)
    assert success[0] < failure[0] - 5, (success, failure)
