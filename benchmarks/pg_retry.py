#!/usr/bin/env python3
"""PostgreSQL's operator calls on many rows: ``store.cancel_many`` of every ready row
(R31, the web's "cancel all matching"), ``store.dead.retry`` of every dead one (R32), the
way ``jobpool dead retry --all`` sends them after an outage, and ``store.dead.delete``.

    .venv/bin/python benchmarks/pg_retry.py [URL] [--rows 4000] [--keyed 0.1] [--batched 0]
                                            [--repeat 3]

Each repeat makes a store in a schema of its own (dropped after), enqueues ``--rows``
jobs of a limited name grouped per user (R35: the retry takes their lanes first), a
fraction ``--keyed`` of them with a key (R3: only those may meet a live job holding it),
the first fraction ``--batched`` of them as members of batches of 100 without keys (R34:
a retry reopens their shards),
times the one cancel of them all (dead, R31), the one retry of every dead id, and (after
a cancel again) the one delete of every dead id, then prints for each the seconds and
the rows a second, median, min and max. With ``PYTHONPATH=TREE`` it measures
another checkout's jobpool (the first line says which), so two trees are compared by
running it alternately over each.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jobpool
from jobpool import job
from pg_scratch import scratch_store, url_argument



@job(name="bench.retried", max_running=1, group_by="user")
def retried(user):
    return None


def one_round(url: str, rows: int, keyed: float,
              batched: float = 0.0) -> tuple[float, float, float]:
    """Seconds of one ``cancel_many`` of ``rows`` ready rows, of one ``dead.retry`` of
    them, dead, and of one ``dead.delete`` of them, dead again, in a fresh schema."""
    with scratch_store(url, "bench_retry") as store:
        every = max(1, round(1 / keyed)) if keyed > 0 else 0
        members = round(rows * batched)
        for start in range(0, members, 100):
            batch = store.batch()
            batch.add_many("bench.retried", [retried.s(user=f"u{i % 500}")
                                             for i in range(start, min(members, start + 100))])
            batch.close()
        for start in range(members, rows, 1000):
            part = range(start, min(rows, start + 1000))
            store.enqueue_many("bench.retried", [retried.s(user=f"u{i % 500}") for i in part],
                               keys=[f"k{i}" if every and i % every == 0 else None for i in part])
        ids = list(range(1, rows + 1))
        began = time.perf_counter()
        cancelled = store.cancel_many(ids)
        cancel_s = time.perf_counter() - began
        assert set(cancelled.values()) == {"cancelled"}, set(cancelled.values())
        dead = store.dead.ids()
        assert len(dead) == rows, (len(dead), rows)
        began = time.perf_counter()
        answers = store.dead.retry(dead)
        seconds = time.perf_counter() - began
        assert set(answers.values()) == {"retried"}, set(answers.values())
        store.cancel_many(ids)
        began = time.perf_counter()
        deleted = store.dead.delete(ids)
        delete_s = time.perf_counter() - began
        assert set(deleted.values()) == {"deleted"}, set(deleted.values())
        return cancel_s, seconds, delete_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    url_argument(parser)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--keyed", type=float, default=0.1,
                        help="the fraction of the rows that have a key (0 to 1)")
    parser.add_argument("--batched", type=float, default=0.0,
                        help="the fraction of the rows in batches, without keys (0 to 1)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"jobpool from {os.path.dirname(os.path.dirname(jobpool.__file__))}")
    rounds = [one_round(args.url, args.rows, args.keyed, args.batched)
              for _ in range(args.repeat)]
    for index, call in enumerate(("cancel_many", "dead.retry", "dead.delete")):
        times = [r[index] for r in rounds]
        rates = [args.rows / t for t in times]
        print(f"{call} of {args.rows} rows ({args.keyed:.0%} keyed, {args.batched:.0%} in "
              f"batches), {args.repeat} repeats: "
              f"{statistics.median(times):.2f} s median ({min(times):.2f}-{max(times):.2f}), "
              f"{statistics.median(rates):,.0f} rows/s")


if __name__ == "__main__":
    sys.exit(main())
