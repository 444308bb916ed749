"""How long each page of `jobpool web` takes to render over a big store (R47, issue 27).

The store is filled as tests/test_web_plans.py fills it (one INSERT … SELECT, then
ANALYZE): ``--rows`` jobs of every status, with keys, batches, groups, chains and
errors, and the pools' per-minute rollups of the three days a store keeps them (R56),
up to now, for 30 job names, so ``/charts?hours=72`` draws the whole window. Each
page and API read is then asked of the app in this process (Starlette's test client,
no network), with the overview's shared snapshot made anew before each render (so it
is read, not served from memory), and the median and the slowest of ``--repeat``
renders are printed, in ms.

    .venv/bin/python benchmarks/web_pages.py                       # SQLite, 1 000 000 rows
    .venv/bin/python benchmarks/web_pages.py --rows 100000
    .venv/bin/python benchmarks/web_pages.py --db postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python benchmarks/web_pages.py --rows 100000 --only /charts   # the charts alone
    .venv/bin/python benchmarks/web_pages.py --skewed [--db postgresql://...]   # a few among many
    .venv/bin/python benchmarks/web_pages.py --skewed --pool --only /api/stats   # names unserved

``--pool`` registers a live pool (on another host) that serves every queue and every
name of the store but one, so the overview, ``/live`` and ``/api/stats`` also read the
ready jobs no pool serves (R28, R47: only while a pool is live), and times
``store.unserved()`` itself as a line of its own.

``--skewed`` fills the skewed store of tests/test_web_plans.py instead
(``--rows`` done rows with a handful dead, a backlog of a tenth as many ready rows with a
handful scheduled and running, two small old batches) and times the pages of those
few rows.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jobpool  # noqa: E402
from jobpool.web import create_app, live  # noqa: E402

from tests.test_web_plans import (SKEWED_PAGES, SQLITE_SKEWED_PAGES,  # noqa: E402
                                  _made_batch, fill_pg, fill_rollups_pg, fill_rollups_sqlite,
                                  fill_skewed_pg, fill_skewed_sqlite, fill_sqlite, pages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="time only the pages whose path "
                                                    "starts with this")
    parser.add_argument("--db", help="a PostgreSQL URL (a schema is made and dropped); "
                                     "default: a SQLite file in a temporary folder")
    parser.add_argument("--skewed", action="store_true",
                        help="the skewed store and its pages")
    parser.add_argument("--pool", action="store_true",
                        help="a live pool serving all but one name (the pages then read "
                             "the ready jobs no pool serves)")
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

    with tempfile.TemporaryDirectory() as folder:
        url, drop = _store(options, folder)
        try:
            store = jobpool.connect(url)
            batch = _made_batch(store)
            print(f"{'page':<100} {'median ms':>10} {'max ms':>8}")
            worst = 0.0
            if options.pool:
                print(f"unserved: {_live_pool_but_one(store)}", flush=True)
                if "store.unserved()".startswith(options.only):
                    worst = _time("store.unserved()", store.unserved, options.repeat)
            app = create_app(None, store=store)
            with TestClient(app) as client:
                timed = ((SQLITE_SKEWED_PAGES if options.db is None else SKEWED_PAGES)
                         if options.skewed else pages(options.rows, batch))
                for path in (p for p in timed if p.startswith(options.only)):
                    took = []
                    for _ in range(options.repeat):
                        # The overview's snapshot read afresh, as its first viewer does.
                        app.state.live = live.SharedSnapshot(store)
                        start = time.perf_counter()
                        answer = client.get(path)
                        took.append((time.perf_counter() - start) * 1000)
                        assert answer.status_code == 200, (path, answer.status_code)
                    worst = max(worst, max(took))
                    print(f"{path:<100} {statistics.median(took):>10.1f} {max(took):>8.1f}",
                          flush=True)
            print(f"slowest render: {worst:.1f} ms")
            store.close()
        finally:
            drop()


def _time(what: str, read, repeat: int) -> float:
    """Print the median and slowest of ``repeat`` calls of ``read``; return the slowest."""
    took = []
    for _ in range(repeat):
        start = time.perf_counter()
        read()
        took.append((time.perf_counter() - start) * 1000)
    print(f"{what:<100} {statistics.median(took):>10.1f} {max(took):>8.1f}", flush=True)
    return max(took)


def _live_pool_but_one(store) -> list[dict]:
    """A live pool on another host serving every queue and name of the store's oldest
    100 000 jobs (every queue and name the fills use) but the name of the oldest ready
    job (one of the backlog's), its beat dated a day ahead; the ready jobs no pool
    serves (that name's, and the 3 of the batch made through the API), as the store
    says."""
    from jobpool.store.records import Heartbeat
    [oldest] = store.list_jobs(status="ready", limit=1)
    pairs = {(j["queue"], j["name"]) for j in store.list_jobs(limit=100_000)}
    names = sorted({name for _, name in pairs} - {oldest["name"]})
    store.heartbeat(Heartbeat(owner="bench-host:1:", host="bench-host", pid=1, procs=1,
                              queues=tuple(sorted({queue for queue, _ in pairs})),
                              names=tuple(names), core="python", counters_json="{}",
                              slots_json="[]"), [], time.time() + 86_400)
    return store.unserved()


def _store(options: argparse.Namespace, folder: str):
    start = time.perf_counter()
    if options.db is None:
        url = str(Path(folder) / "big.db")
        if options.skewed:
            fill_skewed_sqlite(url, options.rows)
        else:
            fill_sqlite(url, options.rows)
            fill_rollups_sqlite(url, time.time())
        drop = lambda: None  # noqa: E731 - the folder goes with the with
    else:
        import psycopg
        schema = "jp_bench_" + uuid.uuid4().hex[:12]
        url = f"{options.db}{'&' if '?' in options.db else '?'}schema={schema}"
        if options.skewed:
            fill_skewed_pg(url, options.rows)
        else:
            fill_pg(url, options.rows)
            fill_rollups_pg(url, time.time())

        def drop() -> None:
            with psycopg.connect(options.db, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(f"filled {options.rows} rows in {time.perf_counter() - start:.1f} s", flush=True)
    return url, drop


if __name__ == "__main__":
    main()
