"""R44: a row is data, never a crash (issue 24).

A store is written by whoever can write its file or schema, by hand or by an older
release. Each test here writes one row wrong with raw SQL (``sqlite3`` on the file,
``psycopg`` on the schema) and runs a real pool over it, on both stores: the row is
settled dead at once naming its column, its job never runs, and every other job runs
once, in the turn it shares with the bad row. SQLite keeps any value in any column;
PostgreSQL's columns are typed, so a text ``deadline`` cannot be written there, and
what it can hold wrong is a value (NaN, a count below zero) or a ``chain`` of the
wrong shape: each case says what it writes on each store, or why a store cannot hold
that column wrong.
"""
from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from rich.console import Console

from jobpool.handles import Signature
from jobpool.dashboard import render
from jobpool.snapshot import read_snapshot
from tests.conftest import insert_job, wait_for

APP = """
import os
from jobpool import job

RAN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ran.log")


def _ran(what):
    with open(RAN, "a") as log:
        log.write(what + "\\n")


@job(name="r.work")
def work(tag):
    _ran(f"work {tag}")
    return tag


@job(name="r.step")
def step(tag):
    _ran(f"step {tag}")


@job(name="r.rewrite")
def rewrite(tag):
    # A hand edit while the job runs: its own row's chain made unreadable.
    _ran(f"rewrite {tag}")
    db = os.environ["ROWDATA_DB"]
    if db.startswith("postgresql"):
        import psycopg
        from jobpool.store.postgres.connection import parse_url
        target = parse_url(db)
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {target.schema}")
            conn.execute("UPDATE jobs SET chain = '5' WHERE name = 'r.rewrite'")
    else:
        import sqlite3
        conn = sqlite3.connect(db, timeout=30, isolation_level=None)
        conn.execute("UPDATE jobs SET chain = 'not json' WHERE name = 'r.rewrite'")
        conn.close()
    return tag
"""


def is_pg(store_url: str) -> bool:
    return store_url.startswith("postgresql")


def raw(store_url: str, statement: str, params: tuple = ()) -> None:
    """``statement`` (``%s`` placeholders) on the store's own tables, by hand."""
    if is_pg(store_url):
        import psycopg

        from jobpool.store.postgres.connection import parse_url
        target = parse_url(store_url)
        with psycopg.connect(target.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {target.schema}")
            conn.execute(statement, params)
        return
    conn = sqlite3.connect(store_url, isolation_level=None)
    try:
        conn.execute(statement.replace("%s", "?"), params)
    finally:
        conn.close()


def ran(app) -> list[str]:
    log = app.dir / "ran.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def app(make_any_app, store_url):
    app = make_any_app(APP)
    app.env["ROWDATA_DB"] = store_url
    return app


#: One case per column a claim reads: (what SQLite holds, what PostgreSQL holds, what
#: the reason says it holds). None: the store cannot hold that column wrong, as the
#: note beside it says. ``id`` and ``name`` are not here: the claim matches the name
#: as text, so a row whose name is not text is never claimed (doctor names it).
CLAIMED = {
    # PostgreSQL's bytea holds any bytes: decoding them is the child's
    # (tests/faults/test_payloads.py), by the job's own serializer (R39).
    "payload": ("5", None, "the integer 5, not text or bytes"),
    # PostgreSQL's text holds text: a serializer the job does not use is R39's.
    "serializer": ("x'6a736f6e'", None, "4 bytes, not text"),
    "attempts": ("2.5", "-3", "not an attempt number"),
    "max_attempts": ("'five'", "0", "not a number of attempts"),
    "crashes": ("'many'", "-1", "not a count"),
    "timeout": ("'long'", "'NaN'", "not seconds"),
    "deadline": ("'tomorrow'", "'NaN'", "not a Unix time"),
    # PostgreSQL's integer holds a priority whatever its value.
    "priority": ("'high'", None, "not a priority"),
    "line_at": ("'first'", "'NaN'", "not a Unix time"),
    # The issue's row: 'malformed JSON' on SQLite, 'cannot get array length of a
    # scalar' on PostgreSQL, at every turn.
    "chain": ("'not json'", "'5'", "column chain:"),
}


def on_store(make_app, request, kind: str):
    """An app whose pools run on ``kind``'s store (a fresh file, or a fresh schema)."""
    app = make_app(APP)
    if kind == "postgres":
        app.db = request.getfixturevalue("pg_url")
    app.env["ROWDATA_DB"] = str(app.db)
    return app


@pytest.mark.parametrize("kind, column", [
    pytest.param(kind, column, id=f"{kind}-{column}")
    for kind in ("sqlite", "postgres") for column, case in CLAIMED.items()
    if case[kind == "postgres"] is not None])
def test_a_claimed_row_wrong_in_one_column_is_dead_at_claim_and_every_other_job_runs_once(
        make_app, request, kind, column):
    app = on_store(make_app, request, kind)
    value, says = CLAIMED[column][kind == "postgres"], CLAIMED[column][2]
    store = app.store()
    before = store.enqueue("r.work", "before").id
    then = [Signature("r.step", ("next",))] if column == "chain" else None
    victim = store.enqueue_with("r.work", args=("victim",), then=then).id
    after = store.enqueue("r.work", "after").id
    raw(str(app.db), f"UPDATE jobs SET {column} = {value} WHERE id = %s", (victim,))

    app.start("--procs", "1", timeout=60)   # exits 0: the pool never stopped

    job = store.get(victim)
    assert job["status"] == "dead"
    assert job["last_error"].startswith(f"malformed row: column {column}: ")
    assert says in job["last_error"]
    # Refused at claim: logged as such, and no child ever ran it.
    assert [a["outcome"] for a in store.attempts(victim)] == ["malformed"]
    assert sorted(ran(app)) == ["work after", "work before"]
    assert [store.get(i)["status"] for i in (before, after)] == ["done", "done"]
    assert [len(store.attempts(i)) for i in (before, after)] == [1, 1]
    # A chain that was never read enqueued nothing.
    assert {j["name"] for j in store.list_jobs()} == {"r.work"}


@pytest.mark.parametrize("kind, column, value", [
    ("sqlite", "attempts", 2**31 - 1), ("sqlite", "attempts", 10**18),
    ("postgres", "attempts", 2**31 - 1), ("sqlite", "crashes", 2**31 - 1),
    ("postgres", "crashes", 2**31 - 1)])
def test_a_row_whose_next_count_is_past_32_bits_is_dead_at_claim_and_the_pool_goes_on(
        make_app, request, kind, column, value):
    # R44: a child's pipe carries an attempt in four bytes, and a crash's count one more
    # into a 32-bit column (PostgreSQL). A row at 10**18 attempts
    # was claimed and its child died on packing its reply ("no attempts left after
    # 1000000000000000001"); at 2**31 - 1 the claim's increment is past the column.
    app = on_store(make_app, request, kind)
    store = app.store()
    before = store.enqueue("r.work", "before").id
    victim = store.enqueue("r.work", "victim").id
    after = store.enqueue("r.work", "after").id
    raw(str(app.db), f"UPDATE jobs SET {column} = {value} WHERE id = %s", (victim,))

    app.start("--procs", "1", timeout=60)   # exits 0: the pool never stopped

    job = store.get(victim)
    assert job["status"] == "dead"
    assert job["last_error"].startswith(f"malformed row: column {column}: "), job["last_error"]
    assert sorted(ran(app)) == ["work after", "work before"]
    assert [store.get(i)["status"] for i in (before, after)] == ["done", "done"]


#: Chains of the wrong shape (R12), each refused at claim naming what is wrong; the
#: same text on both stores (PostgreSQL's ``jsonb`` keeps it as JSON).
CHAINS = {
    "an object": ('{"a": 1}', "a JSON object, not a list of steps"),
    "no steps": ("[]", "an empty JSON list, not a list of steps"),
    "a number for a step": ("[1]", "step 0: the integer 1, not a step"),
    "a step without a queue": ('[{"name": "r.step", "payload": "[[1],{}]", "priority": 0}]',
                               "step 0: no queue"),
    "a text priority": ('[{"name": "r.step", "queue": "default", "payload": "[[1],{}]", '
                        '"priority": "high"}]', "step 0: priority: text 'high'"),
    "a budget past 32 bits": ('[{"name": "r.step", "queue": "default", "payload": "[[1],{}]", '
                              '"priority": 0, "max_attempts": 1099511627776}]',
                              "step 0: max_attempts: the integer 1099511627776"),
    # JSON's integers have no bound: one past any float is no number of seconds (a
    # check that made it a float raised, and the claim's error stopped the pool).
    "a timeout past any float": ('[{"name": "r.step", "queue": "default", "payload": '
                                 '"[[1],{}]", "priority": 0, "timeout": 1' + "0" * 400 + '}]',
                                 "step 0: timeout: the integer 1" + "0" * 39 + "…, not seconds"),
    # R55: a step's own metadata is a JSON object, or the step has none.
    "a step's meta not an object": ('[{"name": "r.step", "queue": "default", '
                                    '"payload": "[[1],{}]", "priority": 0, "meta": "x"}]',
                                    "step 0: meta: text 'x', not a JSON object"),
    "a later step wrong": ('[{"name": "r.step", "queue": "default", "payload": "[[1],{}]", '
                           '"priority": 0}, 7]', "step 1: the integer 7, not a step"),
}


@pytest.mark.parametrize("shape", CHAINS)
def test_a_chain_of_the_wrong_shape_is_dead_at_claim_naming_the_step(app, store_url, shape):
    chain, says = CHAINS[shape]
    store = app.store()
    victim = store.enqueue_with("r.work", args=("victim",),
                                then=[Signature("r.step", ("next",))]).id
    after = store.enqueue("r.work", "after").id
    raw(store_url, "UPDATE jobs SET chain = %s WHERE id = %s", (chain, victim))

    app.start("--procs", "1", timeout=60)

    job = store.get(victim)
    assert job["status"] == "dead"
    assert job["last_error"].startswith(f"malformed row: column chain: {says}")
    assert ran(app) == ["work after"]
    assert store.get(after)["status"] == "done"
    assert {j["name"] for j in store.list_jobs()} == {"r.work"}


def test_a_chain_made_unreadable_while_its_job_runs_stops_there_and_the_turn_commits(
        app, store_url):
    """The claim read the chain sound; the job's row is edited while it runs. Its
    settle cannot enqueue the next step: the job's end stands (it ran), its row says
    why the chain stopped, and the rest of the turn commits."""
    store = app.store()
    first = store.enqueue_with("r.rewrite", args=("first",),
                               then=[Signature("r.step", ("never",))]).id
    after = store.enqueue("r.work", "after").id

    app.start("--procs", "1", timeout=60)

    job = store.get(first)
    assert job["status"] == "done"
    assert job["last_error"].startswith(
        "malformed row: column chain: the next step could not be enqueued; the chain stops here")
    assert sorted(ran(app)) == ["rewrite first", "work after"]
    assert store.get(after)["status"] == "done"
    assert [len(store.attempts(i)) for i in (first, after)] == [1, 1]
    assert "r.step" not in {j["name"] for j in store.list_jobs()}


def test_a_lease_taken_back_from_a_wrong_row_is_dead_naming_the_column(app, store_url):
    """R23: a reclaim reads running rows too. A budget that is not a number (SQLite)
    or not a positive count (PostgreSQL) crashed the supervisor, or was read as
    'no attempts left after 0'."""
    store = app.store()
    held = store.enqueue("r.work", "held").id
    other = store.enqueue("r.work", "other").id
    budget = "0" if is_pg(store_url) else "'five'"
    raw(store_url, "UPDATE jobs SET status = 'running', lease_owner = 'elsewhere:1:1', "
        f"lease_expires_at = 1, started_at = 1, attempts = 1, max_attempts = {budget} "
        "WHERE id = %s", (held,))

    app.start("--procs", "1", timeout=60)

    job = store.get(held)
    assert job["status"] == "dead"
    assert job["last_error"].startswith("malformed row: column max_attempts: ")
    assert [a["outcome"] for a in store.attempts(held)] == ["malformed"]
    assert ran(app) == ["work other"]
    assert store.get(other)["status"] == "done"


def test_text_that_is_not_utf8_is_named_instead_of_failing_every_turn(make_app):
    """SQLite only (PostgreSQL's text is always in the database's encoding): a
    serializer whose bytes are not UTF-8 failed the claim's read, so every turn."""
    app = make_app(APP)
    store = app.store()
    victim = store.enqueue("r.work", "victim").id
    after = store.enqueue("r.work", "after").id
    raw(str(app.db), "UPDATE jobs SET serializer = CAST(x'6a736f6eff' AS TEXT) WHERE id = %s",
        (victim,))

    app.start("--procs", "1", timeout=60)

    job = store.get(victim)
    assert (job["status"], job["last_error"]) == (
        "dead", "malformed row: column serializer: text that is not UTF-8")
    assert ran(app) == ["work after"]
    assert store.get(after)["status"] == "done"


# -- both SQLite cores, one turn at a time ----------------------------------------------

OWNER = "host:1:1"
NOW = 10_000.0


@pytest.mark.parametrize("column", [c for c, case in CLAIMED.items() if case[0]])
def test_both_cores_refuse_the_same_row_with_the_same_words(core_impl, store_path, column):
    """The compiled core vouches for a row in C (column types and bounds) and hands
    any other row to the codec: its answers are the pure core's, word for word."""
    good = insert_job(store_path, "t.job", run_at=NOW - 10)
    victim = insert_job(store_path, "t.job", run_at=NOW - 5)
    late = insert_job(store_path, "t.job", run_at=NOW - 1)
    conn = sqlite3.connect(store_path, isolation_level=None)
    conn.execute(f"UPDATE jobs SET {column} = {CLAIMED[column][0]} WHERE id = ?", (victim,))
    conn.close()
    core = core_impl.Core(str(store_path), OWNER, ["t.job"], ["default"])
    try:
        claimed, expired = core.claim(3, NOW)
    finally:
        core.close()
    assert [job.job_id for job in claimed] == [good, late]
    assert [(s.job_id, s.status) for s in expired] == [(victim, "dead")]
    assert expired[0].reason.startswith(f"malformed row: column {column}: ")
    assert CLAIMED[column][2] in expired[0].reason


# -- read paths: a row is shown flagged, never a failure --------------------------------

#: A value each store can hold in a time column that is not a time.
NOT_A_TIME = {"sqlite": ("'soon'", "text 'soon', not a Unix time (a finite number)"),
              "postgres": ("'NaN'", "the number nan, not a Unix time (a finite number)")}


def test_reads_show_a_malformed_row_flagged_and_a_pool_never_waits_for_it(app, store_url):
    """The issue's third row: a text run_at crashed `jobs list` while `doctor` said
    'ok' (on PostgreSQL a NaN run_at kept a `--burst` pool waiting for ever). Such a
    row is never due; every read shows it flagged, the bad column None."""
    kind = "postgres" if is_pg(store_url) else "sqlite"
    value, holds = NOT_A_TIME[kind]
    store = app.store()
    never = store.enqueue("r.work", "never").id
    other = store.enqueue("r.work", "other").id
    gone = store.enqueue("r.work", "gone").id
    store.cancel(gone)
    raw(store_url, f"UPDATE jobs SET run_at = {value} WHERE id = %s", (never,))
    finished = "finished_jobs" if kind == "postgres" else "jobs"
    raw(store_url, f"UPDATE {finished} SET deadline = 'NaN'::float8 WHERE id = %s"
        if kind == "postgres" else f"UPDATE {finished} SET deadline = 'x' WHERE id = %s", (gone,))

    app.start("--procs", "1", timeout=60)

    assert ran(app) == ["work other"]
    job = store.get(never)
    assert (job["status"], job["run_at"]) == ("ready", None)
    assert job["malformed"] == {"run_at": holds}
    assert "malformed" not in store.get(other)
    assert store.get(gone)["malformed"].keys() == {"deadline"}
    assert {j["id"]: j.get("malformed", {}).keys() for j in store.list_jobs()} == {
        never: {"run_at"}, other: set(), gone: {"deadline"}}
    assert [j["id"] for j in store.dead.list()] == [gone]

    listed = app.cli("jobs", "list", "--db", store_url, check=True)
    line = next(x for x in listed.stdout.splitlines() if x.split()[:1] == [str(never)])
    assert "[malformed: run_at]" in line
    as_json = json.loads(app.cli("jobs", "list", "--db", store_url, "--json", check=True).stdout)
    assert {j["id"]: j.get("malformed") for j in as_json}[never] == {"run_at": holds}
    shown = app.cli("jobs", "show", str(never), "--db", store_url, check=True).stdout
    assert f"run_at malformed: {holds}" in shown
    dead = app.cli("dead", "list", "--db", store_url, check=True).stdout
    assert "[malformed: deadline]" in dead


HOLD_APP = APP + """

@job(name="r.hold", timeout=120)
def hold(tag):
    import time
    _ran(f"hold {tag}")
    while not os.path.exists(RAN + ".go"):
        time.sleep(0.05)
"""


def test_the_dashboard_shows_a_running_row_flagged(make_any_app, store_url):
    """A running row whose start is not a time: the dashboard's slot says so, where
    it computed `now - started_at` and failed (SQLite) or showed nothing (a NaN)."""
    app = make_any_app(HOLD_APP)
    store = app.store()
    held = store.enqueue("r.hold", "held").id
    pool = app.spawn("--procs", "1")
    wait_for(lambda: "hold held" in ran(app), timeout=60)
    value = "'NaN'" if is_pg(store_url) else "'early'"
    raw(store_url, f"UPDATE jobs SET started_at = {value} WHERE id = %s", (held,))
    wait_for(lambda: any(s.job_id == held for s in read_snapshot(store).slots), timeout=30)

    top = app.cli("top", "--once", "--db", store_url, check=True).stdout
    assert "malformed row: started_at" in top
    slot = next(s for s in read_snapshot(store).slots if s.job_id == held)
    assert (slot.started, slot.elapsed, slot.stage) == (None, None, "malformed row: started_at")

    (app.dir / "ran.log.go").touch()
    wait_for(lambda: store.get(held)["status"] == "done", timeout=60)
    pool.terminate()
    pool.wait(timeout=60)


def test_queue_names_that_are_not_text_are_shown_flagged_by_the_dashboard_and_metrics(make_app):
    """SQLite only: PostgreSQL's text columns hold text. A done row whose queue is
    bytes made the dashboard and `jobpool metrics` fail sorting the queues."""
    app = make_app(APP)
    store = app.store()
    done = store.enqueue("r.work", "done").id
    app.start("--procs", "1", timeout=60)
    raw(str(app.db), "UPDATE jobs SET queue = x'42', finished_at = %s WHERE id = %s",
        (time.time(), done))
    store.enqueue("r.work", "waits")

    top = app.cli("top", "--once", "--db", str(app.db), check=True).stdout
    assert "[malformed row: 1 bytes]" in top
    metrics = app.cli("metrics", "--db", str(app.db), check=True).stdout
    assert 'jobpool_queue_jobs{queue="default",status="ready"} 1.0' in metrics
    assert store.get(done)["malformed"] == {"queue": "1 bytes, not text"}


# -- doctor: every malformed row, by id and column, whatever its status ----------------------

def test_doctor_names_each_malformed_row_by_id_and_column_whatever_its_status(app, store_url):
    """A row whose run_at is not a number is never claimed, so doctor is where it shows;
    it names finished rows too (typeof on SQLite; values and chains on PostgreSQL)."""
    pg = is_pg(store_url)
    store = app.store()
    never = store.enqueue("r.work", "never").id
    finished = store.enqueue("r.work", "finished").id
    gone = store.enqueue_with("r.work", args=("gone",), then=[Signature("r.step", ("x",))]).id
    store.cancel(gone)
    fine = store.enqueue("r.work", "fine").id
    raw(store_url, f"UPDATE jobs SET run_at = {NOT_A_TIME['postgres' if pg else 'sqlite'][0]} "
        "WHERE id = %s", (never,))
    app.start("--procs", "1", timeout=60)
    table = "finished_jobs" if pg else "jobs"
    raw(store_url, f"UPDATE {table} SET crashes = {'-1' if pg else chr(39) + 'many' + chr(39)} "
        "WHERE id = %s", (finished,))
    raw(store_url, f"UPDATE {table} SET chain = %s WHERE id = %s",
        ("5" if pg else "not json", gone))

    report = app.cli("doctor", "--db", store_url)

    assert report.returncode == 1
    assert "3 malformed row(s)" in report.stderr
    holds = NOT_A_TIME["postgres" if pg else "sqlite"][1]
    assert f"job {never} (ready): column run_at: {holds}" in report.stderr
    crashes = "the integer -1" if pg else "text 'many'"
    assert f"job {finished} (done): column crashes: {crashes}, not a count" in report.stderr
    chain = "the integer 5, not a list of steps" if pg else "not JSON ("
    assert f"job {gone} (dead): column chain: {chain}" in report.stderr
    assert f"job {fine} " not in report.stderr


def test_both_cores_settle_a_wrong_lease_they_take_back_whatever_its_owner_holds(core_impl,
                                                                                store_path):
    """R23 on a running row whose budget is text and whose owner's bytes are not UTF-8:
    the reclaim names both columns and settles the row dead, fenced by those bytes."""
    held = insert_job(store_path, "t.job", run_at=NOW - 10)
    conn = sqlite3.connect(store_path, isolation_level=None)
    conn.execute("UPDATE jobs SET status = 'running', lease_owner = CAST(x'6f776e6572ff' AS TEXT), "
                 "lease_expires_at = 1, started_at = 1, attempts = 1, max_attempts = 'five' "
                 "WHERE id = ?", (held,))
    conn.close()
    core = core_impl.Core(str(store_path), OWNER, ["t.job"], ["default"])
    try:
        [settled] = core.reclaim(NOW)
    finally:
        core.close()
    assert (settled.job_id, settled.status) == (held, "dead")
    assert settled.reason == ("malformed row: column max_attempts: text 'five', not a number of "
                              "attempts (an integer, 1 or more); column lease_owner: text that is "
                              "not UTF-8")
    conn = sqlite3.connect(store_path)
    try:
        assert conn.execute("SELECT status, last_error FROM jobs WHERE id = ?",
                            (held,)).fetchone() == ("dead", settled.reason)
        assert conn.execute("SELECT outcome FROM attempts WHERE job_id = ?",
                            (held,)).fetchall() == [("malformed",)]
    finally:
        conn.close()


def _as_json_loads_reads_it(data):
    """What decoding ``data`` gave before the payload's fast path: ``json.loads`` and
    the pair check, or the error's type and words."""
    try:
        value = json.loads(data)
    except Exception as exc:  # noqa: BLE001 - compared by type and words
        return ("refused", type(exc).__name__, str(exc))
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], list)
            and isinstance(value[1], dict)):
        return ("refused", "ValueError", "payload is not a JSON [args, kwargs] pair")
    return ("decoded", tuple(value[0]), value[1])


def _decoded(data):
    from jobpool.serialize import decode_payload
    try:
        return ("decoded", *decode_payload(data, "json"))
    except Exception as exc:  # noqa: BLE001
        return ("refused", type(exc).__name__, str(exc))


@pytest.mark.parametrize("data", [
    b'[[1],{}]', b"[", b"[\x00", b"[\x00\x00\x00", '[[1],{}]'.encode("utf-16-le"),
    '[[1],{}]'.encode("utf-32-le"), b"\xef\xbb\xbf[[1],{}]", b"[[1],{}] x", b'[["\xed\xa0\x80"],{}]',
    b'[["\xff"],{}]', b" [[1],{}]", "[[1],{}]"])
def test_a_payload_decodes_as_json_reads_it_whatever_its_bytes(data):
    # R44: a row's payload is written by anyone who can write the store; the child's
    # shortcut for UTF-8 bytes must decode or refuse exactly as json.loads does.
    assert _decoded(data) == _as_json_loads_reads_it(data)


def test_any_bytes_after_a_bracket_decode_as_json_reads_them():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    # Payloads as an enqueue writes them (any JSON arguments, in any encoding json.loads
    # reads), the same with one byte changed, and any bytes after a bracket: random
    # bytes alone never decode, so the decoded road would go uncompared.
    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
        | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                    max_size=3),
        max_leaves=8)
    written = st.builds(lambda args, kwargs, ascii, encoding: json.dumps(
        [args, kwargs], ensure_ascii=ascii).encode(encoding),
        st.lists(values, max_size=3), st.dictionaries(st.text(max_size=4), values, max_size=2),
        st.booleans(), st.sampled_from(["utf-8", "utf-8-sig", "utf-16-le", "utf-32-le"]))
    payloads = st.one_of(
        written,
        st.builds(lambda data, at, byte: data[:at % len(data)] + bytes([byte]) + data[at % len(data) + 1:],
                  written, st.integers(0, 10**6), st.integers(0, 255)),
        st.binary(max_size=24).map(lambda tail: b"[" + tail))
    seen: dict[str, int] = {"decoded": 0, "refused": 0}

    @settings(max_examples=500, deadline=None)
    @given(payloads)
    def check(data):
        answer = _decoded(data)
        assert answer == _as_json_loads_reads_it(data)
        seen[answer[0]] += 1
    check()
    assert seen["decoded"] >= 50 and seen["refused"] >= 50, seen


DEEP_APP = """
import sys
sys.setrecursionlimit(200_000)  # an app that recurses deep raised it for the whole process
from jobpool import job


@job(name="d.echo", store_result=True, max_attempts=1)
def echo(x):
    return x


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


@job(name="d.deep", store_result=True, max_attempts=1)
def deep():
    return nested(150_000)
"""

#: Nested far past where a raised recursion limit lets the C decoder run off its stack.
DEEP = "[" * 150_000 + "]" * 150_000


def test_deep_json_in_a_row_is_an_error_under_a_raised_recursion_limit(make_app):
    """R44: under a recursion limit an app raised, JSON nested 150 000 deep took the C
    decoder off its stack: a segfault in the pool's child, or in the caller that read
    the result, where a row may earn an error and nothing more."""
    app = make_app(DEEP_APP)
    store = app.store()
    done = store.enqueue("d.echo", "fine")
    deep = store.enqueue("d.echo", "replaced")
    returns_deep = store.enqueue("d.deep")
    conn = sqlite3.connect(app.db, isolation_level=None)
    conn.execute("UPDATE jobs SET payload = ? WHERE id = ?", (f"[[{DEEP}],{{}}]", deep.id))
    app.start("--procs", "1")
    assert store.get(done.id)["status"] == "done"
    row = store.get(deep.id)
    assert row["status"] == "dead" and "nested" in row["last_error"], row["last_error"]
    row = store.get(returns_deep.id)  # the encoder ran off its stack as the decoder did
    assert row["status"] == "dead" and "nested too deeply" in row["last_error"], row["last_error"]
    conn.execute("UPDATE jobs SET result = ? WHERE id = ?", (DEEP, done.id))
    conn.close()
    reader = app.dir / "reader.py"
    reader.write_text(textwrap.dedent(f"""
        import {app.module}, sys, jobpool
        from jobpool.handles import Handle
        assert sys.getrecursionlimit() == 200_000
        store = jobpool.connect({str(app.db)!r})
        try:
            Handle({done.id}, store=store).result(timeout=0)
        except Exception as exc:
            print(type(exc).__name__, str(exc)[:200])
        print("read", len(store.get({done.id})["result"]))
        for enqueue in (lambda: store.enqueue("d.echo", {app.module}.nested(150_000)),
                        lambda: store.enqueue_many("d.echo", [({app.module}.nested(150_000),)]),
                        lambda: store.enqueue_with("d.echo", args=[1], meta={{"m": {app.module}.nested(150_000)}})):
            try:
                enqueue()
            except jobpool.EnqueueError as exc:
                print(str(exc)[-40:])
        print(store.stats()["ready"])
    """))
    result = subprocess.run([sys.executable, str(reader)], cwd=app.dir, env=app.env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result
    refused, read, *enqueues, ready = result.stdout.splitlines()
    assert "nested" in refused and read == f"read {len(DEEP)}"
    assert len(enqueues) == 3 and all("nested too deeply" in e for e in enqueues), enqueues
    assert ready == "0"
    # The CLI reads --from after importing the app, under the limit it raised.
    lines = app.dir / "deep.jsonl"
    lines.write_text(f'["ok"]\n[{DEEP}]\n')
    refused = app.cli("enqueue", "d.echo", "--from", str(lines), "--app", app.module,
                      "--db", str(app.db))
    assert (refused.returncode, refused.stderr.strip()) == (
        1, f"jobpool: error: --from {lines} line 2: nested too deeply"), refused


def test_the_depth_walk_leaves_cycles_to_the_encoder_and_counts_shared_values_once():
    """R44: under a raised recursion limit a cyclic value is still the encoder's
    "circular reference" (the walk skips a container met on its own path), and a value
    shared by many branches is no deeper for it."""
    from jobpool import serialize
    cyclic: list = [1]
    cyclic.append(cyclic)
    shared = [[[1]]] * 1000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(serialize.JSON_MOST_DEPTH * 4)
    try:
        serialize.check_object_depth(cyclic)
        serialize.check_object_depth({"a": shared, "b": (shared, shared)})
        with pytest.raises(ValueError, match="Circular reference"):
            serialize.encode_result(cyclic)
        deep: list = []
        for _ in range(serialize.JSON_MOST_DEPTH):
            deep = [deep]  # one list more than the bound, counting the innermost
        with pytest.raises(RecursionError):
            serialize.check_object_depth(deep)
        serialize.check_object_depth(deep[0])  # exactly the bound: allowed
    finally:
        sys.setrecursionlimit(limit)


def test_metadata_nested_deep_is_shown_not_a_traceback(make_app):
    """R44: metadata written by hand nested 5 000 deep ended `jobs list` and `jobs show`
    in a RecursionError (the shown value's check that it reads back as text); a
    `--meta` filter of such a value too."""
    app = make_app(APP)
    store = app.store()
    job_id = store.enqueue_with("r.work", args=("a",), meta={"k": "v"}).id
    conn = sqlite3.connect(app.db, isolation_level=None)
    deep = "[" * 5000 + "]" * 5000
    conn.execute("UPDATE jobs SET meta = ? WHERE id = ?", (json.dumps({"k": deep}), job_id))
    conn.close()
    db = str(app.db)
    for command in (["jobs", "list"], ["jobs", "show", str(job_id)], ["dead", "list"],
                    ["jobs", "list", "--meta", f"k={deep}"]):
        shown = app.cli(*command, "--db", db)
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (command, shown.stderr)


def test_the_depth_scan_reads_strings_left_open_once():
    """A string with no closing quote runs to the end of the text: its brackets are no
    nesting, and the scan meets it once (from each of its quotes, it took quadratic
    time on malformed text)."""
    from jobpool import serialize
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(serialize.JSON_MOST_DEPTH * 4)
    try:
        serialize.check_depth('["' + '\\\\"' * 20_000 + "[]" * 10_001)
        serialize.check_depth('["' + "[" * 20_000 + '"]')
        with pytest.raises(RecursionError):
            serialize.check_depth("[" * 10_001 + '"open')
    finally:
        sys.setrecursionlimit(limit)


# -- the store's other tables: rows every pool reads at each heartbeat (R44) -------------

def _foreign_pool(store_url: str, owner: str) -> None:
    """A pools row of another supervisor, beating now, written by hand."""
    raw(store_url, "INSERT INTO pools (owner, host, pid, procs, queues, core, started_at, "
                   "heartbeat_at, counters, slots) VALUES (%s, %s, 1, 1, 'default', 'pure', "
                   "%s, %s, '{}', '[]')", (owner, owner.partition(":")[0], time.time(), time.time()))


def _this_host() -> str:
    from jobpool import procinfo
    return procinfo.host_id()


#: A pools row written wrong: (its owner, the column, what SQLite holds, what PostgreSQL
#: holds; None: the store cannot hold it so, or holding it so never failed a read).
POOL_ROWS = {
    "counters not JSON": ("elsewhere:7:1", "counters", "not json", "not json"),
    "counters a list": ("elsewhere:7:1", "counters", "[1]", "[1]"),
    "slots an object": ("elsewhere:7:1", "slots", '{"a": 1}', '{"a": 1}'),
    "a slot not an object": ("elsewhere:7:1", "slots", '[1, {"slot": "x"}]', '[1, {"slot": "x"}]'),
    "a slot's RSS of text": ("elsewhere:7:1", "slots", '[{"slot": 0, "rss": "big", "pid": "x"}]',
                             '[{"slot": 0, "rss": "big", "pid": "x"}]'),
    "a slot's job id a list": ("elsewhere:7:1", "slots", '[{"slot": 0, "job_id": [1]}]',
                               '[{"slot": 0, "job_id": [1]}]'),
    "a heartbeat of text": ("elsewhere:7:1", "heartbeat_at", "soon", None),
    "an owner of bytes": ("elsewhere:7:1", "owner", b"elsewhere:7:1", None),
    "a pid past any pid_t": (f"{_this_host()}:{'9' * 30}:1", None, None, None),
    "a pid in other digits": (f"{_this_host()}:\u00b2:1", None, None, None),
}


@pytest.mark.parametrize("case", POOL_ROWS)
def test_a_pools_row_written_wrong_stops_no_pool_and_no_reader(app, store_url, case):
    # Every pool reads every pools row at its heartbeat (to bury dead ones): one row
    # that failed the read (not JSON, a heartbeat of text, an owner's pid os.kill
    # cannot take) stopped every pool on the store, and `jobpool pools` with it.
    owner, column, sqlite_value, pg_value = POOL_ROWS[case]
    value = pg_value if is_pg(store_url) else sqlite_value
    if column is not None and value is None:
        pytest.skip("the store cannot hold it so, or holding it so never failed a read")
    store = app.store()
    _foreign_pool(store_url, owner)
    if column is not None:
        raw(store_url, f"UPDATE pools SET {column} = %s WHERE owner = %s", (value, owner))
    ids = [store.enqueue("r.work", tag).id for tag in ("a", "b")]
    app.start("--procs", "1", timeout=60)
    assert sorted(ran(app)) == ["work a", "work b"]
    assert {store.get(job_id)["status"] for job_id in ids} == {"done"}
    for json_too in ((), ("--json",)):
        listed = app.cli("pools", "--db", str(app.db), *json_too)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert any(pool["owner"] == (value if column == "owner" else owner) for pool in store.pools())
    # The dashboard's and the web's read of the fleet (`jobpool top`, R30) too.
    console = Console(record=True, width=120, height=40, file=io.StringIO())
    console.print(render(read_snapshot(store, time.time()), 120, 40))


def test_a_limit_row_no_pool_can_obey_stops_none_and_holds_its_name(app, store_url):
    # R35, R36: a pool reads every limit row at each heartbeat; a rate no pool can read
    # raised before the plan was cut to the names it serves, and every pool stopped.
    store = app.store()
    raw(store_url, "INSERT INTO jobpool_limits (scope, target, max_running, rate, burst, set_by, "
                   "set_at) VALUES ('name', 'r.other', NULL, '30/d', 1, 'by hand', 0)")
    store.enqueue("r.work", "a")
    result = app.start("--procs", "1", timeout=60)
    assert ran(app) == ["work a"]
    assert "the name limit of 'r.other' cannot be read" in result.stderr
    from jobpool.store.limit_store import plan_from_rows
    plan = plan_from_rows([("name", "r.other", None, "30/d", 1, None, "by hand", 0.0),
                           ("queue", "q", "five", None, 1, None, "by hand", 0.0),
                           ("name", 7, 1, None, 1, None, "by hand", 0.0)])
    assert plan.names["r.other"].max_running == 0 and plan.queues == {"q": 0}
    assert 7 not in plan.names


def test_a_running_row_whose_owner_is_no_text_stops_no_pool_at_its_start(app, store_url):
    # R24 at start: a pool looks at every lease owner's process; an owner written as a
    # number (SQLite keeps it) raised in that look and the pool never started.
    if is_pg(store_url):
        pytest.skip("PostgreSQL's lease_owner is text")
    store = app.store()
    victim = store.enqueue("r.work", "victim").id
    other = store.enqueue("r.work", "other").id
    raw(store_url, "UPDATE jobs SET status = 'running', attempts = 1, lease_owner = 12345, "
                   "lease_expires_at = %s WHERE id = %s", (time.time() + 3600, victim))
    app.start("--procs", "1", timeout=60)
    assert ran(app) == ["work other"]
    assert store.get(other)["status"] == "done"


def test_a_scale_request_of_no_whole_number_is_not_obeyed_and_stops_no_pool(app, store_url):
    # R27: a pool reads its own row's desired_procs at each beat; text (SQLite keeps it)
    # or a fraction made int() raise there, and the pool stopped.
    if is_pg(store_url):
        pytest.skip("PostgreSQL's desired_procs is an integer")
    pool = app.spawn("--procs", "1", "--no-dashboard", "-q")
    try:
        store = app.store()
        wait_for(lambda: store.pools(), timeout=30)
        owner = store.pools()[0]["owner"]
        for wrong in ("five", 2.5):
            raw(store_url, "UPDATE pools SET desired_procs = %s WHERE owner = %s", (wrong, owner))
            wait_for(lambda: store.pools()[0]["desired_procs"] is None, timeout=30)
        job_id = store.enqueue("r.work", "after").id
        wait_for(lambda: store.get(job_id)["status"] == "done", timeout=30)
        assert pool.poll() is None
        assert store.pools()[0]["procs"] == 1
    finally:
        pool.terminate()
        pool.wait(30)
    assert pool.returncode == 0, pool.stderr.read()


def test_a_stop_request_of_no_count_is_not_obeyed_and_said(app, store_url):
    # R25, R44: `jobpool stop` writes 1 into the pool's row; text or a blob written by
    # hand there stopped the pool, and nothing said why.
    if is_pg(store_url):
        pytest.skip("PostgreSQL's stop_requested is an integer")
    pool = app.spawn("--procs", "1", "--no-dashboard")
    try:
        store = app.store()
        wait_for(lambda: store.pools(), timeout=30)
        owner = store.pools()[0]["owner"]

        def requested():
            conn = sqlite3.connect(store_url)
            try:
                return conn.execute("SELECT stop_requested FROM pools WHERE owner = ?",
                                    (owner,)).fetchone()[0]
            finally:
                conn.close()
        for wrong in ("'maybe'", "x'01'"):
            raw(store_url, f"UPDATE pools SET stop_requested = {wrong} WHERE owner = %s", (owner,))
            wait_for(lambda: requested() == 0, timeout=30)  # acknowledged at the next beat
        job_id = store.enqueue("r.work", "after").id
        wait_for(lambda: store.get(job_id)["status"] == "done", timeout=30)
        assert pool.poll() is None
    finally:
        pool.terminate()
        pool.wait(30)
    assert pool.returncode == 0
    said = pool.stderr.read()
    assert said.count("stop_requested is") == 2 and "not obeyed" in said, said


def test_counts_no_whole_number_holds_read_as_unknown_in_the_cli(app, store_url):
    # R44: `dead list` printed "0/None" for a job enqueued by name (its budget comes
    # with its first claim), and `status` "None processes" for a pools row's procs.
    store = app.store()
    job_id = store.enqueue("r.unregistered", "x").id
    assert store.cancel(job_id) == "cancelled"
    dead = app.cli("dead", "list", "--db", str(app.db), check=True).stdout
    assert "None" not in dead and "0/?" in dead, dead
    if not is_pg(store_url):
        from jobpool.store.records import Heartbeat
        beat = Heartbeat(owner="h:1:1", host="h", pid=1, procs=1, queues=("default",),
                         names=("r.work",), core="test", counters_json="{}", slots_json="[]")
        store.heartbeat(beat, [], time.time())
        raw(store_url, "UPDATE pools SET procs = 'many' WHERE owner = %s", ("h:1:1",))
        status = app.cli("status", "--db", str(app.db), check=True).stdout
        assert "None" not in status and "? processes" in status, status


def test_jobs_show_of_a_deadline_of_never_and_an_attempt_line_written_wrong(app, store_url):
    # R44, R46: `jobs show` printed every time through the local calendar: a deadline
    # past any float (an enqueue writes inf for it) raised OverflowError, and an attempt
    # line whose figures are text raised too; both are shown as what they are.
    store = app.store()
    job_id = store.enqueue_with("r.work", args=("x",), deadline=10**400).id
    app.start("--procs", "1", timeout=60)
    if not is_pg(store_url):
        raw(store_url, "UPDATE attempts SET ended_at = 'late', cpu_s = 'lots', peak_rss = 'big' "
                       "WHERE job_id = %s", (job_id,))
    shown = app.cli("jobs", "show", str(job_id), "--db", str(app.db))
    assert shown.returncode == 0, shown.stderr
    assert "never" in shown.stdout and "Traceback" not in shown.stderr


def test_a_batch_row_written_wrong_is_shown_and_stops_no_member(app, store_url):
    # R34, R44: a batch's counts of text and a callback that is not JSON raised in
    # every read of the batch (`batches show`, `batch_status`, a member adding to it).
    if is_pg(store_url):
        pytest.skip("PostgreSQL's batch counts are integers and its callbacks jsonb")
    store = app.store()
    batch = store.batch()
    batch.add_many("r.work", [("m",)])
    batch.close()
    raw(store_url, "UPDATE jobpool_batches SET total = 'some', on_success = 'not json', "
                   "created_at = 'then' WHERE id = %s", (batch.id,))
    assert store.batch_status(batch.id).on_success is None
    for command in (("show", str(batch.id)), ("list",)):
        shown = app.cli("batches", *command, "--db", str(app.db))
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    app.start("--procs", "1", timeout=60)
    assert ran(app) == ["work m"]


#: A batch's callback as a hand may leave it: (SQLite's change, PostgreSQL's, or None
#: where that store cannot hold it so).
CALLBACKS = {
    "not JSON": ("'{not json'", None),
    "no name": ("json_remove(on_success, '$.name')", "on_success - 'name'"),
    "a priority of text": ("json_set(on_success, '$.priority', 'high')",
                           "jsonb_set(on_success, '{priority}', '\"high\"')"),
    "a payload that is no JSON": ("json_set(on_success, '$.payload', '[1,')",
                                  "jsonb_set(on_success, '{payload}', '\"[1,\"')"),
}


@pytest.mark.parametrize("case", list(CALLBACKS))
def test_a_batch_callback_written_wrong_stops_no_pool(app, store_url, case):
    # R34, R44 (SQLite schema 15, PostgreSQL revision 17): the callback is made a row
    # by the trigger that counts the batch's last member; one that cannot be a row
    # failed that member's settle, and every turn after it: the pool never moved again.
    change = CALLBACKS[case][is_pg(store_url)]
    if change is None:
        pytest.skip("PostgreSQL's callbacks are jsonb")
    store = app.store()
    batch = store.batch(on_success=Signature("r.step", ("callback",)))
    batch.add_many("r.work", [("member",)])
    batch.close()
    raw(store_url, f"UPDATE jobpool_batches SET on_success = {change} WHERE id = %s", (batch.id,))
    other = store.enqueue("r.work", "other").id
    app.start("--procs", "1", timeout=60)   # exits: a burst pool that never stopped did not
    assert sorted(ran(app)) == ["work member", "work other"]
    assert store.get(other)["status"] == "done"
    status = store.batch_status(batch.id)
    assert (status.done, status.dead) == (1, 0)
    # Not a row: nothing enqueued for it (a priority of text on SQLite is a row, which
    # its claim refuses, R44, and which no child runs).
    assert "step callback" not in ran(app)
