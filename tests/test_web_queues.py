"""The queues page's limits and weights (R35, R38, R47, issue 27): a queue's limit is
set and cleared from the page (a form with the session's CSRF token) and the JSON API
(``POST``/``DELETE /api/queues/{queue}/limit``), as ``jobpool limits set``/``clear``
do it, each one ``web_action`` event; a bad number is a 400 naming it and writes
nothing; read-only refuses both. Each queue's weight is shown as the live pools serve
it (a pool started with ``--queues high:3,default:1`` writes them in its heartbeat),
or "none". Over both stores.
"""
from __future__ import annotations

import html as html_lib
import json
import logging
import re
import subprocess
import time
import urllib.parse

import pytest

pytest.importorskip("starlette")

from jobpool import procinfo  # noqa: E402
from jobpool.store.records import Heartbeat  # noqa: E402

from tests.conftest import wait_for  # noqa: E402
from tests.test_web import (HOSTILE_NAME, _client, _csrf, _web_actions,  # noqa: E402, F401
                            on_both_stores, store_url)

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")


def _queue_limits(store) -> dict[str, int]:
    return {row["target"]: row["max_running"] for row in store.limits.listing()["limits"]
            if row["scope"] == "queue"}


def _row(html: str, queue: str) -> str:
    found = re.search(r'<tr class="queue[^"]*" data-queue="' + re.escape(queue) + r'">(.*?)</tr>',
                      html, re.S)
    assert found, html
    return found.group(1)


@on_both_stores
def test_a_queues_limit_is_set_and_cleared_from_the_page_and_each_is_an_event(
        any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    any_store.enqueue_with("t.a", queue="reports")
    with _client(store_url) as client:
        page = client.get("/queues").text
        assert 'action="/queues/limit"' in _row(page, "reports")
        assert '<input type="hidden" name="queue" value="reports">' in _row(page, "reports")
        assert "clear limit" not in _row(page, "reports")  # no limit to clear
        token = _csrf(page)
        answer = client.post("/queues/reports/limit",
                             data={"csrf": token, "next": "/queues", "running": "4"})
        assert answer.status_code == 303 and answer.headers["location"] == "/queues"
        assert _queue_limits(any_store) == {"reports": 4}
        shown = client.get("/queues").text
        assert "queue reports: at most 4 running" in shown  # the one-time notice
        assert "4 (0 running; set by web)" in _row(shown, "reports")
        assert client.post("/queues/reports/clear-limit",
                           data={"csrf": token, "next": "/queues"}).status_code == 303
        assert _queue_limits(any_store) == {}
        assert client.post("/queues/reports/clear-limit",
                           data={"csrf": token, "next": "/queues"}).status_code == 303
        assert "queue reports: had no limit" in client.get("/queues").text
    assert _web_actions(caplog) == [
        {"action": "limit", "who": "loopback", "queue": "reports", "running": 4,
         "result": "at most 4 running"},
        {"action": "clear-limit", "who": "loopback", "queue": "reports", "result": "no limit"},
        {"action": "clear-limit", "who": "loopback", "queue": "reports",
         "result": "had no limit"}]


@on_both_stores
def test_a_bad_limit_is_a_400_naming_it_and_writes_nothing(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    any_store.limits.set_queue("reports", 2)
    bad = ("0", "-1", "x", "", "2.5", "2147483648")
    with _client(store_url) as client:
        token = _csrf(client.get("/queues").text)
        for running in bad:
            answer = client.post("/queues/reports/limit",
                                 data={"csrf": token, "next": "/queues", "running": running})
            assert answer.status_code == 400, running
            assert answer.text == ("running must be a whole number from 1 to 2147483647, "
                                   f"not {running!r}")
        for sent in ({"running": 0}, {"running": "x"}, {"running": True}, {"running": 2.5},
                     {"running": 2**31}, {}, {"running": 3, "more": 1}, [3]):
            answer = client.post("/api/queues/reports/limit", json=sent)
            assert answer.status_code == 400, sent
            assert "running" in answer.json()["error"], sent
        # A queue name the store refuses (R1a): its words, a 409, nothing written.
        refused = client.post("/api/queues/high:3/limit", json={"running": 3})
        assert refused.status_code == 409 and "':'" in refused.json()["result"]
    assert _queue_limits(any_store) == {"reports": 2}
    assert [e["queue"] for e in _web_actions(caplog)] == ["high:3"]


@on_both_stores
def test_the_api_sets_and_clears_a_queues_limit(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    bearer = {"authorization": "Bearer t0k"}
    with _client(store_url, token="t0k") as client:
        answer = client.post("/api/queues/reports/limit", json={"running": 3}, headers=bearer)
        assert answer.status_code == 200
        assert answer.json() == {"ok": True, "result": "at most 3 running"}
        assert _queue_limits(any_store) == {"reports": 3}
        listed = client.get("/api/queues", headers=bearer).json()["queues"]
        assert [(q["queue"], q["limit"]["max_running"]) for q in listed] == [("reports", 3)]
        # a form body is not JSON: another site's form could send it
        assert client.post("/api/queues/reports/limit", data={"running": "9"},
                           headers=bearer).status_code == 415
        assert client.post("/api/queues/reports/limit", json={"running": 9}).status_code == 401
        assert _queue_limits(any_store) == {"reports": 3}
        cleared = client.request("DELETE", "/api/queues/reports/limit", json={}, headers=bearer)
        assert cleared.status_code == 200 and cleared.json()["result"] == "no limit"
        again = client.request("DELETE", "/api/queues/reports/limit", json={}, headers=bearer)
        assert again.status_code == 409 and again.json()["result"] == "had no limit"
        document = client.get("/api/openapi.json", headers=bearer).json()
    assert _queue_limits(any_store) == {}
    assert set(document["paths"]["/api/queues/{queue}/limit"]) == {"post", "delete"}
    assert [e["action"] for e in _web_actions(caplog)] == ["limit", "clear-limit", "clear-limit"]


def test_read_only_draws_no_limit_form_and_refuses_a_limit(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    any_store.limits.set_queue("reports", 2)
    with _client(store_url, read_only=True) as client:
        page = client.get("/queues")
        assert page.status_code == 200 and "<form" not in page.text
        for path, data in (("/queues/reports/limit", {"csrf": "any", "running": "5"}),
                           ("/queues/reports/clear-limit", {"csrf": "any"})):
            answer = client.post(path, data=data)
            assert answer.status_code == 403 and "read-only" in answer.text, path
        assert client.post("/api/queues/reports/limit", json={"running": 5}).status_code == 403
        assert client.delete("/api/queues/reports/limit").status_code == 403
    assert _queue_limits(any_store) == {"reports": 2}
    assert _web_actions(caplog) == []


def test_a_limit_without_the_csrf_token_is_refused(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    any_store.limits.set_queue("reports", 2)
    with _client(store_url) as client:
        client.get("/queues")
        assert client.post("/queues/reports/limit", data={"running": "5"}).status_code == 403
        assert client.post("/queues/reports/clear-limit",
                           data={"csrf": "forged"}).status_code == 403
    assert _queue_limits(any_store) == {"reports": 2}
    assert _web_actions(caplog) == []


def test_a_hostile_queue_names_limit_form_is_text_and_acts_on_that_queue(any_store, store_url):
    any_store.enqueue_with("t.a", queue=HOSTILE_NAME)
    with _client(store_url) as client:
        page = client.get("/queues").text
        assert "<script>alert" not in page
        (action, fields), = [(a, f) for a, f in _forms(page) if a.endswith("/limit")]
        answer = client.post(action, data=dict(fields, running="2"))
        assert answer.status_code == 303
    assert _queue_limits(any_store) == {HOSTILE_NAME: 2}


def _beat(store, owner: str, counters: dict, queues=("high", "default"), host="h") -> None:
    store.heartbeat(Heartbeat(owner=owner, host=host, pid=int(owner.split(":")[1]), procs=1,
                              queues=queues, names=("t.a",), core="python",
                              counters_json=json.dumps(counters), slots_json="[]"), [],
                    time.time() + 86_400)


def _gone_pid() -> int:
    """The pid of a process of this host that has exited."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@on_both_stores
def test_each_queues_weight_is_shown_as_the_live_pools_serve_it(any_store, store_url):
    """R38, R44: a live pool's weights by queue; a pool in strict order, a dead pool,
    and weights that are not whole numbers above 0, are none."""
    for queue in ("high", "default", "low"):
        any_store.enqueue_with("t.a", queue=queue)
    _beat(any_store, "h:1:", {"weights": {"high": 3, "default": 1}})
    _beat(any_store, "h:2:", {"weights": {"high": 5, "low": "<b>9</b>", "default": True}},
          queues=("high", "default", "low"))
    _beat(any_store, "h:3:", {}, queues=("low",))  # strict order: no weight
    gone = _gone_pid()
    here = procinfo.host_id()
    _beat(any_store, f"{here}:{gone}:", {"weights": {"low": 2}}, queues=("low",), host=here)
    assert [p["dead"] is not None for p in any_store.pools()] == [False, False, False, True]
    with _client(store_url) as client:
        page = client.get("/queues").text
        body = client.get("/api/queues").json()
    cells = {q: re.search(r'<td class="weight">(.*?)</td>', _row(page, q)).group(1)
             for q in ("high", "default", "low")}
    assert cells == {"high": "3 (h:1), 5 (h:2)", "default": "1 (h:1)", "low": "none"}
    assert {q["queue"]: [(w["pool"], w["weight"]) for w in q["weights"]]
            for q in body["queues"]} == {"high": [("h:1:", 3), ("h:2:", 5)],
                                         "default": [("h:1:", 1)], "low": []}


def test_a_pool_started_with_weights_shows_them_until_it_stops(make_app, store_url):
    app = make_app("""
        from jobpool import job

        @job(name="t.noop")
        def noop():
            pass
    """)
    store = app.store()
    pool = app.spawn("--queues", "high:3,default:1", "--procs", "1")
    wait_for(lambda: any(p["dead"] is None for p in store.pools()), timeout=60)
    store.enqueue_with("t.other", queue="high")
    with _client(str(app.db)) as client:
        row = _row(client.get("/queues").text, "high")
        assert re.search(r'<td class="weight">3 \(\S+:\d+\)</td>', row), row
        app.cli("stop", "--db", str(app.db), check=True)
        pool.wait(timeout=60)
        wait_for(lambda: not store.pools(), timeout=30)
        assert '<td class="weight">none</td>' in _row(client.get("/queues").text, "high")


@on_both_stores
def test_the_cli_and_the_store_refuse_the_same_limits_as_the_page(make_any_app, any_store):
    """R35, R41: ``limits set --running`` and ``set_queue`` take the page's bound, in
    the same words, and write nothing past it; the bound itself is kept on both stores."""
    from jobpool.errors import EnqueueError
    app = make_any_app("from jobpool import job\n")
    over = app.cli("limits", "set", "--db", str(app.db), "--queue", "q", "--running",
                   "2147483648")
    assert over.returncode == 2
    assert "running must be a whole number from 1 to 2147483647, not '2147483648'" in over.stderr
    with pytest.raises(EnqueueError, match="running must be a whole number from 1 to"):
        any_store.limits.set_queue("q", 0)
    assert _queue_limits(any_store) == {}
    assert app.cli("limits", "set", "--db", str(app.db), "--queue", "q", "--running",
                   "2147483647").returncode == 0
    assert _queue_limits(any_store) == {"q": 2147483647}


def _forms(html: str) -> list[tuple[str, dict[str, str]]]:
    """Each form of a page: its action and its fields' values, as a browser sends them."""
    found = []
    for action, body in re.findall(r'<form method="post" action="([^"]*)"[^>]*>(.*?)</form>', html,
                                   re.S):
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body))
        found.append((html_lib.unescape(action), {k: html_lib.unescape(v) for k, v in fields.items()}))
    return found


@on_both_stores
@pytest.mark.parametrize("page", ["/queues", "/"])
def test_a_queues_button_acts_on_that_queue_whatever_its_name(any_store, store_url, page):
    """R38, R47: a queue's name is text anyone who enqueues chooses. Named in the path,
    ``x/../default``'s pause button posted ``/queues/x/../default/pause``, which the
    browser resolves to ``/queues/default/pause``: it paused another queue. The pages'
    forms name the queue in a field, and the browser's resolution of the form's
    address (urljoin's, as a browser's) changes nothing."""
    hostile = "x/../default"
    any_store.enqueue_with("t.a", queue=hostile)
    any_store.enqueue_with("t.a", queue="default")
    with _client(store_url) as client:
        html = client.get(page).text
        mine = [(action, fields) for action, fields in _forms(html)
                if fields.get("queue") == hostile and action.endswith("/pause")]
        assert len(mine) == 1, _forms(html)
        action, fields = mine[0]
        resolved = urllib.parse.urlsplit(urllib.parse.urljoin("http://testserver" + page,
                                                              action)).path
        assert client.post(resolved, data=fields).status_code == 303
    assert any_store.paused_queues() == [hostile]


@on_both_stores
def test_a_queue_action_the_store_refuses_is_its_answer_not_a_server_error(any_store,
                                                                           store_url):
    # A queue name the store refuses (R38 names it) is the action's answer: a 409 from
    # the API, the notice on the page; it was a 500.
    any_store.enqueue_with("t.a", queue="default")  # a page with forms, for its token
    with _client(store_url) as client:
        for verb in ("pause", "resume"):
            answer = client.post(f"/api/queues/a:b/{verb}", json={})
            assert answer.status_code == 409 and "a:b" in answer.json()["result"], answer.text
        page = client.get("/queues").text
        assert client.post("/queues/pause", data={"csrf": _csrf(page), "queue": "a:b",
                                                  "next": "/queues"}).status_code == 303
        assert "queue a:b: " in client.get("/queues").text
        assert client.post("/queues/pause", data={"csrf": _csrf(page),
                                                  "next": "/queues"}).status_code == 400
    assert any_store.paused_queues() == []


@on_both_stores
def test_a_pools_buttons_act_on_that_pool_whatever_its_owner(any_store, store_url):
    """R27, R47: a pools row is data (R44): its owner, named in the path, could resolve
    to another pool's (``/pools/h:7:x/../../pools/h:8:v/stop`` is ``/pools/h:8:v/stop``
    once a browser resolves it). The pools page's forms name the pool in a field."""
    hostile, victim = "h:7:x/../../pools/h:8:v", "h:8:v"
    _beat(any_store, victim, {})
    _beat(any_store, hostile, {})
    with _client(store_url) as client:
        html = client.get("/pools").text
        for verb, extra in (("stop", {}), ("scale", {"procs": "3"})):
            (action, fields), = [(a, f) for a, f in _forms(html)
                                 if f.get("owner") == hostile and a.endswith("/" + verb)]
            resolved = urllib.parse.urlsplit(urllib.parse.urljoin("http://testserver/pools",
                                                                  action)).path
            assert client.post(resolved, data=dict(fields, **extra)).status_code == 303
    rows = {p["owner"]: p for p in any_store.pools()}
    assert (rows[hostile]["stop_requested"], rows[hostile]["desired_procs"]) == (1, 3)
    assert (rows[victim]["stop_requested"], rows[victim]["desired_procs"]) == (0, None)
