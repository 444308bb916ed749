"""Schema over time (R26a): a store made by the first release opens with this code and
is upgraded in place keeping every row; a newer one is refused; read-only commands
never write; an application's own SQLite file gets jobpool's tables."""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys

import pytest

import jobpool
from jobpool.errors import NotAStoreError, StoreError
from jobpool.lifecycle import DEFAULT_POLICY
from jobpool.store.sqlite import migrations
from jobpool.store.sqlite import statements as sql
from .conftest import ROOT, rows
from .schemas import v1

SCHEMAS = ROOT / "tests" / "schemas"


def _v1_store(path) -> None:
    """A store as release 1 wrote it: a ready job, a dead letter with its attempts, a pool."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for stmt in v1.SCHEMA:
        conn.execute(stmt)
    conn.execute("INSERT INTO jobpool_meta VALUES ('schema', '1')")
    conn.execute("INSERT INTO jobs (id, queue, name, payload, serializer, priority, status, run_at, "
                 "line_at, created_at) VALUES (1, 'default', 't.ready', '[[1],{}]', 'json', 0, "
                 "'ready', 0, 0, 0)")
    conn.execute("INSERT INTO jobs (id, queue, name, payload, serializer, priority, status, run_at, "
                 "line_at, created_at, attempts, max_attempts, last_error, finished_at) VALUES "
                 "(2, 'default', 't.dead', '[[],{}]', 'json', 0, 'dead', 0, 0, 0, 2, 2, 'boom', 5)")
    for attempt in (1, 2):
        conn.execute("INSERT INTO attempts (job_id, attempt, started_at, ended_at, outcome, error) "
                     "VALUES (2, ?, 1, 2, 'error', 'boom')", (attempt,))
    conn.close()


def _cli(*args, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "jobpool", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_schema_1_store_is_upgraded_in_place_keeping_every_row(tmp_path):
    db = tmp_path / "old.db"
    _v1_store(db)
    before = rows(db)
    store = jobpool.connect(db)
    try:
        assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [
            {"value": str(migrations.CURRENT)}]
        assert [{k: r[k] for k in before[0]} for r in rows(db)] == before
        assert [a["attempt"] for a in store.attempts(2)] == [1, 2]
        assert store.dead.ids() == [2]
        store.enqueue("t.new")  # and it works as a store of today
        assert store.stats()["ready"] == 2
    finally:
        store.close()


def test_a_pool_of_today_runs_the_jobs_of_an_upgraded_store(make_app):
    app = make_app("""
        from jobpool import job

        @job(name="t.ready")
        def ready(x):
            return x
    """)
    _v1_store(app.db)
    app.start("--procs", "1")
    assert app.rows("SELECT id, status FROM jobs ORDER BY id") == [
        {"id": 1, "status": "done"}, {"id": 2, "status": "dead"}]


def test_read_only_commands_never_upgrade_and_say_what_does(tmp_path):
    db = tmp_path / "old.db"
    _v1_store(db)
    for command in (["status"], ["jobs", "list"], ["pools"], ["top", "--once"]):
        result = _cli(*command, "--db", str(db), cwd=tmp_path)
        assert result.returncode == 1, (command, result)
        assert "schema 1" in result.stderr and "upgrades it" in result.stderr
    assert rows(db, "SELECT value FROM jobpool_meta") == [{"value": "1"}]
    # An admin command writes, so it upgrades.
    assert _cli("dead", "retry", "2", "--db", str(db), cwd=tmp_path).returncode == 0
    assert rows(db, "SELECT value FROM jobpool_meta") == [{"value": str(migrations.CURRENT)}]


def test_a_store_newer_than_this_code_is_refused_naming_both_versions(tmp_path):
    db = tmp_path / "new.db"
    jobpool.connect(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE jobpool_meta SET value = '99' WHERE key = 'schema'")
    conn.close()
    with pytest.raises(NotAStoreError, match=f"schema 99, newer than schema {migrations.CURRENT}"):
        jobpool.connect(db)
    result = _cli("enqueue", "t.x", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "schema 99" in result.stderr


def test_an_application_database_gets_jobpools_tables_for_transactional_enqueue(tmp_path):
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO orders VALUES (1, 9.5)")
    conn.close()
    # A read-only command never writes into someone's database (a mistyped --db).
    status = _cli("status", "--db", str(db), cwd=tmp_path)
    assert status.returncode == 1 and "not a jobpool store" in status.stderr
    assert {r["name"] for r in rows(db, "SELECT name FROM sqlite_master WHERE type = 'table'")} \
        == {"orders"}
    # connect() (as start and enqueue do) adds the tables beside the application's.
    store = jobpool.connect(db)
    try:
        app = sqlite3.connect(db, isolation_level=None)
        app.execute("BEGIN IMMEDIATE")
        app.execute("INSERT INTO orders VALUES (2, 20.0)")
        store.enqueue_with("t.ship", args=(2,), connection=app)
        app.execute("COMMIT")
        app.close()
        assert store.stats()["ready"] == 1
        assert rows(db, "SELECT count(*) AS n FROM orders") == [{"n": 2}]
        assert rows(db, "PRAGMA journal_mode") == [{"journal_mode": "wal"}]
    finally:
        store.close()
    listed = json.loads(_cli("jobs", "list", "--json", "--db", str(db), cwd=tmp_path).stdout)
    assert [j["name"] for j in listed] == ["t.ship"]


def test_a_file_whose_tables_clash_with_jobpools_is_refused_and_untouched(tmp_path):
    db = tmp_path / "clash.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, what TEXT)")
    conn.close()
    with pytest.raises(NotAStoreError, match="jobs would clash"):
        jobpool.connect(db)
    assert {r["name"] for r in rows(db, "SELECT name FROM sqlite_master")} == {"jobs"}


def test_a_schema_8_store_gets_the_chain_index_and_reads_a_chain_through_it(tmp_path):
    """R47: upgrading a schema 8 store adds ``jobs_chain`` over the chain steps it holds,
    and a chain's listing then reads them through it (the first job by id)."""
    db = tmp_path / "eight.db"
    jobpool.connect(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP INDEX jobs_chain")
        for column, _field in sql.DONE_LINE_HERE:  # schema 8 had no success's line in its rows (R61)
            conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
        conn.execute("UPDATE jobpool_meta SET value = '8' WHERE key = 'schema'")
        conn.executemany(
            "INSERT INTO jobs (id, queue, name, payload, serializer, priority, status, run_at,"
            " line_at, created_at, chain_root) VALUES (?, 'default', 't.step', '[[],{}]',"
            " 'json', 0, 'done', 0, 0, 0, ?)",
            [(n, 10 if n > 10 and n % 2 else None) for n in range(1, 31)])
    conn.close()
    store = jobpool.connect(db)
    try:
        assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [
            {"value": str(migrations.CURRENT)}]
        assert [j["id"] for j in store.list_jobs(chain=10)] == [10, *range(11, 31, 2)]
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        store.list_jobs(chain=10, after=15)
        store.conn.set_trace_callback(None)
        plan = [row[3] for row in store.conn.execute("EXPLAIN QUERY PLAN " + statements[-1])]
        assert any("jobs_chain (chain_root=? AND rowid>?)" in step for step in plan), plan
    finally:
        store.close()


#: How a pool of schema 11 reads ``jobs_status`` (its retention sweep, R32), frozen: it may
#: still be running while a newer one upgrades its store.
SCHEMA_11_SWEEPS = (
    ("SELECT id FROM jobs INDEXED BY jobs_status WHERE status = :status AND finished_at < :before"
     " LIMIT :limit", {"status": "done", "before": 100.0, "limit": 500}),
    ("SELECT finished_at FROM jobs INDEXED BY jobs_status WHERE status = 'dead'"
     " ORDER BY finished_at DESC LIMIT 1 OFFSET :keep", {"keep": 0}),
)


def test_a_schema_11_store_gets_the_status_indexes_and_an_old_pools_sweep_still_reads(tmp_path):
    """R47 (issue 27): upgrading a schema 11 store makes ``jobs_status`` anew over finished
    rows only and adds ``jobs_status_ids`` and ``jobs_ready_due`` over the rows it holds;
    the pages of one status then read through them, and the statements a schema 11 pool
    sweeps with still read ``jobs_status`` by name (R26a: a rolling upgrade)."""
    db = tmp_path / "eleven.db"
    jobpool.connect(db).close()
    conn = sqlite3.connect(db)
    with conn:
        for name in ("jobs_status", "jobs_status_ids", "jobs_ready_due"):
            conn.execute(f"DROP INDEX {name}")
        conn.execute("CREATE INDEX jobs_status ON jobs (status, finished_at)")  # schema 11's
        conn.execute("UPDATE jobpool_meta SET value = '11' WHERE key = 'schema'")
        conn.executemany(
            "INSERT INTO jobs (id, queue, name, payload, serializer, priority, status, run_at,"
            " line_at, created_at, finished_at) VALUES (?, 'default', 't.old', '[[],{}]', 'json',"
            " 0, ?, ?, 0, 0, ?)",
            [(n, status, 1e12 if n == 9 else 0, 5.0 if status in ("done", "dead") else None)
             for n, status in enumerate(["done", "dead", "ready", "done", "ready", "done",
                                         "dead", "ready", "ready"], start=1)])
    conn.close()
    store = jobpool.connect(db)
    try:
        assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [
            {"value": str(migrations.CURRENT)}]
        indexes = {r["name"]: " ".join(r["sql"].split()) for r in rows(
            db, "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        for made in sql.STATUS_SCHEMA:
            name = made.split("EXISTS ")[1].split()[0]
            assert indexes[name] == " ".join(made.split()).replace(" IF NOT EXISTS", ""), name
        assert [j["id"] for j in store.list_jobs(status="done", newest_first=True)] == [6, 4, 1]
        assert [j["id"] for j in store.list_jobs(status="scheduled")] == [9]
        assert [j["id"] for j in store.list_jobs(status="ready", newest_first=True)] == [8, 5, 3]
        assert store.count_jobs(status="dead", at_most=10) == 2
        stats = store.stats()
        assert (stats["ready"], stats["scheduled"], stats["done"], stats["dead"]) == (3, 1, 3, 2)
        for sweep, params in SCHEMA_11_SWEEPS:
            assert store.conn.execute(sweep, params).fetchall()
        in_status = rows(db, "SELECT count(*) AS n FROM jobs INDEXED BY jobs_status"
                             " WHERE status = 'done' OR status = 'dead' OR finished_at IS NOT NULL")
        assert in_status == [{"n": 5}]
    finally:
        store.close()


def test_a_schema_12_store_gets_its_ready_rows_keyed_by_queue_and_name(tmp_path):
    """R28, R47 (issue 27, schema 13): upgrading a schema 12 store keys ``jobs_ready_due``
    by queue, name and due time (schema 12 keyed it by due time alone) over the rows it
    holds; the scheduled rows, the counts and the pairs of ready rows are read through it."""
    db = tmp_path / "twelve.db"
    jobpool.connect(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP INDEX jobs_ready_due")
        conn.execute("CREATE INDEX jobs_ready_due ON jobs (run_at) WHERE status = 'ready'")
        conn.execute("UPDATE jobpool_meta SET value = '12' WHERE key = 'schema'")
        conn.executemany(
            "INSERT INTO jobs (id, queue, name, payload, serializer, priority, status, run_at,"
            " line_at, created_at) VALUES (?, ?, ?, '[[],{}]', 'json', 0, ?, ?, 0, 0)",
            [(n, f"q{n % 2}", f"t.n{n % 3}", "done" if n == 6 else "ready",
              1e12 if n in (2, 5) else 0) for n in range(1, 8)])
    conn.close()
    store = jobpool.connect(db)
    try:
        assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [
            {"value": str(migrations.CURRENT)}]
        [index] = rows(db, "SELECT sql FROM sqlite_master WHERE name = 'jobs_ready_due'")
        assert " ".join(index["sql"].split()) == " ".join(
            sql.CREATE_READY_DUE_INDEX.split()).replace(" IF NOT EXISTS", "")
        assert [j["id"] for j in store.list_jobs(status="scheduled")] == [2, 5]
        assert store.count_jobs(status="scheduled", at_most=10) == 2
        stats = store.stats()
        assert (stats["ready"], stats["scheduled"], stats["done"]) == (4, 2, 1)
        assert sorted(store.conn.execute(sql.READY_BY_NAME).fetchall()) == [
            ("q0", "t.n1"), ("q0", "t.n2"), ("q1", "t.n0"), ("q1", "t.n1"), ("q1", "t.n2")]
    finally:
        store.close()


#: What a plain job's life writes, statement by statement: its enqueue, its claim's take
#: and its success's settle, with every parameter bound (their values do not matter to
#: EXPLAIN, only that each is bound).
_WRITES = {"enqueue": sql.INSERT_UNLIMITED_JOB, "insert": sql.INSERT_JOB,
           "take": sql.claim_sql(["t.x"], {}, DEFAULT_POLICY).take, "settle": sql.SETTLE_DONE}


def _temporary_btrees(db, text: str) -> int:
    """How many temporary B-trees SQLite's program for ``text`` opens (``OpenEphemeral``)."""
    numbered = [int(n) for n in re.findall(r"\?(\d+)", text)]
    params = [1] * max(numbered) if numbered else dict.fromkeys(re.findall(r":(\w+)", text), 1)
    conn = sqlite3.connect(db)
    try:
        ops = [r[1] for r in conn.execute("EXPLAIN " + text, params)]
    finally:
        conn.close()
    return ops.count("OpenEphemeral")


def _v10_store(path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript((SCHEMAS / "sqlite_v10.sql").read_text(encoding="utf-8"))
    conn.close()


@pytest.mark.parametrize("made", ["new", "schema 10"])
def test_the_status_check_costs_no_temporary_btree_and_still_refuses_other_statuses(made, tmp_path):
    """Schema 14: the jobs table's status CHECK is comparisons, not an IN list of four
    (which SQLite evaluated through a temporary B-tree built for every row a statement
    wrote): neither a new store's nor an upgraded one's enqueue, claim or settle opens
    one; the rows are kept as they were, and a status outside the four is still refused."""
    db = tmp_path / "store.db"
    if made != "new":
        _v10_store(db)
    before = [(r["id"], r["status"]) for r in rows(db)] if made != "new" else []
    jobpool.connect(db).close()
    [table] = rows(db, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")
    assert sql.STATUS_CHECK in table["sql"] and sql.STATUS_CHECK_IN_LIST not in table["sql"]
    assert [(r["id"], r["status"]) for r in rows(db)] == before
    assert rows(db, "PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    for name, text in _WRITES.items():
        assert _temporary_btrees(db, text) == 0, name
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT INTO jobs (queue, name, payload, serializer, priority, status, run_at,"
                      " line_at, created_at) VALUES ('default', 't.x', '[[],{}]', 'json', 0,"
                      " 'ready', 0, 0, 0)")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute("UPDATE jobs SET status = 'lost' WHERE name = 't.x'")
    finally:
        conn.close()


def test_an_in_list_check_does_cost_a_temporary_btree(tmp_path):
    """The measure above can fail: schema 13's CHECK, on the same statements, opens one."""
    db = tmp_path / "thirteen.db"
    _v10_store(db)
    assert _temporary_btrees(db, _WRITES["take"]) == 1


def test_a_status_check_that_would_not_parse_rolls_the_whole_upgrade_back(tmp_path, monkeypatch):
    """Schema 14 rewrites the table's text in place: had the new text not parsed, the
    upgrade's transaction is rolled back whole, and the store reads as it was (its schema
    version, its CHECK, its rows), to be upgraded by a build that gets it right."""
    db = tmp_path / "old.db"
    _v10_store(db)
    before = rows(db)
    monkeypatch.setattr(sql, "STATUS_CHECK", "CHECK (status = 'ready' OR")
    with pytest.raises(StoreError, match="malformed database schema"):
        jobpool.connect(db)
    assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [{"value": "10"}]
    [table] = rows(db, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")
    assert sql.STATUS_CHECK_IN_LIST in table["sql"]
    assert rows(db) == before
    monkeypatch.undo()
    jobpool.connect(db).close()
    assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [
        {"value": str(migrations.CURRENT)}]


class _DefensiveConnection:
    """A connection whose SQLite refuses writes to its schema table, as one built in
    defensive mode does (Python's ``sqlite3`` here cannot turn that mode on)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, text: str, *params):
        if text.lstrip().upper().startswith("UPDATE SQLITE_MASTER"):
            raise sqlite3.OperationalError("table sqlite_master may not be modified")
        return self._conn.execute(text, *params)


def test_an_sqlite_that_refuses_the_rewrite_still_upgrades_keeping_the_old_check(tmp_path):
    """Schema 14 where the schema table cannot be written: the store still reaches
    today's schema (every other step made), its CHECK as it was, which refuses the same
    statuses; the upgrade's transaction is committed, not left open."""
    db = tmp_path / "old.db"
    _v10_store(db)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        migrations.ensure(_DefensiveConnection(conn), str(db), create=False, upgrade=True)
        assert not conn.in_transaction
    finally:
        conn.close()
    assert rows(db, "SELECT value FROM jobpool_meta WHERE key = 'schema'") == [
        {"value": str(migrations.CURRENT)}]
    [table] = rows(db, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")
    assert sql.STATUS_CHECK_IN_LIST in table["sql"]
    store = jobpool.connect(db)  # and it is a store of today that works
    try:
        assert store.get(store.enqueue("t.after").id)["status"] == "ready"
    finally:
        store.close()
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute("UPDATE jobs SET status = 'lost' WHERE name = 't.after'")
    finally:
        conn.close()


def test_a_connection_open_across_the_rewrite_keeps_claiming_and_settling(tmp_path):
    """R26a's rolling restart through schema 14: a connection that prepared its claim
    and settle before another process rewrote the table's text (a pool still running
    the previous release) steps them again after it, on the new text: SQLite sees the
    schema's counter moved and prepares them anew."""
    db = tmp_path / "old.db"
    _v10_store(db)
    take = sql.claim_sql(["old.stamp"], {}, DEFAULT_POLICY).take
    settle = sql.SETTLE_DONE
    running = sqlite3.connect(db, isolation_level=None)
    try:
        ready = [r[0] for r in running.execute("SELECT id FROM jobs WHERE status = 'ready'"
                                               " ORDER BY id")]
        params = {"owner": "old-pool", "now": 1.0, "slack": 1.0}
        assert running.execute(take, {**params, "id": ready[0]}).rowcount == 1
        jobpool.connect(db).close()  # another process upgrades the file meanwhile
        [table] = rows(db, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'")
        assert sql.STATUS_CHECK in table["sql"]
        assert running.execute(take, {**params, "id": ready[1]}).rowcount == 1
        (attempts,) = running.execute("SELECT attempts FROM jobs WHERE id = ?",
                                      (ready[0],)).fetchone()
        done = {"id": ready[0], "owner": "old-pool", "attempt": attempts, "now": 2.0,
                "result": None, "pid": 1, "peak_rss": 1, "cpu_s": 0.0, "strays": 0,
                "exit_status": "0"}
        assert running.execute(settle, done).rowcount == 1
    finally:
        running.close()
    statuses = {r["id"]: r["status"] for r in rows(db)}
    assert (statuses[ready[0]], statuses[ready[1]]) == ("done", "running")
