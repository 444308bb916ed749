"""Stores that older builds of jobpool made, with jobs in every state, are upgraded by
today's build and then used the way an operator would: listed, checked by ``doctor``,
and run by a real pool, which finishes what the old build left (a chain's next steps
from the old chain column, a batch's last member and its callback, a keyed job) while
what was not due stays put. The stores are dumps of what those builds wrote
(tests/schemas/make_old_store.py says how they were made), never today's schema
relabelled, so a step that reads a column or a JSON shape an old row does not have
fails here.

SQLite schemas 5, 8 and 10 and PostgreSQL revisions 7, 9 and 11 (the earliest
PostgreSQL revisions, 2 and 3, are tests/contract/test_pg_old_stores.py's)."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import psycopg
import pytest

import jobpool
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.sqlite import statements as sqlite_sql

SCHEMAS = Path(__file__).resolve().parent / "schemas"

#: The jobs the old builds left unfinished (make_old_store.py), registered by the pool.
APP = '''
import jobpool

@jobpool.job(name="old.second", store_result=True)
def second(n):
    return ["second", n]

@jobpool.job(name="old.third", store_result=True)
def third(k):
    return ["third", k]

@jobpool.job(name="old.member_left")
def member_left(n):
    return None

@jobpool.job(name="old.callback", store_result=True)
def callback(table, batch):
    return [table, batch["total"], batch["done"], batch["dead"]]

@jobpool.job(name="old.ready", store_result=True)
def ready(x):
    return x

@jobpool.job(name="old.retries")
def retries():
    return None

@jobpool.job(name="old.later")
def later(x):
    return None
'''

#: Each job's status as the old build left it, by id (make_old_store.py's order).
LEFT = {1: "done", 2: "dead", 3: "ready", 4: "done", 5: "done", 6: "ready", 7: "ready",
        8: "ready", 9: "running", 10: "ready"}

FROZEN = ["sqlite_v5.sql", "sqlite_v8.sql", "sqlite_v10.sql",
          "pg_r7.sql", "pg_r9.sql", "pg_r11.sql"]


#: The frozen rows that wait out a delay counted from when their store was made
#: (``old.retries``' day of backoff, ``old.later`` due in a year): moved to wait as long
#: from now when a test loads the store, so what is due reads the same whatever the day
#: the suite runs (the rest of each row as the old build wrote it).
WAITING = (3, 8)


def _load(frozen: str, tmp_path: Path, request) -> str:
    """The frozen store, loaded where this test's store lives; returns its address."""
    text = (SCHEMAS / frozen).read_text(encoding="utf-8")
    not_due = f"UPDATE {{jobs}} SET run_at = {time.time()!r} + (run_at - created_at) " \
              f"WHERE id IN ({', '.join(str(i) for i in WAITING)})"
    if frozen.startswith("sqlite"):
        db = tmp_path / "old.db"
        with sqlite3.connect(db) as conn:
            conn.executescript(text)
            conn.execute(not_due.format(jobs="jobs"))
        conn.close()
        return str(db)
    url = request.getfixturevalue("pg_url")
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(text.replace("__SCHEMA__", schema))  # one simple query, no parameters
        conn.execute(not_due.format(jobs=f"{schema}.jobs"))
    return url


def _version(db: str) -> str:
    if db.startswith("postgresql"):
        schema = db.rsplit("schema=", 1)[1]
        with psycopg.connect(db.split("?")[0], autocommit=True) as conn:
            return conn.execute(f"SELECT value FROM {schema}.jobpool_meta "
                                "WHERE key = 'revision'").fetchone()[0]
    with sqlite3.connect(db) as conn:
        version = conn.execute("SELECT value FROM jobpool_meta WHERE key = 'schema'").fetchone()[0]
    conn.close()
    return version


def _triggers(db: str) -> set[str]:
    """The triggers of a PostgreSQL store's ``jobs`` table, by name."""
    schema = db.rsplit("schema=", 1)[1]
    with psycopg.connect(db.split("?")[0], autocommit=True) as conn:
        return {name for (name,) in conn.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid = %s::regclass",
            (f"{schema}.jobs",))}


@pytest.mark.parametrize("frozen", FROZEN)
def test_an_old_store_is_upgraded_listed_checked_and_run(frozen, tmp_path, request, make_app):
    db = _load(frozen, tmp_path, request)
    app = make_app(APP)
    app.db = db
    store = app.store()  # the first writer brings the schema up to today's
    today = pg_sql.SCHEMA_VERSION if db.startswith("postgresql") else sqlite_sql.SCHEMA_VERSION
    assert _version(db) == today
    if db.startswith("postgresql"):
        # Revision 16: the row triggers that took shards and lanes row by row are gone,
        # replaced, not kept beside today's (R34, R35).
        assert _triggers(db) == {"jobpool_limited_insert", "jobpool_member_moved",
                                 "jobpool_members_ended", "jobpool_row_readied",
                                 "jobpool_lanes_remade"}

    # What the old build wrote reads back as it wrote it.
    assert {i: store.get(i)["status"] for i in LEFT} == LEFT
    assert jobpool.Handle(1, store=store).result(timeout=0) == {"n": 1, "text": "caf\u00e9 \u2603"}
    assert "boom <b>bold</b> [red]" in store.get(2)["last_error"]
    assert store.get(3)["attempts"] == 1 and store.get(7)["key"] == "k1"
    assert store.stats()["dead"] == 1

    # The operator's first commands after an upgrade.
    checked = app.cli("doctor", "--db", db)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = app.cli("jobs", "list", "--db", db, check=True)
    assert "old.killer" in listed.stdout and "old.member_left" in listed.stdout
    dead = app.cli("dead", "list", "--db", db, check=True)
    assert "old.fails" in dead.stdout

    # A pool of today's build finishes what the old one left due.
    app.start("--procs", "2", "-q", "--no-dashboard")
    chain = [j for j in store.list_jobs(limit=50) if j["name"] in ("old.second", "old.third")]
    assert sorted((j["name"], j["status"]) for j in chain) == [
        ("old.second", "done"), ("old.third", "done")]
    third = next(j for j in chain if j["name"] == "old.third")
    assert jobpool.Handle(third["id"], store=store).result(timeout=0) == ["third", "v"]
    callbacks = [j for j in store.list_jobs(limit=50) if j["name"] == "old.callback"]
    assert [j["status"] for j in callbacks] == ["done"]
    # the batch's two members, both done, neither dead: its on_success ran once
    assert jobpool.Handle(callbacks[0]["id"], store=store).result(timeout=0) == ["sales", 2, 2, 0]
    assert store.get(6)["status"] == "done" and store.get(7)["status"] == "done"
    assert jobpool.Handle(7, store=store).result(timeout=0) == "r"
    # not due: a retry's day of backoff, a job due in a year
    assert (store.get(3)["status"], store.get(3)["attempts"]) == ("ready", 1)
    assert store.get(8)["status"] == "ready"
