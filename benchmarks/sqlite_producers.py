"""Durable enqueues one at a time on one SQLite store while others write it (R26a):
a producer beside a pool that drains, and several producers beside each other.

    .venv/bin/python benchmarks/sqlite_producers.py [--seconds 3] [--producers 4] [--n 500]

``beside a pool``: a backlog of 300 000 no-op jobs, ``jobpool start --procs 2`` draining
it; one second after its start this process enqueues as fast as it can for
``--seconds``, and prints its enqueues a second, their latency (p50, p99, max) and the
jobs the pool finished a second meanwhile. ``producers``: ``--producers`` processes,
each enqueuing ``--n`` jobs as fast as it can, no pool: enqueues a second in all and
the latency of all of them (mean, p50, p99, p99.9, max). Run it from another checkout's
tree with ``PYTHONPATH=TREE`` to compare (the tree's compiled core built).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import jobpool

NAME = "bench.producers"

APP = f"""
from jobpool import job

@job(name={NAME!r})
def noop(i):
    return None
"""


def _latencies(times: list[float]) -> str:
    times = sorted(times)
    n = len(times)
    return (f"mean {sum(times) / n * 1e3:.2f} p50 {times[n // 2] * 1e3:.2f} "
            f"p99 {times[int(n * 0.99)] * 1e3:.2f} p99.9 {times[int(n * 0.999)] * 1e3:.1f} "
            f"max {times[-1] * 1e3:.1f} ms")


def beside_a_pool(folder: str, seconds: float) -> str:
    path = os.path.join(folder, "pool.db")
    store = jobpool.connect(path)
    store.enqueue_many(NAME, [(i,) for i in range(300_000)])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [folder, *filter(None, [os.environ.get("PYTHONPATH")])]))
    pool = subprocess.Popen([sys.executable, "-m", "jobpool", "start", "--app", "producers_app",
                             "--db", path, "-q", "--procs", "2", "--no-dashboard"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        done_before = store.stats()["done"]
        times: list[float] = []
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            start = time.perf_counter()
            store.enqueue(NAME, 1)
            times.append(time.perf_counter() - start)
        wall = time.perf_counter() - began
        drained = (store.stats()["done"] - done_before) / wall
    finally:
        pool.terminate()
        pool.wait()
        store.close()
    return (f"beside a pool: {len(times) / wall:.0f} enqueues/s, {_latencies(times)}; "
            f"the pool {drained:.0f} jobs/s meanwhile")


def _produce(path: str, n: int, start, answers) -> None:
    store = jobpool.connect(path)
    start.wait()
    times = []
    for i in range(n):
        began = time.perf_counter()
        store.enqueue(NAME, i)
        times.append(time.perf_counter() - began)
    store.close()
    answers.put(times)


def producers(folder: str, count: int, n: int) -> str:
    path = os.path.join(folder, "producers.db")
    jobpool.connect(path).close()
    start = multiprocessing.Event()
    answers: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_produce, args=(path, n, start, answers))
             for _ in range(count)]
    for proc in procs:
        proc.start()
    time.sleep(0.5)  # every producer opened its store
    began = time.perf_counter()
    start.set()
    times = [t for _ in procs for t in answers.get()]
    wall = time.perf_counter() - began
    for proc in procs:
        proc.join()
    return f"{count} producers: {len(times) / wall:.0f} enqueues/s in all, {_latencies(times)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--n", type=int, default=500)
    args = parser.parse_args()
    print(f"jobpool from {os.path.dirname(os.path.dirname(jobpool.__file__))}")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(__file__))) as folder:
        with open(os.path.join(folder, "producers_app.py"), "w") as app:
            app.write(APP)
        sys.path.insert(0, folder)
        __import__("producers_app")
        print(beside_a_pool(folder, args.seconds))
        print(producers(folder, args.producers, args.n))


if __name__ == "__main__":
    main()
