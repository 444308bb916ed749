#!/usr/bin/env python3
"""PostgreSQL retention (R32): a sweep that deletes rows against one that drops a day's
partition, and what a ``finished_jobs`` partitioned by day would cost everything else.

    .venv/bin/python benchmarks/pg_retention.py postgresql://postgres@127.0.0.1:5432/test \
        [--rows 200000] [--lookups 3000] [--jobs 2000] [--pairs 4]

Two stores, each in a schema of its own, made by this build (every index a store has):

- ``plain``: ``finished_jobs`` as it is.
- ``parted``: ``finished_jobs`` partitioned by day of ``finished_at`` (``RANGE``), its
  indexes those of the plain table on every partition, its primary key ``(id,
  finished_at)``, as PostgreSQL requires of a unique index on a partitioned table.

Measured, each on the server's WAL position (``pg_current_wal_insert_lsn``: run it
under the machine's benchmark lock, as it counts every writer on the server):

1. The sweep of ``--rows`` done rows finished two days ago, with a CHECKPOINT first (a
   day-old page is first touched after the last checkpoint, so its first change writes a
   full-page image, as a real sweep's does): on ``plain`` as ``store.sweep`` runs it (the
   store's ``PURGE_FINISHED`` in batches of 500 until one comes up short) and the VACUUM
   that must follow it, then the same again with ``wal_compression = lz4`` (the full-page
   images compressed); on ``parted`` ``DROP TABLE`` of the day's partition.
2. Reads by id, the way ``Handle.result``, ``jobs show``, R26's in-doubt look and a dead
   retry find a finished row: ``--lookups`` primary-key reads of random ids, on ``plain``
   and on ``parted`` with 2 partitions (``result_ttl`` of a day) and with 31 (30 days).
3. The settle (the hot path): ``--jobs`` no-op jobs drained by a real ``jobpool start
   --burst --procs 2`` on each store, in ``--pairs`` alternating pairs: jobs/s and WAL
   per job, the partitioned store's settles moving rows into today's partition.
"""
from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import jobpool  # noqa: E402
from jobpool.store.postgres import statements as pg_sql  # noqa: E402
from jobpool.store.postgres.connection import parse_url  # noqa: E402

from compare import drop_schema, with_schema  # noqa: E402

DAY = 86400.0

#: Done rows finished at ``%(at)s`` and after, one a millisecond: no-op results, a
#: success's line (R61) in every row, a retry's attempt row for one in twenty.
FILL_FINISHED = """
INSERT INTO finished_jobs (id, queue, name, payload, serializer, priority, status, run_at,
                           line_at, attempts, crashes, deferrals, result, created_at,
                           started_at, finished_at, done_owner, done_pid, done_peak_rss,
                           done_cpu_s, done_strays)
SELECT i, 'default', 'bench.noop', '[[0],{}]', 'json', 0, 'done', %(at)s, i,
       1, 0, 0, 'null', %(at)s, %(at)s + i / 1000.0, %(at)s + i / 1000.0 + 0.001,
       'host:1234:abcdef', 1234, 30000000, 0.001, 0
  FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i
"""
FILL_ATTEMPTS = """
INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, outcome, error)
SELECT i, 1, 'host:1234:abcdef', 1234, %(at)s, %(at)s + 0.001, 'failed', 'ValueError: x'
  FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i WHERE i %% 20 = 0
"""
WAL_AT = "SELECT pg_current_wal_insert_lsn()"
WAL_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)::bigint"


def connect(url: str) -> psycopg.Connection:
    target = parse_url(url)
    return psycopg.connect(target.conninfo, autocommit=True,
                           options=f"-c search_path={target.schema}")


def make_store(url: str) -> None:
    jobpool.connect(url).close()


def partition_finished(conn: psycopg.Connection, days: list[float]) -> None:
    """Swap the store's ``finished_jobs`` for one partitioned by day over ``days``
    (each a day's start, server clock), with the same indexes on every partition."""
    indexes = [r[0] for r in conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = 'finished_jobs' AND indexname <> 'finished_jobs_pkey'")]
    conn.execute("DROP VIEW all_jobs")
    conn.execute("ALTER TABLE finished_jobs RENAME TO finished_flat")
    for definition in indexes:  # the names go with the new table
        conn.execute(sql.SQL("DROP INDEX {}").format(
            sql.Identifier(definition.split(" INDEX ", 1)[1].split(" ON ", 1)[0])))
    conn.execute("CREATE TABLE finished_jobs (LIKE finished_flat INCLUDING DEFAULTS "
                 "INCLUDING CONSTRAINTS, PRIMARY KEY (id, finished_at)) "
                 "PARTITION BY RANGE (finished_at)")
    conn.execute("DROP TABLE finished_flat")
    for definition in indexes:
        conn.execute(definition.replace(" ONLY ", " "))
    for start in days:
        add_day(conn, start)
    conn.execute(pg_sql.CREATE_ALL_JOBS)


def add_day(conn: psycopg.Connection, start: float) -> str:
    name = f"finished_day_{int(start // DAY)}"
    conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF finished_jobs FOR VALUES FROM ({}) TO ({})")
                 .format(sql.Identifier(name), sql.Literal(start), sql.Literal(start + DAY)))
    return name


def fill(conn: psycopg.Connection, first: int, rows: int, at: float) -> None:
    given = {"first": first, "last": first + rows - 1, "at": at}
    conn.execute(FILL_FINISHED, given)
    conn.execute(FILL_ATTEMPTS, given)
    conn.execute("ANALYZE finished_jobs")
    conn.execute("ANALYZE attempts")


def measured(conn: psycopg.Connection, action) -> tuple[float, int, object]:
    """Run ``action()``; its seconds, the WAL it wrote in bytes, and its answer."""
    conn.execute("CHECKPOINT")
    lsn = conn.execute(WAL_AT).fetchone()[0]
    started = time.perf_counter()
    answer = action()
    seconds = time.perf_counter() - started
    return seconds, conn.execute(WAL_SINCE, (lsn,)).fetchone()[0], answer


def sweep_by_delete(conn: psycopg.Connection, before: float) -> int:
    total = 0
    while True:
        done = conn.execute(pg_sql.PURGE_FINISHED, {
            "status": "done", "before": before, "limit": 500}).fetchone()[0]
        total += done
        if done < 500:
            return total


def lookups(conn: psycopg.Connection, ids: list[int]) -> float:
    """Mean µs of one primary-key read of a finished row, prepared as a driver's is."""
    statement = "SELECT id, status, result, finished_at FROM finished_jobs WHERE id = %s"
    for job_id in ids[:200]:
        conn.execute(statement, (job_id,), prepare=True).fetchone()
    started = time.perf_counter()
    for job_id in ids:
        conn.execute(statement, (job_id,), prepare=True).fetchone()
    return (time.perf_counter() - started) / len(ids) * 1e6


def drain(url: str, conn: psycopg.Connection, jobs: int, env: dict) -> tuple[float, float]:
    """``jobs`` no-op jobs drained by a burst pool: its jobs/s and WAL bytes a job
    (the enqueue excluded)."""
    from bench_jobs import jobpool_jobs  # registers bench.noop for the enqueue
    del jobpool_jobs
    store = jobpool.connect(url)
    try:
        store.enqueue_many("bench.noop", [(i,) for i in range(jobs)])
    finally:
        store.close()
    lsn = conn.execute(WAL_AT).fetchone()[0]
    started = time.perf_counter()
    pool = subprocess.run(
        [sys.executable, "-m", "jobpool", "start", "--app", "bench_jobs.jobpool_jobs",
         "--db", url, "--procs", "2", "--burst", "-q"],
        env=env, cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    seconds = time.perf_counter() - started
    wal = conn.execute(WAL_SINCE, (lsn,)).fetchone()[0]
    if pool.returncode != 0:
        raise SystemExit(f"the pool failed: {pool.stderr.strip()[-400:]}")
    left = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    if left:
        raise SystemExit(f"the pool left {left} jobs: {pool.stderr.strip()[-400:]}")
    return jobs / seconds, wal / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--lookups", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    tag = secrets.token_hex(3)
    plain_url = with_schema(args.url, f"bench_ret_plain_{tag}")
    parted_url = with_schema(args.url, f"bench_ret_parted_{tag}")
    try:
        make_store(plain_url)
        make_store(parted_url)
        with connect(plain_url) as plain, connect(parted_url) as parted:
            now = plain.execute(pg_sql.SERVER_NOW).fetchone()[0]
            today = now // DAY * DAY
            old = today - 2 * DAY
            partition_finished(parted, [old, today - DAY, today, today + DAY])
            for conn in (plain, parted):
                fill(conn, 1, args.rows, old)

            print(f"1. retention of {args.rows} done rows (1 in 20 with an attempt row)")
            seconds, wal, gone = measured(plain, lambda: sweep_by_delete(plain, old + DAY))
            print(f"   DELETE in batches of 500: {gone} rows, {seconds * 1e3:.0f} ms, "
                  f"{wal / 1e6:.1f} MB of WAL ({wal / max(gone, 1):.0f} B a row, "
                  f"{seconds / max(gone, 1) * 1e6:.1f} µs a row)")
            vac_s, vac_wal, _ = measured(plain, lambda: plain.execute(
                "VACUUM finished_jobs, attempts"))
            print(f"   the VACUUM after it: {vac_s * 1e3:.0f} ms, {vac_wal / 1e6:.1f} MB of WAL "
                  f"({vac_wal / max(gone, 1):.0f} B a row)")
            fill(plain, 1, args.rows, old)  # the same day again, swept with its pages compressed
            plain.execute("SET wal_compression = lz4")
            lz_s, lz_wal, _ = measured(plain, lambda: sweep_by_delete(plain, old + DAY))
            lzv_s, lzv_wal, _ = measured(plain, lambda: plain.execute(
                "VACUUM finished_jobs, attempts"))
            plain.execute("RESET wal_compression")
            print(f"   the same with wal_compression = lz4: DELETE {lz_s * 1e3:.0f} ms, "
                  f"{lz_wal / max(gone, 1):.0f} B a row; VACUUM {lzv_s * 1e3:.0f} ms, "
                  f"{lzv_wal / max(gone, 1):.0f} B a row")
            day = f"finished_day_{int(old // DAY)}"

            drop_s, drop_wal, _ = measured(parted, lambda: parted.execute(
                sql.SQL("DROP TABLE {}").format(sql.Identifier(day))))
            print(f"   DROP TABLE of the day's partition of finished_jobs: {drop_s * 1e3:.1f} ms, "
                  f"{drop_wal} B of WAL (attempts, partitioned too, would be another)")

            print(f"2. {args.lookups} reads of a finished row by id (µs each, mean)")
            for conn in (plain, parted):
                fill(conn, args.rows + 1, args.rows, today - DAY)
            ids = [random.randint(args.rows + 1, 2 * args.rows) for _ in range(args.lookups)]
            for conn in (plain, parted):  # new jobs' ids after every finished row's
                conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), %s)",
                             (2 * args.rows + 1,))
            # Rounds alternated, the best of each kept: the machine is shared.
            flat, two = [], []
            for _ in range(3):
                flat.append(lookups(plain, ids))
                two.append(lookups(parted, ids))  # yesterday's, today's and tomorrow's
            extra = [add_day(parted, old - k * DAY) for k in range(28)]
            parted.execute("ANALYZE finished_jobs")
            many = []
            for _ in range(3):
                flat.append(lookups(plain, ids))
                many.append(lookups(parted, ids))
            flat, two, many = min(flat), min(two), min(many)
            print(f"   plain {flat:.1f}; partitioned, 3 days {two:.1f} ({two / flat:.2f}×); "
                  f"31 days {many:.1f} ({many / flat:.2f}×)")
            for name in extra:
                parted.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))

            print(f"3. drain of {args.jobs} no-op jobs, --procs 2, {args.pairs} pairs")
            counter = tempfile.NamedTemporaryFile(prefix="retention-counter-", delete=False)
            counter.close()
            # The pool imports this checkout's jobpool, whatever the interpreter has.
            env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(BENCH), str(ROOT))),
                       BENCH_COUNTER=counter.name, PYTHONDONTWRITEBYTECODE="1")
            rates: dict[str, list[float]] = {"plain": [], "parted": []}
            wals: dict[str, list[float]] = {"plain": [], "parted": []}
            for pair in range(args.pairs):
                order = [("plain", plain_url, plain), ("parted", parted_url, parted)]
                for label, url, conn in (order if pair % 2 == 0 else order[::-1]):
                    rate, per_job = drain(url, conn, args.jobs, env)
                    rates[label].append(rate)
                    wals[label].append(per_job)
                print(f"   pair {pair + 1}: plain {rates['plain'][-1]:.0f} jobs/s "
                      f"{wals['plain'][-1]:.0f} B/job; partitioned {rates['parted'][-1]:.0f} "
                      f"jobs/s {wals['parted'][-1]:.0f} B/job")
            os.unlink(counter.name)
            ratio = statistics.median(p / f for p, f in zip(rates["parted"], rates["plain"]))
            print(f"   median jobs/s ratio partitioned ÷ plain: {ratio:.3f}; WAL a job "
                  f"{statistics.median(wals['plain']):.0f} against "
                  f"{statistics.median(wals['parted']):.0f} B")
    finally:
        drop_schema(args.url, f"bench_ret_plain_{tag}")
        drop_schema(args.url, f"bench_ret_parted_{tag}")


if __name__ == "__main__":
    main()
