"""The pools' per-minute rollups and the charts drawn from them (R56, issue 27): a real
pool's counts of done, retried and dead jobs, its pickup latency and run time, land in
the store's rollups in its heartbeats (and its last one as it stops), and the charts
page and ``GET /api/rollups`` show them. Over SQLite; the tests marked
``on_both_stores`` over PostgreSQL too.
"""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("starlette")

from jobpool import rollups  # noqa: E402
from jobpool.store.records import Heartbeat  # noqa: E402
from jobpool.supervisor.rollups import Rollups  # noqa: E402

from tests.test_web import _client, on_both_stores, store_url  # noqa: E402, F401

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")

APP = """
    import time
    from jobpool import Fatal, job

    @job(name="c.ok")
    def ok(n):
        time.sleep(0.02)

    @job(name="c.flaky", max_attempts=2, backoff_base=0)
    def flaky(n):
        raise ValueError("not yet")

    @job(name="c.fatal")
    def fatal(n):
        raise Fatal("never")
"""


def _window_totals(store) -> dict[str, dict]:
    """Each name's rollups added up over every minute the store holds."""
    found: dict[str, list] = {}
    for row in store.rollups(0.0):
        found.setdefault(row["name"], []).append(row)
    return {name: rollups.merged(rows) for name, rows in found.items()}


@on_both_stores
def test_a_pools_rollups_count_what_it_ran_and_the_charts_show_them(make_any_app, store_url):
    app = make_any_app(APP)
    store = app.store()
    for n in range(4):
        store.enqueue_with("c.ok", args=(n,))
    for n in range(2):
        store.enqueue_with("c.flaky", args=(n,))
    store.enqueue_with("c.fatal", args=(0,))
    app.start("--procs", "2")
    totals = _window_totals(store)
    # Each attempt is counted once: c.flaky ran twice per job (a retry, then dead).
    assert {n: (t["done"], t["retried"], t["dead"], t["wait_n"], t["run_n"])
            for n, t in totals.items()} == {
        "c.ok": (4, 0, 0, 4, 4), "c.flaky": (0, 2, 2, 4, 4), "c.fatal": (0, 0, 1, 1, 1)}
    ok = totals["c.ok"]
    assert ok["run_max"] >= 0.02 and ok["run_sum"] >= 4 * 0.02
    assert sum(ok[f"r{i}"] for i in range(rollups.BUCKETS)) == 4
    assert sum(ok[f"w{i}"] for i in range(rollups.BUCKETS)) == 4
    with _client(store_url) as client:
        page = client.get("/charts", params={"hours": "1"})
        assert page.status_code == 200
        assert re.search(r'<span id="totals">4 done, 2 retried, 3 dead</span>', page.text)
        rows = dict(re.findall(r'<tr class="rollup" data-name="([^"]+)">.*?<td class="done">'
                               r'(\d+)</td>', page.text))
        assert rows == {"c.ok": "4", "c.flaky": "0", "c.fatal": "0"}
        drawn = re.findall(r'<rect class="(done|retried|dead)"[^>]*data-count="(\d+)"', page.text)
        assert {part: sum(int(c) for p, c in drawn if p == part)
                for part in ("done", "retried", "dead")} == {"done": 4, "retried": 2, "dead": 3}
        assert page.text.count('<polyline class="p95"') == 2
        api = client.get("/api/rollups", params={"hours": "1", "name": "c.flaky"}).json()
    assert len(api["minutes"]) == 60 and api["name"] == "c.flaky"
    assert sum(m["retried"] for m in api["minutes"]) == 2
    assert sum(m["done"] for m in api["minutes"]) == 0  # the other names left out
    assert api["names"]["c.ok"]["done"] == 4 and api["names"]["c.ok"]["run_time"]["count"] == 4
    assert api["names"]["c.fatal"]["latency"]["count"] == 1


def _beat(owner: str, counted: Rollups) -> Heartbeat:
    return Heartbeat(owner=owner, host="h", pid=1, procs=1, queues=("default",),
                     names=("c.ok",), core="pure", counters_json="{}", slots_json="[]",
                     rollups=counted.rows())


@on_both_stores
def test_beats_of_several_pools_add_into_one_row_a_minute_and_name(any_store, store_url):
    first, second = Rollups(), Rollups()
    first.claimed("c.ok", 0.5)
    first.settled("c.ok", "done", 2.0)
    second.claimed("c.ok", 7.0)
    second.settled("c.ok", "retried", 0.1)
    second.settled("c.ok", "deferred", None)  # not a failure: counts nothing
    any_store.heartbeat(_beat("pool-a", first), (), 1_000_000_020.0)
    any_store.heartbeat(_beat("pool-b", second), (), 1_000_000_030.0)
    found = any_store.rollups(0.0)
    if not store_url.startswith("postgresql"):
        assert len(found) == 1  # one minute, one name (PostgreSQL's minute is the server's)
    row = dict(rollups.merged(found), minute=found[0]["minute"], name=found[-1]["name"])
    assert row["minute"] % 60 == 0 and row["name"] == "c.ok"
    assert (row["done"], row["retried"], row["dead"], row["wait_n"], row["run_n"]) == (1, 1, 0, 2, 2)
    assert row["wait_sum"] == pytest.approx(7.5) and row["wait_max"] == pytest.approx(7.0)
    assert row["run_max"] == pytest.approx(2.0)
    assert row[f"w{rollups.bucket(0.5)}"] == 1 and row[f"w{rollups.bucket(7.0)}"] == 1


def test_rollups_older_than_they_are_kept_are_trimmed_by_the_next_beat(any_store):
    counted = Rollups()
    counted.settled("c.ok", "done", 1.0)
    old = 1_000_000_000.0
    any_store.heartbeat(_beat("pool-a", counted), (), old)
    any_store.heartbeat(_beat("pool-a", counted), (), old + rollups.KEEP - 60)
    assert [r["minute"] for r in any_store.rollups(0.0)] == [
        rollups.minute_of(old), rollups.minute_of(old + rollups.KEEP - 60)]
    any_store.heartbeat(_beat("pool-a", counted), (), old + rollups.KEEP + 60)
    assert [r["minute"] for r in any_store.rollups(0.0)] == [
        rollups.minute_of(old + rollups.KEEP - 60), rollups.minute_of(old + rollups.KEEP + 60)]


def test_the_accumulator_counts_by_name_and_clears_only_when_told():
    counted = Rollups()
    counted.claimed("b", -3.0)  # a skewed clock: waited nothing
    counted.claimed("a", 0.2)
    counted.settled("a", "dead", None)  # retired at claim: never ran
    counted.settled("a", "lease_lost", None)
    rows = counted.rows()
    assert [r.name for r in rows] == ["a", "b"]
    a = dict(zip(rollups.COUNTS, rows[0].values))
    assert (a["dead"], a["wait_n"], a["run_n"], a[f"w{rollups.bucket(0.2)}"]) == (1, 1, 0, 1)
    assert dict(zip(rollups.COUNTS, rows[1].values))["w0"] == 1
    assert counted.rows() == rows  # a refused beat leaves them for the next one
    counted.clear()
    assert counted.rows() == ()


def test_percentiles_are_read_within_their_bucket_and_never_past_the_largest():
    hist = [0] * rollups.BUCKETS
    hist[rollups.bucket(0.03)] = 90   # 0.01 < t <= 0.05
    hist[rollups.bucket(3.0)] = 10    # 1 < t <= 5
    assert 0.01 <= rollups.percentile(hist, 0.5, 4.0) <= 0.05
    assert 1.0 <= rollups.percentile(hist, 0.95, 4.0) <= 4.0
    assert rollups.percentile(hist, 1.0, 4.0) == 4.0
    assert rollups.percentile([0] * rollups.BUCKETS, 0.5, 0.0) is None
    overflow = [0] * rollups.BUCKETS
    overflow[-1] = 1
    assert rollups.percentile(overflow, 0.5, 7200.0) <= 7200.0


def test_the_charts_window_is_checked(any_store, store_url):
    with _client(store_url) as client:
        assert client.get("/charts").status_code == 200
        for bad in ("0", "73", "x"):
            page = client.get("/charts", params={"hours": bad})
            assert page.status_code == 400 and "hours" in page.text
            api = client.get("/api/rollups", params={"hours": bad})
            assert api.status_code == 400 and "hours" in api.json()["error"]
        empty = client.get("/charts").text
        assert "Nothing settled in this window." in empty


def test_names_in_charts_render_as_text(any_store, store_url):
    counted = Rollups()
    hostile = "<script>alert(1)</script>"
    counted.settled(hostile, "done", 0.5)
    import time
    any_store.heartbeat(_beat("pool-a", counted), (), time.time())
    with _client(store_url) as client:
        page = client.get("/charts").text
        api = client.get("/api/rollups").json()
    assert hostile not in page and "&lt;script&gt;" in page
    assert json.dumps(api["names"][hostile]["done"]) == "1"


def test_the_charts_need_a_login_and_the_api_the_token(any_store, store_url):
    with _client(store_url, token="s3cret") as client:
        assert client.get("/charts").status_code == 303
        assert client.get("/api/rollups").status_code == 401
        assert client.get("/api/rollups",
                          headers={"authorization": "Bearer s3cret"}).status_code == 200
