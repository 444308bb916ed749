"""How long `jobs list --meta KEY=VALUE` takes on PostgreSQL where the planner cannot
count the matches (R54, issue 28), with the bounded plan and with the planner's own.

Two stores are filled as tests/test_meta_plans.py fills them, each with statistics
(ANALYZE): a burst (``--rows`` jobs of one tenant enqueued after the statistics, half
as many before them) and wide metadata (``--rows`` jobs whose metadata is wider than
ANALYZE keeps). On each, a page of 100 (``list_jobs(meta=..., newest_first=True)``, as
the CLI asks it) is read ``--repeat`` times with the bounded plan (``META_NEAR``) and
with the plain statement the planner chooses for (each part's ``ORDER BY id DESC
LIMIT``), alternately, and the median of each is printed in ms; then the count of
what the page left out, to the CLI's 100 000.

    .venv/bin/python benchmarks/meta_listing.py --db postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python benchmarks/meta_listing.py --db ... --rows 1000000
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jobpool  # noqa: E402
from jobpool.store.postgres import statements as pg_sql  # noqa: E402

from tests.test_meta_plans import _fill  # noqa: E402


def _store(url: str, rows: int, kind: str) -> tuple[str, Any]:
    """A new schema filled for ``kind`` ("burst" or "wide"), and a function dropping it."""
    import psycopg

    from jobpool.store.postgres.connection import parse_url
    schema = "jp_bench_" + uuid.uuid4().hex[:12]
    made = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    jobpool.connect(made).close()
    conn = psycopg.connect(parse_url(made).conninfo, autocommit=True)
    conn.execute(f"SET search_path TO {schema}")
    if kind == "burst":
        _fill(conn, 1, rows // 2, "'t' || (i %% 50)")
        conn.execute("ANALYZE")
        for table in ("jobs", "finished_jobs"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        _fill(conn, rows // 2 + 1, rows // 2 + rows, "'burst'")
    else:
        _fill(conn, 1, rows, "CASE WHEN i %% 10 = 1 THEN 'other' ELSE 'acme' END", wide=True)
        conn.execute("ANALYZE")
    conn.close()

    def drop() -> None:
        with psycopg.connect(parse_url(url).conninfo, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return made, drop


def _timed(store: Any, meta: dict, planner: bool) -> float:
    """One page's read in ms; ``planner``: the plain statement, as before the bound."""
    plain = pg_sql.list_jobs
    if planner:
        pg_sql.list_jobs = lambda *a, **k: plain(*a, **dict(k, meta_near=False))  # type: ignore
    try:
        started = time.perf_counter()
        store.list_jobs(meta=meta, newest_first=True, limit=100)
        return (time.perf_counter() - started) * 1000
    finally:
        pg_sql.list_jobs = plain  # type: ignore[assignment]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a PostgreSQL URL (schemas are made "
                                                    "and dropped)")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    cases = {"burst": [{"tenant": "burst"}, {"req": "r1234"}],
             "wide": [{"tenant": "acme"}, {"req": "r1234"}]}
    print(f"{'store':<6} {'filter':<22} {'bounded ms':>11} {'planner ms':>11} "
          f"{'count ms':>9}")
    for kind, filters in cases.items():
        url, drop = _store(options.db, options.rows, kind)
        try:
            store = jobpool.connect(url, readonly=True)
            for meta in filters:
                took: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(options.repeat):
                    for planner in (False, True):
                        took[planner].append(_timed(store, meta, planner))
                started = time.perf_counter()
                store.count_jobs(meta=meta, newest_first=True, at_most=100_000)
                counted = (time.perf_counter() - started) * 1000
                print(f"{kind:<6} {str(meta):<22} {statistics.median(took[False]):>11.1f} "
                      f"{statistics.median(took[True]):>11.1f} {counted:>9.1f}")
            store.close()
        finally:
            drop()


if __name__ == "__main__":
    main()
