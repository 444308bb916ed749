"""Turn latency of a supervisor's claimer while a producer enqueues beside it.

A producer process enqueues one job at a time (``store.enqueue``, ``synchronous=FULL``,
so each commit holds SQLite's write lock through its fsync) every ``--gap`` seconds;
this process runs the claimer's turns (claim one, settle it done) back to back and
records each turn's wall time. When a turn meets the producer's lock it waits in the
driver's busy handler: the tail of the distribution is that wait.

    .venv/bin/python benchmarks/contention.py [--turns 3000] [--gap 0.002] [--driver compiled]

Prints p50 / p90 / p99 / p99.9 / max in milliseconds. Compare two checkouts by running
it with ``PYTHONPATH=TREE`` from outside both (see BENCHMARKS.md).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import tempfile
import time

import jobpool
from jobpool.lifecycle import DONE, Outcome
from jobpool.store.sqlite.claimer import SqliteClaimer, driver_class

NAME = "bench.contention"
OWNER = "benchhost:1:1"


@jobpool.job(name=NAME)
def contention_job(i):  # never runs: the claimer settles it without running it
    return None


def produce(path: str, gap: float, stop) -> None:
    store = jobpool.connect(path)
    i = 0
    while not stop.is_set():
        store.enqueue(NAME, i)
        i += 1
        time.sleep(gap)
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--gap", type=float, default=0.002)
    parser.add_argument("--driver", default="compiled", choices=["compiled", "pure"])
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "store.db")
    store = jobpool.connect(path)
    store.enqueue_many(NAME, [(i,) for i in range(args.turns + 100)])
    store.close()
    stop = multiprocessing.get_context("fork").Event()
    producer = multiprocessing.get_context("fork").Process(target=produce,
                                                           args=(path, args.gap, stop))
    producer.start()
    claimer = SqliteClaimer(path, OWNER, [NAME], ["default"], {NAME: contention_job.policy},
                            driver=driver_class(args.driver), busy_timeout=5.0)
    rng = random.Random(1)
    finished: list[Outcome] = []
    took: list[float] = []
    try:
        time.sleep(0.2)
        for _ in range(args.turns):
            started = time.perf_counter()
            _settled, claimed, _expired = claimer.turn(finished, 1, time.time(), rng)
            took.append(time.perf_counter() - started)
            job = claimed[0]
            finished = [Outcome(job.job_id, job.attempt, DONE, pid=os.getpid(), exit_status="0",
                                peak_rss=0, cpu_s=0.0)]
            time.sleep(0.0003)  # a child's no-op job and its pipe, roughly
    finally:
        stop.set()
        producer.join()
        claimer.close()
    took.sort()
    cut = [took[min(len(took) - 1, int(len(took) * q))] * 1e3 for q in (0.5, 0.9, 0.99, 0.999)]
    print(f"{args.driver} turns={len(took)} gap={args.gap}: p50 {cut[0]:.3f} p90 {cut[1]:.3f} "
          f"p99 {cut[2]:.3f} p99.9 {cut[3]:.3f} max {took[-1] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
