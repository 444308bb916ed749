"""R35 and R36, the same tests for every claimer: the compiled and pure SQLite cores
and PostgreSQL. A limit is enforced inside the claim transaction; a held-back row
keeps its place, spends no attempt and blocks no row behind it; groups with ready
rows are served in rotation; a rate's bucket is never overdrawn."""
from __future__ import annotations

import random
import threading
import time

import pytest

from jobpool import core
from jobpool.errors import EnqueueError
from jobpool.lifecycle import DONE, FATAL, RETRY, Outcome
from jobpool.limits import NameLimit, parse_rate

LOAD, FREE, RATED = "l.load", "l.free", "l.rated"
NAMES = (LOAD, FREE, RATED)


@pytest.fixture(params=["compiled", "pure", "postgres", "postgres-in-flight"])
def store(request, tmp_path, monkeypatch):
    import jobpool
    if request.param.startswith("postgres"):
        url = request.getfixturevalue("pg_url")
    else:
        url = str(tmp_path / "jobpool.db")
        if request.param == "pure":
            monkeypatch.setattr(core, "NAME", "pure")  # the claimer takes the pure driver
        elif core.NAME != "compiled":
            pytest.skip("the compiled core is not built")
    store = jobpool.connect(url)
    yield store
    store.close()


class InFlight:
    """R66: a claimer whose every turn is sent and then landed (``begin_turn``,
    ``finish_turn``), as a PostgreSQL pool's loop runs them: a claim under limits goes
    out with the turn's settles in a transaction left open until it lands."""

    def __init__(self, claimer):
        self.claimer = claimer

    def turn(self, outcomes, n, now, rng, shares=None):
        flight = self.claimer.begin_turn(outcomes, n, now, rng, shares)
        if n > 0:
            assert flight.flight is not None and flight.fileno() is not None  # sent, unread
        return self.claimer.finish_turn(flight)

    def __getattr__(self, name):
        return getattr(self.claimer, name)


@pytest.fixture
def claimer(store, request):
    made = []
    in_flight = request.node.callspec.params.get("store") == "postgres-in-flight"

    def make(owner="pool-a", queues=("default",)):
        c = store.claimer(owner, NAMES, queues, {})
        c.set_limits(store.limits.plan().for_pool(NAMES, queues))
        made.append(c)
        return InFlight(c) if in_flight else c
    yield make
    for c in made:
        c.close()


def declare(store, *limits: NameLimit) -> None:
    store.limits.declare({limit.name: limit for limit in limits}, "test")


def per_group(n: int) -> NameLimit:
    return NameLimit(LOAD, n, None, 1, "customer")


def claim(c, n):
    return c.turn([], n, time.time(), None)[1]


def finish(c, jobs, kind=DONE):
    return c.turn([Outcome(j.job_id, j.attempt, kind) for j in jobs], 0, time.time(),
                  random.Random(1))[0]


def groups(store, jobs):
    return sorted(_kwargs(store, j.job_id)["customer"] for j in jobs)


def _kwargs(store, job_id):
    import json
    return json.loads(store.get(job_id)["payload"])[1]


def enqueue(store, customer, count, name=LOAD, **options):
    # This process registers no job: the group is named as an enqueuer without the
    # job's group_by would name it.
    return [store.enqueue_with(name, kwargs={"customer": customer, "n": i}, group=customer,
                               **options).id for i in range(count)]


def test_a_group_at_its_limit_is_held_and_blocks_no_one_behind_it(store, claimer):
    declare(store, per_group(2))
    held = enqueue(store, "big", 10)
    enqueue(store, "small", 3)
    free = store.enqueue(FREE, 1).id
    c = claimer()
    first = claim(c, 8)
    # R35: two of each customer, and the unlimited job behind them all, in one turn.
    assert groups(store, [j for j in first if j.name == LOAD]) == ["big", "big", "small", "small"]
    assert free in {j.job_id for j in first}
    assert claim(c, 8) == []  # both groups at their limit: nothing more, however many slots
    # Held rows keep their place and spend no attempt.
    waiting = [store.get(i) for i in held[2:]]
    assert {(j["status"], j["attempts"]) for j in waiting} == {("ready", 0)}
    finish(c, [j for j in first if j.name == LOAD and _kwargs(store, j.job_id)["customer"] == "big"])
    # The next in line of the big group, in line order.
    assert [j.job_id for j in claim(c, 8)] == held[2:4]


def test_two_claimers_never_run_more_than_the_limit(store, claimer):
    declare(store, per_group(3))
    enqueue(store, "a", 20)
    one, two = claimer("pool-a"), claimer("pool-b")
    first, second, third = claim(one, 2), claim(two, 4), claim(one, 4)
    assert (len(first), len(second), len(third)) == (2, 1, 0)
    finish(one, first[:1])
    assert len(claim(two, 4)) == 1
    assert claim(one, 4) == []


def test_groups_are_served_in_rotation(store, claimer):
    # A customer's 30 files enqueued first do not starve another's 3: with room for
    # many, each turn's slots alternate between the groups with ready rows.
    declare(store, per_group(100))
    big = enqueue(store, "big", 30)
    small = enqueue(store, "small", 3)
    c = claimer()
    taken = claim(c, 4)
    assert groups(store, taken) == ["big", "big", "small", "small"]
    assert set(j.job_id for j in taken) == {big[0], big[1], small[0], small[1]}


def test_priority_comes_before_rotation(store, claimer):
    declare(store, per_group(5))
    enqueue(store, "a", 4)
    urgent = enqueue(store, "b", 1, priority=10)
    c = claimer()
    assert claim(c, 1)[0].job_id == urgent[0]


def test_a_retried_row_comes_back_into_its_lane(store, claimer):
    declare(store, per_group(1))
    (only,) = enqueue(store, "a", 1)
    c = claimer()
    (job,) = claim(c, 1)
    assert finish(c, [job], RETRY)[0].status == "ready"
    store_row = store.get(only)
    assert store_row["status"] == "ready"
    again = []
    deadline = time.monotonic() + 10
    while not again and time.monotonic() < deadline:  # the retry's backoff, then due
        again = claim(c, 1)
        time.sleep(0.05)
    assert [j.job_id for j in again] == [only]


def test_a_dead_limited_row_retried_is_claimed_again(store, claimer):
    declare(store, per_group(1))
    (only,) = enqueue(store, "a", 1)
    c = claimer()
    (job,) = claim(c, 1)
    finish(c, [job], FATAL)
    assert claim(c, 1) == []  # the group's lane is found empty and dropped
    assert store.dead.retry([only]) == {only: "retried"}
    assert [j.job_id for j in claim(c, 1)] == [only]


def test_a_limited_name_enqueued_without_its_group_joins_the_whole_name(store, claimer):
    # A process that never imported the job writes no group: the store puts the row
    # in the whole name's group, so the limit still holds.
    declare(store, NameLimit(LOAD, 1, None, 1, None))
    first = store.enqueue(LOAD, customer="x").id
    store.enqueue(LOAD, customer="y")
    c = claimer()
    assert [j.job_id for j in claim(c, 4)] == [first]
    assert claim(c, 4) == []


def test_a_chain_step_of_a_limited_name_is_claimed_under_its_limit(store, claimer):
    from jobpool import Signature
    declare(store, NameLimit(LOAD, 1, None, 1, None))
    store.enqueue_with(FREE, args=(1,), then=Signature(LOAD, (), {"customer": "z"}))
    store.enqueue_with(LOAD, kwargs={"customer": "y"})
    c = claimer()
    first = claim(c, 4)
    assert sorted(j.name for j in first) == [FREE, LOAD]
    assert claim(c, 4) == []  # the name's lane is found empty, and goes
    finish(c, [j for j in first if j.name == FREE])  # its next step is enqueued now
    assert claim(c, 4) == []  # the step waits: its name's one place is taken
    finish(c, [j for j in first if j.name == LOAD])
    (step,) = claim(c, 4)
    assert (step.name, _kwargs(store, step.job_id)["customer"]) == (LOAD, "z")


def test_a_per_group_name_enqueued_by_name_takes_its_group_from_its_argument(store, claimer):
    # A process that never imported the job passes no group=: the store reads the
    # group from the keyword argument the stored limit names (one by one and in
    # bulk); a row without that argument joins the whole name's group.
    from jobpool import Signature
    declare(store, per_group(1))
    store.enqueue(LOAD, customer="x")
    store.enqueue(LOAD, customer="x")
    store.enqueue_many(LOAD, [Signature(LOAD, (), {"customer": "y"}),
                              Signature(LOAD, (), {"customer": 7})])
    store.enqueue_many(LOAD, [("no customer",)])
    c = claimer()
    taken = claim(c, 8)
    assert sorted(str(_kwargs(store, j.job_id).get("customer", "")) for j in taken) == [
        "", "7", "x", "y"]
    assert claim(c, 8) == []  # the second x waits for the first
    # Arguments holding a NUL character (which PostgreSQL's jsonb refuses) are written
    # all the same (PostgreSQL puts the row in the whole name's group).
    nul = store.enqueue(LOAD, customer="v", note="a\0b").id
    assert store.get(nul)["status"] == "ready"


def test_a_chain_step_of_a_per_group_name_is_in_its_own_group(store, claimer):
    # The store writes a chain's next step itself: its group comes from the step's own
    # keyword argument, so a step for a customer at its limit waits.
    from jobpool import Signature
    declare(store, per_group(1))
    (running,) = enqueue(store, "z", 1)
    c = claimer()
    assert [j.job_id for j in claim(c, 4)] == [running]
    store.enqueue_with(FREE, args=(1,), then=Signature(LOAD, (), {"customer": "z"}))
    store.enqueue_with(FREE, args=(2,), then=Signature(LOAD, (), {"customer": "w",
                                                                  "note": "a\0b"}))
    firsts = claim(c, 4)
    finish(c, firsts)  # the next steps are enqueued now
    (step,) = claim(c, 4)  # w's; z's waits for z's running job
    assert _kwargs(store, step.job_id)["customer"] == "w"
    assert claim(c, 4) == []


def test_rows_enqueued_before_the_limit_are_limited_too(store, claimer):
    enqueue(store, "a", 5)
    declare(store, NameLimit(LOAD, 2, None, 1, None))
    c = claimer()
    assert len(claim(c, 5)) == 2


def test_rows_enqueued_before_a_limit_per_group_take_their_groups(store, claimer):
    for customer in ("a", "a", "b"):
        store.enqueue(LOAD, customer=customer)  # by name, no group: none is written
    declare(store, per_group(1))
    c = claimer()
    assert groups(store, claim(c, 5)) == ["a", "b"]


def test_a_queue_limit_holds_across_claimers(store, claimer):
    store.limits.set_queue("default", 3)
    for i in range(10):
        store.enqueue(FREE, i)
    one, two = claimer("pool-a"), claimer("pool-b")
    taken = claim(one, 2) + claim(two, 5)
    assert len(taken) == 3
    finish(one, taken[:1])
    assert len(claim(two, 5)) == 1
    assert store.limits.clear_queue("default")
    fresh = claimer("pool-c")
    assert len(claim(fresh, 10)) == 6


def test_a_rate_never_overdraws_its_bucket(store, claimer):
    # R36: any window of length w sees at most rate x w + burst starts.
    rate = parse_rate("10/s")
    declare(store, NameLimit(RATED, None, rate, 2, None))
    for i in range(60):
        store.enqueue(RATED, i)
    c = claimer()
    starts = []
    begun = time.monotonic()
    while time.monotonic() - begun < 1.5:
        jobs = claim(c, 8)
        starts.extend([time.monotonic()] * len(jobs))
        finish(c, jobs)
        time.sleep(0.01)
    assert starts, "a rate of 10/s started nothing in 1.5 s"
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            window = starts[j] - first
            # One token of slack: the store's clock and this one are read apart.
            assert j - i + 1 <= rate.per_second * window + 2 + 1, (i, j, window)
    assert len(starts) <= 10 * (starts[-1] - starts[0]) + 3
    assert len(starts) >= 5  # it refills: more than the burst over 1.5 s


def test_a_bucket_written_as_no_number_reads_full_and_stops_no_claim(store, claimer):
    # R36, R44: a group's bucket is a row; one written by hand as no number (text on
    # SQLite, an infinity on PostgreSQL) raised in the claim's refill, and the pool
    # stopped. It reads as full: at most the burst is claimed, and the claim goes on.
    declare(store, NameLimit(RATED, None, parse_rate("1/h"), 2, None))
    for i in range(5):
        store.enqueue(RATED, i)
    c = claimer()
    finish(c, claim(c, 1))  # the bucket's row is written, one token spent
    pg = store.__class__.__name__.startswith("Postgres")
    store.transaction("spoiling the bucket", lambda conn: conn.execute(
        "UPDATE jobpool_groups SET tokens = " + ("'-Infinity'" if pg else "'lots'")
        + " WHERE name = " + ("%s" if pg else "?"), (RATED,)))
    assert len(claim(c, 8)) == 2


def test_a_limited_row_whose_line_is_no_number_is_refused_and_stops_no_claim(store, claimer):
    # R7, R44: a limited claim sorts its candidates before the codec reads them; a line
    # of text (SQLite keeps it) raised in that sort. The row is taken first and refused.
    if store.__class__.__name__ == "PostgresStore":
        pytest.skip("PostgreSQL's line_at is a number")
    declare(store, per_group(5))
    (bad,), (good,) = enqueue(store, "a", 1), enqueue(store, "b", 1)  # two lanes' heads
    store.transaction("spoiling a line", lambda conn: conn.execute(
        "UPDATE jobs SET line_at = 'soon' WHERE id = ?", (bad,)))
    assert [job.job_id for job in claim(claimer(), 8)] == [good]
    assert store.get(bad)["status"] == "dead"


def test_a_claim_held_back_by_a_rate_says_when_the_next_token_is_due(store, claimer):
    # R36: the claim knows when the bucket it emptied has a token again; the pool
    # wakes then (tests/test_rate_wakeup.py), not at its poll interval.
    declare(store, NameLimit(RATED, None, parse_rate("10/s"), 1, None))
    for i in range(3):
        store.enqueue(RATED, i)
    c = claimer()
    assert len(claim(c, 4)) == 1
    assert c.token_wait == pytest.approx(0.1, abs=0.01)
    time.sleep(0.12)
    assert len(claim(c, 4)) == 1  # the token came when it said
    assert 0 < c.token_wait <= 0.1 + 0.01


def test_a_group_at_its_concurrency_limit_waits_for_no_token(store, claimer):
    # Tokens to spare, but one running at most: a finish, not time, frees the next.
    declare(store, NameLimit(RATED, 1, parse_rate("10/s"), 5, None))
    for i in range(3):
        store.enqueue(RATED, i)
    c = claimer()
    assert len(claim(c, 4)) == 1
    assert c.token_wait is None
    store.enqueue(FREE, 1)
    assert [j.name for j in claim(c, 4)] == [FREE]
    assert c.token_wait is None


def test_enqueue_without_the_group_by_argument_is_refused(store):
    from jobpool import job, jobs

    @job(name="l.declared", max_running=2, group_by="customer")
    def declared(customer=None):
        pass
    try:
        with pytest.raises(EnqueueError, match="customer"):
            store.enqueue("l.declared", "positional")
        with pytest.raises(EnqueueError, match="customer"):
            declared.enqueue_with(kwargs={}, store=store)
        # group= names it instead.
        handle = declared.enqueue_with(kwargs={}, group="g1", store=store)
        assert handle.id
        assert store.list_jobs(name="l.declared")  # nothing half-written before it
        assert len(store.list_jobs(name="l.declared")) == 1
    finally:
        jobs.unregister("l.declared")


def test_declaring_changes_are_reported_and_the_last_one_wins(store):
    changes = store.limits.declare({LOAD: per_group(2)}, "pool-1")
    assert changes == [f"limits of {LOAD}: no limit -> max_running=2 per customer "
                       f"(declared by pool pool-1)"]
    assert store.limits.declare({LOAD: per_group(2)}, "pool-2") == []
    assert store.limits.declare({LOAD: per_group(3)}, "pool-3") != []
    assert store.limits.plan().names[LOAD].max_running == 3
    store.limits.declare({LOAD: None}, "pool-4")
    assert LOAD not in store.limits.plan().names


def test_a_group_another_claim_holds_is_passed_over(store, claimer):
    # PostgreSQL: a claim locks each group's row (SKIP LOCKED) before it counts the
    # group's running jobs; a group another host's claim holds right now is passed over
    # this turn, never waited for, and the other groups are claimed.
    if store.__class__.__name__ != "PostgresStore":
        pytest.skip("SQLite has one writer at a time: no claim holds a group while another runs")
    declare(store, per_group(5))
    enqueue(store, "a", 3)
    enqueue(store, "b", 3)
    store.transaction("making a's group", lambda conn: conn.execute(
        "INSERT INTO jobpool_groups (name, grp) VALUES (%s, 'a') ON CONFLICT DO NOTHING",
        (LOAD,)))
    c = claimer()

    def claim_while_a_is_held(conn):
        conn.execute("SELECT 1 FROM jobpool_groups WHERE name = %s AND grp = 'a' FOR UPDATE",
                     (LOAD,))
        return claim(c, 8)
    taken = store.transaction("holding a's group", claim_while_a_is_held)
    assert groups(store, taken) == ["b", "b", "b"]
    assert groups(store, claim(c, 8)) == ["a", "a", "a"]  # released: its turn comes


def test_a_page_that_counted_too_few_running_jobs_still_never_exceeds_the_limit(
        store, claimer, monkeypatch):
    # PostgreSQL: the page counts a group's running jobs in a snapshot taken before it
    # locks the group, so it can miss a claim another host committed in between; the
    # claim statement counts again, after the locks, and takes a row only while its
    # group is under the limit. Here the page is made to count none at all.
    if store.__class__.__name__ != "PostgresStore":
        pytest.skip("SQLite has one writer at a time: its page counts what is running")
    from jobpool.store.limit_claim import SqlLimitedSource
    declare(store, per_group(3))
    enqueue(store, "a", 6)
    first = claimer("pool-a")
    assert len(claim(first, 2)) == 2
    counted = SqlLimitedSource.lane_page

    def stale(self, *args):
        return [state._replace(running=0) for state in counted(self, *args)]
    monkeypatch.setattr(SqlLimitedSource, "lane_page", stale)
    second = claimer("pool-b")
    assert len(claim(second, 8)) == 1     # the third place, not three more
    assert claim(second, 8) == []
    assert len(store.list_jobs(status="running", name=LOAD)) == 3


def test_a_row_the_claim_refuses_costs_no_token(store, claimer, monkeypatch):
    # PostgreSQL: a row the claim statement refuses (over its group's limit, counted
    # again) does not start, so it takes no token from its group's bucket (R36).
    if store.__class__.__name__ != "PostgresStore":
        pytest.skip("SQLite has one writer at a time: its claim takes every row it picks")
    from jobpool.store.limit_claim import SqlLimitedSource
    declare(store, NameLimit(LOAD, 1, parse_rate("1/h"), 3, "customer"))
    enqueue(store, "a", 3)
    assert len(claim(claimer("pool-a"), 2)) == 1
    counted = SqlLimitedSource.lane_page

    def stale(self, *args):
        return [state._replace(running=0) for state in counted(self, *args)]
    monkeypatch.setattr(SqlLimitedSource, "lane_page", stale)
    assert claim(claimer("pool-b"), 2) == []
    (group,) = store.limits.listing()["groups"]
    assert group["tokens"] == pytest.approx(2, abs=0.01)  # one spent, by pool-a's start


def test_the_claimer_counts_in_read_committed_whatever_the_default(store, request):
    # PostgreSQL: the claim statement's second count needs a snapshot of its own,
    # taken after the page's locks; a session that defaulted to REPEATABLE READ would
    # count in the transaction's first snapshot.
    if store.__class__.__name__ != "PostgresStore":
        pytest.skip("SQLite has one writer at a time")
    from urllib.parse import quote

    import jobpool
    rr = quote("-c default_transaction_isolation=repeatable\\ read")
    url = f"{request.getfixturevalue('pg_url')}&options={rr}"
    other = jobpool.connect(url)
    try:
        c = other.claimer("pool-rr", NAMES, ("default",), {})
        conn = c.driver._connection()
        assert conn.execute("SHOW transaction_isolation").fetchone()[0] == "read committed"
        c.close()
        assert other.transaction("reading", lambda conn: conn.execute(
            "SHOW transaction_isolation").fetchone()[0]) == "repeatable read"  # the URL's own
    finally:
        other.close()


def test_a_limit_declared_on_a_busy_name_waits_on_no_row_a_pool_holds_on_postgres(pg_url):
    """R35 on PostgreSQL: a pool declaring a new limit gives the name's rows their groups.
    It took them in its own order, waiting for rows pools' turns held, while those turns
    (a claim, then a settle) waited for rows it had taken: deadlock detected, and a new pool
    declaring a limit on a busy name could not register. The declare now commits the limit
    without waiting on a row another transaction holds, and comes back for that row."""
    import jobpool
    from tests.conftest import outcome_of, rows_held, wait_for
    store, holder, watcher = (jobpool.connect(pg_url) for _ in range(3))
    ids = store.enqueue_many(LOAD, [(n,) for n in range(3)]).ids
    seen = {}
    declaring = threading.Thread(target=lambda: seen.update(declared=outcome_of(
        lambda: declare(store, NameLimit(LOAD, 1, None, 1, None)))))
    try:
        with rows_held(holder, ids[-1]):  # a pool's claim in flight holds the last row
            declaring.start()
            # The limit is committed while the row is still held: the declare waited for it.
            wait_for(lambda: LOAD in watcher.limits.plan().names, timeout=10, interval=0.02)
    finally:
        if declaring.ident is not None:
            declaring.join(60)
    assert not isinstance(seen["declared"], Exception), seen["declared"]
    ungrouped = watcher.transaction("reading", lambda conn: conn.execute(
        "SELECT count(*) FROM jobs WHERE name = %s AND grp IS NULL", (LOAD,)).fetchone()[0])
    assert ungrouped == 0  # the held row too, once it was let go
    for each in (store, holder, watcher):
        each.close()


def test_a_declare_that_runs_out_of_patience_has_said_what_it_changed_on_postgres(
        pg_url, monkeypatch):
    """R35 on PostgreSQL: a declare whose rows of a newly limited name stay held past its
    patience is a store error, and its pool declares again at the next beat; the limits
    were committed, so that declare found nothing changed and the change was never
    logged. ``on_change`` hears each change once the limits are committed."""
    import jobpool
    from jobpool.errors import StoreError
    from jobpool.store import limit_store
    from tests.conftest import rows_held
    monkeypatch.setattr(limit_store, "ADOPT_PATIENCE", 0.2)
    store, holder = jobpool.connect(pg_url), jobpool.connect(pg_url)
    ids = store.enqueue_many(LOAD, [(n,) for n in range(2)]).ids
    limit, heard = NameLimit(LOAD, 1, None, 1, None), []
    with rows_held(holder, ids[-1]), pytest.raises(
            StoreError, match=f"limits of {LOAD} are declared, but 1 of its rows was held by "
                              r"other transactions for 0.2 s"):
        store.limits.declare({LOAD: limit}, "pool-a", on_change=heard.append)
    assert heard == [f"limits of {LOAD}: no limit -> max_running=1 (declared by pool pool-a)"]
    assert store.limits.declare({LOAD: limit}, "pool-a", on_change=heard.append) == []
    assert len(heard) == 1  # nothing changed the second time, and the rows have their groups
    assert holder.transaction("reading", lambda conn: conn.execute(
        "SELECT count(*) FROM jobs WHERE name = %s AND grp IS NULL", (LOAD,)).fetchone()[0]) == 0
    store.close()
    holder.close()


def test_a_limited_claim_waits_on_no_lane_another_pools_turn_holds_on_postgres(pg_url):
    """R35 on PostgreSQL: a limited turn in flight that put a grouped row back to ready
    holds that group's lane (its ``seq`` bumped) until its pool lands it. Another pool's
    claim from the same lane waited for it to mark the lane served, while the first could
    wait for what the second held (the queue's limit, another lane): a deadlock between
    two pools' limited turns. The second passes over a lane another transaction holds."""
    import jobpool
    from tests.conftest import outcome_of, wait_for
    store = jobpool.connect(pg_url)
    declare(store, per_group(5))
    first, second, third = enqueue(store, "a", 3)
    one = store.claimer("pool-a", NAMES, ("default",), {})
    two = store.claimer("pool-b", NAMES, ("default",), {})
    seen: dict = {}
    claiming = threading.Thread(target=lambda: seen.update(claimed=outcome_of(
        lambda: two.turn([], 1, time.time(), None)[1])))
    try:
        for c in (one, two):
            c.set_limits(store.limits.plan().for_pool(NAMES, ("default",)))
        (job,) = one.turn([], 1, time.time(), None)[1]
        assert job.job_id == first
        # Its retry goes out with a claim, in a transaction left open (R66): the lane is
        # held until pool-a lands it.
        flight = one.begin_turn([Outcome(first, job.attempt, RETRY, "again")], 1, time.time(),
                                random.Random(1))
        assert flight.holds_locks()
        claiming.start()
        wait_for(lambda: not claiming.is_alive(), timeout=10)  # while pool-a's turn is open
        one.finish_turn(flight)
    finally:
        if claiming.ident is not None:  # started
            claiming.join(30)
        one.close()
        two.close()
        store.close()
    assert [j.job_id for j in seen["claimed"]] in ([second], [third])
