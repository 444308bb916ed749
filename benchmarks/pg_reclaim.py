#!/usr/bin/env python3
"""PostgreSQL: a pool takes back the leases of a dead pool that held many rows (R24,
R24b), as after a crash of a pool of many slots running chunks (R63).

    .venv/bin/python benchmarks/pg_reclaim.py [URL] [--rows 1000,4000,8000] [--limited]
                                              [--repeat 1]

For each count, in a schema of its own (dropped after): that many jobs are enqueued
(``--limited``: of a name limited per group, R35, 50 groups), one claimer takes them all
as pool A, and a second claimer, pool B, reclaims A's leases (``reclaim_owner``, one
transaction); its seconds are printed, median, min and max. With ``PYTHONPATH=TREE``
it measures another checkout's jobpool (the first line says which), so two trees are
compared by running it alternately over each.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import jobpool
from jobpool.limits import NameLimit
from pg_scratch import scratch_store, url_argument

NAME = "bench.reclaimed"


def one_round(url: str, rows: int, limited: bool) -> float:
    """Seconds of one reclaim of ``rows`` running rows, in a fresh schema."""
    with scratch_store(url, "bench_reclaim") as store:
        if limited:
            store.limits.declare({NAME: NameLimit(NAME, 1 << 30, None, 1, "user")}, "bench")
        for i in range(rows):
            user = f"u{i % 50}"
            store.enqueue_with(NAME, kwargs={"user": user}, group=user if limited else None)
        claimers = []
        for owner in ("bench-a", "bench-b"):
            claimer = store.claimer(owner, (NAME,), ("default",), {})
            claimer.set_limits(store.limits.plan().for_pool((NAME,), ("default",)))
            claimers.append(claimer)
        taken = 0
        while taken < rows:
            got = claimers[0].turn([], rows - taken, time.time(), random.Random(1))[1]
            if not got:
                raise SystemExit(f"pg_reclaim.py: claimed {taken} of {rows}")
            taken += len(got)
        began = time.perf_counter()
        settled = claimers[1].reclaim_owner("bench-a", "its pool died", time.time())
        seconds = time.perf_counter() - began
        if len(settled) != rows:
            raise SystemExit(f"pg_reclaim.py: reclaimed {len(settled)} of {rows}")
        for claimer in claimers:
            claimer.close()
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    url_argument(parser)
    parser.add_argument("--rows", default="1000,4000,8000")
    parser.add_argument("--limited", action="store_true")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"jobpool from {os.path.dirname(os.path.dirname(jobpool.__file__))}")
    for rows in (int(n) for n in args.rows.split(",")):
        times = [one_round(args.url, rows, args.limited) for _ in range(args.repeat)]
        print(f"reclaim of {rows} running rows{' (limited, 50 groups)' if args.limited else ''}, "
              f"{args.repeat} repeats: {statistics.median(times):.2f} s median "
              f"({min(times):.2f}-{max(times):.2f})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
