"""What a no-op job costs a SQLite store in bytes: one claimer in this process, no
children, turns over a backlog, each turn settling (done) the ``--per-turn`` jobs the
turn before claimed and claiming as many, as a pool of ``--procs`` slots does when its
children reply at once.

    .venv/bin/python benchmarks/sqlite_turn.py [--jobs 5000] [--per-turn 2]

Nothing checkpoints while it turns (the claimer leaves checkpoints to the pool's
checkpointer, which does not run here), so the WAL holds every frame the turns
committed: its growth over the jobs is the bytes a job's claim and settle write. Then
the WAL is checkpointed into the file, and the file's growth over the jobs is what a
finished job leaves in the store. Also the wall and CPU time per turn. Prints one line;
run it from another checkout's tree with ``PYTHONPATH=TREE`` to compare (each tree makes
the store with its own schema).
"""
from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import tempfile
import time

import jobpool
from jobpool.lifecycle import DONE, Outcome

NAME = "bench.turn"


def run(jobs: int, per_turn: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "turn.db")
        store = jobpool.connect(path)
        store.enqueue_many(NAME, [(i,) for i in range(jobs + per_turn)])
        store.close()
        _checkpoint(path)
        size0 = os.path.getsize(path)
        store = jobpool.connect(path)
        claimer = store.claimer("bench-turn:1:1", (NAME,), ("default",), {})
        rng = random.Random(1)
        claimed = claimer.turn([], per_turn, time.time(), rng)[1]
        wal0 = os.path.getsize(path + "-wal")
        walls, done, pid = [], 0, os.getpid()
        cpu0 = time.process_time()
        while done < jobs:
            outcomes = [Outcome(c.job_id, c.attempt, DONE, pid=pid, peak_rss=24_000_000,
                                cpu_s=0.001) for c in claimed]
            began = time.perf_counter()
            claimed = claimer.turn(outcomes, per_turn, time.time(), rng)[1]
            walls.append(time.perf_counter() - began)
            done += len(outcomes)
        cpu = time.process_time() - cpu0
        wal = os.path.getsize(path + "-wal") - wal0
        claimer.close()
        store.close()
        _checkpoint(path)
        grown = os.path.getsize(path) - size0
    turns = len(walls)
    return {"wal_bytes_per_job": wal / done, "file_bytes_per_job": grown / done,
            "wall_median_us": statistics.median(walls) * 1e6, "cpu_per_turn_us": cpu / turns * 1e6}


def _checkpoint(path: str) -> None:
    """Every frame of the WAL into the file, and the WAL emptied."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--per-turn", type=int, default=2)
    args = parser.parse_args()
    row = run(args.jobs, args.per_turn)
    print(f"jobs={args.jobs} per_turn={args.per_turn} "
          + " ".join(f"{key}={value:.0f}" for key, value in row.items()))


if __name__ == "__main__":
    main()
