"""Enqueues per second from several producer processes at once on one PostgreSQL store,
with R11c's quiet window (the default) and without it (``notify_quiet = 0``).

    .venv/bin/python benchmarks/pg_producers.py [--db URL] [--producers 4] [--n 1000] [--rounds 3]

Each round runs both settings alternately on a fresh schema, dropped after; every
producer is its own process with its own store, calling ``store.enqueue_with`` ``--n``
times as fast as it can (no pool runs: the jobs stay ready).
"""
from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import time

import psycopg

import jobpool


def _produce(url: str, n: int, quiet: float, start, done) -> None:
    store = jobpool.connect(url)
    store.notify_quiet = quiet
    start.wait()
    for i in range(n):
        store.enqueue_with("bench.noop", args=(i,))
    store.close()
    done.put(time.perf_counter())


def one_run(db: str, producers: int, n: int, quiet: float) -> float:
    schema = f"bench_{random.getrandbits(40):x}"
    url = f"{db}?schema={schema}"
    jobpool.connect(url).close()  # the schema, before the clock starts
    ctx = multiprocessing.get_context("fork")
    start, done = ctx.Barrier(producers + 1), ctx.Queue()
    procs = [ctx.Process(target=_produce, args=(url, n, quiet, start, done))
             for _ in range(producers)]
    for proc in procs:
        proc.start()
    start.wait()
    began = time.perf_counter()
    ended = max(done.get() for _ in procs)
    for proc in procs:
        proc.join()
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
    return producers * n / (ended - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from jobpool.store.postgres.store import NOTIFY_QUIET
    runs: dict[str, list[float]] = {"quiet window": [], "every enqueue notifies": []}
    for _ in range(args.rounds):
        runs["quiet window"].append(one_run(args.db, args.producers, args.n, NOTIFY_QUIET))
        runs["every enqueue notifies"].append(one_run(args.db, args.producers, args.n, 0.0))
    for label, rates in runs.items():
        print(f"{label:24} {statistics.median(rates):8.0f} enqueues/s "
              f"(min {min(rates):.0f}, max {max(rates):.0f}; {args.producers} producers)")


if __name__ == "__main__":
    main()
