"""The web dashboard (R47, DESIGN section 13): what its pages and API show equals what
the store holds, actions need the session's CSRF token and are events, read-only
refuses them, a token guards everything, and text from jobs is HTML text.

The web app reaches a store only through the store protocol (tests/test_layers.py),
whose contract suite runs on both stores; so the pages are tested over SQLite, and a
few tests (``on_both_stores``: stats, a list and its keyset, an action, the API, the
served process) prove the app over PostgreSQL too.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("starlette")

import jobpool  # noqa: E402
from jobpool import events  # noqa: E402
from jobpool.web import create_app  # noqa: E402

from tests.conftest import ROOT  # noqa: E402

# Starlette's TestClient warns that it will move to another HTTP client.
pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")

HOSTILE = "<script>alert(1)</script> [bold]x[/bold] \x1b]0;title\x07"
#: A name or queue is printable text without spaces (R1): the markup part of HOSTILE.
HOSTILE_NAME = "<script>alert(1)</script>[bold]x[/bold]"


@pytest.fixture(params=["sqlite"])
def store_url(request, tmp_path):
    """The web tests' store: SQLite unless a test is ``on_both_stores`` (this overrides
    conftest's ``store_url`` for every module that imports it)."""
    if request.param == "sqlite":
        return str(tmp_path / "jobpool.db")
    return request.getfixturevalue("pg_url")


#: A web test that runs over PostgreSQL as well as SQLite.
on_both_stores = pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)


def _client(store_url, **options):
    from starlette.testclient import TestClient
    return TestClient(create_app(store_url, **options), follow_redirects=False)


def _csrf(page_html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page_html)
    assert found, page_html
    return found.group(1)


def _dead_jobs(store, n: int, name: str = "t.gone") -> list[int]:
    ids = [store.enqueue_with(name, queue="q1").id for _ in range(n)]
    for job_id in ids:
        assert store.cancel(job_id) == "cancelled"
    return ids


def _web_actions(caplog) -> list[dict]:
    return [dict(r.fields) for r in caplog.records if getattr(r, "event", None) == events.WEB_ACTION]


@on_both_stores
def test_the_overview_and_api_stats_count_what_the_store_holds(any_store, store_url):
    any_store.enqueue_with("t.a", queue="q1")
    any_store.enqueue_with("t.a", queue="q2")
    any_store.enqueue_with("t.b", queue="q1", delay=3600)
    _dead_jobs(any_store, 2)
    expected = any_store.stats()
    with _client(store_url) as client:
        page = client.get("/")
        assert page.status_code == 200
        for key in ("ready", "scheduled", "running", "done", "dead"):
            cell = re.search(rf'id="total-{key}"><a [^>]*>(\d+)</a>', page.text)
            assert cell and int(cell.group(1)) == expected[key], key
        assert "q1" in page.text and "q2" in page.text
        stats = client.get("/api/stats").json()
    assert stats == json.loads(json.dumps(dict(expected, unserved=any_store.unserved(),
                                               paused=any_store.paused_queues())))
    assert (stats["ready"], stats["scheduled"], stats["dead"]) == (2, 1, 2)


def test_jobs_status_dead_lists_exactly_the_dead_jobs_newest_first(any_store, store_url):
    dead = _dead_jobs(any_store, 3)
    any_store.enqueue_with("t.live", queue="q1")
    with _client(store_url) as client:
        page = client.get("/jobs", params={"status": "dead"})
        api = client.get("/api/jobs", params={"status": "dead"}).json()
    listed = [int(i) for i in re.findall(r'<tr class="job" data-id="(\d+)"', page.text)]
    assert listed == sorted(dead, reverse=True)
    assert [row["id"] for row in api["jobs"]] == sorted(dead, reverse=True)


def test_a_page_lists_limit_jobs_and_counts_the_rest(any_store, store_url):
    ids = [any_store.enqueue_with("t.a").id for _ in range(5)]
    with _client(store_url) as client:
        page = client.get("/jobs", params={"limit": "2"})
        api = client.get("/api/jobs", params={"limit": "2"}).json()
        assert client.get("/jobs", params={"status": "nonsense"}).status_code == 400
    assert [int(i) for i in re.findall(r'data-id="(\d+)"', page.text)] == ids[:-3:-1]
    assert "3 more" in page.text and api["more"] == 3


@on_both_stores
def test_the_next_page_link_carries_the_keyset_and_the_filters(any_store, store_url):
    ids = [any_store.enqueue_with("t.a", queue="q1").id for _ in range(5)]
    any_store.enqueue_with("t.other", queue="q1")
    with _client(store_url) as client:
        first = client.get("/jobs", params={"name": "t.a", "limit": "2"})
        link = re.search(r'<a href="([^"]+)" id="next-page"', first.text)
        assert link and "newest" not in first.text
        href = link.group(1).replace("&amp;", "&")
        assert href == f"/jobs?name=t.a&after={ids[3]}&limit=2"
        any_store.enqueue_with("t.a", queue="q1")  # a newer job shifts no page
        second = client.get(href)
        assert [int(i) for i in re.findall(r'data-id="(\d+)"', second.text)] == [ids[2], ids[1]]
        assert "1 more" in second.text and 'id="first-page"' in second.text
        last = client.get(re.search(r'<a href="([^"]+)" id="next-page"',
                                    second.text).group(1).replace("&amp;", "&"))
        assert [int(i) for i in re.findall(r'data-id="(\d+)"', last.text)] == [ids[0]]
        assert 'id="next-page"' not in last.text
        api = client.get("/api/jobs", params={"name": "t.a", "limit": "2", "after": ids[3]}).json()
        assert [row["id"] for row in api["jobs"]] == [ids[2], ids[1]]
        assert (api["more"], api["next_after"]) == (1, ids[1])
        assert client.get("/api/jobs", params={"after": ids[0]}).json()["next_after"] is None
        assert client.get("/jobs", params={"after": "-3"}).status_code == 400
        assert client.get("/api/jobs", params={"after": "x"}).status_code == 400


@on_both_stores
def test_a_retry_with_the_csrf_token_makes_the_dead_job_ready_and_is_an_event(
        any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    job_id, = _dead_jobs(any_store, 1)
    with _client(store_url) as client:
        token = _csrf(client.get("/dead").text)
        answer = client.post(f"/jobs/{job_id}/retry", data={"csrf": token, "next": "/dead"})
        assert answer.status_code == 303 and answer.headers["location"] == "/dead"
        assert f"job {job_id}: retried" in client.get("/dead").text
    assert any_store.get(job_id)["status"] == "ready"
    assert _web_actions(caplog) == [{"action": "retry", "who": "loopback", "job_id": job_id,
                                     "result": "retried"}]


@on_both_stores
def test_retry_all_matching_shows_the_count_then_retries_them_and_is_one_event(
        any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    gone = _dead_jobs(any_store, 3)
    other = _dead_jobs(any_store, 1, name="t.other")
    with _client(store_url) as client:
        listed = client.get("/jobs", params={"status": "dead", "name": "t.gone"}).text
        assert 'href="/jobs/all/retry?status=dead&amp;name=t.gone" id="bulk-retry"' in listed
        confirm = client.get("/jobs/all/retry", params={"status": "dead", "name": "t.gone"})
        assert confirm.status_code == 200
        assert re.search(r'id="bulk-count"><strong>3</strong> jobs match', confirm.text)
        later, = _dead_jobs(any_store, 1)  # matches after the confirmation: not taken
        form = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">',
                               confirm.text.split('action="/jobs/all/retry"')[1]))
        assert form["through"] == str(gone[-1]) and form["name"] == "t.gone"
        answer = client.post("/jobs/all/retry", data=form)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/jobs?status=dead&name=t.gone"
        assert "retry all matching: 3 retried" in client.get(answer.headers["location"]).text
    assert [any_store.get(i)["status"] for i in gone] == ["ready"] * 3
    assert [any_store.get(i)["status"] for i in (*other, later)] == ["dead", "dead"]
    assert _web_actions(caplog) == [{"action": "retry", "who": "loopback",
                                     "filter": {"status": "dead", "name": "t.gone"},
                                     "job_ids": gone[::-1], "result": {"retried": 3}}]


def test_cancel_and_delete_all_matching(any_store, store_url):
    ready = [any_store.enqueue_with("t.a", queue="q9").id for _ in range(2)]
    elsewhere = any_store.enqueue_with("t.a", queue="q1").id
    with _client(store_url) as client:
        for action, chosen in (("cancel", {"status": "ready", "queue": "q9"}),
                               ("delete", {"status": "dead", "queue": "q9"})):
            confirm = client.get(f"/jobs/all/{action}", params=chosen).text
            assert "<strong>2</strong> jobs match" in confirm
            answer = client.post(f"/jobs/all/{action}", data=dict(
                chosen, csrf=_csrf(confirm), through=str(ready[-1])))
            assert answer.status_code == 303
        assert "delete all matching: 2 deleted" in client.get("/jobs").text
        for job_id in ready:
            assert client.get(f"/jobs/{job_id}").status_code == 404
    assert any_store.get(elsewhere)["status"] == "ready"


def test_all_matching_needs_a_status_it_takes_the_csrf_token_and_write_access(any_store, store_url):
    dead = _dead_jobs(any_store, 1)
    with _client(store_url) as client:
        assert client.get("/jobs/all/retry").status_code == 400  # no status: refused
        assert client.get("/jobs/all/retry", params={"status": "ready"}).status_code == 400
        assert client.get("/jobs/all/cancel", params={"status": "dead"}).status_code == 400
        assert client.get("/jobs/all/explode", params={"status": "dead"}).status_code == 404
        client.get("/jobs")
        assert client.post("/jobs/all/retry", data={"status": "dead",
                                                    "through": str(dead[0])}).status_code == 403
        assert "No job matches" in client.get("/jobs/all/retry",
                                              params={"status": "dead", "name": "t.none"}).text
    with _client(store_url, read_only=True) as client:
        assert 'id="bulk-retry"' not in client.get("/jobs", params={"status": "dead"}).text
        assert client.get("/jobs/all/retry", params={"status": "dead"}).status_code == 403
        assert client.post("/jobs/all/retry", data={"status": "dead"}).status_code == 403
    assert any_store.get(dead[0])["status"] == "dead"


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    job_id, = _dead_jobs(any_store, 1)
    with _client(store_url) as client:
        client.get("/dead")  # a session with a token, which the POSTs below do not send
        assert client.post(f"/jobs/{job_id}/retry", data={"next": "/dead"}).status_code == 403
        assert client.post(f"/jobs/{job_id}/delete", data={"csrf": "forged"}).status_code == 403
        assert client.post("/queues/q1/pause", data={}).status_code == 403
    assert any_store.get(job_id)["status"] == "dead"
    assert any_store.paused_queues() == []
    assert _web_actions(caplog) == []


def test_read_only_draws_no_form_and_refuses_every_action(any_store, store_url):
    job_id, = _dead_jobs(any_store, 1)
    ready = any_store.enqueue_with("t.a", queue="q1").id
    with _client(store_url, read_only=True) as client:
        for path in ("/", "/jobs", "/dead", f"/jobs/{job_id}", f"/jobs/{ready}"):
            page = client.get(path)
            assert page.status_code == 200 and "<form" not in page.text.replace(
                '<form method="get"', ""), path
        # No page drew a form, so there is no CSRF token to send: the refusal says read-only.
        for path in (f"/jobs/{job_id}/retry", f"/jobs/{job_id}/delete", f"/jobs/{ready}/cancel",
                     "/queues/q1/pause"):
            answer = client.post(path, data={"csrf": "any"})
            assert answer.status_code == 403 and "read-only" in answer.text, path
        for method, path in (("POST", f"/api/jobs/{job_id}/retry"), ("DELETE", f"/api/jobs/{job_id}"),
                             ("POST", f"/api/jobs/{ready}/cancel"), ("POST", "/api/queues/q1/pause")):
            assert client.request(method, path, json={}).status_code == 403, path
    assert any_store.get(job_id)["status"] == "dead"
    assert any_store.get(ready)["status"] == "ready"
    assert any_store.paused_queues() == []


def test_a_token_guards_pages_and_api_and_the_login_form_opens_a_session(any_store, store_url):
    with _client(store_url, token="s3cret", token_label="ops") as client:
        assert client.get("/api/stats").status_code == 401
        assert client.get("/api/stats", headers={"authorization": "Bearer nope"}).status_code == 401
        assert client.get("/api/stats", headers={"authorization": "Bearer s3cret"}).status_code == 200
        for path in ("/", "/jobs", "/dead"):
            answer = client.get(path)
            assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
        form = client.get("/login?next=/jobs")
        token = _csrf(form.text)
        wrong = client.post("/login", data={"csrf": token, "token": "guess", "next": "/jobs"})
        assert wrong.status_code == 401 and client.get("/").status_code == 303
        right = client.post("/login", data={"csrf": token, "token": "s3cret", "next": "/jobs"})
        assert right.status_code == 303 and right.headers["location"] == "/jobs"
        assert client.get("/").status_code == 200 and client.get("/jobs").status_code == 200
        # The session opens pages, not the API: a cookie a browser sends on its own acts on nothing.
        assert client.get("/api/stats").status_code == 401


def test_a_login_form_without_its_csrf_token_is_refused(any_store, store_url):
    with _client(store_url, token="s3cret") as client:
        client.get("/login")
        assert client.post("/login", data={"token": "s3cret"}).status_code == 403
        assert client.get("/").status_code == 303


def test_actions_after_a_login_are_events_naming_the_tokens_label(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    with _client(store_url, token="s3cret", token_label="ops") as client:
        token = _csrf(client.get("/login").text)
        client.post("/login", data={"csrf": token, "token": "s3cret"})
        token = _csrf(client.get("/").text)  # the log-out form's
        assert client.post("/queues/q1/pause", data={"csrf": token}).status_code == 303
    assert any_store.paused_queues() == ["q1"]
    assert _web_actions(caplog) == [{"action": "pause", "who": "ops", "queue": "q1",
                                     "result": "paused"}]


def test_pause_and_resume_through_the_api_show_in_the_store(any_store, store_url):
    bearer = {"authorization": "Bearer t0k"}
    with _client(store_url, token="t0k") as client:
        answer = client.post("/api/queues/reports/pause", json={}, headers=bearer)
        assert answer.status_code == 200 and answer.json() == {"ok": True, "result": "paused"}
        assert any_store.paused_queues() == ["reports"]
        again = client.post("/api/queues/reports/pause", json={}, headers=bearer)
        assert again.status_code == 409
        # A form body is not JSON: another site's form could send it.
        form = client.post("/api/queues/reports/resume", data={"x": "1"}, headers=bearer)
        assert form.status_code == 415 and any_store.paused_queues() == ["reports"]
        assert client.post("/api/queues/reports/resume", json={}, headers=bearer).status_code == 200
    assert any_store.paused_queues() == []


@on_both_stores
def test_the_api_retries_cancels_and_deletes(any_store, store_url):
    dead, gone = _dead_jobs(any_store, 2)
    ready = any_store.enqueue_with("t.a").id
    with _client(store_url) as client:
        assert client.post(f"/api/jobs/{dead}/retry", json={}).json()["result"] == "retried"
        assert client.post(f"/api/jobs/{ready}/cancel", json={}).json()["result"] == "cancelled"
        assert client.delete(f"/api/jobs/{gone}", headers={"content-type": "application/json"}
                             ).json()["result"] == "deleted"
        assert client.delete(f"/api/jobs/{dead}", headers={"content-type": "application/json"}
                             ).status_code == 409  # ready again: only a dead job is deleted
        shown = client.get(f"/api/jobs/{ready}").json()
        assert client.get("/api/jobs/999999").status_code == 404
    assert any_store.get(dead)["status"] == "ready"
    assert shown["status"] == "dead" and shown["attempt_log"] == []
    with pytest.raises(jobpool.errors.JobNotFound):
        any_store.get(gone)


HOSTILE_APP = f"""
from jobpool import job, Fatal

@job(name="t.hostile")
def hostile():
    raise Fatal({HOSTILE!r})
"""


def test_hostile_names_and_errors_render_as_text(make_any_app, store_url):
    app = make_any_app(HOSTILE_APP)
    failed = app.store().enqueue("t.hostile").id
    named = app.store().enqueue_with(HOSTILE_NAME, args=[HOSTILE], queue=HOSTILE_NAME).id
    app.start("-q")
    assert app.store().get(failed)["status"] == "dead"
    with _client(store_url) as client:
        pages = [client.get(path).text for path in
                 ("/", "/jobs", "/dead", f"/jobs/{failed}", f"/jobs/{named}",
                  f"/jobs/{named}?reveal=1", f"/jobs/{named}/data", "/scheduled", "/queues",
                  "/pools", "/batches", "/live")]
    for html in pages:
        assert "<script>alert" not in html and "\x1b" not in html and "\x07" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; [bold]x[/bold] \\x1b]0;title\\x07" in pages[3]
    attempts = pages[3][pages[3].index('id="attempts"'):]
    # The attempt log: number, outcome, pid, exit status, no signal, wall and CPU seconds,
    # peak MiB.
    assert re.search(r"<tr><td>1</td><td>fatal</td><td>\d+</td><td>0</td><td></td>\s*<td>[\d.]+</td>\s*"
                     r"<td>[\d.]+</td>\s*<td>[\d.]+</td>", attempts), attempts
    assert "&lt;script&gt;alert(1)&lt;/script&gt;[bold]x[/bold]" in pages[4]  # the name
    assert "&lt;script&gt;alert(1)&lt;/script&gt;[bold]x[/bold]" in pages[0]  # its queue
    assert "<script src=\"/static/htmx.min.js\"" in pages[0]  # our own script, and only it


def test_arguments_are_hidden_until_revealed(any_store, store_url):
    job_id = any_store.enqueue_with("t.a", args=["the-secret-argument"]).id
    with _client(store_url) as client:
        hidden = client.get(f"/jobs/{job_id}").text
        shown = client.get(f"/jobs/{job_id}?reveal=1").text
        fragment = client.get(f"/jobs/{job_id}/data").text
    assert "the-secret-argument" not in hidden and "reveal" in hidden
    assert "the-secret-argument" in shown and "the-secret-argument" in fragment


def test_an_open_dashboard_beyond_loopback_is_refused_in_one_line(tmp_path):
    db = tmp_path / "jobpool.db"
    jobpool.connect(db).close()
    result = subprocess.run([sys.executable, "-m", "jobpool", "web", "--db", str(db), "--bind",
                             "0.0.0.0:0"], capture_output=True, text=True, timeout=60,
                            env=_env())
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and "without a token" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT))


@on_both_stores
def test_jobpool_web_serves_api_stats_over_http(any_store, store_url):
    any_store.enqueue_with("t.a")
    proc = subprocess.Popen([sys.executable, "-m", "jobpool", "web", "--db", store_url, "--bind",
                             "127.0.0.1:0", "--token", "tk"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    try:
        line = proc.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = f"http://127.0.0.1:{found.group(1)}/api/stats"
        request = urllib.request.Request(url, headers={"Authorization": "Bearer tk"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            stats = json.loads(answer.read())
        assert stats["ready"] == 1 and stats["paused"] == []
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        errors = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    # uvicorn stops gracefully on SIGTERM, then raises the signal again: status -15.
    assert proc.returncode in (0, -15) and "Traceback" not in errors, errors


def test_a_port_in_use_is_one_line(tmp_path):
    db = tmp_path / "jobpool.db"
    jobpool.connect(db).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "jobpool", "web", "--db", str(db), "--bind",
                                 f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60,
                                env=_env())
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr


def test_an_open_dashboard_answers_loopback_host_names_only(any_store, store_url):
    from starlette.testclient import TestClient
    app = create_app(store_url, allowed_hosts=("127.0.0.1", "localhost", "::1"))
    with TestClient(app, base_url="http://127.0.0.1:8700") as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"host": "[::1]:8700"}).status_code == 200
        assert client.get("/", headers={"host": "attacker.example:8700"}).status_code == 421



def test_without_the_web_extra_jobpool_web_says_how_to_install_it():
    # ``None`` in sys.modules makes ``import starlette`` fail as if it were not installed.
    code = ("import sys; sys.modules['starlette'] = None; from jobpool.cli import main; "
            "sys.exit(main(['web']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=_env())
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "the web extra is not installed: pip install '" in result.stderr
    assert "[web]'" in result.stderr
    # Said before the --app is imported (a heavy import, or one that fails, came first).
    code = code.replace("main(['web'])", "main(['web', '--app', 'no_such_module_xyz'])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=_env())
    assert result.returncode == 1 and "the web extra is not installed" in result.stderr


def test_after_a_login_or_an_action_it_never_lands_on_another_site(any_store, store_url):
    with _client(store_url, token="s3cret") as client:
        token = _csrf(client.get("/login").text)
        answer = client.post("/login", data={"csrf": token, "token": "s3cret",
                                             "next": "//evil.example/"})
        assert answer.status_code == 303 and answer.headers["location"] == "/"
        token = _csrf(client.get("/").text)
        answer = client.post("/queues/q1/pause", data={"csrf": token, "next": "https://evil.example/"})
        assert answer.headers["location"] == "/"


def _retried_with_note(client, store, job_id: int, note: str) -> None:
    """The dead job ``job_id`` retried by its page's button, then (dead again) through
    the API: each says ``note`` beside "retried"."""
    token = _csrf(client.get("/dead").text)
    answer = client.post(f"/jobs/{job_id}/retry", data={"csrf": token, "next": "/dead"})
    assert f"job {job_id}: retried; {note}" in client.get(answer.headers["location"]).text
    assert store.cancel(job_id) == "cancelled"
    assert client.post(f"/api/jobs/{job_id}/retry", json={}).json() == {
        "ok": True, "result": "retried", "note": note}


@on_both_stores
def test_a_retried_member_of_a_finished_batch_is_said_to_run_alone(any_store, store_url):
    """R34: ``dead retry`` says when a retried member's batch has finished; the page's
    button and the API said only "retried", and an operator waited for its callback."""
    batch = any_store.batch(on_complete=jobpool.Signature("t.report"))
    member = batch.add(jobpool.Signature("t.gone")).id
    assert any_store.cancel(member) == "cancelled"
    batch.close()
    assert any_store.batch_status(batch.id).finished
    alone = (f"its batch {batch.id} is finished: it runs outside it, and no callback of the "
             f"batch follows its end")
    with _client(store_url) as client:
        _retried_with_note(client, any_store, member, alone)
        plain, = _dead_jobs(any_store, 1)  # in no batch: no note
        assert client.post(f"/api/jobs/{plain}/retry", json={}).json() == {
            "ok": True, "result": "retried"}
        # A retry of many says how many of them run alone: a selection, through the API...
        for job_id in (member, plain):
            assert any_store.cancel(job_id) == "cancelled"
        many = client.post("/api/jobs/bulk", json={"action": "retry", "ids": [member, plain]})
        assert many.json() == {"ok": True, "result": "2 retried", "jobs": {
            str(member): "retried", str(plain): "retried"},
            "note": "of them, 1 ran in a finished batch (it runs alone): no batch callback "
                    "follows it"}
        # ... and every matching one, through the page's confirmation.
        for job_id in (member, plain):
            assert any_store.cancel(job_id) == "cancelled"
        confirm = client.get("/jobs/all/retry", params={"status": "dead"})
        form = dict(re.findall(r'name="([^"]+)" value="([^"]*)"',
                               confirm.text.split('action="/jobs/all/retry"')[1]))
        answer = client.post("/jobs/all/retry", data=form)
        assert ("retry all matching: 2 retried; of them, 1 ran in a finished batch (it runs "
                "alone)" in client.get(answer.headers["location"]).text)


@on_both_stores
def test_a_retried_member_of_a_cancelled_batch_is_said_to_have_no_callback(any_store, store_url):
    """R34: a member of a batch cancelled while another member ran counts in it again when
    retried, and no callback follows its end: the button, the API and a selection say so."""
    batch = any_store.batch(on_complete=jobpool.Signature("t.report"))
    running, waiting = batch.add_many("t.gone", [("a",), ("b",)]).ids
    claimer = any_store.claimer("pool-x", ("t.gone",), ("default",), {})
    try:
        assert [job.job_id for job in claimer.turn([], 1, time.time(), None)[1]] == [running]
    finally:
        claimer.close()
    assert batch.cancel().cancelled and not any_store.batch_status(batch.id).finished
    with _client(store_url) as client:  # open until its running member ends: no callback
        overview = client.get("/").text.split('id="open-batches"', 1)[1].split("</table>")[0]
        assert "<td>cancelled</td><td></td>" in overview and "t.report" not in overview
    said = (f"its batch {batch.id} was cancelled: it counts in it again, and no callback of "
            f"the batch follows its end")
    with _client(store_url) as client:
        _retried_with_note(client, any_store, waiting, said)
        assert any_store.cancel(waiting) == "cancelled"
        many = client.post("/api/jobs/bulk", json={"action": "retry", "ids": [waiting]})
        assert many.json()["note"] == ("of them, 1 is in a cancelled batch (counted in it "
                                       "again): no batch callback follows it")
        # With a member of a finished batch among them, the note says both.
        with any_store.batch() as finished:
            ended = finished.add(jobpool.Signature("t.gone", ("c",))).id
        assert any_store.cancel(ended) == "cancelled" and any_store.cancel(waiting) == "cancelled"
        many = client.post("/api/jobs/bulk", json={"action": "retry", "ids": [waiting, ended]})
        assert many.json()["note"] == (
            "of them, 1 ran in a finished batch (it runs alone) and 1 is in a cancelled batch "
            "(counted in it again): no batch callback follows them")
