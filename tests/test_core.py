"""The claim/settle core, run against the pure twin and the compiled core."""
from __future__ import annotations

import os
import random
import sqlite3

import pytest

import jobpool
from jobpool.errors import StoreError
from jobpool.lifecycle import Outcome

from .conftest import ATTEMPT_LINES, insert_job, rows

OWNER = "host:1:1"
NOW = 10_000.0


def outcome(job, kind, error=None, delay=None, result=None):
    job_id, attempt = job.job_id, job.attempt
    return Outcome(job_id, attempt, kind, error, delay, result, 123, "0", 1024, 0.5)


@pytest.fixture
def core(core_impl, store_path):
    c = core_impl.Core(str(store_path), OWNER, ["t.job", "t.other"], ["default"],
                       {"t.job": (1.0, 3600.0, 3, 4, 60.0)})
    yield c
    c.close()


# -- backoff (R13) ------------------------------------------------------------------------

def test_backoff_doubles_from_base_and_caps_at_max(core_impl):
    assert [core_impl.backoff(a, 1.0, 3600.0, 0.0) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert core_impl.backoff(20, 1.0, 3600.0, 0.0) == 3600.0


def test_backoff_jitter_only_subtracts_up_to_a_quarter(core_impl):
    for attempts in range(1, 40):
        for u in (0.0, 0.3, 0.999999):
            delay = core_impl.backoff(attempts, 1.0, 3600.0, u)
            full = min(3600.0, 2.0 ** (attempts - 1))
            assert full * 0.75 <= delay <= full


def test_backoff_base_zero_retries_at_once(core_impl):
    assert core_impl.backoff(7, 0.0, 3600.0, 0.5) == 0.0


def test_backoff_never_overflows_for_huge_attempt_counts(core_impl):
    for attempts in (1023, 1024, 10**6, 2**62):
        assert core_impl.backoff(attempts, 1.0, 3600.0, 0.0) == 3600.0


# -- claiming (R6-R10) ------------------------------------------------------------------------

def test_claim_order_is_priority_then_run_at_then_id(core, store_path):
    late = insert_job(store_path, run_at=900.0)
    early = insert_job(store_path, run_at=800.0)
    urgent = insert_job(store_path, run_at=950.0, priority=5)
    tie = insert_job(store_path, run_at=800.0)
    claimed, _ = core.claim(10, NOW)
    assert [j[0] for j in claimed] == [urgent, early, tie, late]


def test_a_claim_of_one_row_takes_the_first_in_claim_order(core, store_path):
    # A turn for one free slot claims one row: the same first row as the claim of
    # many (R7), none when none is due, and each in turn.
    late = insert_job(store_path, run_at=900.0)
    early = insert_job(store_path, run_at=800.0)
    urgent = insert_job(store_path, run_at=950.0, priority=5)
    tie = insert_job(store_path, run_at=800.0)
    insert_job(store_path, run_at=NOW + 60)  # scheduled, not due
    taken = []
    for _ in range(5):
        claimed, _ = core.claim(1, NOW)
        assert len(claimed) <= 1
        taken += [j[0] for j in claimed]
    assert taken == [urgent, early, tie, late]


def test_the_claim_walks_the_claim_order_index_and_takes_each_row_by_its_id(store_path):
    """The claim's two statements (R7): the pick reads ready rows in the claim-order
    index's own order (no sort of the ready rows), the take finds its row by id."""
    from jobpool.store.sqlite import statements as sql
    from jobpool.store.sqlite.driver import DEFAULT_POLICY
    conn = sqlite3.connect(store_path)
    claim = sql.claim_sql(["t.job"], {}, DEFAULT_POLICY)
    plan = " | ".join(r[3] for r in conn.execute(
        "EXPLAIN QUERY PLAN " + claim.pick, {"now": NOW, "queue": "default", "limit": 2}))
    assert "USING INDEX jobs_claim_order" in plan and "TEMP B-TREE" not in plan, plan
    plan = " | ".join(r[3] for r in conn.execute(
        "EXPLAIN QUERY PLAN " + claim.take, {"owner": OWNER, "now": NOW, "slack": 1.0, "id": 1}))
    assert "INTEGER PRIMARY KEY" in plan, plan
    conn.close()


@pytest.mark.parametrize("served", [1, 3, 8, 9, 40])
def test_a_claim_takes_only_the_names_it_serves_however_many_it_serves(core_impl, store_path,
                                                                     served):
    """R7, R28: a pool claims the ready rows of the names it serves, in claim order, past
    the rows of names it does not serve ahead of them (one whose name a served name
    starts with, one whose name starts with a served name, one of another name), whether
    its claim tells them by comparisons (up to ``NAMES_COMPARED`` names) or by an ``IN``
    list (beyond); the walk is the claim-order index's, unsorted, either way, and up to
    ``NAMES_COMPARED`` names the pick's program builds no temporary B-tree (SQLite builds
    one for an ``IN`` list of more than two names each time the statement runs)."""
    from jobpool.store.sqlite import statements as sql
    from jobpool.store.sqlite.claimer import driver_class
    names = [f"t.n{i:02d}" for i in range(served)]
    strangers = ["t.n0", "t.n000", "t.other"]
    wanted = []
    for i in range(3 * served + 6):
        if i % 2:
            wanted.append(insert_job(store_path, name=names[(i // 2) % served]))
        else:
            insert_job(store_path, name=strangers[(i // 2) % len(strangers)])
    driver = driver_class(core_impl.NAME)(str(store_path))
    try:
        driver.serve(OWNER, names, {})
        driver.now = NOW
        pick = driver.claim_text.pick
        plan = " | ".join(r[3] for r in driver._db.rows("EXPLAIN QUERY PLAN " + pick,
                                                         {"now": NOW, "queue": "default",
                                                          "limit": 2}))
        assert "USING INDEX jobs_claim_order" in plan and "TEMP B-TREE" not in plan, plan
        program = [r[1] for r in driver._db.rows("EXPLAIN " + pick,
                                                  {"now": NOW, "queue": "default", "limit": 2})]
        assert sql.NAMES_COMPARED == 8  # the threshold the parameters straddle
        assert program.count("OpenEphemeral") == (0 if served <= 8 else 1)
        driver._db.changes("BEGIN IMMEDIATE")
        taken = [row[0] for row in driver.claim("default", len(wanted) + 5)]
        driver._db.changes("COMMIT")
    finally:
        driver.close()
    assert taken == wanted
    assert {r["id"] for r in rows(store_path) if r["status"] == "ready"}.isdisjoint(wanted)


@pytest.mark.parametrize("road", ["claim", "plain_turn", "limited"])
def test_a_claim_takes_no_row_that_is_no_longer_ready(core_impl, store_path, road):
    """R9: the claim's take is fenced by the row's status. Were its pick ever to hand
    it a row that is not ready (it cannot, under the turn's write lock), the claim
    fails and nothing of it is kept, on either driver, on the compiled turn and in a
    limited claim of chosen ids (R35)."""
    from jobpool.limits import Picked
    from jobpool.store.limit_claim import LimitedClaim
    from jobpool.store.sqlite import statements as sql
    from jobpool.store.sqlite.claimer import driver_class
    if road == "plain_turn" and core_impl.NAME != "compiled":
        pytest.skip("the compiled driver's own turn")
    taken = insert_job(store_path)
    driver = driver_class(core_impl.NAME)(str(store_path))
    try:
        driver.serve(OWNER, ["t.job"], {})
        driver.now = NOW
        driver.claim("default", 1)  # running now
        before = rows(store_path)
        driver.claim_text = driver.claim_text._replace(pick=driver.claim_text.pick.replace(
            "INDEXED BY jobs_claim_order", "").replace("status = 'ready'", "status = 'running'"))
        db = driver._db
        with pytest.raises(sqlite3.DatabaseError, match=f"job {taken} found it no longer ready"):
            if road == "claim":
                db.changes("BEGIN IMMEDIATE")  # the engine's turn's (plain_turn opens its own)
                driver.claim("default", 1)
            elif road == "limited":
                db.changes("BEGIN IMMEDIATE")
                by_ids = sql.limited_claim_sql(["t.job"], [], {}, core_impl.DEFAULT_POLICY)[0]
                limited = LimitedClaim(None, by_ids.pick.replace("status = 'ready'",
                                                                 "status = 'running'"),
                                       None, take=by_ids.take)
                driver.claim_chosen(limited, Picked([taken], [None], [None], {}))
            else:
                db.plain_turn(sql.SETTLE_DONE, sql.SUCCESS_ENDS, driver.claim_text.pick,
                              driver.claim_text.take, OWNER, NOW, 30.0, (("default", 1),), 1, [])
        db.changes("ROLLBACK")
        assert rows(store_path) == before
    finally:
        driver.close()


def test_the_compiled_turn_refuses_shares_that_are_not_pairs_before_it_begins(core_impl,
                                                                               store_path):
    """R68: ``Connection.plain_turn`` takes its shares as ``(queue, quota)`` pairs (what
    ``queueplan.as_shares`` makes); anything else is a TypeError, with no transaction
    begun and nothing written."""
    from jobpool.store.sqlite import statements as sql
    from jobpool.store.sqlite.claimer import driver_class
    if core_impl.NAME != "compiled":
        pytest.skip("the compiled driver's own turn")
    insert_job(store_path)
    driver = driver_class(core_impl.NAME)(str(store_path))
    try:
        driver.serve(OWNER, ["t.job"], {})
        db = driver._db
        for shares in ((("default",),), ("default",), (("default", 1, 2),)):
            with pytest.raises(TypeError, match=r"plain_turn takes \(queue, quota\) shares"):
                db.plain_turn(sql.SETTLE_DONE, sql.SUCCESS_ENDS, driver.claim_text.pick,
                              driver.claim_text.take, OWNER, NOW, 30.0, shares, 1, [])
        assert db.plain_turn(sql.SETTLE_DONE, sql.SUCCESS_ENDS, driver.claim_text.pick,
                             driver.claim_text.take, OWNER, NOW, 30.0, (("default", 1),), 1,
                             [])[1]  # nothing left open
    finally:
        driver.close()


def test_claim_takes_at_most_n_and_only_due_rows(core, store_path):
    ids = [insert_job(store_path) for _ in range(3)]
    insert_job(store_path, run_at=NOW + 60)  # scheduled, not due
    claimed, _ = core.claim(2, NOW)
    assert [j[0] for j in claimed] == ids[:2]
    claimed, _ = core.claim(5, NOW)
    assert [j[0] for j in claimed] == ids[2:]


def test_claim_marks_running_with_lease_and_spends_the_attempt(core_impl, core, store_path):
    job_id = insert_job(store_path, timeout=60.0, run_at=NOW - 5)
    (job,), _ = core.claim(1, NOW)
    # The queue and when it was due travel with it (a pool's wait-time metric).
    assert job == (job_id, "t.job", b"[[],{}]", "json", 1, 60.0, None, "default", NOW - 5,
                   None, None)
    row = rows(store_path)[0]
    assert row["status"] == "running"
    assert row["lease_owner"] == OWNER
    assert row["lease_expires_at"] == NOW + 60.0 + core_impl.LEASE_SLACK
    assert row["attempts"] == 1


def test_the_claim_carries_the_batch_and_the_metadata_as_stored(core, store_path):
    """R58: a job's batch id and its metadata's text come with the claim, whatever the
    text holds (the child reads what is not a JSON object as none), ASCII or not."""
    texts = ['{"tenant":"acme"}', '{"who":"caf\u00e9"}', "[1, 2]", "not json"]
    ids = [insert_job(store_path) for _ in texts]
    conn = sqlite3.connect(store_path, isolation_level=None)
    for job_id, text in zip(ids, texts):
        conn.execute("UPDATE jobs SET meta = ?, batch_id = ? WHERE id = ?", (text, job_id + 40, job_id))
    conn.close()
    claimed, refused = core.claim(10, NOW)
    assert refused == []
    assert [(j.job_id, j.batch, j.meta) for j in claimed] == [
        (job_id, job_id + 40, text) for job_id, text in zip(ids, texts)]


def test_options_left_unset_at_enqueue_take_the_jobs_registered_values(core_impl, core, store_path):
    insert_job(store_path, max_attempts=None, timeout=None)
    insert_job(store_path, name="t.other", max_attempts=None, timeout=None)
    claimed, _ = core.claim(2, NOW)
    assert [j[5] for j in claimed] == [60.0, core_impl.DEFAULT_POLICY[4]]
    got = [(r["max_attempts"], r["timeout"], r["lease_expires_at"]) for r in rows(store_path)]
    assert got == [(4, 60.0, NOW + 60.0 + core_impl.LEASE_SLACK),
                   (core_impl.DEFAULT_POLICY[3], core_impl.DEFAULT_POLICY[4],
                    NOW + core_impl.DEFAULT_POLICY[4] + core_impl.LEASE_SLACK)]


def test_unknown_names_and_other_queues_are_never_claimed(core, store_path):
    insert_job(store_path, name="newer.deployment.job")
    insert_job(store_path, queue="elsewhere")
    mine = insert_job(store_path)
    claimed, _ = core.claim(10, NOW)
    assert [j[0] for j in claimed] == [mine]
    assert [r["status"] for r in rows(store_path)] == ["ready", "ready", "running"]


def test_queues_are_served_in_order_of_preference(core_impl, store_path):
    low = insert_job(store_path, queue="low", priority=9)
    high = insert_job(store_path, queue="high")
    core = core_impl.Core(str(store_path), OWNER, ["t.job"], ["high", "low"])
    claimed, _ = core.claim(10, NOW)
    assert [j[0] for j in claimed] == [high, low]
    core.close()


def test_a_job_claimed_after_its_deadline_is_dead_without_running(core, store_path):
    job_id = insert_job(store_path, deadline=NOW - 1)
    claimed, expired = core.claim(1, NOW)
    assert claimed == []
    assert expired == [(job_id, "t.job", 1, "dead", "deadline passed")]
    row = rows(store_path)[0]
    assert (row["status"], row["last_error"]) == ("dead", "deadline passed")
    store = jobpool.connect(store_path)
    try:  # R10's own word in the attempt log, not a failure of the job's
        assert [(a["outcome"], a["error"]) for a in store.attempts(job_id)] == [
            ("deadline", "deadline passed")]
    finally:
        store.close()


def test_two_cores_never_claim_the_same_row(core_impl, store_path):
    for _ in range(50):
        insert_job(store_path)
    a = core_impl.Core(str(store_path), "host:1:1", ["t.job"], ["default"])
    b = core_impl.Core(str(store_path), "host:2:2", ["t.job"], ["default"])
    seen = []
    for _ in range(30):
        for c in (a, b):
            seen += [j[0] for j in c.claim(1, NOW)[0]]
    assert len(seen) == len(set(seen)) == 50
    a.close()
    b.close()


# -- settling (section 4, R12-R19) ----------------------------------------------------------

def test_success_is_done_with_result_and_progress_closed(core_impl, core, store_path):
    insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    settled = core.settle([outcome(job, core_impl.DONE, result="42")], NOW + 1, random.Random(1))
    assert settled == [(job[0], "t.job", 1, "done", None)]
    row = rows(store_path)[0]
    assert (row["status"], row["result"], row["progress"], row["lease_owner"]) == ("done", "42", 100, None)
    assert core.inflight == 0


def test_an_error_is_a_retry_after_backoff(core_impl, core, store_path):
    insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    settled = core.settle([outcome(job, core_impl.ERROR, "ValueError: x")], NOW, random.Random(3))
    assert settled[0][3] == "ready"
    row = rows(store_path)[0]
    assert row["status"] == "ready" and row["lease_owner"] is None
    assert NOW + 0.75 <= row["run_at"] <= NOW + 1.0  # base 1 s, first retry
    assert row["last_error"] == "ValueError: x"


def test_retry_after_overrides_backoff(core_impl, core, store_path):
    insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.RETRY, "Retry: later", delay=30.0)], NOW, random.Random())
    assert rows(store_path)[0]["run_at"] == NOW + 30.0


def test_out_of_attempts_is_dead_naming_the_budget(core_impl, core, store_path):
    insert_job(store_path, max_attempts=2)
    for attempt in (1, 2):
        (job,), _ = core.claim(1, NOW + 10_000 * attempt)
        settled = core.settle([outcome(job, core_impl.ERROR, "OSError: down\nTraceback...")],
                              NOW + 10_000 * attempt, random.Random())
    assert settled[0][3] == "dead"
    row = rows(store_path)[0]
    assert row["status"] == "dead"
    assert row["last_error"] == "OSError: down; no attempts left after 2\nTraceback..."


def test_a_retry_past_the_deadline_is_dead_with_a_distinct_reason(core_impl, core, store_path):
    insert_job(store_path, deadline=NOW + 0.5)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.RETRY, "Retry: x", delay=5.0)], NOW, random.Random())
    row = rows(store_path)[0]
    assert row["status"] == "dead"
    assert "retry would fall past its deadline" in row["last_error"]
    assert "no attempts left" not in row["last_error"]


def test_fatal_is_dead_after_one_attempt(core_impl, core, store_path):
    insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.FATAL, "Fatal: bad input")], NOW, random.Random())
    row = rows(store_path)[0]
    assert (row["status"], row["attempts"], row["last_error"]) == ("dead", 1, "Fatal: bad input")


def test_defer_gives_the_attempt_back_and_keeps_the_place_in_line(core_impl, core, store_path):
    first = insert_job(store_path, run_at=100.0)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.DEFER, "Defer: rate limit", delay=60.0)], NOW, random.Random())
    row = rows(store_path)[0]
    assert (row["status"], row["attempts"], row["deferrals"], row["run_at"]) == ("ready", 0, 1, NOW + 60)
    later = insert_job(store_path, run_at=NOW + 30)  # enqueued while it waited
    claimed, _ = core.claim(2, NOW + 61)
    assert [j[0] for j in claimed] == [first, later]


def test_reschedule_resets_attempts_and_error(core_impl, core, store_path):
    insert_job(store_path, key="nightly")
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.ERROR, "boom")], NOW, random.Random())
    (job,), _ = core.claim(1, NOW + 100)
    core.settle([outcome(job, core_impl.RESCHEDULE, "Reschedule: next", delay=3600.0)], NOW + 100,
                random.Random())
    row = rows(store_path)[0]
    assert (row["status"], row["attempts"], row["last_error"], row["key"]) == ("ready", 0, None, "nightly")
    assert row["run_at"] == NOW + 3700


def test_child_crashes_are_quarantined_after_max_crashes(core_impl, core, store_path):
    insert_job(store_path, max_attempts=10)
    causes = ["child killed by SIGSEGV", "child exited with status 3", "child killed by SIGKILL"]
    for i, cause in enumerate(causes):
        (job,), _ = core.claim(1, NOW + 10_000 * (i + 1))
        settled = core.settle([outcome(job, core_impl.CRASH, cause)], NOW + 10_000 * (i + 1),
                              random.Random())
    row = rows(store_path)[0]
    assert settled[0][3] == "dead"
    assert row["status"] == "dead" and row["crashes"] == 3 and row["attempts"] == 3
    assert row["last_error"].startswith("quarantined: killed its child 3 times")
    for cause in causes:
        assert cause in row["last_error"]


def test_release_gives_the_lease_back_keeping_the_attempt_spent(core_impl, core, store_path):
    insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.RELEASE)], NOW, random.Random())
    row = rows(store_path)[0]
    assert (row["status"], row["attempts"], row["lease_owner"], row["run_at"]) == ("ready", 1, None, 1000.0)
    assert row["max_attempts"] == 5


def test_a_job_released_during_its_last_attempt_gets_one_more(core_impl, core, store_path):
    # R25: the stop was the pool's doing; the budget grows by the attempt it cut short,
    # so the row never reads "2/1" and the job keeps its last chance.
    insert_job(store_path, max_attempts=1)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.RELEASE)], NOW, random.Random())
    row = rows(store_path)[0]
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("ready", 1, 2)
    (job,), _ = core.claim(1, NOW)
    settled = core.settle([outcome(job, core_impl.ERROR, "boom")], NOW, random.Random())
    assert settled[0][3] == "dead" and "no attempts left after 2" in rows(store_path)[0]["last_error"]


def test_a_stale_settle_is_fenced_off_and_reported_lost(core_impl, core, store_path):
    insert_job(store_path, timeout=1.0)
    (job,), _ = core.claim(1, NOW)
    # Our lease expires and another supervisor takes the job over (attempt 2).
    other = core_impl.Core(str(store_path), "host:9:9", ["t.job"], ["default"])
    assert other.reclaim(NOW + 100)[0][3] == "ready"
    (theirs,), _ = other.claim(1, NOW + 100)
    settled = core.settle([outcome(job, core_impl.DONE)], NOW + 101, random.Random())
    assert settled == [(job[0], "t.job", 1, "lost", "lease lost")]
    row = rows(store_path)[0]
    assert (row["status"], row["lease_owner"], row["attempts"]) == ("running", "host:9:9", 2)
    # The log has the attempt the reclaim ended, and nothing from the stale settle.
    assert [(a["attempt"], a["outcome"], a["owner"]) for a in rows(store_path, f"SELECT * FROM {ATTEMPT_LINES}")] \
        == [(1, "lease_expired", OWNER)]
    other.close()


def test_settle_writes_one_attempt_log_row_per_attempt(core_impl, core, store_path):
    job_id = insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    core.settle([outcome(job, core_impl.ERROR, "E: 1")], NOW + 2, random.Random())
    (log,) = rows(store_path, "SELECT * FROM attempts")
    assert log["job_id"] == job_id and log["attempt"] == 1 and log["outcome"] == "error"
    assert (log["started_at"], log["ended_at"], log["pid"], log["peak_rss"]) == (NOW, NOW + 2, 123, 1024)


# -- recovery (R23, R24) --------------------------------------------------------------------

def test_expired_leases_return_to_ready_or_dead(core_impl, core, store_path):
    a = insert_job(store_path, timeout=1.0)
    b = insert_job(store_path, timeout=1.0, max_attempts=1)
    core.claim(2, NOW)
    assert core.reclaim(NOW + 1.0) == []  # lease still live (timeout + slack)
    back = sorted(core.reclaim(NOW + 1.0 + core_impl.LEASE_SLACK + 1))
    assert [(r[0], r[3]) for r in back] == [(a, "ready"), (b, "dead")]
    assert "no attempts left after 1" in back[1][4]
    assert [r["attempts"] for r in rows(store_path)] == [1, 1]
    log = rows(store_path, "SELECT job_id, attempt, outcome, error FROM attempts ORDER BY job_id")
    assert [(a["job_id"], a["attempt"], a["outcome"]) for a in log] == [
        (a, 1, "lease_expired"), (b, 1, "lease_expired")]


def test_a_dead_owners_leases_come_back_at_once(core_impl, core, store_path):
    insert_job(store_path)
    core.claim(1, NOW)
    other = core_impl.Core(str(store_path), "host:9:9", ["t.job"], ["default"])
    assert other.lease_owners() == [OWNER]
    back = other.reclaim_owner(OWNER, "supervisor died", NOW + 1)
    assert [r[3] for r in back] == ["ready"]
    assert rows(store_path)[0]["last_error"] == "supervisor died"
    (log,) = rows(store_path, "SELECT * FROM attempts")
    assert (log["outcome"], log["error"], log["owner"]) == ("owner_died", "supervisor died", OWNER)
    other.close()


# -- store errors (R26) -----------------------------------------------------------------------

def claimed_then_locked(core_impl, store_path):
    """A core holding one claimed job, and another connection holding the write lock."""
    insert_job(store_path)
    core = core_impl.Core(str(store_path), OWNER, ["t.job"], ["default"], busy_timeout=0.05)
    (job,), _ = core.claim(1, NOW)
    blocker = sqlite3.connect(store_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    return core, job, blocker


def test_a_locked_store_raises_store_error_and_applies_nothing(core_impl, store_path):
    core, job, blocker = claimed_then_locked(core_impl, store_path)
    with pytest.raises(StoreError):
        core.settle([outcome(job, core_impl.DONE)], NOW, random.Random())
    with pytest.raises(StoreError):
        core.claim(1, NOW)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert core.settle([outcome(job, core_impl.DONE)], NOW, random.Random())[0][3] == "done"
    core.close()


def test_a_turn_waits_out_a_lock_released_within_the_busy_timeout(core_impl, store_path):
    """R26: a lock another connection holds for less than the busy timeout delays a
    turn, never fails it (the compiled driver waits in short sleeps of its own)."""
    import threading
    insert_job(store_path)
    core = core_impl.Core(str(store_path), OWNER, ["t.job"], ["default"], busy_timeout=30.0)
    blocker = sqlite3.connect(store_path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.2, blocker.execute, ("ROLLBACK",))
    release.start()
    try:
        (job,), _ = core.claim(1, NOW)
    finally:
        release.join()
        blocker.close()
    assert core.settle([outcome(job, core_impl.DONE)], NOW, random.Random())[0][3] == "done"
    core.close()


def test_a_lock_held_past_the_busy_timeout_fails_the_turn_only_after_it(core_impl, store_path):
    """The busy timeout is a floor on the wait before R26's StoreError: however the
    driver sleeps, it gives up no sooner."""
    import time
    core, job, blocker = claimed_then_locked(core_impl, store_path)
    core.close()
    core = core_impl.Core(str(store_path), OWNER, ["t.job"], ["default"], busy_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(StoreError):
        core.claim(1, NOW)
    assert time.monotonic() - started >= 0.3
    blocker.execute("ROLLBACK")
    blocker.close()
    core.close()


# -- the slot table (R6, R20) --------------------------------------------------------------------

def test_slot_table_tracks_jobs_and_deadlines(core_impl):
    table = core_impl.SlotTable(3)
    assert table.free_slots() == [0, 1, 2]
    table.assign(1, 7, 1, 50.0)
    table.assign(2, 8, 1, 40.0)
    with pytest.raises(ValueError):
        table.assign(1, 9, 1, 10.0)
    assert table.free_slots() == [0]
    assert table.busy_count() == 2
    assert table.next_deadline() == 40.0
    assert table.overdue(45.0) == [2]
    assert table.clear(2) == (8, 1)
    assert table.next_deadline() == 50.0
    table.resize(5)
    assert table.free_slots() == [0, 2, 3, 4]
    table.resize(1)  # slot 1 is busy: shrink stops there (R27)
    assert table.size == 2


def test_a_turn_settles_and_claims_in_one_transaction(core_impl, core, store_path):
    """The supervisor's loop turn: a job retried at once can be claimed again in it."""
    a = insert_job(store_path)
    b = insert_job(store_path)
    (job,), _ = core.claim(1, NOW)
    policies_zero = core_impl.Core(str(store_path), "host:5:5", ["t.job"], ["default"],
                                   {"t.job": (0.0, 0.0, 3, 5, 60.0)})
    (job,), _ = policies_zero.claim(1, NOW)  # b, under a supervisor that retries at once
    settled, claimed, expired = policies_zero.turn(
        [outcome(job, core_impl.ERROR, "E: x")], 2, NOW + 1, random.Random())
    assert [s[3] for s in settled] == ["ready"]
    assert [(c[0], c[4]) for c in claimed] == [(b, 2)] and expired == []
    assert policies_zero.inflight == 1  # the new lease, not the settled one
    assert rows(store_path)[1]["attempts"] == 2
    assert rows(store_path)[0]["lease_owner"] == OWNER and a == rows(store_path)[0]["id"]
    policies_zero.close()


def test_a_failed_turn_applies_nothing_and_keeps_the_lease(core_impl, store_path):
    core, job, blocker = claimed_then_locked(core_impl, store_path)
    with pytest.raises(StoreError):
        core.turn([outcome(job, core_impl.DONE)], 1, NOW, random.Random())
    blocker.execute("ROLLBACK")
    blocker.close()
    assert core.inflight == 1
    settled, _, _ = core.turn([outcome(job, core_impl.DONE)], 1, NOW, random.Random())
    assert settled[0][3] == "done"
    core.close()


# -- forks (R42, R43) -------------------------------------------------------------------------

def _open_descriptors_of(path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_a_core_released_for_a_fork_holds_nothing_of_the_store_and_settles_after(core, core_impl,
                                                                                   store_path):
    """R42/R43: before the supervisor forks, its core lets go of every descriptor of
    the store (so the child inherits no SQLite state); its next operation reopens,
    and the leases it held are settled as if nothing happened."""
    job_id = insert_job(store_path)
    (claimed,), _ = core.claim(1, NOW)
    core.release_before_fork()
    assert _open_descriptors_of(store_path) == []
    settled = core.settle([outcome(claimed, core_impl.DONE)], NOW + 1, random.Random(1))
    assert [s[3] for s in settled] == ["done"]
    assert rows(store_path, "SELECT status FROM jobs WHERE id = ?", (job_id,)) == [{"status": "done"}]
    core.close()
    with pytest.raises((sqlite3.ProgrammingError, StoreError)):
        core.claim(1, NOW)


def test_the_compiled_module_has_every_name_of_its_pure_twin(compiled_core):
    # ``_core_py.__all__`` is the API the compiled module mirrors: ``jobpool.core`` takes
    # each name from whichever is loaded.
    from jobpool import _core_py
    assert [name for name in _core_py.__all__ if not hasattr(compiled_core, name)] == []
    assert compiled_core.WAL_VFS == "jobpool-walbuf" and _core_py.WAL_VFS is None
