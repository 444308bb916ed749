#!/usr/bin/env python3
"""A PostgreSQL drain beside a big backlog it does not serve, against the same drain alone.

    .venv/bin/python benchmarks/pg_backlog.py postgresql://postgres@127.0.0.1:5432/test \
        [--backlog 1000000] [--jobs 2000] [--pairs 3]

Two stores, each in a schema of its own: an empty one, and one holding ``--backlog``
ready rows in another queue (``backlog``), ANALYZEd, as every production store has
statistics. In alternating pairs, ``--jobs`` no-op jobs are enqueued in the queue
``default`` of each store and drained there by a real ``jobpool start --burst --procs 2``
(from its start to its exit); the backlog's rows are never claimed, but every claim
and settle runs against a table that holds them. Printed: jobs/s on each store, pair
by pair, and their ratio (backlog ÷ empty). The claimer runs generic plans, so a hot
statement whose generic plan reads all of ``jobs`` costs the drain in proportion to
the backlog (issue 22 item 6; ``tests/contract/test_pg_plans.py``). Target: ≥ 0.8×.
"""
from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import jobpool  # noqa: E402
from jobpool.store.postgres.connection import parse_url  # noqa: E402

sys.path.insert(0, str(BENCH))
from compare import drop_schema, with_schema  # noqa: E402

#: The backlog: ready no-op rows of a name no pool here serves, in a queue of their own.
FILL = """
INSERT INTO jobs (queue, name, payload, serializer, priority, status, run_at, line_at,
                  created_at)
SELECT 'backlog', 'bench.backlog', '[[0],{}]', 'json', 0, 'ready', 0, i, 0
  FROM generate_series(1, %(rows)s) AS i
"""


def fill(store_url: str, rows: int) -> None:
    """``rows`` backlog rows in one statement, then ANALYZE, on a connection of its own
    (the store's limits each statement's time, R26)."""
    target = parse_url(store_url)
    with psycopg.connect(target.conninfo, autocommit=True,
                         options=f"-c search_path={target.schema}") as conn:
        conn.execute(FILL, {"rows": rows})
        conn.execute("ANALYZE")


def drain(store_url: str, jobs: int, env: dict) -> float:
    """Enqueue ``jobs`` no-op jobs and drain them with one burst pool: its jobs/s."""
    from bench_jobs import jobpool_jobs  # registers bench.noop for the enqueue
    del jobpool_jobs
    store = jobpool.connect(store_url)
    try:
        before = store.stats()["done"]
        store.enqueue_many("bench.noop", [(i,) for i in range(jobs)])
    finally:
        store.close()
    started = time.perf_counter()
    pool = subprocess.run(
        [sys.executable, "-m", "jobpool", "start", "--app", "bench_jobs.jobpool_jobs",
         "--db", store_url, "--procs", "2", "--burst", "-q"],
        env=env, cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        timeout=600)
    seconds = time.perf_counter() - started
    store = jobpool.connect(store_url)
    try:
        stats = store.stats()
    finally:
        store.close()
    if pool.returncode or stats["done"] - before != jobs:
        raise SystemExit(f"the pool exited {pool.returncode} with {stats['done'] - before} of "
                         f"{jobs} done: {pool.stderr[-300:]}")
    return jobs / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a postgresql:// URL (two schemas of its own are made "
                                    "and dropped)")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=3,
                        help="alternating drains on each store (the ratio is their medians')")
    args = parser.parse_args()
    work = BENCH / ".work"
    work.mkdir(exist_ok=True)
    counter = work / f"counter-backlog-{secrets.token_hex(4)}.bin"
    counter.touch()
    # The pool imports this checkout's jobpool, whatever the interpreter has installed.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(BENCH), str(ROOT))),
               BENCH_COUNTER=str(counter), PYTHONDONTWRITEBYTECODE="1")
    tag = secrets.token_hex(4)
    schemas = {"empty": f"bench_empty_{tag}", "backlog": f"bench_backlog_{tag}"}
    urls = {what: with_schema(args.url, schema) for what, schema in schemas.items()}
    try:
        for url in urls.values():
            jobpool.connect(url).close()
        began = time.perf_counter()
        fill(urls["backlog"], args.backlog)
        print(f"{args.backlog} backlog rows written and analyzed in "
              f"{time.perf_counter() - began:.1f} s")
        rates: dict[str, list[float]] = {"empty": [], "backlog": []}
        for pair in range(args.pairs):
            # Alternating, so a change in the machine's speed falls on both alike.
            for what in ("empty", "backlog"):
                rates[what].append(drain(urls[what], args.jobs, env))
            print(f"pair {pair + 1}: empty {rates['empty'][-1]:.0f} jobs/s, backlog "
                  f"{rates['backlog'][-1]:.0f} jobs/s, "
                  f"ratio {rates['backlog'][-1] / rates['empty'][-1]:.3f}x")
        empty, backlog = (statistics.median(rates[w]) for w in ("empty", "backlog"))
        print(f"median: empty {empty:.0f} jobs/s, backlog {backlog:.0f} jobs/s, "
              f"ratio {backlog / empty:.3f}x (target >= 0.8x)")
    finally:
        for schema in schemas.values():
            drop_schema(args.url, schema)
        counter.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
