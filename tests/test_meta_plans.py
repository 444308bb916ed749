"""R54 on PostgreSQL: `jobs list --meta KEY=VALUE` reads a bounded number of rows
however many match, and lists them newest first (issue 28).

No index serves both the containment and the id order, and which plan the planner
picks (walk the primary key newest first, or read every match from the GIN index and
sort them) follows its estimate of how many rows match, which statistics often cannot
give. Two stores with planner statistics (ANALYZE) show both ways it goes wrong:

* a burst: 200 000 jobs of one tenant enqueued since the last ANALYZE (autovacuum held
  off, as on a busy store between its analyses), so most rows match a filter the
  statistics say nothing matches: the GIN index read all 200 000 matches and sorted them;
* wide metadata (a value past what ANALYZE keeps) on 200 000 rows, so the planner
  guesses 1 %: a filter matching one row walked the whole primary key.

Each listing's statement, as the store runs it, is planned and run with ``EXPLAIN
ANALYZE``, and the rows its plan reads from jobs and finished_jobs (from a table or
an index) are added up: at most three times ``META_NEAR`` (each part's near window),
however big the store. ``JOBPOOL_META_PLAN_ROWS`` sets the size (200 000 by default).
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import jobpool

ROWS = int(os.environ.get("JOBPOOL_META_PLAN_ROWS", "200000"))

#: Jobs before the statistics: every 10th ready, the rest done; 50 tenants, a request
#: id each (``wide``: and a note wider than ANALYZE keeps).
FILL = """
INSERT INTO {table} (id, queue, name, payload, serializer, priority, status, run_at, line_at,
                     attempts, max_attempts, created_at, meta{finished})
SELECT i, 'default', 'meta.n', convert_to('[[],{{}}]', 'UTF8'), 'json', 0, {status},
       1e9 + i, 1e9 + i, 1, 3, 1e9 + i,
       jsonb_build_object('tenant', {tenant}, 'req', 'r' || i{wide}){finished_values}
  FROM generate_series(%(low)s, %(high)s) AS i WHERE {which}
"""


def _fill(conn: Any, low: int, high: int, tenant: str, wide: bool = False) -> None:
    note = ", 'note', repeat(md5(i::text), 40)" if wide else ""
    for table, status, which, finished, values in (
            ("jobs", "'ready'", "i %% 10 = 0", "", ""),
            ("finished_jobs", "'done'", "i %% 10 <> 0", ", crashes, deferrals, finished_at",
             ", 0, 0, 1e9 + i + 1")):
        conn.execute(FILL.format(table=table, status=status, which=which, tenant=tenant,
                                 wide=note, finished=finished, finished_values=values),
                     {"low": low, "high": high})


@pytest.fixture(scope="module")
def pg_schema() -> Iterator:
    """A new store's URL and an autocommit connection to its schema, for each call;
    every schema made is dropped after the module."""
    import psycopg

    from jobpool.store.postgres.connection import parse_url
    from tests.conftest import PG_URL, _pg_admin
    admin = _pg_admin()
    made = []

    def make() -> tuple[str, Any]:
        schema = "jp_test_" + uuid.uuid4().hex[:12]
        made.append(schema)
        url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"
        jobpool.connect(url).close()
        conn = psycopg.connect(parse_url(url).conninfo, autocommit=True)
        conn.execute(f"SET search_path TO {schema}")
        return url, conn
    try:
        yield make
    finally:
        for schema in made:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()


@pytest.fixture(scope="module")
def burst(pg_schema) -> Iterator[str]:
    """``ROWS // 2`` jobs of 50 tenants, ANALYZE, then ``ROWS`` of tenant "burst"."""
    url, conn = pg_schema()
    _fill(conn, 1, ROWS // 2, "'t' || (i %% 50)")
    conn.execute("ANALYZE")
    for table in ("jobs", "finished_jobs"):
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    _fill(conn, ROWS // 2 + 1, ROWS // 2 + ROWS, "'burst'")
    conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), %s)", (ROWS // 2 + ROWS,))
    conn.close()
    yield url


@pytest.fixture(scope="module")
def wide(pg_schema) -> Iterator[str]:
    """``ROWS`` jobs whose metadata is wider than ANALYZE keeps, then ANALYZE."""
    url, conn = pg_schema()
    _fill(conn, 1, ROWS, "CASE WHEN i %% 10 = 1 THEN 'other' ELSE 'acme' END", wide=True)
    conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), %s)", (ROWS,))
    conn.execute("ANALYZE")
    conn.close()
    yield url


def _rows_read(plan: dict) -> int:
    """Rows a plan's nodes read from jobs or finished_jobs or their indexes: each scan's
    rows out, with those its filter and recheck dropped, over all its loops."""
    read = 0
    if plan.get("Relation Name") in ("jobs", "finished_jobs") or \
            plan["Node Type"] == "Bitmap Index Scan":
        read = round((plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
                      + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"])
    return read + sum(_rows_read(child) for child in plan.get("Plans", ()))


def _listed(url: str, **listing: Any) -> tuple[list[int], int]:
    """``list_jobs(**listing)``'s ids, and the rows the plan of the statement it ran
    read (planned and run again under the settings the store lists with)."""
    import psycopg

    from jobpool.store.postgres import statements as pg_sql
    from jobpool.store.postgres.connection import parse_url
    ran: list[tuple[str, Any]] = []
    execute = psycopg.Cursor.execute

    def recording(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        ran.append((str(query), params))
        return execute(cursor, query, params, **kwargs)
    store = jobpool.connect(url, readonly=True)
    psycopg.Cursor.execute = recording  # type: ignore[method-assign]
    try:
        ids = [job["id"] for job in store.list_jobs(newest_first=True, **listing)]
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        store.close()
    query, params = next((q, p) for q, p in reversed(ran) if "%(limit)s" in q)
    with psycopg.connect(parse_url(url).conninfo) as conn:
        conn.execute(f"SET search_path TO {parse_url(url).schema}")
        conn.execute(pg_sql.LISTING_PLANS)
        ((plan,),) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchall()
    return ids, _rows_read(plan[0]["Plan"])


def _bound() -> int:
    from jobpool.store.postgres.statements import META_NEAR
    return 3 * META_NEAR


def test_a_filter_most_rows_match_since_the_statistics_reads_a_page_newest_first(burst):
    newest = ROWS // 2 + ROWS
    ids, read = _listed(burst, meta={"tenant": "burst"}, limit=100)
    assert ids == list(range(newest, newest - 100, -1))
    assert read <= _bound(), read
    # The next page, by keyset, and one of a status only.
    ids, read = _listed(burst, meta={"tenant": "burst"}, limit=100, after=newest - 500)
    assert ids == list(range(newest - 501, newest - 601, -1)) and read <= _bound(), read
    ids, read = _listed(burst, meta={"tenant": "burst"}, status="ready", limit=20)
    assert ids == [i for i in range(newest, newest - 200, -1) if i % 10 == 0]
    assert read <= _bound(), read


def test_a_narrow_filter_the_statistics_cannot_see_reads_its_matches_through_the_index(wide):
    ids, read = _listed(wide, meta={"req": "r1234"}, limit=100)
    assert ids == [1234] and read <= _bound(), read
    ids, read = _listed(wide, meta={"tenant": "other", "req": f"r{ROWS - 9}"}, limit=100)
    assert ids == [ROWS - 9] and read <= _bound(), read
    # Most rows match, on a page far below the newest: near the keyset again.
    ids, read = _listed(wide, meta={"tenant": "acme"}, limit=10, after=ROWS // 2)
    assert ids == [i for i in range(ROWS // 2 - 1, ROWS // 2 - 13, -1) if i % 10 != 1][:10]
    assert read <= _bound(), read
