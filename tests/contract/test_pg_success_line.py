"""R61 on PostgreSQL: a clean success's attempt line is written into its
``finished_jobs`` row by the settle that moves it, not as a row of ``attempts``; every
reader of the attempt log (``store.attempts``, ``jobpool jobs show``, the web job page
and ``/api/jobs/<id>``) shows it as the last line, after the failures that came before
it; a store from before the step keeps showing its old lines once."""
from __future__ import annotations

import json

import psycopg
import pytest

import jobpool
from jobpool.store.postgres import statements as pg_sql

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


def _sql(pg_url, statement, params=()):
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema}")
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


# Starlette's TestClient warns that it will move to another HTTP client.
@pytest.mark.filterwarnings("ignore:Using `httpx`")
def test_a_success_is_logged_in_its_row_and_shown_after_its_failures(pg_url, make_app, tmp_path):
    app = make_app(APP)
    app.db = pg_url
    store = jobpool.connect(pg_url)
    try:
        ok = store.enqueue("t.ok", 7).id
        flaky = store.enqueue("t.flaky", str(tmp_path / "marker")).id
        app.start("--procs", "2")
        assert store.get(ok)["status"] == store.get(flaky)["status"] == "done"
        # R61: no line in the attempt table for either success; the failure keeps its own
        assert _sql(pg_url, "SELECT job_id, attempt, outcome FROM attempts ORDER BY seq") == [
            (flaky, 1, "error")]
        (line,) = store.attempts(ok)
        row = store.get(ok)
        assert (line["attempt"], line["outcome"], line["error"], line["exit_status"]) == (
            1, "done", None, None)
        assert line["owner"].count(":") == 2 and line["pid"] > 0
        assert (line["started_at"], line["ended_at"]) == (row["started_at"], row["finished_at"])
        assert line["peak_rss"] > 0 and line["cpu_s"] is not None
        logged = store.attempts(flaky)
        assert [(a["attempt"], a["outcome"]) for a in logged] == [(1, "error"), (2, "done")]
        assert "first time fails" in logged[0]["error"]
    finally:
        store.close()
    # jobs show, as text and as JSON: the success's line
    shown = json.loads(app.cli("jobs", "show", str(flaky), "--db", pg_url, "--json",
                               check=True).stdout)
    assert [a["outcome"] for a in shown["attempt_log"]] == ["error", "done"]
    text = app.cli("jobs", "show", str(ok), "--db", pg_url, check=True).stdout
    assert "attempts" in text and " done " in text
    # the web: the job page and the API
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    with TestClient(create_app(pg_url), follow_redirects=False) as client:
        api = client.get(f"/api/jobs/{flaky}").json()
        assert [a["outcome"] for a in api["attempt_log"]] == ["error", "done"]
        page = client.get(f"/jobs/{ok}").text
        assert str(line["pid"]) in page


def test_a_store_from_before_the_step_shows_its_old_success_lines_once(pg_url):
    """A done job settled before the step has its line in ``attempts`` and none in its
    row; after the upgrade it still shows one line, and the next success is folded."""
    step = next(n for n, statements in pg_sql.STEPS.items()
                if any("done_owner" in s for s in statements))
    store = jobpool.connect(pg_url)
    old, new = (h.id for h in store.enqueue_many("c.job", [(1,), (2,)]))
    store.close()
    store = jobpool.connect(pg_url)
    pool = store.claimer("host-a:1:1", ("c.job",), ("default",), {})
    from jobpool.lifecycle import DONE, Outcome
    try:
        (first,) = pool.turn([], 1, 0.0, None)[1]
        pool.turn([Outcome(first.job_id, first.attempt, DONE, pid=42)], 0, 0.0, None)
    finally:
        pool.close()
        store.close()
    assert first.job_id == old
    # what the release before the step left: the line in attempts, no columns in the row
    _sql(pg_url, "INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, "
                 "outcome) SELECT id, attempts, done_owner, done_pid, started_at, finished_at, "
                 "'done' FROM finished_jobs")
    for column in pg_sql.DONE_LINE_COLUMNS:
        _sql(pg_url, f"ALTER TABLE finished_jobs DROP COLUMN {column}")
    _sql(pg_url, f"UPDATE jobpool_meta SET value = '{step - 1}' WHERE key = 'revision'")
    store = jobpool.connect(pg_url)   # a writer: brings it up to date
    pool = store.claimer("host-a:1:1", ("c.job",), ("default",), {})
    try:
        assert [(a["outcome"], a["pid"]) for a in store.attempts(old)] == [("done", 42)]
        (second,) = pool.turn([], 1, 0.0, None)[1]
        pool.turn([Outcome(second.job_id, second.attempt, DONE, pid=43)], 0, 0.0, None)
        assert second.job_id == new
        assert [(a["outcome"], a["pid"]) for a in store.attempts(new)] == [("done", 43)]
        assert _sql(pg_url, "SELECT count(*) FROM attempts WHERE job_id = %s", (new,)) == [(0,)]
    finally:
        pool.close()
        store.close()
