#!/usr/bin/env python3
"""The claim under concurrency limits (R35) against the ordinary claim, on a big backlog.

    .venv/bin/python benchmarks/limits.py [--rows 1000000] [--groups 1000] [--jobs 4000]
        [--db postgresql://postgres@127.0.0.1:5432/test] [--chunks 20]

One store holds ``--rows`` ready rows of one job name: half of them one large group
at the head of the line, the rest spread over ``--groups - 1`` small groups. A
claimer (the compiled core on SQLite) runs turns as a pool does: each settles the 8
jobs the turn before claimed and claims 8 more, ``--jobs`` in all, and the claims per
second are timed. Two claimers, alternating in ``--chunks`` chunks on the same backlog:

* ``unlimited``: a claimer given no limits: the ordinary claim.
* ``limited``: ``max_running=2`` per group, with the large group saturated (two of
  its rows held running for the whole run by another owner), so every claim passes
  over the 500 000 rows at the head of the line and rotates through the small groups.

R35's bound: the limited claim stays within 2x of the unlimited one.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

import jobpool  # noqa: E402
from jobpool.lifecycle import DONE, Outcome  # noqa: E402
from jobpool.limits import NameLimit  # noqa: E402

NAME = "bench.limited"
BATCH = 8

SQLITE_FILL = """
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :rows)
INSERT INTO jobs (queue, name, payload, serializer, priority, status, run_at, line_at,
                  created_at, grp)
SELECT 'default', :name, '[[],{}]', 'json', 0, 'ready', 0, i, 0,
       CASE WHEN i < :rows / 2 THEN 'large' ELSE 'g' || (i % (:groups - 1)) END
  FROM n
"""
PG_FILL = """
INSERT INTO jobs (queue, name, payload, serializer, priority, status, run_at, line_at,
                  created_at, grp)
SELECT 'default', %(name)s, '[[],{}]', 'json', 0, 'ready', 0, i, 0,
       CASE WHEN i < %(rows)s / 2 THEN 'large' ELSE 'g' || (i %% (%(groups)s - 1)) END
  FROM generate_series(0, %(rows)s - 1) AS i
"""


def fill(store, rows: int, groups: int) -> None:
    params = {"rows": rows, "groups": groups, "name": NAME}
    if store.__class__.__name__ == "PostgresStore":
        import psycopg
        # Its own connection: the store's limits each statement's time (R26).
        with psycopg.connect(store.target.conninfo, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {store.target.schema}")
            conn.execute(PG_FILL, params)
            conn.execute("ANALYZE jobs")
    else:
        store.transaction("fill", lambda conn: conn.execute(SQLITE_FILL, params))
        store.transaction("analyze", lambda conn: conn.execute("ANALYZE"))


class Timed:
    """One claimer and the time its turns took: ``run(jobs)`` claims that many, 8 a
    turn, each turn settling the 8 the turn before claimed, then settles the last."""

    def __init__(self, store, owner: str, limited: bool) -> None:
        self.claimer = store.claimer(owner, [NAME], ["default"], {})
        if limited:
            self.claimer.set_limits(store.limits.plan().for_pool([NAME], ["default"]))
        self.rng = random.Random(1)
        self.jobs = 0
        self.wall = 0.0
        self.cpu = 0.0

    def run(self, jobs: int) -> None:
        held: list = []
        done = 0
        began, began_cpu = time.perf_counter(), time.process_time()
        while done < jobs:
            outcomes = [Outcome(j.job_id, j.attempt, DONE) for j in held]
            _settled, held, _expired = self.claimer.turn(outcomes, BATCH, time.time(), self.rng)
            if not held:
                raise SystemExit("the claim found nothing: the backlog ran out")
            done += len(held)
        self.claimer.turn([Outcome(j.job_id, j.attempt, DONE) for j in held], 0, time.time(),
                          self.rng)
        self.wall += time.perf_counter() - began
        self.cpu += time.process_time() - began_cpu
        self.jobs += done

    def rates(self) -> tuple[float, float]:
        """Claims per second of wall time, and per second of this process's CPU."""
        return self.jobs / self.wall, self.jobs / self.cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=8000, help="claims by each claimer")
    parser.add_argument("--chunks", type=int, default=20,
                        help="alternations of the two claimers (--jobs is split among them)")
    parser.add_argument("--db", help="a PostgreSQL URL (a schema of its own is made and "
                                     "dropped); default a SQLite file in a temp dir")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jobpool-limits-"))
    schema = None
    if args.db:
        sys.path.insert(0, str(BENCH))
        from compare import drop_schema, with_schema
        schema = f"bench_limits_{random.randrange(1 << 30):x}"
        url = with_schema(args.db, schema)
    else:
        url = str(work / "limits.db")
    store = jobpool.connect(url)
    try:
        began = time.perf_counter()
        fill(store, args.rows, args.groups)
        print(f"{args.rows} rows in {args.groups} groups written in "
              f"{time.perf_counter() - began:.1f} s")
        store.limits.declare({NAME: NameLimit(NAME, 2, None, 1, "customer")}, "bench")
        saturate(store)
        # Both claimers on the same backlog, in alternating chunks, so a change in the
        # machine's speed during the run falls on both alike: the unlimited one is
        # given no limits (the ordinary claim, which takes the large group's rows at
        # the head of the line), the limited one the store's.
        unlimited = Timed(store, "bench-unlimited", False)
        limited = Timed(store, "bench-limited", True)
        chunk = max(BATCH, args.jobs // args.chunks)
        for _ in range(args.chunks):
            if not args.db:
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as a pool's checkpointer
            unlimited.run(chunk)
            limited.run(chunk)
        for what, index in (("claims/s", 0), ("claims per CPU second", 1)):
            u, lim = unlimited.rates()[index], limited.rates()[index]
            print(f"{what}: unlimited {u:.0f}, limited {lim:.0f}, ratio {u / lim:.2f}x")
        unlimited.claimer.close()
        limited.claimer.close()
    finally:
        store.close()
        if schema is not None:
            drop_schema(args.db, schema)


HOLD = """
UPDATE jobs SET status = 'running', lease_owner = 'bench-holder', attempts = 1,
       lease_expires_at = 1e12, started_at = 0
 WHERE id IN (SELECT id FROM jobs WHERE grp = 'large' AND status = 'ready' ORDER BY id LIMIT 2)
"""


def saturate(store) -> None:
    """The large group at its limit: two of its rows running, held by an owner that
    never settles them (as a pool's long jobs would be), for the rest of the run."""
    if not store.list_jobs(status="running", name=NAME):
        store.transaction("holding two large rows", lambda conn: conn.execute(HOLD))


if __name__ == "__main__":
    main()
