#!/usr/bin/env python3
"""Several supervisors on one PostgreSQL queue: how the work splits and what it costs.

    .venv/bin/python benchmarks/scaleout.py postgresql://postgres@127.0.0.1:5432/test \
        [--jobs 20000] [--supervisors 1,2,4] [--batch]

For each count N: a fresh schema, ``--jobs`` no-op jobs enqueued in one batch, then
N ``jobpool start --burst --procs 2`` processes started together, each with a host
id of its own (``JOBPOOL_HOST_ID``), as N hosts would be. Measured until the last
exits: jobs/s, the database's commits/s and WAL bytes a job (``pg_stat_database``,
``pg_current_wal_lsn()``, so the whole server's, taken before and after), and how
the jobs split between the supervisors (their attempt rows). On one machine the
supervisors, their children and the server share the cores, so this shows
correctness and the absence of collapse under contention, not scaling.

``--batch``: the jobs are the members of one closed batch (R34), so every settle
also updates that batch's one row, and the supervisors' settles of it wait on each
other's row lock; the run checks its callback ran once.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import jobpool  # noqa: E402
from jobpool.store.postgres.connection import parse_url  # noqa: E402

sys.path.insert(0, str(BENCH))
from compare import drop_schema, with_schema  # noqa: E402


def server_counters(admin) -> tuple[int, int]:
    """(commits so far in this database, WAL position in bytes)."""
    commits = admin.execute("SELECT xact_commit FROM pg_stat_database"
                            " WHERE datname = current_database()").fetchone()[0]
    wal = admin.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
    return int(commits), int(wal)


def run(url: str, supervisors: int, jobs: int, work: Path, batch: bool = False) -> dict:
    schema = f"bench_scale_{secrets.token_hex(4)}"
    store_url = with_schema(url, schema)
    counter = work / f"counter-{schema}.bin"
    counter.touch()
    env = dict(os.environ, PYTHONPATH=str(BENCH), BENCH_COUNTER=str(counter),
               PYTHONDONTWRITEBYTECODE="1")
    try:
        from bench_jobs import jobpool_jobs  # registers bench.noop for the enqueue
        del jobpool_jobs
        store = jobpool.connect(store_url)
        if batch:
            # The callback is a name no pool serves: it is counted, not run.
            with store.batch(on_complete=jobpool.Signature("bench.callback")) as members:
                members.add_many("bench.noop", [(i,) for i in range(jobs)])
        else:
            store.enqueue_many("bench.noop", [(i,) for i in range(jobs)])
        store.close()
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as admin:
            commits0, wal0 = server_counters(admin)
            started = time.perf_counter()
            pools = [subprocess.Popen(
                [sys.executable, "-m", "jobpool", "start", "--app", "bench_jobs.jobpool_jobs",
                 "--db", store_url, "--procs", "2", "--burst", "-q"],
                env=dict(env, JOBPOOL_HOST_ID=f"host-{k}"), cwd=BENCH,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for k in range(supervisors)]
            codes = [pool.wait(timeout=600) for pool in pools]
            seconds = time.perf_counter() - started
            commits1, wal1 = server_counters(admin)
            split = dict(admin.execute(
                f"SELECT split_part(owner, ':', 1), count(*) FROM {schema}.attempts"
                " GROUP BY 1 ORDER BY 1").fetchall())
            done = admin.execute(f"SELECT count(*) FROM {schema}.finished_jobs"
                                 " WHERE status = 'done'").fetchone()[0]
            twice = admin.execute(f"SELECT count(*) FROM (SELECT job_id FROM {schema}.attempts"
                                  " GROUP BY job_id HAVING count(*) > 1) AS t").fetchone()[0]
        if any(codes) or done != jobs:
            errors = " | ".join(pool.stderr.read()[-300:] for pool in pools if pool.stderr)
            raise SystemExit(f"{supervisors} supervisors: exit codes {codes}, {done} of {jobs} "
                             f"done: {errors}")
        if batch and admin_fired(url, schema) != 1:
            raise SystemExit(f"{supervisors} supervisors: the batch's callback did not run once")
        return {"supervisors": supervisors, "jobs": jobs, "batch": batch, "seconds": round(seconds, 2),
                "jobs_per_s": round(jobs / seconds), "commits_per_s": round((commits1 - commits0)
                                                                            / seconds),
                "wal_bytes_per_job": round((wal1 - wal0) / jobs), "split": split,
                "jobs_run_twice": twice}
    finally:
        drop_schema(url, schema)
        counter.unlink(missing_ok=True)


def admin_fired(url: str, schema: str) -> int:
    """How many callback jobs the batch made (they are not members)."""
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as admin:
        return admin.execute(f"SELECT count(*) FROM {schema}.all_jobs"
                             " WHERE name = 'bench.callback'").fetchone()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a postgresql:// URL (a schema of its own is made per run)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--supervisors", default="1,2,4")
    parser.add_argument("--batch", action="store_true",
                        help="the jobs are the members of one batch (R34)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    work = BENCH / ".work"
    work.mkdir(exist_ok=True)
    results = [run(args.url, int(n), args.jobs, work, args.batch)
               for n in args.supervisors.split(",")]
    print("| supervisors | jobs/s | commits/s | WAL bytes a job | jobs per supervisor | run twice |")
    print("|---:|---:|---:|---:|---|---:|")
    for r in results:
        split = ", ".join(str(v) for v in r["split"].values())
        print(f"| {r['supervisors']} | {r['jobs_per_s']:,} | {r['commits_per_s']:,} | "
              f"{r['wal_bytes_per_job']:,} | {split} | {r['jobs_run_twice']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
