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


@on_both_stores
def test_the_store_adds_a_window_up_per_minute_and_per_name_as_the_rows_merge(any_store,
                                                                              store_url):
    """R56: ``rollup_totals`` is the store's own sum of the window (what the charts read):
    per minute of all names or of one, and per name, equal to ``rollups.merged`` of the
    raw rows, empty minutes absent, the minute before ``since`` left out."""
    base = 1_000_000_020.0
    for minute, pool, counted in ((0, "pool-a", {"c.ok": (0.5, 1.0), "c.slow": (3.0, 40.0)}),
                                  (0, "pool-b", {"c.ok": (7.0, 2.0)}),
                                  (1, "pool-a", {"c.slow": (0.02, 0.3)}),
                                  (3, "pool-a", {"c.ok": (0.2, 0.1), "c.slow": (90.0, 1.5)})):
        beat = Rollups()
        for name, (wait, run) in counted.items():
            beat.claimed(name, wait)
            beat.settled(name, "done" if run < 10 else "dead", run)
        any_store.heartbeat(_beat(pool, beat), (), base + minute * rollups.MINUTE)
    raw = any_store.rollups(0.0)
    minutes = sorted({row["minute"] for row in raw})
    if not store_url.startswith("postgresql"):  # PostgreSQL's minute is its server's now
        assert len(minutes) == 3 and len(raw) == 5

    def expect(rows):
        return {k: pytest.approx(v) for k, v in rollups.merged(rows).items()}

    def got(row):
        return {k: row[k] for k in rollups.COUNTS}

    for name in (None, "c.ok", "c.slow", "c.none"):
        totals = any_store.rollup_totals(0.0, by="minute", name=name)
        wanted = [m for m in minutes if any(r["minute"] == m and name in (None, r["name"])
                                            for r in raw)]
        assert [row["minute"] for row in totals] == wanted, name
        for row in totals:
            assert row["name"] is None
            assert got(row) == expect([r for r in raw if r["minute"] == row["minute"]
                                       and name in (None, r["name"])]), (name, row["minute"])
    by_name = any_store.rollup_totals(0.0, by="name")
    assert [row["name"] for row in by_name] == ["c.ok", "c.slow"]
    for row in by_name:
        assert row["minute"] is None
        assert got(row) == expect([r for r in raw if r["name"] == row["name"]])
    later = any_store.rollup_totals(minutes[-1], by="name")  # earlier minutes left out
    assert {row["name"]: got(row) for row in later} == {
        n: expect([r for r in raw if r["name"] == n and r["minute"] >= minutes[-1]])
        for n in {r["name"] for r in raw if r["minute"] >= minutes[-1]}}
    with pytest.raises(ValueError, match="not 'hour'"):
        any_store.rollup_totals(0.0, by="hour")


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


def test_a_rollup_of_counts_no_int_holds_shows_as_nothing(any_store, store_url):
    # R44, R56: a rollup row is data. SQLite's sum of huge counts is inf, and text can
    # be written by hand: int() of either raised, and /charts answered 500.
    counted = Rollups()
    counted.settled("c.odd", "done", 0.5)
    import time
    any_store.heartbeat(_beat("pool-a", counted), (), time.time())
    any_store.transaction("spoiling a rollup", lambda conn: conn.execute(
        "UPDATE jobpool_rollups SET done = 9e999, run_n = 'many', run_sum = 'x' "
        "WHERE name = 'c.odd'"))
    with _client(store_url) as client:
        assert client.get("/charts").status_code == 200
        api = client.get("/api/rollups")
    assert api.status_code == 200
    assert api.json()["names"]["c.odd"]["done"] == 0


def test_the_charts_need_a_login_and_the_api_the_token(any_store, store_url):
    with _client(store_url, token="s3cret") as client:
        assert client.get("/charts").status_code == 303
        assert client.get("/api/rollups").status_code == 401
        assert client.get("/api/rollups",
                          headers={"authorization": "Bearer s3cret"}).status_code == 200


def test_a_long_window_is_drawn_in_columns_of_several_minutes_and_the_api_stays_per_minute(
        any_store, store_url):
    """R56: three days on a 720-unit drawing are 720 columns of 6 minutes, each the sum
    of its minutes (the page says so); ``/api/rollups`` keeps a row per minute."""
    import time
    now = time.time()
    for minutes_ago in (1, 2, 3, 60 * 70):
        counted = Rollups()
        counted.settled("c.ok", "done", 0.5)
        any_store.heartbeat(_beat("pool-a", counted), (), now - minutes_ago * rollups.MINUTE)
    with _client(store_url) as client:
        page = client.get("/charts", params={"hours": 72}).text
        api = client.get("/api/rollups", params={"hours": 72}).json()
        short = client.get("/charts", params={"hours": 1}).text
    assert "Per 6 minutes from" in page and "Per minute from" in short
    assert len(api["minutes"]) == 72 * 60
    bars = [int(n) for n in re.findall(r'<rect class="done"[^>]*data-count="(\d+)"', page)]
    assert sum(bars) == sum(m["done"] for m in api["minutes"]) == api["names"]["c.ok"]["done"]
    if not store_url.startswith("postgresql"):  # there a beat's minute is the server's now
        assert sum(m["done"] for m in api["minutes"]) == 4
        assert len(bars) < 4  # three minutes in a row span two 6-minute columns at most


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_a_viewer_an_hour_off_charts_the_hour_the_servers_clock_dated(
        any_store, store_url, monkeypatch, skew):
    """R7a, R56: PostgreSQL's rollups are dated by the server's minute, so the charts'
    window ends at the server's now, not at the web host's: a host an hour ahead (or
    behind) charted an empty hour."""
    import time
    counted = Rollups()
    counted.claimed("c.ok", 0.5)
    counted.settled("c.ok", "done", 2.0)
    any_store.heartbeat(_beat("pool-a", counted), (), time.time())
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)
    with _client(store_url) as client:
        api = client.get("/api/rollups", params={"hours": "1"}).json()
        page = client.get("/charts", params={"hours": "1"})
    assert sum(m["done"] for m in api["minutes"]) == 1
    assert abs(api["to"] - real()) < 120
    assert re.search(r'<span id="totals">1 done, 0 retried, 0 dead</span>', page.text)


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_viewer_an_hour_ahead_reads_the_overview_now_and_counts_by_the_server(
        any_store, store_url, monkeypatch):
    """R7a, R29: the overview's frame is PostgreSQL's (counted by the server's clock),
    and "read now" is the viewer's own: dated by the server, a frame read a moment ago
    by a host an hour ahead said "read 1h ago"."""
    import time
    any_store.enqueue_with("c.ok", delay=600)  # scheduled by the server's clock
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)
    with _client(store_url) as client:
        page = client.get("/").text
    assert re.search(r'id="asof">Read now;', page), page
    assert '<td id="total-scheduled"><a href="/jobs?status=scheduled">1</a>' in page
    assert '<td class="ready">0</td><td class="scheduled">1</td>' in page
