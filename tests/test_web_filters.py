"""The job list's filters by key, batch, group, error text, arguments and a created or
finished time range (R47, issue 27), through the page (``/jobs?…``), the JSON API
(``GET /api/jobs?…``) and ``jobpool jobs list``: each lists exactly the jobs that
match, newest first, in keyset pages; a search (group, texts, times) reads a window
of ids and offers the next, older one. Over SQLite; ``on_both_stores`` over
PostgreSQL too (tests/test_web.py says why).
"""
from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("starlette")

from jobpool.handles import Signature  # noqa: E402
from jobpool.lifecycle import FATAL, Outcome  # noqa: E402
from jobpool.limits import NameLimit  # noqa: E402

from tests.test_web import _client, on_both_stores, store_url  # noqa: E402, F401

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")


def _failed(store, errors: list[str], name: str = "f.fails") -> list[int]:
    """Jobs made dead by a fatal error each, with that error's text."""
    ids = [store.enqueue_with(name, args=[n]).id for n in range(len(errors))]
    claimer = store.claimer("pool-f", [name], ["default"], {})
    try:
        claimed = [job.job_id for job in claimer.turn([], len(ids), time.time(), None)[1]]
        assert sorted(claimed) == ids
        claimer.turn([Outcome(job_id, 1, FATAL, error) for job_id, error in zip(ids, errors)],
                     0, time.time(), None)
    finally:
        claimer.close()
    return ids


def _listed(html: str) -> list[int]:
    part = html.split('id="jobs"', 1)[1].split("</table>", 1)[0] if 'id="jobs"' in html else ""
    return [int(i) for i in re.findall(r'<tr class="job[^"]*" data-id="(\d+)"', part)]


def _both(client, **query) -> tuple[list[int], dict]:
    """The ids the page lists and the API's answer, for one query."""
    page = client.get("/jobs", params=query)
    api = client.get("/api/jobs", params=query)
    assert page.status_code == api.status_code == 200, (page.text[:200], api.text[:200])
    body = api.json()
    assert [job["id"] for job in body["jobs"]] == _listed(page.text)
    return _listed(page.text), body


@on_both_stores
def test_key_and_batch_list_exactly_their_jobs(any_store, store_url):
    keyed = any_store.enqueue_with("f.keyed", key="order-7").id
    any_store.enqueue_with("f.keyed", key="order-8")
    any_store.enqueue_with("f.other", key="order-7")  # the same key of another name
    with any_store.batch() as made:
        members = [made.add(Signature("f.member", (n,))).id for n in range(3)]
    any_store.enqueue_with("f.member", args=[9])
    with _client(store_url) as client:
        assert _both(client, name="f.keyed", key="order-7")[0] == [keyed]
        assert _both(client, batch=str(made.id))[0] == members[::-1]
        assert _both(client, batch=str(made.id), limit="2")[1]["next_after"] == members[1]
        refused = client.get("/api/jobs", params={"key": "order-7"})
        assert refused.status_code == 400 and "name" in refused.json()["error"]
        assert client.get("/jobs", params={"batch": "x"}).status_code == 400


@on_both_stores
def test_error_text_lists_the_dead_jobs_whose_error_contains_it(any_store, store_url):
    timeouts = _failed(any_store, ["TimeoutError: upstream 504", "KeyError: 'sku'",
                                   "TimeoutError: db", "timeouterror lowercase"])
    with _client(store_url) as client:
        ids, body = _both(client, status="dead", error="TimeoutError")
        assert ids == [timeouts[2], timeouts[0]]  # case-sensitive, newest first
        assert body["searched"] == {"from_id": 1, "to_id": timeouts[-1]}
        assert body["next_after"] is None  # the window reached the first job
        html = client.get("/jobs", params={"error": "<script>"}).text
        assert "&lt;script&gt;" in html and "<script>" not in html.split("<main", 1)[1]


def test_arguments_and_a_group_are_searched(any_store, store_url):
    wanted = any_store.enqueue_with("f.mail", args=["to@example.org"]).id
    any_store.enqueue_with("f.mail", args=["to@example.com"])
    any_store.limits.declare({"f.limited": NameLimit("f.limited", 2, None, 1, "tenant")},
                             "pool-f")
    grouped = any_store.enqueue_with("f.limited", kwargs={"tenant": "acme"}).id
    any_store.enqueue_with("f.limited", kwargs={"tenant": "other"})
    with _client(store_url) as client:
        assert _both(client, args="example.org")[0] == [wanted]
        assert _both(client, args="example.org", name="f.other")[0] == []
        assert _both(client, group="acme")[0] == [grouped]


def test_a_created_or_finished_time_range(any_store, store_url):
    before = any_store.enqueue_with("f.t").id
    time.sleep(0.05)
    start = time.time()
    inside = any_store.enqueue_with("f.t").id
    dead, = _failed(any_store, ["ValueError"])
    end = time.time()
    time.sleep(0.05)
    after = any_store.enqueue_with("f.t").id
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start - 1))
    with _client(store_url) as client:
        assert _both(client, created_from=str(start), created_to=str(end))[0] == [dead, inside]
        assert _both(client, created_to=str(start))[0] == [before]
        assert after in _both(client, created_from=iso)[0]
        assert _both(client, status="dead", finished_from=str(start),
                     finished_to=str(time.time()))[0] == [dead]
        assert _both(client, status="dead", finished_to=str(start))[0] == []
        for query in ({"finished_from": str(start)}, {"created_from": "yesterday"}):
            assert client.get("/api/jobs", params=query).status_code == 400


def test_a_search_reads_one_window_and_links_the_next(any_store, store_url):
    ids = [any_store.enqueue_with("f.w", args=["hit" if n % 5 == 1 else "miss"]).id
           for n in range(12)]
    hits = ids[1::5]  # the 2nd, 7th and 12th
    with _client(store_url) as client:
        ids_seen, body = _both(client, args="hit", scan="5")
        assert ids_seen == [ids[11]] and body["searched"] == {"from_id": ids[7], "to_id": ids[11]}
        assert body["next_after"] == ids[7]
        page = client.get("/jobs", params={"args": "hit", "scan": "5"}).text
        older = re.search(r'href="/jobs\?([^"]+)" id="search-older"', page).group(1)
        assert _listed(client.get("/jobs?" + older.replace("&amp;", "&")).text) == [ids[6]]
        _, last = _both(client, args="hit", scan="5", after=str(ids[2]))
        assert [j["id"] for j in last["jobs"]] == [ids[1]] and last["next_after"] is None
        full = _both(client, args="hit", limit="1")[1]  # the window holds all three
        assert [j["id"] for j in full["jobs"]] == [hits[2]]
        assert full["more"] == 2 and full["next_after"] == hits[2]
        assert client.get("/api/jobs", params={"args": "hit", "scan": "0"}).status_code == 400


def test_all_matching_refuses_a_search_and_takes_key_and_batch(any_store, store_url):
    with any_store.batch() as made:
        members = [made.add(Signature("f.member", (n,))).id for n in range(2)]
    other = any_store.enqueue_with("f.member", args=[9]).id
    with _client(store_url) as client:
        refused = client.get("/jobs/all/cancel", params={"status": "ready", "error": "x"})
        assert refused.status_code == 400 and "search" in refused.text
        confirm = client.get("/jobs/all/cancel", params={"status": "ready",
                                                         "batch": str(made.id)}).text
        assert re.search(r"<strong>2</strong> jobs match", confirm)
        csrf = re.search(r'name="csrf" value="([^"]+)"', confirm).group(1)
        through = re.search(r'name="through" value="(\d+)"', confirm).group(1)
        done = client.post("/jobs/all/cancel", data={"csrf": csrf, "status": "ready",
                                                     "batch": str(made.id), "through": through})
        assert done.status_code == 303
    assert [any_store.get(i)["status"] for i in (*members, other)] == ["dead", "dead", "ready"]


def test_jobs_list_takes_the_same_filters_and_names_its_window(any_store, store_url):
    """``jobpool jobs list`` (R47): the key, batch and searched filters, the window a
    search read and the --after of the next, older one; refusals in one line."""
    import subprocess
    import sys

    from tests.conftest import ROOT
    ids = [any_store.enqueue_with("f.cli", args=["hit" if n % 5 == 1 else "miss"],
                                  key=f"k{n}").id for n in range(12)]
    any_store.close()

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jobpool", "jobs", "list", "--db",
                               store_url, *args], capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
    found = cli("--args", "hit", "--scan", "5", "--json")
    assert [row["id"] for row in json_rows(found)] == [ids[11]]
    shown = cli("--args", "hit", "--scan", "5").stdout.splitlines()
    assert shown[-1] == f"searched jobs {ids[7]} to {ids[11]}; --after {ids[7]} searches older jobs"
    assert [row["id"] for row in json_rows(cli("--args", "hit", "--scan", "5", "--after",
                                               str(ids[7]), "--json"))] == [ids[6]]
    assert [row["id"] for row in json_rows(cli("--name", "f.cli", "--key", "k3", "--json"))] \
        == [ids[3]]
    refused = cli("--key", "k3")
    assert refused.returncode != 0 and "filter by the name too" in refused.stderr
    assert "ISO 8601" in cli("--created-from", "yesterday").stderr


def json_rows(done) -> list[dict]:
    import json
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@on_both_stores
def test_metadata_lists_exactly_the_jobs_whose_metadata_holds_every_pair(any_store, store_url):
    """R54, R47: ``meta=KEY=VALUE`` (repeated: every pair), parsed as ``jobs list
    --meta`` parses it (``7`` a number, ``"7"`` text), on the page and the API; the
    filter stays in the form, the next page's link and the keyset pages; a pair that
    is not KEY=VALUE is a 400 in the CLI's words, naming ``meta``."""
    ids = [any_store.enqueue_with("f.meta", meta=meta).id for meta in (
        {"tenant": 7, "tier": "gold"}, {"tenant": "7"}, {"tenant": 7.0, "tier": "gold"},
        {"tenant": 7, "ok": True}, {"x": None}, None, {"tenant": 7, "tier": "gold"})]
    with _client(store_url) as client:
        assert _both(client, meta="tenant=7")[0] == [ids[6], ids[3], ids[2], ids[0]]
        assert _both(client, meta='tenant="7"')[0] == [ids[1]]
        assert _both(client, meta=["tenant=7", "tier=gold"])[0] == [ids[6], ids[2], ids[0]]
        assert _both(client, meta="ok=true")[0] == [ids[3]]
        assert _both(client, meta="x=null")[0] == [ids[4]]
        assert _both(client, meta="tier=silver")[0] == []
        assert _both(client, meta="")[0] == ids[::-1]  # an empty field filters nothing
        # keyset pages of two, the filter kept in the next page's link and the form
        page = client.get("/jobs", params={"meta": ["tenant=7", "tier=gold"], "limit": "2"})
        assert _listed(page.text) == [ids[6], ids[2]]
        assert 'name="meta" value="tenant=7"' in page.text
        assert 'name="meta" value="tier=gold"' in page.text
        assert 'name="bulk' not in page.text and "all matching" not in page.text
        link = re.search(r'href="/jobs\?([^"]+)" id="next-page"', page.text).group(1)
        assert "meta=tenant%3D7&amp;meta=tier%3Dgold" in link
        rest = client.get("/jobs?" + link.replace("&amp;", "&"))
        assert _listed(rest.text) == [ids[0]]
        api = client.get("/api/jobs", params={"meta": ["tenant=7", "tier=gold"], "limit": "2"})
        after = api.json()["next_after"]
        assert after == ids[2]
        assert [j["id"] for j in client.get("/api/jobs", params={
            "meta": ["tenant=7", "tier=gold"], "limit": "2", "after": str(after)}).json()[
            "jobs"]] == [ids[0]]
        for bad in ("tier", "=gold"):
            answer = client.get("/api/jobs", params={"meta": bad})
            assert answer.status_code == 400
            assert answer.json() == {"error": f"meta takes KEY=VALUE, not {bad!r}"}
            shown = client.get("/jobs", params={"meta": bad})
            assert shown.status_code == 400 and shown.text == f"meta takes KEY=VALUE, not {bad!r}"
        # "all matching" takes the indexed filters on every store, not metadata
        assert client.get("/jobs/all/cancel", params={
            "status": "ready", "meta": "tenant=7"}).status_code == 400


def test_a_hostile_metadata_filter_is_text_in_the_form(any_store, store_url):
    with _client(store_url) as client:
        page = client.get("/jobs", params={"meta": 'k="><script>alert(1)</script>'})
    assert page.status_code == 200 and "<script>alert" not in page.text
    assert 'value="k=&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in page.text
