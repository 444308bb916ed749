"""The web dashboard's run-now, scheduled, job, pools, batches and queues pages (R47, R51)
through the pages and the JSON API as an operator would use them: what they show equals
what the store holds, each action is one ``web_action`` event, the store's refusals are
shown in its own words, and read-only refuses every action. Over SQLite; the tests
marked ``on_both_stores`` over PostgreSQL too (why: tests/test_web.py).
"""
from __future__ import annotations

import json
import logging
import random
import re
import time

import pytest

pytest.importorskip("starlette")

from jobpool.handles import Signature  # noqa: E402
from jobpool.lifecycle import CRASH, DONE, FATAL, Outcome, Policy  # noqa: E402
from jobpool.store.records import Heartbeat, ProgressReport  # noqa: E402

from tests.test_web import (_client, _csrf, _dead_jobs, _web_actions,  # noqa: E402, F401
                            on_both_stores, store_url)

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")

#: A backoff long enough that a retried job waits for the whole test.
HOUR = Policy(backoff_base=3600.0, backoff_max=3600.0)


def _claimed(claimer, n: int = 10) -> list[int]:
    return [job.job_id for job in claimer.turn([], n, time.time(), None)[1]]


def _retrying(store, name: str = "w.flaky") -> int:
    """A job out a retry's backoff: claimed once, crashed (killed by SIGKILL, two
    strays), due again in an hour."""
    job_id = store.enqueue_with(name, max_attempts=3).id
    claimer = store.claimer("pool-w", [name], ["default"], {name: HOUR})
    try:
        assert _claimed(claimer) == [job_id]
        claimer.turn([Outcome(job_id, 1, CRASH, "child killed by SIGKILL", pid=4321,
                              exit_status="SIGKILL", peak_rss=50 << 20, cpu_s=1.25, strays=2)],
                     0, time.time(), random.Random(1))
    finally:
        claimer.close()
    return job_id


def _ids(html: str, table: str) -> list[int]:
    if f'id="{table}"' not in html:
        return []
    part = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return [int(i) for i in re.findall(r'<tr class="job[^"]*" data-id="(\d+)"', part)]


# -- run now (R51) -----------------------------------------------------------------------------

def test_run_now_on_a_scheduled_jobs_page_makes_it_due_and_is_an_event(any_store, store_url,
                                                                      caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    job_id = any_store.enqueue_with("w.later", delay=3600).id
    with _client(store_url) as client:
        page = client.get(f"/jobs/{job_id}").text
        assert 'id="state">scheduled, due in 60m' in page
        assert f'action="/jobs/{job_id}/run-now"' in page
        answer = client.post(f"/jobs/{job_id}/run-now",
                             data={"csrf": _csrf(page), "next": f"/jobs/{job_id}"})
        assert answer.status_code == 303 and answer.headers["location"] == f"/jobs/{job_id}"
        after = client.get(f"/jobs/{job_id}").text
    assert f"job {job_id}: due now" in after and "/run-now" not in after
    assert any_store.get(job_id)["run_at"] <= time.time()
    assert [row["id"] for row in any_store.list_jobs(status="ready")] == [job_id]
    assert _web_actions(caplog) == [{"action": "run-now", "who": "loopback", "job_id": job_id,
                                     "result": "due now"}]


def test_run_now_refusals_are_the_stores_words(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    dead, = _dead_jobs(any_store, 1)
    due = any_store.enqueue_with("w.now").id
    with _client(store_url) as client:
        token = _csrf(client.get(f"/jobs/{dead}").text)  # its retry button's form
        for job_id, said in ((dead, "dead"), (due, "due already"), (999_999, "no such job")):
            client.post(f"/jobs/{job_id}/run-now", data={"csrf": token, "next": "/scheduled"})
            assert f"job {job_id}: {said}" in client.get("/scheduled").text
    assert any_store.get(dead)["status"] == "dead"
    assert [e["result"] for e in _web_actions(caplog)] == ["dead", "due already", "no such job"]


@on_both_stores
def test_the_api_runs_a_job_now_and_answers_409_with_the_refusal(any_store, store_url):
    later = any_store.enqueue_with("w.later", delay=3600).id
    dead, = _dead_jobs(any_store, 1)
    with _client(store_url, token="t0k") as client:
        bearer = {"authorization": "Bearer t0k"}
        assert client.post(f"/api/jobs/{later}/run-now", json={}).status_code == 401
        answer = client.post(f"/api/jobs/{later}/run-now", json={}, headers=bearer)
        assert answer.status_code == 200 and answer.json() == {"ok": True, "result": "due now"}
        refused = client.post(f"/api/jobs/{dead}/run-now", json={}, headers=bearer)
        assert refused.status_code == 409 and refused.json() == {"ok": False, "result": "dead"}
        assert client.post(f"/api/jobs/{dead}/run-now", data={"x": "1"},
                           headers=bearer).status_code == 415
    assert any_store.get(later)["run_at"] <= time.time()
    with _client(store_url, read_only=True) as client:
        assert client.post(f"/api/jobs/{later}/run-now", json={}).status_code == 403
        assert client.post(f"/jobs/{later}/run-now", data={"csrf": "x"}).status_code == 403


def test_run_all_matching_now_goes_through_the_confirmation_and_is_one_event(
        any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    waiting = [any_store.enqueue_with("w.later", delay=3600, queue="q1").id for _ in range(3)]
    other = any_store.enqueue_with("w.later", delay=3600, queue="q2").id
    with _client(store_url) as client:
        listed = client.get("/scheduled", params={"queue": "q1"}).text
        assert 'href="/jobs/all/run-now?status=scheduled&amp;queue=q1"' in listed
        confirm = client.get("/jobs/all/run-now", params={"status": "scheduled", "queue": "q1"})
        assert re.search(r'id="bulk-count"><strong>3</strong> jobs match', confirm.text)
        assert "<button class=\"danger\">run 3 jobs now</button>" in confirm.text
        later = any_store.enqueue_with("w.later", delay=3600, queue="q1").id  # not taken
        form = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">',
                               confirm.text.split('action="/jobs/all/run-now"')[1]))
        answer = client.post("/jobs/all/run-now", data=form)
        assert answer.status_code == 303
        assert "run-now all matching: 3 due now" in client.get(answer.headers["location"]).text
        # Run now takes waiting jobs only: a dead or ready filter is refused.
        assert client.get("/jobs/all/run-now", params={"status": "dead"}).status_code == 400
    now = time.time()
    assert all(any_store.get(i)["run_at"] <= now for i in waiting)
    assert all(any_store.get(i)["run_at"] > now for i in (other, later))
    assert _web_actions(caplog) == [{"action": "run-now", "who": "loopback",
                                     "filter": {"status": "scheduled", "queue": "q1"},
                                     "job_ids": waiting[::-1], "result": {"due now": 3}}]


# -- scheduled and retrying ----------------------------------------------------------------------

def test_the_scheduled_page_lists_waiting_jobs_with_run_now_per_row(any_store, store_url):
    later = any_store.enqueue_with("w.later", delay=600).id
    retrying = _retrying(any_store)
    any_store.enqueue_with("w.now")  # due: not waiting
    _dead_jobs(any_store, 1)
    with _client(store_url) as client:
        page = client.get("/scheduled").text
        assert _ids(page, "scheduled") == [retrying, later]
        rows = dict(re.findall(r'data-id="(\d+)">(.*?)</tr>', page, re.S))
        assert re.search(r"<td>retrying</td><td>in \d\dm</td>", rows[str(retrying)])  # jitter
        assert "child killed by SIGKILL" in rows[str(retrying)]
        assert "<td>scheduled</td><td>in 600s</td>" in rows[str(later)]
        assert page.count('/run-now" class="inline"') == 2
        client.post(f"/jobs/{retrying}/run-now", data={"csrf": _csrf(page), "next": "/scheduled"})
        after = client.get("/scheduled").text
        assert f"job {retrying}: due now" in after and _ids(after, "scheduled") == [later]
        assert _ids(client.get("/scheduled", params={"name": "w.flaky"}).text, "scheduled") == []
        assert client.get("/scheduled", params={"limit": "0"}).status_code == 400
    # The retry keeps its attempts and error: it is its second attempt when claimed.
    row = any_store.get(retrying)
    assert (row["attempts"], row["last_error"]) == (1, "child killed by SIGKILL")
    with _client(store_url, read_only=True) as client:
        page = client.get("/scheduled").text
        assert "<form method=\"post\"" not in page and 'id="bulk-run-now"' not in page


def test_the_scheduled_page_pages_by_keyset(any_store, store_url):
    ids = [any_store.enqueue_with("w.later", delay=3600).id for _ in range(3)]
    with _client(store_url) as client:
        first = client.get("/scheduled", params={"limit": "2"}).text
        assert _ids(first, "scheduled") == [ids[2], ids[1]]
        link = re.search(r'<a href="([^"]+)" id="next-page"', first).group(1).replace("&amp;", "&")
        assert link == f"/scheduled?after={ids[1]}&limit=2"
        assert _ids(client.get(link).text, "scheduled") == [ids[0]]


# -- a job's page ---------------------------------------------------------------------------------

@on_both_stores
def test_a_jobs_page_shows_its_attempts_with_exit_signal_rss_cpu_and_strays(any_store, store_url):
    job_id = _retrying(any_store)
    with _client(store_url) as client:
        page = client.get(f"/jobs/{job_id}").text
    assert re.search(r'id="state">retrying, due in \d\dm</p>', page)  # an hour, with jitter
    attempts = page.split('id="attempts"', 1)[1].split("</table>", 1)[0]
    assert re.search(r"<tr><td>1</td><td>crash</td><td>4321</td><td></td><td>SIGKILL</td>\s*"
                     r"<td>[\d.]+</td>\s*<td>1.250</td>\s*<td>50.0</td>\s*<td>2</td>", attempts), \
        attempts
    assert "<summary>child killed by SIGKILL</summary>" in attempts


def test_a_jobs_page_shows_attempt_lines_whatever_their_columns_hold(store_url):
    """R44: an attempt line is data, written by hand or by an older release. One whose
    times, size, CPU or exit status hold text, a blob or a number where another type
    belongs made the job's page a server error; its cells show nothing instead, the
    rest of the page as ever."""
    import sqlite3
    import jobpool
    store = jobpool.connect(store_url)
    job_id = store.enqueue("t.a").id
    store.close()
    conn = sqlite3.connect(store_url)
    with conn:
        conn.execute("INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, "
                     "outcome, error, exit_status, peak_rss, cpu_s, strays) VALUES "
                     "(?, 1, 'x', 'pid', 'yesterday', X'00ff', 'crash', 42, 137, 'big', 'slow', 'x')",
                     (job_id,))
        conn.execute("INSERT INTO attempts (job_id, attempt, owner, started_at, ended_at, outcome) "
                     "VALUES (?, 2, 'x', 1.0, 3.5, 'done')", (job_id,))
    conn.close()
    with _client(store_url) as client:
        answer = client.get(f"/jobs/{job_id}")
    assert answer.status_code == 200, answer.text[-2000:]
    attempts = answer.text.split('id="attempts"', 1)[1].split("</table>", 1)[0]
    assert "<td>crash</td>" in attempts and "<summary>42</summary>" in attempts
    assert "<td>2.500</td>" in attempts  # a good line beside it as ever


def test_a_running_jobs_page_shows_its_progress_and_stage(any_store, store_url):
    job_id = any_store.enqueue_with("w.long").id
    claimer = any_store.claimer("pool-p", ["w.long"], ["default"], {})
    try:
        assert _claimed(claimer) == [job_id]
        any_store.set_progress("pool-p", [ProgressReport(job_id, 1, 42.0, "copying <files>")])
        with _client(store_url) as client:
            page = client.get(f"/jobs/{job_id}").text
    finally:
        claimer.close()
    assert 'id="state">running, started' in page
    assert '<progress max="100" value="42.0">' in page and "42%" in page
    assert '<span class="stage">copying &lt;files&gt;</span>' in page


def test_a_jobs_page_shows_its_chain_in_order(any_store, store_url):
    first = any_store.enqueue_with("w.step", then=[Signature("w.step2"), Signature("w.step3")]).id
    claimer = any_store.claimer("pool-c", ["w.step", "w.step2"], ["default"], {})
    try:
        assert _claimed(claimer) == [first]
        claimer.turn([Outcome(first, 1, DONE, result="null", exit_status="0")], 1, time.time(),
                     None)
    finally:
        claimer.close()
    chain = [row["id"] for row in any_store.list_jobs(chain=first)]
    assert len(chain) == 2 and chain[0] == first
    with _client(store_url) as client:
        for job_id in chain:
            page = client.get(f"/jobs/{job_id}").text
            assert _ids(page, "chain") == chain
            assert '<tr class="job this" data-id="%d">' % job_id in page
        first_page, second_page = (client.get(f"/jobs/{i}").text for i in chain)
        # The walk: each step links the one before and the one after it.
        assert 'id="previous-step"' not in first_page and "the chain's first step" in first_page
        assert f'<a id="next-step" href="/jobs/{chain[1]}">' in first_page
        assert f'<a id="previous-step" href="/jobs/{first}">' in second_page
        assert 'id="next-step"' not in second_page
        listed = client.get("/jobs", params={"chain": first}).text
        assert _ids(listed, "jobs") == chain  # the chain in the order its steps run
        assert client.get("/jobs", params={"chain": "x"}).status_code == 400
        alone = any_store.enqueue_with("w.alone").id
        assert 'id="chain"' not in client.get(f"/jobs/{alone}").text


def test_a_step_past_the_shown_part_of_a_long_chain_walks_by_keyset(any_store, store_url):
    from jobpool.web import pages
    length = pages.CHAIN_SHOWN + 3
    root = any_store.enqueue_with(
        "w.step", then=[Signature("w.step")] * (length - 1) + [Signature("w.last")]).id
    claimer = any_store.claimer("pool-c", ["w.step"], ["default"], {})
    try:
        for _ in range(length - 1):  # each step done enqueues the next (R12)
            job_id, = _claimed(claimer, 1)
            claimer.turn([Outcome(job_id, 1, DONE, result="null", exit_status="0")], 0,
                         time.time(), None)
    finally:
        claimer.close()
    steps = [row["id"] for row in any_store.list_jobs(chain=root, limit=length + 1)]
    assert len(steps) == length
    with _client(store_url) as client:
        page = client.get(f"/jobs/{steps[-2]}").text
        assert 'href="/jobs?chain=%d">the whole chain' % root in page
        assert f'<a id="previous-step" href="/jobs/{steps[-3]}">' in page
        assert f'<a id="next-step" href="/jobs/{steps[-1]}">' in page
        # The step not enqueued yet is the newest step's, read past the shown 50.
        assert _waiting(client.get(f"/jobs/{root}").text) == ["w.last"]


def _waiting(html: str) -> list[str]:
    """The names in a job page's table of chain steps not enqueued yet."""
    if 'id="waiting-steps"' not in html:
        return []
    part = html.split('id="waiting-steps"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr class="waiting"><td>\d+</td><td>([^<]*)</td>', part)


@on_both_stores
def test_a_jobs_page_shows_the_chains_steps_not_enqueued_yet(any_store, store_url):
    """R12: a chain's steps wait in its newest step's row until each one's predecessor
    completes; every step's page lists them, in order, with their queue, never their
    arguments, and says what they wait for (a dead step: a retry)."""
    first = any_store.enqueue_with("w.step", then=[
        Signature("w.step2", ("secret-arg",)), Signature("w.step3").with_meta({"k": 1}),
        Signature("w.step4")]).id
    with _client(store_url) as client:
        page = client.get(f"/jobs/{first}").text
        assert _ids(page, "chain") == [first]  # the chain is shown before a step is enqueued
        assert _waiting(page) == ["w.step2", "w.step3", "w.step4"]
        assert "secret-arg" not in page
        assert f"next: when job {first} does" in page
        claimer = any_store.claimer("pool-c", ["w.step", "w.step2"], ["default"], {})
        try:
            assert _claimed(claimer) == [first]
            claimer.turn([Outcome(first, 1, DONE, result="null", exit_status="0")], 1,
                         time.time(), None)
            second, = [j["id"] for j in any_store.list_jobs(chain=first)][1:]
            for job_id in (first, second):
                page = client.get(f"/jobs/{job_id}").text
                assert _ids(page, "chain") == [first, second]
                assert _waiting(page) == ["w.step3", "w.step4"]
            claimer.turn([Outcome(second, 1, FATAL, "ValueError: no", exit_status="1")], 0,
                         time.time(), None)
        finally:
            claimer.close()
        assert any_store.get(second)["status"] == "dead"
        page = client.get(f"/jobs/{first}").text
        assert _waiting(page) == ["w.step3", "w.step4"]
        assert f"Step {second} is dead: these are enqueued only if it is retried" in page
        alone = any_store.enqueue_with("w.alone").id
        assert 'id="waiting-steps"' not in client.get(f"/jobs/{alone}").text


def test_a_jobs_page_shows_its_batch(any_store, store_url):
    with any_store.batch() as batch:
        members = [batch.add(Signature("w.member", (n,))).id for n in range(3)]
    any_store.cancel(members[0])
    with _client(store_url) as client:
        page = client.get(f"/jobs/{members[1]}").text
    assert (f'<p id="batch"><a href="/batches/{batch.id}">batch {batch.id}</a>: 3 jobs, '
            "2 pending, 0 done, 1 dead;") in page
    assert "closed</p>" in page
    with any_store.batch() as single:
        only = single.add(Signature("w.member", (9,))).id
    with _client(store_url) as client:
        assert f"batch {single.id}</a>: 1 job, 1 pending" in client.get(f"/jobs/{only}").text


def test_a_jobs_page_and_the_api_show_its_metadata(any_store, store_url):
    """R54: the job page shows the metadata as JSON text (escaped as any text is,
    R46); the API answers it as an object."""
    job_id = any_store.enqueue_with("w.member", meta={"tenant": "<b>7</b>"}).id
    with _client(store_url) as client:
        page = client.get(f"/jobs/{job_id}").text
        answer = client.get(f"/api/jobs/{job_id}").json()
    assert "<tr><th>meta</th><td>{&#34;tenant&#34;: &#34;&lt;b&gt;7&lt;/b&gt;&#34;}</td></tr>" in page
    assert answer["meta"] == {"tenant": "<b>7</b>"}


# -- pools -----------------------------------------------------------------------------------------

def _beat(store, owner: str, procs: int = 2, slots: str = "[]"):
    """A heartbeat of a pool on another host, alive by it: what that pool would take."""
    return store.heartbeat(Heartbeat(owner=owner, host=owner.partition(":")[0], pid=1,
                                     procs=procs, queues=("default", "q1"), names=("w.a",),
                                     core="test", counters_json='{"completed": 7, "busy": 0}',
                                     slots_json=slots), [], time.time())


def test_the_pools_page_scales_and_stops_a_pool_and_each_is_an_event(any_store, store_url,
                                                                     caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    owner, other = "web-1:4242:1", "web-2:99:1"
    busy = any_store.enqueue_with("w.a").id
    claimer = any_store.claimer(owner, ["w.a"], ["default"], {})
    try:
        assert _claimed(claimer) == [busy]
        any_store.set_progress(owner, [ProgressReport(busy, 1, 25.0, "reading")])
    finally:
        claimer.close()
    _beat(any_store, owner, slots=json.dumps([{"slot": 0, "pid": 777, "job_id": busy,
                                               "attempt": 1, "rss": 30 << 20}]))
    _beat(any_store, other)
    with _client(store_url) as client:
        page = client.get("/pools").text
        slots = page.split('id="slots"', 1)[1].split("</table>", 1)[0]
        assert f'data-id="{busy}"><td>{owner}</td><td>0</td><td>777</td>' in slots
        assert '<progress max="100" value="25.0">' in slots
        assert "<td>reading</td><td>30.0</td>" in slots
        running = client.get("/").text.split('id="running"', 1)[1].split("</table>", 1)[0]
        assert f'<a href="/jobs/{busy}">{busy}</a></td><td>w.a</td><td class="meta"></td><td>1</td>' in running
        assert "<td>reading</td><td>30.0</td>" in running
        row = page.split(f'data-owner="{owner}"', 1)[1].split("</tr>", 1)[0]
        assert "<td>web-1</td>" in row and "<td>running</td>" in row and "<td>7</td>" in row
        assert "default, q1" in row
        token = _csrf(page)
        answer = client.post(f"/pools/{owner}/scale", data={"csrf": token, "procs": "5",
                                                            "next": "/pools"})
        assert answer.status_code == 303 and answer.headers["location"] == "/pools"
        assert f"pool {owner}: asked to run 5 processes" in client.get("/pools").text
        client.post(f"/pools/{other}/stop", data={"csrf": token, "next": "/pools"})
        assert f"pool {other}: asked to stop" in client.get("/pools").text
        assert client.post(f"/pools/{owner}/scale", data={"csrf": token, "procs": "x"}
                           ).status_code == 400
        client.post("/pools/nobody:1:1/stop", data={"csrf": token, "next": "/pools"})
        assert "pool nobody:1:1: no such running pool" in client.get("/pools").text
        assert client.post(f"/pools/{owner}/stop", data={}).status_code == 403  # no CSRF token
    # The pools take the requests at their next heartbeat.
    assert (_beat(any_store, owner).procs, _beat(any_store, other).stop) == (5, True)
    assert _beat(any_store, owner).stop is False
    assert _web_actions(caplog) == [
        {"action": "scale", "who": "loopback", "pool": owner, "procs": 5,
         "result": "asked to run 5 processes"},
        {"action": "stop", "who": "loopback", "pool": other, "result": "asked to stop"},
        {"action": "stop", "who": "loopback", "pool": "nobody:1:1",
         "result": "no such running pool"}]


@on_both_stores
def test_the_api_lists_scales_and_stops_pools(any_store, store_url):
    owner = "web-1:4242:1"
    _beat(any_store, owner)
    bearer = {"authorization": "Bearer t0k"}
    with _client(store_url, token="t0k") as client:
        assert client.get("/api/pools").status_code == 401
        listed = client.get("/api/pools", headers=bearer).json()
        assert [p["owner"] for p in listed] == [owner] and listed[0]["procs"] == 2
        one = client.post(f"/api/pools/{owner}/scale", json={"procs": 1}, headers=bearer)
        assert one.json()["result"] == "asked to run 1 process"
        answer = client.post(f"/api/pools/{owner}/scale", json={"procs": 3}, headers=bearer)
        assert answer.status_code == 200 and answer.json()["result"] == "asked to run 3 processes"
        assert client.post(f"/api/pools/{owner}/scale", json={"procs": "many"},
                           headers=bearer).status_code == 400
        assert client.post(f"/api/pools/{owner}/scale", json={"procs": 0},
                           headers=bearer).status_code == 409  # the store's refusal
        assert client.post(f"/api/pools/{owner}/stop", json={}, headers=bearer).status_code == 200
        assert client.post("/api/pools/nobody/stop", json={}, headers=bearer).status_code == 409
    beat = _beat(any_store, owner)
    assert (beat.procs, beat.stop) == (3, True)


def test_pools_are_refused_read_only_and_show_no_form(any_store, store_url):
    owner = "web-1:4242:1"
    _beat(any_store, owner)
    with _client(store_url, read_only=True) as client:
        page = client.get("/pools").text
        assert owner in page and 'method="post"' not in page
        assert client.post(f"/pools/{owner}/stop", data={"csrf": "x"}).status_code == 403
        assert client.post(f"/api/pools/{owner}/scale", json={"procs": 3}).status_code == 403
        assert client.post(f"/api/pools/{owner}/stop", json={}).status_code == 403
    beat = _beat(any_store, owner)
    assert (beat.procs, beat.stop) == (None, False)


# -- batches ---------------------------------------------------------------------------------------

def test_the_batches_page_lists_them_and_cancels_one_as_an_event(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    with any_store.batch(on_complete=Signature("w.report")) as first:
        members = [first.add(Signature("w.member", (n,))).id for n in range(2)]
    second = any_store.batch()  # open: nothing added, not closed
    with _client(store_url) as client:
        page = client.get("/batches").text
        assert [int(i) for i in re.findall(r'<tr class="batch" data-id="(\d+)"', page)] == [
            second.id, first.id]
        row = page.split(f'data-id="{first.id}"', 1)[1].split("</tr>", 1)[0]
        assert "<td>2</td><td>2</td><td>0</td><td>0</td>" in row and "closed, running" in row
        assert "w.report" in row
        open_part = client.get("/").text.split('id="open-batches"', 1)[1].split("</table>", 1)[0]
        assert f'<a href="/batches/{first.id}">{first.id}</a></td><td>0/2</td>' in open_part
        detail = client.get(f"/batches/{first.id}").text
        assert '<tr><th>ready</th><td>2</td></tr>' in detail
        answer = client.post(f"/batches/{first.id}/cancel",
                             data={"csrf": _csrf(detail), "next": f"/batches/{first.id}"})
        assert answer.status_code == 303
        after = client.get(f"/batches/{first.id}").text
        assert f"batch {first.id}: cancelled" in after and 'id="batch-state">cancelled' in after
        assert f'action="/batches/{first.id}/cancel"' not in after
        client.post(f"/batches/{first.id}/cancel", data={"csrf": _csrf(page), "next": "/batches"})
        assert f"batch {first.id}: cancelled already" in client.get("/batches").text
        assert client.get("/batches/999999").status_code == 404
        assert client.get("/batches", params={"limit": "0"}).status_code == 400
    assert [any_store.get(i)["status"] for i in members] == ["dead", "dead"]
    assert [(e["batch_id"], e["result"]) for e in _web_actions(caplog)] == [
        (first.id, "cancelled"), (first.id, "cancelled already")]


@on_both_stores
def test_the_api_shows_and_cancels_batches(any_store, store_url):
    with any_store.batch() as made:
        member = made.add(Signature("w.member", (1,))).id
    with _client(store_url) as client:
        listed = client.get("/api/batches").json()
        assert [b["id"] for b in listed] == [made.id] and listed[0]["pending"] == 1
        shown = client.get(f"/api/batches/{made.id}").json()
        assert (shown["total"], shown["members"]) == (1, {"ready": 1})
        assert client.get("/api/batches/999999").status_code == 404
        answer = client.post(f"/api/batches/{made.id}/cancel", json={})
        assert answer.json() == {"ok": True, "result": "cancelled"}
        assert client.post(f"/api/batches/{made.id}/cancel", json={}).status_code == 409
        assert client.get("/api/batches", params={"open": "1"}).json() == []
    assert any_store.get(member)["status"] == "dead"
    with _client(store_url, read_only=True) as client:
        assert client.post(f"/api/batches/{made.id}/cancel", json={}).status_code == 403


# -- queues ----------------------------------------------------------------------------------------

@on_both_stores
def test_the_queues_page_shows_counts_pauses_and_limits(any_store, store_url):
    any_store.enqueue_with("w.a", queue="q1")
    any_store.enqueue_with("w.a", queue="q1", delay=3600)
    any_store.limits.set_queue("q2", 3)  # a limit, no jobs
    any_store.pause("q3")                # paused, no jobs
    with _client(store_url) as client:
        page = client.get("/queues").text
        rows = dict(re.findall(r'data-queue="([^"]+)">(.*?)</tr>', page, re.S))
        assert sorted(rows) == ["q1", "q2", "q3"]
        assert "<td>1</td><td>1</td><td>0</td><td>0</td>" in rows["q1"]
        assert "3 (0 running; set by cli)" in rows["q2"] and "no limit" in rows["q1"]
        assert "<td>paused</td>" in rows["q3"] and 'action="/queues/resume"' in rows["q3"]
        client.post("/queues/q1/pause", data={"csrf": _csrf(page), "next": "/queues"})
        assert "queue q1: paused" in client.get("/queues").text
        api = client.get("/api/queues").json()
    assert any_store.paused_queues() == ["q1", "q3"]
    by_queue = {q["queue"]: q for q in api["queues"]}
    assert by_queue["q1"]["counts"]["scheduled"] == 1 and by_queue["q2"]["limit"]["max_running"] == 3
    assert by_queue["q3"]["counts"]["ready"] == 0 and api["name_limits"] == [] and api["groups"] == []


@on_both_stores
def test_the_overview_counts_each_queue_to_a_bound_and_says_so(any_store, store_url):
    """R47: a frame counts a queue's ready rows, the dead rows and the done rows to
    ``COUNT_MOST`` and one more (``Store.dashboard``), and the overview, the queues
    page and ``/api/queues`` show a count past it as at least the bound ("10 000+");
    ``store.stats()`` (``/api/stats``) still counts exactly."""
    from jobpool.store.records import COUNT_MOST
    over = COUNT_MOST + 5
    any_store.enqueue_many("w.big", [(n,) for n in range(over)], queue="big")
    any_store.enqueue_many("w.small", [(1,), (2,)], queue="small")
    any_store.enqueue_with("w.small", queue="small", delay=3600)
    any_store.enqueue_many("w.end", [(n,) for n in range(2 * over)], queue="end")
    claimer = any_store.claimer("pool-b", ["w.end"], ["end"], {})
    try:
        for kind in (DONE, FATAL):
            left = over
            while left:
                ids = _claimed(claimer, min(left, 1000))
                claimer.turn([Outcome(i, 1, kind, None if kind == DONE else "ValueError: x",
                                      result="null" if kind == DONE else None, exit_status="0")
                              for i in ids], 0, time.time(), None)
                left -= len(ids)
    finally:
        claimer.close()
    rows = any_store.dashboard(time.time())
    counts = {(q, status): (n, later) for q, status, n, later in rows.queue_counts}
    assert counts[("big", "ready")] == (COUNT_MOST + 1, 0)
    assert counts[("small", "ready")] == (3, 1)
    assert counts[("end", "dead")] == (COUNT_MOST + 1, 0) and rows.done == COUNT_MOST + 1
    stats = any_store.stats()
    assert (stats["ready"], stats["scheduled"], stats["done"], stats["dead"]) == (
        over + 2, 1, over, over)
    with _client(store_url) as client:
        page = client.get("/").text
        totals = dict(re.findall(r'id="total-(\w+)"><a [^>]*>([^<]*)</a>', page))
        assert totals == {"ready": "10 002+", "scheduled": "1+", "running": "0",
                          "done": "10 000+", "dead": "10 000+"}
        for html in (page, client.get("/queues").text):
            big = html.split('<a href="/jobs?queue=big">big</a>', 1)[1].split("</tr>", 1)[0]
            assert re.findall(r"<td[^>]*>([^<]*)</td>", big)[:4] == [
                "10 000+", "0+", "0", "0+"]
            small = html.split('<a href="/jobs?queue=small">small</a>', 1)[1].split("</tr>")[0]
            assert re.findall(r"<td[^>]*>([^<]*)</td>", small)[:4] == ["2", "1", "0", "0+"]
        queues = {q["queue"]: q["counts"] for q in client.get("/api/queues").json()["queues"]}
        assert queues["big"]["ready"] == COUNT_MOST and queues["big"]["capped"] == [
            "dead", "ready", "scheduled"]
        assert queues["small"]["capped"] == ["dead"] and queues["small"]["scheduled"] == 1
        assert client.get("/api/stats").json()["ready"] == over + 2


# -- the live overview ----------------------------------------------------------------------------

class _Counted:
    """A store whose dashboard reads are counted."""

    def __init__(self, store) -> None:
        self.store = store
        self.dashboard_reads = 0

    def dashboard(self, *args, **kwargs):
        self.dashboard_reads += 1
        return self.store.dashboard(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_every_viewer_shares_one_snapshot_read_at_most_once_a_window(any_store, store_url):
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    counted = _Counted(any_store)
    app = create_app(store_url, store=counted)
    clock = [1000.0]
    app.state.live.clock = lambda: clock[0]
    any_store.enqueue_with("w.a")
    viewers = [TestClient(app, follow_redirects=False) for _ in range(3)]
    for client in viewers:
        assert client.get("/").status_code == 200
        for _ in range(3):
            part = client.get("/live")
            assert part.status_code == 200 and '<td id="total-ready"><a href="/jobs?status=ready">1' \
                in part.text
    assert counted.dashboard_reads == 1  # twelve pages, one read
    any_store.enqueue_with("w.a")
    clock[0] += 1.0
    assert '/jobs?status=ready">1<' in viewers[0].get("/live").text  # still the shared one
    clock[0] += 0.6
    assert '/jobs?status=ready">2<' in viewers[1].get("/live").text  # past the window: anew
    assert counted.dashboard_reads == 2
    # An action reads anew at once, so whoever acted sees it.
    page = viewers[2].get("/").text
    viewers[2].post("/queues/q1/pause", data={"csrf": _csrf(page), "next": "/"})
    assert counted.dashboard_reads == 2
    assert '<li>q1</li>' in viewers[2].get("/").text and counted.dashboard_reads == 3


def test_the_live_part_needs_a_login_and_keeps_the_notice_for_its_page(any_store, store_url):
    with _client(store_url, token="s3cret") as client:
        assert client.get("/live").status_code == 401
        client.post("/login", data={"csrf": _csrf(client.get("/login").text), "token": "s3cret"})
        page = client.get("/").text
        assert 'hx-get="/live" hx-trigger="every 2s"' in page
        client.post("/queues/q1/pause", data={"csrf": _csrf(page), "next": "/"})
        assert "queue q1: paused" not in client.get("/live").text  # a poll took no notice
        assert "queue q1: paused" in client.get("/").text


def test_pool_names_stages_and_queues_from_rows_render_as_text(any_store, store_url):
    from tests.test_web import HOSTILE, HOSTILE_NAME
    owner = f"{HOSTILE_NAME}:4242:1"
    job_id = any_store.enqueue_with("w.a", queue=HOSTILE_NAME, delay=60).id
    any_store.run_now([job_id])
    claimer = any_store.claimer(owner, ["w.a"], [HOSTILE_NAME], {})
    try:
        assert _claimed(claimer) == [job_id]
        any_store.set_progress(owner, [ProgressReport(job_id, 1, 5.0, HOSTILE)])
    finally:
        claimer.close()
    _beat(any_store, owner, slots=json.dumps([{"slot": 0, "pid": 1, "job_id": job_id,
                                               "attempt": 1}]))
    any_store.limits.set_queue(HOSTILE_NAME, 2)
    any_store.enqueue_with("w.b", queue=HOSTILE_NAME, delay=600)
    with _client(store_url) as client:
        pages = [client.get(path).text for path in ("/", "/live", "/pools", "/queues",
                                                    "/scheduled", f"/jobs/{job_id}")]
    for html in pages:
        assert "<script>alert" not in html and "\x1b" not in html and "\x07" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;[bold]x[/bold]" in pages[2]  # the owner
    assert "&lt;script&gt;alert(1)&lt;/script&gt; [bold]x[/bold] \\x1b]0;title\\x07" in pages[2]


def test_a_batch_cancel_needs_the_csrf_token_and_write_access(any_store, store_url):
    with any_store.batch() as made:
        member = made.add(Signature("w.member", (1,))).id
    with _client(store_url) as client:
        client.get("/batches")
        assert client.post(f"/batches/{made.id}/cancel", data={}).status_code == 403
    with _client(store_url, read_only=True) as client:
        page = client.get(f"/batches/{made.id}").text
        assert 'method="post"' not in page
        assert client.post(f"/batches/{made.id}/cancel", data={"csrf": "x"}).status_code == 403
    assert any_store.get(member)["status"] == "ready"
    assert not any_store.batch_status(made.id).cancelled


# -- enqueue by name -------------------------------------------------------------------------------

def test_the_enqueue_form_queues_a_job_by_name_and_is_an_event(any_store, store_url, caplog):
    caplog.set_level(logging.INFO, logger="jobpool.events")
    with _client(store_url) as client:
        form = client.get("/enqueue", params={"name": "w.unregistered"}).text
        assert 'name="name" value="w.unregistered"' in form
        answer = client.post("/enqueue", data={
            "csrf": _csrf(form), "name": "w.unregistered", "args": '[1, "secret-arg"]',
            "kwargs": '{"to": "x@example.org"}', "queue": "q5", "delay": "60"})
        assert answer.status_code == 303
        job_id = int(answer.headers["location"].rsplit("/", 1)[1])
        page = client.get(answer.headers["location"]).text
        assert f"queued job {job_id}" in page and 'id="state">scheduled, due in 60s' in page
        bad = client.post("/enqueue", data={"csrf": _csrf(form), "name": "w.x", "args": "[1,",
                                            "kwargs": "", "queue": "", "delay": ""})
        assert bad.status_code == 400 and "args is not JSON" in bad.text
        assert 'value="[1,"' in bad.text  # the form again, as typed
        refused = client.post("/enqueue", data={"csrf": _csrf(form), "name": "two words",
                                                "args": "[]", "kwargs": "{}", "queue": "",
                                                "delay": ""})
        assert refused.status_code == 409 and 'id="problem"' in refused.text
        assert client.post("/enqueue", data={"name": "w.x"}).status_code == 403  # no CSRF token
    row = any_store.get(job_id)
    assert (row["name"], row["queue"]) == ("w.unregistered", "q5")
    assert '"secret-arg"' in row["payload"] and "x@example.org" in row["payload"]
    assert [row["id"] for row in any_store.list_jobs()] == [job_id]
    logged = _web_actions(caplog)
    assert logged[0] == {"action": "enqueue", "who": "loopback", "name": "w.unregistered",
                         "job_id": job_id, "result": f"queued job {job_id}"}
    assert "secret-arg" not in repr(logged)


def test_the_api_enqueues_by_name(any_store, store_url):
    bearer = {"authorization": "Bearer t0k"}
    with _client(store_url, token="t0k") as client:
        body = {"name": "w.api", "args": [2], "kwargs": {"y": 3}, "key": "k1", "queue": "q2"}
        assert client.post("/api/jobs", json=body).status_code == 401
        made = client.post("/api/jobs", json=body, headers=bearer)
        assert made.status_code == 201
        job_id = made.json()["id"]
        assert made.json() == {"ok": True, "result": f"queued job {job_id}", "id": job_id,
                               "duplicate": False}
        again = client.post("/api/jobs", json=body, headers=bearer).json()
        assert (again["id"], again["duplicate"]) == (job_id, True)
        for wrong, said in (([], "send {"), ({"args": []}, "name must be"),
                            ({"name": "w.api", "args": {}}, "args must be a JSON list"),
                            ({"name": "w.api", "delay": "soon"}, "delay must be a number"),
                            ({"name": "w.api", "retries": 3}, "unknown field(s): retries")):
            answer = client.post("/api/jobs", json=wrong, headers=bearer)
            assert answer.status_code == 400 and said in answer.json()["error"], wrong
        refused = client.post("/api/jobs", json={"name": "two words"}, headers=bearer)
        assert refused.status_code == 409 and refused.json()["ok"] is False
        shown = client.get(f"/api/jobs/{job_id}", headers=bearer).json()
    assert (shown["name"], shown["queue"], shown["key"]) == ("w.api", "q2", "k1")
    with _client(store_url, read_only=True) as client:
        assert client.post("/api/jobs", json={"name": "w.api"}).status_code == 403
        assert client.get("/enqueue").status_code == 403
        assert client.post("/enqueue", data={"csrf": "x", "name": "w.api"}).status_code == 403
    assert len(any_store.list_jobs()) == 1


# -- the API's document ----------------------------------------------------------------------------

def test_the_openapi_document_names_every_api_route_and_method(any_store, store_url):
    from jobpool.web import api
    with _client(store_url, token="t0k") as client:
        assert client.get("/api/openapi.json").status_code == 401
        doc = client.get("/api/openapi.json", headers={"authorization": "Bearer t0k"}).json()
    assert doc["openapi"].startswith("3.") and doc["components"]["securitySchemes"]["bearer"]
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    routed = {(method, re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path))
              for route in api.routes() for method in route.methods - {"HEAD"}}
    assert documented == routed
    assert {p["name"] for p in doc["paths"]["/api/jobs"]["get"]["parameters"]} == {
        "status", "name", "queue", "chain", "limit", "after", "key", "batch", "group", "error",
        "args", "created_from", "created_to", "finished_from", "finished_to", "meta", "scan"}
    assert doc["paths"]["/api/jobs/{job_id}/run-now"]["post"]["parameters"][0]["schema"] == {
        "type": "integer"}
