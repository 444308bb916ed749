#!/usr/bin/env python3
"""A PostgreSQL queue with a 1 000 000-row backlog and a transaction left open.

    .venv/bin/python benchmarks/soak.py postgresql://postgres@127.0.0.1:5432/test \
        [--backlog 1000000] [--drain 50000]

What a forgotten ``BEGIN`` in some application does to the queue: while it stays
open, vacuum cannot remove the row versions that claims and settles leave
behind, so the claim's index walk has more to skip. The script fills a fresh
schema with ``--backlog`` no-op jobs, then times a 64-row claim (inside a
transaction it rolls back, so the probe changes nothing) 200 times: before,
while a pool drains ``--drain`` jobs with another session's transaction held
open the whole time, then with that transaction still open once the pool is gone (the
floor the dead entries set, with nothing else running), and after that transaction ends
and the table is vacuumed.
Beside each claim during the drain and once the pool is gone, the floors on the same
connection: a bare ``SELECT 1`` and a bare update by id of the 64 rows the claim holds
(in its transaction, rolled back), so a claim's time reads against what any statement takes at that moment.
It also prints what ``jobpool doctor`` reports during the drain. ``--explain``: at the
end of the drain, with the transaction still open, the plans of the claim (from the
front and from a place), of the expired-lease look (R23) and of a bare 64-row update by
id, each run under ``EXPLAIN (ANALYZE, BUFFERS)`` and rolled back: where the time goes.
The expired-lease look is then also timed beside the claim during the drain.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

import jobpool  # noqa: E402
from jobpool.lifecycle import DEFAULT_POLICY, LEASE_SLACK  # noqa: E402
from jobpool.store.postgres import doctor as pg_doctor  # noqa: E402
from jobpool.store.postgres import statements as pg_sql  # noqa: E402
from jobpool.store.postgres.connection import parse_url  # noqa: E402

sys.path.insert(0, str(BENCH))
from compare import drop_schema, with_schema  # noqa: E402

#: Rows a probe claims, as a pool with 64 free slots would.
PROBE_ROWS = 64


def probe_claims(store_url: str, count: int, stop: threading.Event | None = None,
                 placed: list[float] | None = None,
                 floors: dict[str, list[float]] | None = None) -> list[float]:
    """Milliseconds for a 64-row claim from the front, ``count`` times (or until
    ``stop``), each rolled back so the queue is left as it was. ``placed``: after each,
    one from a place in line as a pool's claimer makes it (R62, when this tree has it),
    timed into that list: the place is the first row the probe before it found, as for a
    claimer whose last claim ended there. ``floors``: after each, the floors beside it
    on the same connection, timed into their lists: a bare round trip (``SELECT 1``)
    and a bare update by id of the 64 rows the probe holds, in its transaction (so it
    waits for no other session), rolled back: what any statement, and any 64-row write,
    takes on the machine at that moment."""
    target = parse_url(store_url)
    params = dict(pg_sql.claim_params(["bench.noop"], {}, DEFAULT_POLICY), owner="soak-probe",
                  slack=LEASE_SLACK, queue="default", limit=PROBE_ROWS)
    claim_after = getattr(pg_sql, "CLAIM_AFTER", None)
    times = []
    with psycopg.connect(target.conninfo, options=f"-c search_path={target.schema}") as conn:
        while len(times) < count and not (stop and stop.is_set()):
            started = time.perf_counter()
            rows = conn.execute(pg_sql.CLAIM, dict(params, now=time.time())).fetchall()
            times.append((time.perf_counter() - started) * 1000)
            if floors is not None:
                # On the rows this claim holds (in its transaction): waits for no one.
                started = time.perf_counter()
                conn.execute("UPDATE jobs SET status = 'running' WHERE id = ANY(%(ids)s::bigint[])",
                             {"ids": [row[0] for row in rows]})
                floors.setdefault("update_64_by_id", []).append(
                    (time.perf_counter() - started) * 1000)
            conn.rollback()
            if len(rows) != PROBE_ROWS:
                raise SystemExit(f"a probe claimed {len(rows)} rows, not {PROBE_ROWS}")
            if placed is not None and claim_after is not None:
                first = min(rows, key=lambda row: (-row[9], row[10], row[0]))
                started = time.perf_counter()
                found = conn.execute(claim_after, dict(
                    params, now=time.time(), after_priority=first[9], after_line=first[10],
                    after_id=first[0])).fetchall()
                placed.append((time.perf_counter() - started) * 1000)
                conn.rollback()
                if len(found) != PROBE_ROWS:
                    raise SystemExit(f"a probe claimed {len(found)} rows, not {PROBE_ROWS}")
            if floors is not None:
                started = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                floors.setdefault("select_1", []).append(
                    (time.perf_counter() - started) * 1000)
                conn.rollback()
            if stop is not None:
                time.sleep(0.05)
    return times


def probe_expired(store_url: str, stop: threading.Event) -> list[float]:
    """Milliseconds for the pool's expired-lease look (R23, ``RECLAIMABLE_EXPIRED``,
    which a pool runs at each poll), every 50 ms until ``stop``, rolled back."""
    target = parse_url(store_url)
    times = []
    with psycopg.connect(target.conninfo, options=f"-c search_path={target.schema}") as conn:
        while not stop.is_set():
            started = time.perf_counter()
            conn.execute(pg_sql.RECLAIMABLE_EXPIRED, {"now": time.time()}).fetchall()
            times.append((time.perf_counter() - started) * 1000)
            conn.rollback()
            time.sleep(0.05)
    return times


def explain_all(store_url: str) -> dict[str, list[str]]:
    """R62's claim from the front and from a place, the expired-lease look and a bare
    64-row update by id, each under ``EXPLAIN (ANALYZE, BUFFERS)`` in a transaction
    rolled back (run while the other session's transaction is open)."""
    target = parse_url(store_url)
    params = dict(pg_sql.claim_params(["bench.noop"], {}, DEFAULT_POLICY), owner="soak-probe",
                  slack=LEASE_SLACK, queue="default", limit=PROBE_ROWS, now=time.time())
    plans: dict[str, list[str]] = {}
    with psycopg.connect(target.conninfo, options=f"-c search_path={target.schema}") as conn:
        def explain(label: str, text: str, values: dict) -> list[tuple]:
            plans[label] = [r[0] for r in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + text, values).fetchall()]
            conn.rollback()
            return []
        rows = conn.execute(pg_sql.CLAIM, params).fetchall()
        conn.rollback()
        first = min(rows, key=lambda row: (-row[9], row[10], row[0]))
        explain("claim from the front", pg_sql.CLAIM, params)
        if getattr(pg_sql, "CLAIM_AFTER", None):
            explain("claim from a place", pg_sql.CLAIM_AFTER, dict(
                params, after_priority=first[9], after_line=first[10], after_id=first[0]))
        explain("expired-lease look", pg_sql.RECLAIMABLE_EXPIRED, {"now": time.time()})
        explain("bare 64-row update by id",
                "UPDATE jobs SET status = 'running' WHERE id = ANY(%(ids)s::bigint[])",
                {"ids": [row[0] for row in rows]})
    return plans


def summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"claims": len(times), "p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "max_ms": round(ordered[-1], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--drain", type=int, default=50_000)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--explain", action="store_true",
                        help="the statements' plans, analyzed, at the end of the drain")
    args = parser.parse_args()
    schema = f"bench_soak_{secrets.token_hex(4)}"
    store_url = with_schema(args.url, schema)
    work = BENCH / ".work"
    work.mkdir(exist_ok=True)
    counter = work / f"counter-{schema}.bin"
    counter.touch()
    env = dict(os.environ, PYTHONPATH=str(BENCH), BENCH_COUNTER=str(counter),
               PYTHONDONTWRITEBYTECODE="1")
    result: dict = {"backlog": args.backlog, "drained": args.drain}
    try:
        from bench_jobs import jobpool_jobs  # registers bench.noop
        del jobpool_jobs
        store = jobpool.connect(store_url)
        for start in range(0, args.backlog, 100_000):
            store.enqueue_many("bench.noop", [(i,) for i in range(start, min(start + 100_000,
                                                                             args.backlog))])
        store.close()
        admin = psycopg.connect(parse_url(args.url).conninfo, autocommit=True)
        admin.execute(f"VACUUM ANALYZE {schema}.jobs")
        result["before"] = summary(probe_claims(store_url, 200))
        # Another application opens a transaction and forgets it.
        forgetful = psycopg.connect(parse_url(args.url).conninfo,
                                    application_name="soak-forgetful-app")
        forgetful.execute("SELECT txid_current()")
        pool = subprocess.Popen(
            [sys.executable, "-m", "jobpool", "start", "--app", "bench_jobs.jobpool_jobs",
             "--db", store_url, "--procs", "2", "--max-jobs", str(args.drain), "-q"],
            env=env, cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stop = threading.Event()
        during: list[float] = []
        placed: list[float] = []
        floors: dict[str, list[float]] = {}
        prober = threading.Thread(target=lambda: during.extend(
            probe_claims(store_url, 10**9, stop, placed, floors)))
        expired: list[float] = []
        expirer = threading.Thread(target=lambda: expired.extend(probe_expired(store_url, stop)))
        started = time.perf_counter()
        prober.start()
        if args.explain:
            expirer.start()
        time.sleep(5)
        result["doctor_during"] = pg_doctor.check(store_url).lines
        code = pool.wait(timeout=3600)
        result["drain_seconds"] = round(time.perf_counter() - started, 1)
        stop.set()
        prober.join()
        if args.explain:
            expirer.join()
        if code != 0:
            raise SystemExit(f"the pool exited {code}: {pool.stderr.read()[-500:]}")
        # The transaction still open, the pool gone: what the dead entries cost a claim
        # on a machine with nothing else to do (the floor the open transaction sets).
        idle_placed: list[float] = []
        idle_floors: dict[str, list[float]] = {}
        result["open_pool_gone"] = summary(probe_claims(store_url, 200, placed=idle_placed,
                                                        floors=idle_floors))
        for name, times in idle_floors.items():
            result[f"open_pool_gone_floor_{name}"] = summary(times)
        if idle_placed:
            result["open_pool_gone_from_a_place"] = summary(idle_placed)
        if args.explain:
            result["plans_at_end"] = explain_all(store_url)
        result["during"] = summary(during)
        if expired:
            result["expired_lease_look_during"] = summary(expired)
        if placed:
            result["during_from_a_place"] = summary(placed)
        for name, times in floors.items():
            result[f"during_floor_{name}"] = summary(times)
        result["dead_rows_at_end"] = admin.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = %s"
            " AND relname = 'jobs'", (schema,)).fetchone()[0]
        forgetful.close()
        admin.execute(f"VACUUM {schema}.jobs")
        result["after"] = summary(probe_claims(store_url, 200))
        admin.close()
    finally:
        drop_schema(args.url, schema)
        counter.unlink(missing_ok=True)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
