"""``jobpool doctor`` on PostgreSQL: what an operator needs to know about the queue's
health that the server does not say by itself (issue 12).

It reads, never writes: the schema's version, the jobs per status, how many dead
row versions the hot table carries (claims and settles rewrite its rows; vacuum
must keep up), the oldest open transaction in the database (which holds back
vacuum everywhere), and whether LISTEN/NOTIFY reaches this client (it does not
through a transaction-mode pooler, and then pools should use ``?pooler=transaction``).
Other roles' transactions are visible only to a role with ``pg_read_all_stats``
(or a superuser); prepared transactions and replication slots, which also hold
vacuum back, are not looked at yet.
"""
from __future__ import annotations

import select
import time
import uuid
from typing import NamedTuple

from jobpool.errors import StoreError
from jobpool.store import row_codec
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.postgres.connection import Target, open_connection
from jobpool.store.postgres.store import PostgresStore

try:
    import psycopg
    from psycopg import sql as pgsql
except ImportError:  # pragma: no cover - the store refused to open first
    psycopg = None  # type: ignore[assignment]

#: An open transaction older than this is reported as a problem: it keeps vacuum
#: from removing the dead row versions every claim and settle leaves behind.
OLD_TRANSACTION_S = 300.0
#: How long a NOTIFY may take to come back before LISTEN is called silent.
NOTIFY_WAIT_S = 2.0

HOT_TABLE = """
SELECT n_live_tup, n_dead_tup, extract(epoch FROM now() - last_autovacuum)::float8
  FROM pg_stat_user_tables WHERE schemaname = %(schema)s AND relname = 'jobs'
"""
#: A transaction holds back vacuum when it has a snapshot (xmin) or an id of its own.
OLDEST_TRANSACTION = """
SELECT extract(epoch FROM now() - xact_start)::float8, pid, application_name, state
  FROM pg_stat_activity
 WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND xact_start IS NOT NULL
   AND pid <> pg_backend_pid()
   AND datname = current_database()
 ORDER BY xact_start LIMIT 1
"""


#: R44: the columns of a table of the store, for the walk that finds malformed rows.
TABLE_COLUMNS = """
SELECT column_name FROM information_schema.columns
 WHERE table_schema = %(schema)s AND table_name = %(table)s ORDER BY ordinal_position
"""
#: The tables a job's row lives in: ready and running, then done and dead.
JOB_TABLES = ("jobs", "finished_jobs")


class PgReport(NamedTuple):
    """What doctor found on a PostgreSQL store; ``problems`` empty means healthy."""

    shown: str
    lines: list[str]
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(url: str) -> PgReport:
    store = PostgresStore(url, create=False, readonly=True)
    try:
        target = store.target
        lines: list[str] = []
        problems: list[str] = []
        version = store.read("reading the schema version", pg_sql.READ_SCHEMA_VERSION)
        revision, floor = version[0] if version else (None, None)
        lines.append(f"schema {target.schema}, version {revision or floor or '?'}")
        stats = store.stats()
        lines.append("jobs: " + ", ".join(f"{k} {stats[k]}" for k in
                                          ("ready", "scheduled", "running", "done", "dead")))
        count, named = _malformed_rows(store, target.schema)
        if count:
            lines.append(f"{count} malformed row(s): {row_codec.DOCTOR_NOTE}")
            problems += named
        hot = store.read("reading the hot table's statistics", HOT_TABLE, {"schema": target.schema})
        if hot:
            live, dead, since_vacuum = hot[0]
            vacuumed = "never" if since_vacuum is None else f"{since_vacuum:.0f} s ago"
            lines.append(f"hot table (jobs): {live} live rows, {dead} dead row versions, "
                         f"last autovacuum {vacuumed}")
        oldest = store.read("reading open transactions", OLDEST_TRANSACTION)
        if oldest:
            age, pid, application, state = oldest[0]
            text = (f"oldest open transaction: {age:.1f} s (pid {pid}, "
                    f"{application or 'no application name'}, {state})")
            lines.append(text)
            if age > OLD_TRANSACTION_S:
                problems.append(f"{text} holds back vacuum: the hot table grows until it ends")
        else:
            lines.append("oldest open transaction: none")
        if target.pooler:
            lines.append("LISTEN: off (?pooler=transaction): pools poll")
        else:
            waited = _notify_round_trip(target)
            if waited is None:
                problems.append(f"LISTEN: no notification came back within {NOTIFY_WAIT_S:g} s "
                                f"(behind a transaction-mode pooler? add ?pooler=transaction)")
            else:
                lines.append(f"LISTEN: works (a notification came back in {waited * 1000:.0f} ms)")
        return PgReport(store.path, lines, problems)
    finally:
        store.close()


def _malformed_rows(store: PostgresStore, schema: str) -> tuple[int, list[str]]:
    """R44: each row, whatever its status, that the codec refuses, named by id and
    column. The columns are typed here, so what can be wrong is a value (a NaN or
    infinite time, a count below zero) or a ``chain`` of the wrong shape: the
    conditions of ``row_codec`` find the suspects, and every chain is read. How many
    there are, and the first ``row_codec.DOCTOR_NAMES`` of them named."""
    named: list[str] = []
    count = 0
    for table in JOB_TABLES:
        columns = [r[0] for r in store.read("reading the columns of " + table, TABLE_COLUMNS,
                                            {"schema": schema, "table": table})
                   if r[0] in row_codec.COLUMNS]
        if not columns:
            continue
        # The chain and meta as JSON text, as the claim and get read them (the codec
        # reads one form).
        listed = ", ".join(f"{c}::text" if c in ("chain", "meta") else c for c in columns)
        query = (f"SELECT {listed} FROM {table} "
                 f"WHERE {row_codec.suspects(columns, 'postgres')} ORDER BY id")
        for row in store.read(f"reading the rows of {table}", query):
            line = row_codec.described(dict(zip(columns, row)))
            if line is not None:
                count += 1
                if len(named) < row_codec.DOCTOR_NAMES:
                    named.append(f"malformed row: {line}")
    if count > len(named):
        named.append(f"malformed rows: {count - len(named)} more")
    return count, named


def _notify_round_trip(target: Target) -> float | None:
    """Seconds for a NOTIFY on a fresh channel to reach a LISTEN; None if it never did."""
    channel = "jobpool_doctor_" + uuid.uuid4().hex[:12]
    listener = open_connection(target, application="jobpool-doctor")
    try:
        sender = open_connection(target, application="jobpool-doctor")
    except StoreError:
        listener.close()
        raise
    try:
        listener.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
        started = time.monotonic()
        sender.execute("SELECT pg_notify(%s, 'ping')", (channel,))
        deadline = started + NOTIFY_WAIT_S
        readable = select.poll()
        readable.register(listener.fileno(), select.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            readable.poll(left * 1000)
            if any(n.channel == channel for n in listener.notifies(timeout=0)):
                return time.monotonic() - started
        return None
    except psycopg.Error as exc:
        raise StoreError(f"checking LISTEN failed: {target.scrub(str(exc).strip())}") from None
    finally:
        listener.close()
        sender.close()


def describe(report: PgReport) -> list[str]:
    """The report as the CLI prints it: a headline, then one line per finding."""
    state = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    return [f"{report.shown}: {state}"] + [f"  {line}" for line in report.lines] + \
        [f"  problem: {problem}" for problem in report.problems]
