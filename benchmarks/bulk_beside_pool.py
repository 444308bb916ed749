"""A bulk enqueue into a SQLite store with and without a live pool on it (R26a): where a
pool beats, the enqueue's commit leaves the copy of its WAL pages into the store to the
pool's checkpointer; with none, it copies them itself.

    .venv/bin/python benchmarks/bulk_beside_pool.py [--rows 100000] [--repeat 5]

Each repeat makes two fresh stores: into one, with no pool, it times one
``enqueue_many`` of ``--rows`` no-op jobs; beside the other it starts ``jobpool start``
serving another queue (so it runs none of them, and only beats and checkpoints), waits
for its first beat, then times the same call. Prints the rows a second of each, median,
min and max. With ``PYTHONPATH=TREE`` it measures another checkout's jobpool (the first
line says which), so two trees are compared by running it alternately over each.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jobpool

APP = "import jobpool\n\n@jobpool.job(name='bench.bulk')\ndef bulk(i):\n    return None\n"


def timed_bulk(path: str, rows: int) -> float:
    """Rows a second of one ``enqueue_many`` of ``rows`` into the store at ``path``."""
    store = jobpool.connect(path)
    try:
        items = [(i,) for i in range(rows)]
        began = time.perf_counter()
        store.enqueue_many("bench.bulk", items)
        return rows / (time.perf_counter() - began)
    finally:
        store.close()


def beside_pool(folder: str, rows: int) -> float:
    """``timed_bulk`` into a store a pool (of another queue) is running on."""
    path = os.path.join(folder, "pooled.db")
    jobpool.connect(path).close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [folder, os.path.dirname(os.path.dirname(jobpool.__file__))]))
    pool = subprocess.Popen([sys.executable, "-m", "jobpool", "start", "--app", "bulk_app",
                             "--db", path, "--queues", "other", "--procs", "1",
                             "--no-dashboard", "-q"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        watcher = jobpool.connect(path)
        deadline = time.time() + 30
        while not watcher.pools():
            if time.time() > deadline or pool.poll() is not None:
                raise SystemExit("the pool did not start")
            time.sleep(0.05)
        watcher.close()
        return timed_bulk(path, rows)
    finally:
        pool.terminate()
        pool.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"jobpool from {os.path.dirname(os.path.dirname(jobpool.__file__))}")
    alone: list[float] = []
    pooled: list[float] = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "bulk_app.py"), "w") as fh:
                fh.write(APP)
            alone.append(timed_bulk(os.path.join(folder, "alone.db"), args.rows))
            pooled.append(beside_pool(folder, args.rows))
    for label, rates in (("no pool", alone), ("beside a live pool", pooled)):
        print(f"enqueue_many of {args.rows} rows, {label:<18}: median {statistics.median(rates):,.0f} "
              f"rows/s (min {min(rates):,.0f}, max {max(rates):,.0f})")


if __name__ == "__main__":
    sys.exit(main())
