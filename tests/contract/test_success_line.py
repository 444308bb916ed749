"""R61 on both stores: a clean success's attempt line is written into its job's row
by the settle that ends it (SQLite's ``jobs``, PostgreSQL's ``finished_jobs``), not as
a row of ``attempts``; every reader of the attempt log (``store.attempts``,
``jobpool jobs show``, the web job page and ``/api/jobs/<id>``) shows it as the last
line, after the failures that came before it; a store from before the step keeps
showing its old lines once."""
from __future__ import annotations

import json
import sqlite3
import time

import pytest

import jobpool
from jobpool.lifecycle import DONE, Outcome
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.sqlite import migrations
from jobpool.store.sqlite import statements as sql

APP = """
import os
from jobpool import job

@job(name="t.ok")
def ok(n):
    return n

@job(name="t.flaky", max_attempts=3, backoff_base=0)
def flaky(marker):
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise ValueError("first time fails")
    return "second time"
"""


def _sql(url, statement):
    """One statement on the store's own connection (no parameters: both dialects)."""
    if "://" not in url:
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            return [tuple(r) for r in conn.execute(statement).fetchall()]
        finally:
            conn.close()
    import psycopg
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else None


def _logged(url):
    """The rows of ``attempts``, in the order they were written."""
    order = "rowid" if "://" not in url else "seq"
    return _sql(url, f"SELECT job_id, attempt, outcome FROM attempts ORDER BY {order}")


# Starlette's TestClient warns that it will move to another HTTP client.
@pytest.mark.filterwarnings("ignore:Using `httpx`")
def test_a_success_is_logged_in_its_row_and_shown_after_its_failures(store_url, make_app,
                                                                      tmp_path):
    app = make_app(APP)
    app.db = store_url
    store = jobpool.connect(store_url)
    try:
        ok = store.enqueue("t.ok", 7).id
        flaky = store.enqueue("t.flaky", str(tmp_path / "marker")).id
        app.start("--procs", "2")
        assert store.get(ok)["status"] == store.get(flaky)["status"] == "done"
        # R61: no line in the attempt table for either success; the failure keeps its own
        assert _logged(store_url) == [(flaky, 1, "error")]
        (line,) = store.attempts(ok)
        row = store.get(ok)
        # the exit status a child's answer gives its line: kept in the row on SQLite
        sqlite = "://" not in store_url
        assert (line["attempt"], line["outcome"], line["error"], line["exit_status"]) == (
            1, "done", None, "0" if sqlite else None)
        assert line["owner"].count(":") == 2 and line["pid"] > 0
        assert (line["started_at"], line["ended_at"]) == (row["started_at"], row["finished_at"])
        assert line["peak_rss"] > 0 and line["cpu_s"] is not None
        logged = store.attempts(flaky)
        assert [(a["attempt"], a["outcome"]) for a in logged] == [(1, "error"), (2, "done")]
        assert "first time fails" in logged[0]["error"]
        assert logged[0]["ended_at"] <= logged[1]["started_at"]
    finally:
        store.close()
    # jobs show, as text and as JSON: the success's line
    shown = json.loads(app.cli("jobs", "show", str(flaky), "--db", store_url, "--json",
                               check=True).stdout)
    assert [a["outcome"] for a in shown["attempt_log"]] == ["error", "done"]
    assert shown["attempt_log"][1]["pid"] == logged[1]["pid"]
    text = app.cli("jobs", "show", str(ok), "--db", store_url, check=True).stdout
    assert "attempts" in text and " done " in text
    # the web: the job page and the API
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    with TestClient(create_app(store_url), follow_redirects=False) as client:
        api = client.get(f"/api/jobs/{flaky}").json()
        assert [a["outcome"] for a in api["attempt_log"]] == ["error", "done"]
        page = client.get(f"/jobs/{ok}").text
        assert str(line["pid"]) in page


def _one_success(store, owner, pid):
    """Claim and settle one ready job through the store's own hot path."""
    pool = store.claimer(owner, ("c.job",), ("default",), {})
    try:
        (claimed,) = pool.turn([], 1, time.time(), None)[1]
        pool.turn([Outcome(claimed.job_id, claimed.attempt, DONE, pid=pid)], 0, time.time(),
                  None)
    finally:
        pool.close()
    return claimed.job_id


def test_a_store_from_before_the_step_shows_its_old_success_lines_once(store_url):
    """A done job settled before the step has its line in ``attempts`` and none in its
    row; after the upgrade it still shows one line, and the next success is folded."""
    sqlite = "://" not in store_url
    if sqlite:
        step = next(n for n, statements in migrations.STEPS.items()
                    if any("done_owner" in s for s in statements))
        rows, version = "jobs", "UPDATE jobpool_meta SET value = '{}' WHERE key = 'schema'"
    else:
        step = next(n for n, statements in pg_sql.STEPS.items()
                    if any("done_owner" in s for s in statements))
        rows, version = "finished_jobs", "UPDATE jobpool_meta SET value = '{}' WHERE key = 'revision'"
    store = jobpool.connect(store_url)
    old, new = (h.id for h in store.enqueue_many("c.job", [(1,), (2,)]))
    try:
        assert _one_success(store, "host-a:1:1", 42) == old
    finally:
        store.close()
    # what the release before the step left: the line in attempts, no columns in the row
    _sql(store_url, "INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, "
                    f"outcome) SELECT id, attempts, done_owner, done_pid, started_at, finished_at, "
                    f"'done' FROM {rows} WHERE status = 'done'")
    for column, _field in sql.DONE_LINE_HERE if sqlite else pg_sql.DONE_LINE:
        _sql(store_url, f"ALTER TABLE {rows} DROP COLUMN {column}")
    _sql(store_url, version.format(step - 1))
    store = jobpool.connect(store_url)   # a writer: brings it up to date
    try:
        assert [(a["outcome"], a["pid"]) for a in store.attempts(old)] == [("done", 42)]
        assert _one_success(store, "host-a:1:1", 43) == new
        assert [(a["outcome"], a["pid"]) for a in store.attempts(new)] == [("done", 43)]
        assert _logged(store_url) == [(old, 1, "done")]
    finally:
        store.close()


def test_a_salvaged_sqlite_store_keeps_its_success_lines(tmp_path):
    """``doctor --salvage`` copies a done job's row with its line (R61) beside the
    failures' rows of ``attempts``."""
    from jobpool.store.sqlite.doctor import salvage
    old = str(tmp_path / "old.db")
    store = jobpool.connect(old)
    store.enqueue("c.job", 1)
    try:
        job_id = _one_success(store, "host-a:1:1", 42)
    finally:
        store.close()
    salvage(old, str(tmp_path / "new.db"))
    store = jobpool.connect(tmp_path / "new.db")
    try:
        assert [(a["outcome"], a["pid"], a["owner"]) for a in store.attempts(job_id)] == [
            ("done", 42, "host-a:1:1")]
    finally:
        store.close()
