"""A job's attempt log (R19a) as both stores keep it (R61): a clean success's line
in the job's own row, every other line a row of ``attempts``.

A success is the attempt that ends a job, so its line needs no row of its own: the
settle that marks the job done writes the line's measures into the job's row
(``DONE_LINE``; its attempt, start and end are the row's ``attempts``, ``started_at``
and ``finished_at``, its outcome ``done``, with no error). Every reader of the log
reads both halves through ``log_sql``, written once here for both dialects, so no
reader shows a job's log without its success.
"""
from __future__ import annotations

from typing import Callable

#: The fields of one attempt line, in the order a reader of the log gets them.
LINE_FIELDS = ("attempt", "owner", "pid", "started_at", "ended_at", "outcome", "error",
               "exit_status", "peak_rss", "cpu_s", "strays")

#: A success's line in its job's row: the columns (NULL on every other row), each with
#: the field it holds, which is also the settle parameter it is written from
#: (``rows.attempt_params``' names).
DONE_LINE = (("done_owner", "owner"), ("done_pid", "pid"), ("done_peak_rss", "peak_rss"),
             ("done_cpu_s", "cpu_s"), ("done_strays", "strays"))
DONE_LINE_COLUMNS = tuple(column for column, _field in DONE_LINE)
#: SQLite's rows keep the line's exit status too (a child's answer says ``0``), so its
#: log shows a success exactly as the line in ``attempts`` did; PostgreSQL's show none.
DONE_EXIT_STATUS = ("done_exit_status", "exit_status")

#: The line's fields that are the job row's own columns, or constants.
_FROM_ROW = {"attempt": "attempts", "started_at": "started_at", "ended_at": "finished_at",
             "outcome": "'done'"}


def log_sql(rows_table: str, seq: str, job: Callable[[str], str] | None,
            done_line: tuple[tuple[str, str], ...] = DONE_LINE) -> str:
    """The attempt log's lines, oldest first: ``attempts``' rows in ``seq`` order
    (that table's insertion order), then a success's line from ``rows_table`` (the
    table a done row lives in, ``done_line`` its columns). ``job``: how a statement
    names its ``id`` parameter, for one job's log; None reads every job's, each line
    with its ``job_id`` (in order of its end, then of ``seq``)."""
    fields = ", ".join(LINE_FIELDS)
    from_row = {**_FROM_ROW, **{field: column for column, field in done_line}}
    own = f" WHERE job_id = {job('id')}" if job else ""
    done = f"id = {job('id')} AND " if job else ""
    lines = (f"SELECT job_id, {seq} AS seq, {fields} FROM attempts{own}\n"
             f"        UNION ALL\n"
             f"        SELECT id, NULL, {', '.join(from_row.get(f, 'NULL') for f in LINE_FIELDS)}\n"
             f"          FROM {rows_table} WHERE {done}done_owner IS NOT NULL")
    order = "seq IS NULL, seq" if job else "ended_at, seq IS NULL, seq"
    shown = fields if job else f"job_id, {fields}"
    return f"SELECT {shown}\n  FROM ({lines}) AS lines\n ORDER BY {order}\n"
