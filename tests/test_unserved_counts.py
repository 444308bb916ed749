"""R28, R47 (issue 27): the ready jobs no running pool serves, on both stores: only the
pairs of queue and name no live pool serves are counted, each to ``COUNT_MOST + 1``, and
a count past the bound is shown as at least it ("10 000+") by ``store.unserved()``, the
terminal dashboard, the web overview and ``status``'s line.
"""
from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

import jobpool
from jobpool import dashboard, liveness
from jobpool.snapshot import read_snapshot
from jobpool.store.records import COUNT_MOST, Heartbeat


def _live_pool_elsewhere(store, queues: tuple[str, ...], names: tuple[str, ...]) -> None:
    """A pool on another host that has just beaten (live, R24b), serving these."""
    store.heartbeat(Heartbeat(owner="plans-host:1:", host="plans-host", pid=1, procs=1,
                              queues=queues, names=names, core="python", counters_json="{}",
                              slots_json="[]"), [], time.time())


def test_names_no_pool_serves_are_counted_to_their_bound(any_store):
    store = any_store
    store.enqueue_many("t.big", [(n,) for n in range(COUNT_MOST + 2)])
    store.enqueue_many("t.small", [(n,) for n in range(3)])
    store.enqueue_many("t.served", [(n,) for n in range(5)])
    store.enqueue_with("t.served", args=(1,), queue="unread")
    store.enqueue_with("t.served", args=(2,), queue="unread")
    # With no pool running nothing is served, and nothing is singled out.
    assert store.unserved() == []
    _live_pool_elsewhere(store, ("default",), ("t.served",))
    assert store.unserved() == [
        {"queue": "default", "name": "t.big", "count": COUNT_MOST, "capped": True},
        {"queue": "default", "name": "t.small", "count": 3, "capped": False},
        {"queue": "unread", "name": "t.served", "count": 2, "capped": False}]
    assert liveness.describe_unserved(store.unserved()[0]) == \
        f"{COUNT_MOST}+ x t.big (queue default)"
    snapshot = read_snapshot(store)
    assert [(u.name, u.count, u.capped) for u in snapshot.unserved] == [
        ("t.big", COUNT_MOST, True), ("t.small", 3, False), ("t.served", 2, False)]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(dashboard.render(snapshot, 120, 24))
    assert "ready, no pool serves: 10,000+ t.big, 3 t.small, 2 t.served (unread)" in \
        console.export_text()


@pytest.mark.filterwarnings("ignore:Using `httpx`:UserWarning")
def test_the_web_overview_shows_a_capped_count_as_a_bound(any_store):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from jobpool.web import create_app
    any_store.enqueue_many("t.big", [(n,) for n in range(COUNT_MOST + 1)])
    any_store.enqueue_many("t.small", [(n,) for n in range(2)])
    _live_pool_elsewhere(any_store, ("default",), ("t.other",))
    with TestClient(create_app(None, store=any_store)) as client:
        page = client.get("/").text
    unserved = page[page.index('<table id="unserved">'):]
    unserved = unserved[:unserved.index("</table>")]
    assert "<td>t.big</td><td>default</td><td>10 000+</td>" in unserved
    assert "<td>t.small</td><td>default</td><td>2</td>" in unserved


def test_a_pool_serving_every_pair_counts_none(tmp_path):
    """Only pairs no pool serves are counted: with every pair served, the store reads
    the pairs (a step each) and counts nothing."""
    from jobpool.store.sqlite import statements as sql
    store = jobpool.connect(str(tmp_path / "served.db"))
    try:
        store.enqueue_many("t.a", [(n,) for n in range(50)])
        store.enqueue_with("t.b", args=(1,), queue="other")
        _live_pool_elsewhere(store, ("default", "other"), ("t.a", "t.b"))
        counted: list[str] = []
        store.conn.set_trace_callback(counted.append)
        assert store.unserved() == []
        store.conn.set_trace_callback(None)
        said = [" ".join(s.split()) for s in counted]
        assert said.count(" ".join(sql.READY_BY_NAME.split())) == 1
        assert [s for s in said if "jobs_ready_due WHERE status = 'ready' AND queue =" in s
                and "name = " in s and "LIMIT" in s] == []
        # with one pair left unserved, that pair alone is counted
        store.conn.set_trace_callback(counted.append)
        store.enqueue_with("t.c", args=(1,), queue="other")
        counted.clear()
        assert store.unserved() == [{"queue": "other", "name": "t.c", "count": 1,
                                     "capped": False}]
        store.conn.set_trace_callback(None)
        said = [" ".join(s.split()) for s in counted]
        assert [s for s in said if "jobs_ready_due WHERE status = 'ready' AND queue =" in s
                and "LIMIT" in s] == [s for s in said if "name = 't.c'" in s]
        assert len([s for s in said if "name = 't.c'" in s]) == 1
    finally:
        store.close()
