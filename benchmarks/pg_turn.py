"""One PostgreSQL claimer's turn, timed in this process with no children: each turn
settles the ``--per-turn`` jobs the turn before claimed (done) and claims as many
(issue 25: what a turn costs the pool and the server, beside the whole drain of
``benchmarks/whole/run.sh``).

    .venv/bin/python benchmarks/pg_turn.py [--db URL] [--turns 3000] [--per-turn 1]
                                           [--durability normal] [--batch]

Prints the turns' median and mean wall time per turn, the claimer's CPU per turn
(this process), the WAL the server wrote per turn (all of it: run it on a quiet server),
and the CPU its server backend spent per turn (``/proc/PID/stat`` of
the backend, so only with the server on this host). ``--batch`` enqueues the jobs as
the members of one closed batch (R34: each settle counts its members down in the
batch's shards). A fresh schema each run, dropped after. Run it from another
checkout's tree with ``PYTHONPATH=TREE`` to compare.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid

import psycopg

import jobpool
from jobpool.lifecycle import DONE, Outcome

NAME = "bench.turn"


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process ``pid`` has used (utime + stime)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_turns(db: str, turns: int, per_turn: int, durability: str,
              batch: bool = False) -> dict[str, float]:
    """``turns`` turns of one claimer in a fresh schema (dropped after): wall per turn
    (median, mean), the claimer's CPU and its server backend's CPU per turn, in µs."""
    schema = "bench_turn_" + uuid.uuid4().hex[:8]
    url = f"{db}{'&' if '?' in db else '?'}schema={schema}"
    store = jobpool.connect(url, durability=durability)
    try:
        args = [(i,) for i in range((turns + 2) * per_turn)]
        if batch:
            with store.batch() as members:
                members.add_many(NAME, args)
        else:
            store.enqueue_many(NAME, args)
        claimer = store.claimer("bench-turn:1:1", (NAME,), ("default",), {})
        rng = random.Random(1)
        claimed = claimer.turn([], per_turn, time.time(), rng)[1]
        backend = claimer.driver._conn.info.backend_pid
        walls = []
        wal0 = _wal(db)
        cpu0, server0 = time.process_time(), backend_cpu(backend)
        for _ in range(turns):
            outcomes = [Outcome(c.job_id, c.attempt, DONE) for c in claimed]
            began = time.perf_counter()
            claimed = claimer.turn(outcomes, per_turn, time.time(), rng)[1]
            walls.append(time.perf_counter() - began)
        cpu, server = time.process_time() - cpu0, backend_cpu(backend) - server0
        wal = _wal(db) - wal0
        claimer.close()
    finally:
        store.close()
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return {"wall_median_us": statistics.median(walls) * 1e6,
            "wall_mean_us": sum(walls) / turns * 1e6,
            "claimer_cpu_us": cpu / turns * 1e6, "backend_cpu_us": server / turns * 1e6,
            "wal_bytes": wal / turns}


def _wal(db: str) -> int:
    """The server's WAL position in bytes (the whole server's: other sessions count)."""
    with psycopg.connect(db, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--per-turn", type=int, default=1)
    parser.add_argument("--durability", choices=("full", "normal"), default="full")
    parser.add_argument("--batch", action="store_true")
    args = parser.parse_args()
    row = run_turns(args.db, args.turns, args.per_turn, args.durability, args.batch)
    print(f"turns={args.turns} per_turn={args.per_turn} durability={args.durability} "
          f"batch={int(args.batch)} "
          + " ".join(f"{key}={value:.0f}" for key, value in row.items()))


if __name__ == "__main__":
    main()
