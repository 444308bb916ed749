"""R6-R8 on PostgreSQL at scale: the hot statements read ``jobs``, ``finished_jobs`` and
``attempts`` by an index, never the whole table, under the plans they really run with.

The claimer's session forces generic plans (``pg_connection.CLAIMER_OPTIONS``), and the
store's own sessions come to them too (psycopg prepares a statement after its fifth
run; the server then keeps a generic plan unless custom ones look cheaper). A generic
plan is made without the parameters' values: it guesses that ``LIMIT $n`` keeps a
tenth of the rows it limits, and an ``unnest`` of an array a hundred rows, so a
statement that joins the rows it picked back to ``jobs`` can read the whole table
each run (a hash join over a sequential scan, a merge join along the primary key),
once the table has statistics. A fresh schema has none, and every other test runs on
one: here the tables hold 100 000 rows each and are ANALYZEd, and each statement's
generic plan, as psycopg prepares it with the parameters the store binds, is read
with ``EXPLAIN EXECUTE``; what triggers run, EXPLAIN does not show, and auto_explain
does.
"""
from __future__ import annotations

import itertools
import json
import re
import time

import psycopg
import pytest

import jobpool
from jobpool.lifecycle import DEFAULT_POLICY, LEASE_SLACK
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.postgres.connection import CLAIMER_OPTIONS, open_connection, parse_url
from jobpool.store.postgres.store import channel_name

ROWS = 100_000
#: The tables a hot statement must never read whole.
BIG = {"jobs", "finished_jobs", "attempts"}
#: Partial indexes of running rows only: as many as the pools have slots, so a walk of
#: one without a condition is no walk of the backlog (``pg_sql.CREATE_OWNER_INDEX``).
RUNNING_ONLY = {"jobs_owners", "jobs_cancels"}
#: Indexes of one finished status's rows in id order (revision 11): a walk of one is
#: the range of that status, as a ``(status, id)`` index's with the status its condition.
STATUS_ONLY = {"finished_jobs_done", "finished_jobs_dead"}
OWNER = "plans-pool-0"
#: The batch of 1 000 of the filled rows (an id clear of those the store gives).
BATCH = 900_000
#: Running rows: the first 200 ids, four owners (``OWNER`` holds ids 4, 8, 12, ...).
RUNNING = 200

#: A backlog as production has one: 200 running rows, 4 800 ready in the pools' queue
#: (a name per kind of claim, some keyed, some batch members, some grouped by a
#: limit), the rest ready in another queue; as many finished rows and attempt lines.
FILL_JOBS = f"""
INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                  attempts, max_attempts, timeout, lease_owner, lease_expires_at, created_at,
                  started_at, batch_id, grp)
SELECT CASE WHEN i <= 5000 THEN 'default' ELSE 'backlog' END,
       CASE WHEN i <= 3000 THEN 'plans.job' WHEN i <= 5000 THEN 'plans.limited'
            ELSE 'plans.backlog' END,
       CASE WHEN i % 7 = 0 THEN 'key-' || i END, '[[],{{}}]', 'json', i % 3,
       CASE WHEN i <= {RUNNING} THEN 'running' ELSE 'ready' END, i, i,
       (i <= {RUNNING})::integer, 3, 60,
       CASE WHEN i <= {RUNNING} THEN 'plans-pool-' || i % 4 END,
       CASE WHEN i <= {RUNNING} THEN 1e12 END, 0, CASE WHEN i <= {RUNNING} THEN 0 END,
       CASE WHEN i BETWEEN 2000 AND 2999 THEN {BATCH} END,
       CASE WHEN i > 3000 AND i <= 5000 THEN 'g' || i % 100 END
  FROM generate_series(1, {ROWS}) AS i
"""
FILL_FINISHED = f"""
INSERT INTO finished_jobs (id, queue, name, key, payload, serializer, priority, status, run_at,
                           line_at, attempts, crashes, deferrals, created_at, finished_at,
                           batch_id)
SELECT 1000000 + i, 'default', 'plans.job', CASE WHEN i % 7 = 0 THEN 'key-f' || i END,
       '[[],{{}}]', 'json', 0, CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'done' END, i, i, 1, 0, 0,
       i, i, CASE WHEN i % 50 = 0 THEN {BATCH} END
  FROM generate_series(1, {ROWS}) AS i
"""
FILL_ATTEMPTS = f"""
INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, outcome)
SELECT 1000000 + i, 1, 'plans-pool-old', 1, i, i, 'done' FROM generate_series(1, {ROWS}) AS i
"""

#: One batch member running, for the settle that ends it.
MEMBER_RUNS = """
UPDATE jobs SET status = 'running', lease_owner = 'plans-pool-member', attempts = 1,
       lease_expires_at = 1e12, started_at = 0
 WHERE id = 2000
"""


@pytest.fixture
def filled(pg_url):
    """The URL of a store whose tables hold ``ROWS`` rows each, with statistics."""
    jobpool.connect(pg_url).close()  # makes the schema
    target = parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {target.schema}")
        for fill in (FILL_JOBS, FILL_FINISHED, FILL_ATTEMPTS):
            conn.execute(fill)
        conn.execute("INSERT INTO jobpool_batches (id, created_at, changed_at, total)"
                     f" OVERRIDING SYSTEM VALUE VALUES ({BATCH}, 0, 0, 1000)")
        conn.execute(MEMBER_RUNS)
        conn.execute("ANALYZE")
    return pg_url


def _placeholders(statement: str) -> list[str]:
    """The statement's parameters in the order psycopg numbers them ($1 for the first
    name met, a name met again keeps its number)."""
    return list(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement)))


def generic_plan(conn, statement: str, params: dict, settings: tuple[str, ...] = (), *,
                 analyze: bool = False) -> dict:
    """The generic plan of ``statement`` prepared as psycopg prepares it for
    ``params`` (their Python types choose the parameters' types), read by ``EXPLAIN
    EXECUTE`` after ``settings`` (what the store sets in that transaction), and run
    with ``analyze`` (``EXPLAIN ANALYZE``: the rows each node read); the statement's
    runs are rolled back."""
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for setting in settings:
            conn.execute(setting)
        known = {row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements")}
        conn.execute(statement, params, prepare=True)
        (name, types), = [row for row in conn.execute(
            "SELECT name, parameter_types FROM pg_prepared_statements") if row[0] not in known]
        values = [params[key] for key in _placeholders(statement)]
        assert len(values) == len(types), (statement, types)
        arguments = f"({', '.join(['%s'] * len(values))})" if values else ""
        explain = f"EXPLAIN ({'ANALYZE, ' if analyze else ''}FORMAT JSON) EXECUTE {name}{arguments}"
        return psycopg.ClientCursor(conn).execute(explain, values).fetchone()[0][0]["Plan"]


def whole_reads(plan: dict) -> list[str]:
    """The nodes of ``plan`` that read one of the ``BIG`` tables whole: a sequential
    scan, or a walk of an index with no condition to start it (the whole table in
    the index's order), unless that index holds running rows only, or one finished
    status's rows (a range of the table)."""
    found = []
    table = plan.get("Relation Name")
    if table in BIG:
        node = plan["Node Type"]
        if node == "Seq Scan" or (node in ("Index Scan", "Index Only Scan")
                                  and "Index Cond" not in plan
                                  and plan["Index Name"] not in RUNNING_ONLY | STATUS_ONLY):
            found.append(f"{node} on {table}" + (f" using {plan['Index Name']}"
                                                 if "Index Name" in plan else ""))
    for child in plan.get("Plans", ()):
        found.extend(whole_reads(child))
    return found


def hot_statements(schema: str) -> dict[str, tuple[str, dict]]:
    """Every statement a pool's turns, heartbeats and reclaims and an enqueue run,
    with parameters of the types the store binds (``postgres.driver``, ``postgres.store``,
    ``limit_claim``, ``batch_store``)."""
    now = time.time()
    claim = dict(pg_sql.claim_params(["plans.job", "plans.limited"], {}, DEFAULT_POLICY),
                 owner=OWNER, now=now, slack=LEASE_SLACK, queue="default", limit=2)
    # One attempt's settle, as the PostgreSQL driver binds it (PgTurn._params) (id 4 is OWNER's, attempt 1).
    one = {"id": 4, "attempt": 1, "owner": OWNER, "pid": 4321, "started_at": now - 1.0,
           "now": now, "outcome": "done", "error": None, "log_error": None,
           "exit_status": None, "peak_rss": 30_000_000, "cpu_s": 0.01, "strays": 0,
           "result": b"null", "crashes": 0, "run_at": now + 5.0}
    ids = [4, 8, 12]
    many = {"ids": ids, "attempts": [1] * 3, "run_ats": [now + 5.0] * 3,
            "errors": ["boom"] * 3, "crashes": [0] * 3, "results": [b"null"] * 3,
            "pids": [4321] * 3, "began": [now - 1.0] * 3, "outcomes": ["done"] * 3,
            "log_errors": [None] * 3, "exit_statuses": [None] * 3,
            "peak_rsses": [30_000_000] * 3, "cpus": [0.01] * 3, "strays": [0] * 3,
            "owner": OWNER, "now": now}
    # R61: the successes' own arrays
    many.update(done_ids=ids, done_attempts=[1] * 3, done_results=[b"null"] * 3,
                done_pids=[4321] * 3, done_peak_rsses=[30_000_000] * 3, done_cpus=[0.01] * 3,
                done_strays=[0] * 3)
    lane = {"queue": "default", "name": "plans.limited", "grp": "g7", "priority": 1,
            "now": now, "count": 2, "id": 1, "seq": 0}
    new_job = {"queue": "default", "name": "plans.job", "key": "key-new", "payload": b"[[1],{}]",
               "serializer": "json", "priority": 0, "delay": 0.0, "max_attempts": None,
               "deadline": None, "timeout": None, "chain": None, "batch_id": None, "grp": None,
               "meta": None, "channel": channel_name(schema)}
    tables = {"jobs": "jobs", "finished": "finished_jobs"}
    statements = {
        "CLAIM": (pg_sql.CLAIM, claim),
        # R62: the claim from a place in line
        "CLAIM_AFTER": (pg_sql.CLAIM_AFTER, dict(claim, after_priority=0, after_line=now - 5.0,
                                                 after_id=3000)),
        "CLAIM_IDS": (pg_sql.CLAIM_IDS, dict(claim, ids=[3001, 3002], caps=[None, 2])),
        "LANE_PAGE": (pg_sql.LANE_PAGE, {"names": ["plans.limited"], "queue": "default",
                                         "count": 4, "offset": 0, "now": now}),
        "PROBE_LANE": (pg_sql.PROBE_LANE, lane),
        "DROP_EMPTY_LANE": (pg_sql.DROP_EMPTY_LANE, lane),
        "SERVE_LANES": (pg_sql.SERVE_LANES, {"now": now, "ids": [1, 2]}),
        "RUNNING_IN_QUEUE": (pg_sql.RUNNING_IN_QUEUE, {"queue": "default"}),
        "SET_TOKENS": (pg_sql.SET_TOKENS, dict(lane, tokens=1.0)),
        "PROBE_UNLIMITED": (pg_sql.PROBE_UNLIMITED, {"queue": "default", "now": now,
                                                     "unlimited": ["plans.job"], "count": 2}),
        "CRASH_CAUSES": (pg_sql.CRASH_CAUSES, {"id": 4}),
        "RELEASE_IN_DOUBT": (pg_sql.RELEASE_IN_DOUBT, {"owner": OWNER, "held": ids,
                                                      "held_attempts": [1] * len(ids)}),
        # R26, R61: settles in doubt, by the success's row or the failure's line
        "SETTLED_IN_DOUBT": (pg_sql.SETTLED_IN_DOUBT, {
            "owner": OWNER, "ids": ids, "attempts": [1] * 3, "began": [now - 1.0] * 3,
            "ended": [now] * 3}),
        "LIST_ATTEMPTS": (pg_sql.LIST_ATTEMPTS, {"id": 4}),
        "RECLAIMABLE_EXPIRED": (pg_sql.RECLAIMABLE_EXPIRED, {"now": now}),
        "RECLAIMABLE_OWNER": (pg_sql.RECLAIMABLE_OWNER, {"now": now, "owner": OWNER}),
        "LEASE_OWNERS": (pg_sql.LEASE_OWNERS, {}),
        "SET_PROGRESS": (pg_sql.SET_PROGRESS, dict(one, progress=50.0, stage="half")),
        "CANCELS_FOR_OWNER": (pg_sql.CANCELS_FOR_OWNER, {"owner": OWNER}),
        "SAVE_STATE": (pg_sql.SAVE_STATE, dict(one, state="{}")),
        "READ_STATE": (pg_sql.READ_STATE, one),
        "MEMBER_BATCH": (pg_sql.MEMBER_BATCH, one),
        "INSERT_JOB": (pg_sql.INSERT_JOB, new_job),
        "FIND_LIVE_KEY": (pg_sql.FIND_LIVE_KEY_IN.format(**tables), new_job),
        "FIND_RECENT_KEY": (pg_sql.FIND_RECENT_KEY_IN.format(**tables),
                            dict(new_job, period=3600.0)),
        "DELETE_NEW_JOB": (pg_sql.DELETE_NEW_JOB_IN.format(**tables), {"id": 4000}),
        "INSERT_BATCH": (pg_sql.INSERT_BATCH, {
            "queue": "default", "name": "plans.job", "args_only": True, "priority": 0,
            "run_at": now, "max_attempts": None, "timeout": None, "now": now,
            "batch_id": None, "batch": "[[1], [2]]"}),
        "ADOPT_BULK": (pg_sql.ADOPT_BULK, {"name": "plans.limited", "ids": [3001, 3002]}),
        "MEMBERS_JOINED": (pg_sql.MEMBERS_JOINED, {"batch_id": BATCH, "ids": [2000, 2001]}),
    }
    # A turn as one statement (issue 25): every kind's step and the claim, and the
    # settles alone.
    turn = dict(many, kinds=["done", "retry", "dead"])
    every = tuple(pg_sql.TURN_KINDS)
    statements["turn_statement(every kind, claim)"] = (pg_sql.turn_statement(every, True),
                                                       dict(claim, **turn))
    statements["turn_statement(every kind)"] = (pg_sql.turn_statement(every, False), turn)
    statements["turn_statement(done, claim after a place)"] = (
        pg_sql.turn_statement(("done",), True, True),
        dict(claim, **turn, after_priority=0, after_line=now - 5.0, after_id=3000))
    # A batch member's end (its row moved by the settle; the batch counts it in a trigger).
    member = {key: value[:1] if isinstance(value, list) else value for key, value in turn.items()}
    member.update(done_ids=[2000], owner="plans-pool-member")
    statements["turn_statement(done) of a batch member"] = (
        pg_sql.turn_statement(("done",), False), member)
    return statements


def test_no_hot_statement_reads_a_whole_table_under_its_generic_plan(filled):
    target = parse_url(filled)
    conn = open_connection(target)
    try:
        read_whole = {}
        for what, (statement, params) in hot_statements(target.schema).items():
            whole = whole_reads(generic_plan(conn, statement, params))
            if whole:
                read_whole[what] = whole
    finally:
        conn.close()
    assert read_whole == {}


def rows_read(plan: dict) -> int:
    """Every row the scans of ``plan`` (run with ANALYZE) read: those they returned,
    those their filters threw away, and their index rechecks'."""
    own = 0
    if "Relation Name" in plan:
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
               + plan.get("Rows Removed by Index Recheck", 0))
    return own + sum(rows_read(child) for child in plan.get("Plans", ()))


def test_the_heartbeats_look_for_cancels_reads_only_what_it_finds(filled):
    """R31 (revision 14): a pool's heartbeat looks for the cancels asked of its jobs
    through the running rows a cancel was asked for, not every running row of the
    pool: here 200 run (50 of them this pool's), none asked to stop, so it reads no
    row at all (through ``jobs_owners``, as revisions 7-13 did, it read those 50)."""
    target = parse_url(filled)
    conn = open_connection(target)
    try:
        params = {"owner": OWNER}
        plan = generic_plan(conn, pg_sql.CANCELS_FOR_OWNER, params, analyze=True)
        assert whole_reads(plan) == []
        assert rows_read(plan) == 0, plan
        # And it finds a cancel once one is asked for
        conn.execute(pg_sql.REQUEST_CANCEL, {"id": 12})
        assert conn.execute(pg_sql.CANCELS_FOR_OWNER, params).fetchall() == [(12, 1)]
    finally:
        conn.close()


def _nested_plans(conn) -> list[dict]:
    """Turn on auto_explain for this session: every statement's plan, those that
    triggers and functions run included, comes back as a notice, gathered in the list
    returned. Skips where the server has no auto_explain (it ships with PostgreSQL's
    contrib modules; loading it takes a superuser, as this suite's server is)."""
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        pytest.skip(f"auto_explain cannot be loaded here: {exc}")
    for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                           ("log_format", "json"), ("log_level", "notice")):
        conn.execute(f"SET auto_explain.{setting} = {value}")
    plans: list[dict] = []

    def gather(notice) -> None:
        text = notice.message_primary or ""
        if "plan:" in text:
            plans.append(json.loads(text.split("plan:", 1)[1])["Plan"])
    conn.add_notice_handler(gather)
    return plans


def test_a_batch_members_end_reads_by_index_in_its_triggers(filled):
    """R34: a member's settle counts it in its batch, and the last one enqueues the
    callbacks, in triggers whose statements EXPLAIN does not show: their plans are read
    from auto_explain while the settle runs, under the claimer's generic plans."""
    store = jobpool.connect(filled)
    try:
        # Given a closed batch of one member, claimed by a pool.
        with store.batch(on_complete=jobpool.Signature("plans.callback")) as members:
            (member,) = members.add_many("plans.member", [(1,)])
        claimer = store.claimer("plans-pool-members", ["plans.member"], ["default"], {})
        try:
            (claimed,) = claimer.turn([], 1, time.time(), None)[1]
        finally:
            claimer.close()
    finally:
        store.close()
    assert claimed.job_id == member.id
    conn = open_connection(parse_url(filled), settings=CLAIMER_OPTIONS)
    try:
        plans = _nested_plans(conn)
        now = time.time()
        settle = {"done_ids": [member.id], "done_attempts": [claimed.attempt],
                  "done_results": [b"null"], "done_pids": [4321], "done_peak_rsses": [None],
                  "done_cpus": [None], "done_strays": [None], "owner": "plans-pool-members",
                  "now": now}
        # When its settle runs (rolled back: the plans are what is asked).
        with conn.transaction(force_rollback=True):
            assert conn.execute(pg_sql.turn_statement(("done",), False), settle,
                                prepare=True).fetchone()
            plans = plans[:]  # the settle's, not those of the check below
            called = conn.execute("SELECT count(*) FROM jobs WHERE name = 'plans.callback'"
                                  ).fetchone()[0]
    finally:
        conn.close()
    # Then the batch finished (its callback was enqueued), and nothing read a table whole.
    assert called == 1
    relations = [table for plan in plans for table in _relations(plan)]
    assert {"jobs", "finished_jobs", "jobpool_batch_shards", "jobpool_batches"} <= set(relations)
    assert [read for plan in plans for read in whole_reads(plan)] == []


def _relations(plan: dict) -> list[str]:
    found = [plan["Relation Name"]] if "Relation Name" in plan else []
    for child in plan.get("Plans", ()):
        found.extend(_relations(child))
    return found


#: R28: what ``jobs list`` reads: 100 000 live rows and as many finished ones, of 500
#: names in 50 queues (one live row in 500 running, one in 100 not due yet, a tenth of
#: the finished ones dead).
FILL_LISTED_JOBS = """
INSERT INTO jobs (queue, name, payload, serializer, priority, status, run_at, line_at,
                  attempts, max_attempts, lease_owner, lease_expires_at, created_at, started_at)
SELECT 'q' || i % 50, 'list.n' || i % 500, '[[],{}]', 'json', 0,
       CASE WHEN i % 500 = 7 THEN 'running' ELSE 'ready' END,
       CASE WHEN i % 100 = 3 THEN 1e12 ELSE i END, i, 0, 3,
       CASE WHEN i % 500 = 7 THEN 'plans-pool-0' END, CASE WHEN i % 500 = 7 THEN 1e12 END, 0, 0
  FROM generate_series(1, 100000) AS i
"""
FILL_LISTED_FINISHED = """
INSERT INTO finished_jobs (id, queue, name, payload, serializer, priority, status, run_at,
                           line_at, attempts, crashes, deferrals, created_at, finished_at)
SELECT 1000000 + i, 'q' || i % 50, 'list.n' || i % 500, '[[],{}]', 'json', 0,
       CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'done' END, i, i, 1, 0, 0, i, i
  FROM generate_series(1, 100000) AS i
"""


@pytest.fixture
def listed(pg_url):
    """The URL of a store holding ``FILL_LISTED_*``, with statistics."""
    jobpool.connect(pg_url).close()
    target = parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {target.schema}")
        conn.execute(FILL_LISTED_JOBS)
        conn.execute(FILL_LISTED_FINISHED)
        conn.execute("ANALYZE")
    return pg_url


def seq_scans(plan: dict) -> list[str]:
    found = [f"Seq Scan on {plan['Relation Name']}"] if (
        plan["Node Type"] == "Seq Scan" and plan.get("Relation Name") in BIG) else []
    for child in plan.get("Plans", ()):
        found.extend(seq_scans(child))
    return found


def test_jobs_list_reads_every_filter_through_an_index(listed):
    """R28: no listing or count of ``jobs list`` (any status, name, queue, chain, next page) reads a
    table sequentially, under the settings the store reads them with; of one name, or
    of one chain, each table is read from an index condition, not walked whole."""
    from jobpool.store import rows as store_rows
    from jobpool.store.postgres.store import chain_condition
    conn = open_connection(parse_url(listed))
    try:
        sequential, walked = {}, {}
        for status, name, queue, chain, after in itertools.product(
                [None, "ready", "scheduled", "running", "done", "dead"], [None, "list.n7"],
                [None, "q7"], [None, 3], [None, 1_050_000]):
            where, params = store_rows.listing_filters(name, queue, chain,
                                                       lambda key: f"%({key})s", after=after,
                                                       newest_first=True, chain_of=chain_condition)
            for kind, statement, bound in (
                    ("list", pg_sql.list_jobs(status, where, newest_first=True), {"limit": 100}),
                    ("count", pg_sql.count_jobs(status, where), {"most": 100_100})):
                plan = generic_plan(conn, statement, dict(params, **bound),
                                    (pg_sql.LISTING_PLANS,))
                what = (kind, status, name, queue, chain, after)
                if seq_scans(plan):
                    sequential[what] = seq_scans(plan)
                if (name or chain) and whole_reads(plan):
                    walked[what] = whole_reads(plan)
    finally:
        conn.close()
    assert sequential == {}
    assert walked == {}


@pytest.mark.parametrize("how", ["a dead owner's", "expired, of two owners"])
def test_a_reclaim_of_many_rows_reads_the_statistics_of_jobs_before_its_settle(pg_url, how):
    """R23, R24: right after pools claimed many rows, the statistics of ``lease_owner``
    described the table before those claims, and the reclaim's settle was planned as a
    walk of the owner's rows with, for each, a scan of every settle: quadratic (8 000
    rows took 20 s, benchmarks/pg_reclaim.py). A reclaim reading more than
    ``MANY_RECLAIMED`` leases ANALYZEs the owner and status columns before it settles
    any, also when they are expired leases of several owners, each fewer than that (it
    sends a statement at each change of owner): the column's statistics are then the
    claimed table's (the owners among its most common values), and every row is taken
    back."""
    from jobpool.store.postgres import driver as pg_driver
    rows = getattr(pg_driver, "MANY_RECLAIMED", 500) + 100
    owners = ("plans-dead",) if how == "a dead owner's" else ("plans-one", "plans-two")
    store = jobpool.connect(pg_url)
    target = parse_url(pg_url)
    try:
        ids = [job.id for job in store.enqueue_many("plans.job", [(i,) for i in range(rows)])]
        alive = store.claimer("plans-alive", ("plans.job",), ("default",), {})
        for index, owner in enumerate(owners):
            claimer = store.claimer(owner, ("plans.job",), ("default",), {})
            share = rows // len(owners) + (rows % len(owners) if index == 0 else 0)
            taken = 0
            while taken < share:
                taken += len(claimer.turn([], share - taken, time.time(), None)[1])
            claimer.close()
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            if len(owners) > 1:  # their leases ran out (R23)
                conn.execute(f"UPDATE {target.schema}.jobs SET lease_expires_at = 0 "
                             "WHERE status = 'running'")
            settled = (alive.reclaim_owner(owners[0], "its pool died", time.time())
                       if len(owners) == 1 else alive.reclaim(time.time()))
            assert len(settled) == rows
            common = conn.execute(
                "SELECT most_common_vals::text FROM pg_stats WHERE schemaname = %s "
                "AND tablename = 'jobs' AND attname = 'lease_owner'", (target.schema,)).fetchone()
        assert common is not None and all(owner in common[0] for owner in owners)
        assert {store.get(job_id)["status"] for job_id in ids} <= {"ready", "scheduled"}
        alive.close()
    finally:
        store.close()
