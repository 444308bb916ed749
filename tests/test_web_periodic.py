"""The periodic jobs page and ``GET /api/periodic`` (R33, R47, issue 27): each periodic
job with its schedule, its last enqueued occurrence and that job, and its next run.
Schedules are the app's registrations, so the web process shows them when it imports
the app (``jobpool web --app``); without it, what the store knows and how to see more.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("starlette")

from jobpool import jobs  # noqa: E402

from tests.conftest import ROOT  # noqa: E402
from tests.test_web import _client, on_both_stores, store_url  # noqa: E402, F401

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")


@pytest.fixture
def nightly():
    """A periodic job registered in this process (a cron at 03:00 UTC), and one every
    10 minutes; forgotten after the test."""
    @jobs.job(name="p.nightly", cron="0 3 * * *", queue="reports")
    def nightly_report() -> None: ...

    @jobs.job(name="p.often", every=600)
    def often() -> None: ...
    yield
    jobs.unregister("p.nightly")
    jobs.unregister("p.often")


@on_both_stores
def test_the_periodic_page_shows_each_schedule_its_last_job_and_next_run(
        any_store, store_url, nightly):
    occurrence = (time.time() // 600) * 600
    made = any_store.enqueue_occurrence("p.often", occurrence)
    any_store.enqueue_occurrence("p.gone", 1000.0)  # enqueued once; no longer registered
    with _client(store_url) as client:
        page = client.get("/periodic").text
        api = client.get("/api/periodic").json()["periodic"]
    # (other tests of this process may register periodic jobs of their own)
    by_name = {row["name"]: row for row in api if row["name"].startswith("p.")}
    assert list(by_name) == ["p.gone", "p.nightly", "p.often"]
    often, nightly_row, gone = by_name["p.often"], by_name["p.nightly"], by_name["p.gone"]
    assert often["schedule"] == "every 600 s" and often["last_occurrence"] == occurrence
    assert often["last_job"] == made.id and often["last_status"] in ("ready", "scheduled")
    assert often["next_occurrence"] == occurrence + 600
    next_night = nightly_row["next_occurrence"]
    assert time.time() < next_night <= time.time() + 86400 and next_night % 86400 == 3 * 3600
    assert nightly_row["queue"] == "reports" and nightly_row["last_occurrence"] is None
    assert gone["schedule"] is None and gone["next_occurrence"] is None
    row = page.split('data-name="p.often"', 1)[1].split("</tr>", 1)[0]
    assert f'<a href="/jobs/{made.id}">{made.id}</a>' in row and "every 600 s" in row
    due = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(occurrence + 600))
    assert re.search(rf'class="next" title="{due} UTC">in \d+[sm]', row), row


@pytest.mark.parametrize("when", ["9e999", "'soon'", "1e300"], ids=["inf", "text", "past any year"])
def test_a_last_occurrence_no_calendar_holds_shows_as_none(any_store, store_url, when):
    # R33, R44: the periodic row is data (SQLite keeps text, and REAL keeps inf); the
    # page's formats raised on it and /periodic answered 500.
    any_store.enqueue_occurrence("p.odd", 1000.0)
    any_store.transaction("spoiling an occurrence", lambda conn: conn.execute(
        f"UPDATE periodic SET last_occurrence = {when} WHERE name = 'p.odd'"))
    with _client(store_url) as client:
        page = client.get("/periodic")
        api = client.get("/api/periodic")
    assert page.status_code == 200 and 'data-name="p.odd"' in page.text
    (odd,) = [row for row in api.json()["periodic"] if row["name"] == "p.odd"]
    assert odd["last_occurrence"] in (None, 1e300)


def test_without_the_app_the_page_says_how_to_see_the_schedules(any_store, store_url):
    any_store.enqueue_occurrence("p.elsewhere", 1000.0)
    with _client(store_url) as client:
        page = client.get("/periodic").text
    assert 'id="no-schedules"' in page and "jobpool web --app MODULE" in page
    assert 'data-name="p.elsewhere"' in page and "not registered here" in page


def test_jobpool_web_app_imports_the_schedules(tmp_path, any_store, store_url):
    (tmp_path / "web_app_periodic.py").write_text(
        "from jobpool import job\n\n@job(name='p.served', every=60)\ndef served():\n    pass\n")
    proc = subprocess.Popen([sys.executable, "-m", "jobpool", "web", "--db", store_url,
                             "--app", "web_app_periodic", "--bind", "127.0.0.1:0"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        line = proc.stdout.readline()
        base = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert base, (line, proc.stderr.read() if proc.poll() is not None else "")
        with urllib.request.urlopen(base.group(1) + "/api/periodic", timeout=30) as answer:
            rows = json.loads(answer.read())["periodic"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert [(r["name"], r["schedule"]) for r in rows] == [("p.served", "every 60 s")]
