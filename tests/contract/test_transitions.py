"""Transitions as values: every statement that moves a row is rendered from
``lifecycle``'s table, and applying it to a real row in each store (and, on PostgreSQL,
in its one-attempt and several-attempt forms) changes exactly the fields the table
says, to the values it says, and nothing else. R8, R12-R18, R23-R26, R31, R32, R37,
R44, R51.
"""
from __future__ import annotations

from jobpool import lifecycle
from jobpool.lifecycle import (ClearedIf, Earliest, Given, OneMoreAttempt, Shifted)
from jobpool.store.postgres import statements as pg_sql
from jobpool.store.sqlite import statements as sql
OWNER = "pool-t"
#: What the statements are applied with: each given value is distinct, so a column
#: written from the wrong one shows.
GIVEN = {"now": 1000.0, "run_at": 2000.0, "error": "given error", "crashes": 7,
         "result": b"given result", "owner": OWNER, "reset_state": True}
#: The row before, for each status a transition starts from; every field a transition
#: may change holds a value of its own.
BEFORE = {
    "running": {"status": "running", "lease_owner": OWNER, "lease_expires_at": 5000.0,
                "attempts": 2, "max_attempts": 2, "crashes": 1, "deferrals": 3,
                "run_at": 100.0, "line_at": 50.0, "last_error": "before", "progress": 40.0,
                "state": '{"n": 1}', "state_at": 90.0, "started_at": 95.0},
    "ready": {"status": "ready", "attempts": 1, "max_attempts": 4, "crashes": 1,
              "deferrals": 2, "run_at": 1e9, "line_at": 60.0, "last_error": "before",
              "progress": 10.0, "state": '{"n": 2}', "state_at": 80.0},
    "dead": {"status": "dead", "attempts": 3, "max_attempts": 3, "crashes": 2,
             "deferrals": 1, "run_at": 100.0, "line_at": 50.0, "last_error": "before",
             "progress": 70.0, "state": '{"n": 3}', "state_at": 85.0, "finished_at": 99.0},
}


def expected(transition: lifecycle.Transition, row: dict) -> dict:
    """The row after ``transition``, computed from the table alone."""
    after = dict(row, status=transition.status)
    for column, value in transition.sets:
        if isinstance(value, Given):
            after[column] = GIVEN[value.name]
        elif isinstance(value, Shifted):
            after[column] = row[value.column] + value.by
        elif isinstance(value, Earliest):
            after[column] = min(row[value.column], GIVEN[value.given])
        elif isinstance(value, ClearedIf):
            after[column] = None if GIVEN[value.flag] else row[value.column]
        elif isinstance(value, OneMoreAttempt):
            spent = row["attempts"] >= row["max_attempts"]
            after[column] = row["attempts"] + 1 if spent else row["max_attempts"]
        else:
            after[column] = value
    return after


class Rows:
    """Writes and reads a job's row in one store, as it is, in whichever table holds it."""

    def __init__(self, store, postgres: bool):
        self.store, self.postgres = store, postgres

    def _run(self, query, params=None):
        return self.store.transaction("test", lambda conn: _fetch(conn.execute(query, params or {})))

    def make(self, status: str) -> int:
        job_id = self.store.enqueue("t.job").id
        fields = BEFORE[status]
        if status == "dead":
            self.store.cancel(job_id)   # on PostgreSQL this moves it to finished_jobs
        table = "finished_jobs" if self.postgres and status == "dead" else "jobs"
        marks = "%({})s" if self.postgres else ":{}"
        sets = ", ".join(f"{c} = {marks.format(c)}" for c in fields)
        self._run(f"UPDATE {table} SET {sets} WHERE id = {marks.format('id')}",
                  dict(fields, id=job_id))
        return job_id

    def read(self, job_id: int) -> dict:
        tables = ("jobs", "finished_jobs") if self.postgres else ("jobs",)
        for table in tables:
            found = self._run(f"SELECT * FROM {table} WHERE id = {job_id}")
            if found:
                return found[0]
        raise AssertionError(f"job {job_id} is in no table")

    def apply(self, statement: str, params: dict) -> None:
        self._run(statement, params)


def _fetch(cursor):
    if cursor.description is None:
        return []
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def _attempt_log(job_id: int, attempt: int) -> dict:
    return {"pid": 1, "started_at": 95.0, "outcome": "test", "log_error": None,
            "exit_status": "0", "peak_rss": None, "cpu_s": None, "strays": None,
            "id": job_id, "attempt": attempt}


def _many(job_id: int, attempt: int) -> dict:
    return {"ids": [job_id], "attempts": [attempt], "run_ats": [GIVEN["run_at"]],
            "errors": [GIVEN["error"]], "crashes": [GIVEN["crashes"]],
            "results": [GIVEN["result"]], "pids": [1], "began": [95.0], "outcomes": ["test"],
            "log_errors": [None], "exit_statuses": [None], "peak_rsses": [None],
            "cpus": [None], "strays": [None],
            # R61: a success's own arrays
            "done_ids": [job_id], "done_attempts": [attempt], "done_results": [GIVEN["result"]],
            "done_pids": [1], "done_peak_rsses": [None], "done_cpus": [None],
            "done_strays": [None]}


def statements(postgres: bool) -> list[tuple[str, str, str]]:
    """(transition, form, statement) for every rendered statement of a store."""
    if not postgres:
        found = [(name, "one", text) for name, text in sql.SETTLE.items()]
        found += [("malformed", "one", sql.SETTLE_MALFORMED), ("cancel", "one", sql.CANCEL_READY),
                  ("retry_dead", "one", sql.RETRY_DEAD), ("run_now", "one", sql.RUN_NOW)]
        return found
    # A turn's settles as one statement (issue 25), each kind's step over its own rows.
    found = [(name, "turn", pg_sql.turn_statement((name,), False)) for name in pg_sql.TURN_KINDS]
    found += [("malformed", "one", pg_sql.SETTLE_MALFORMED),
              ("cancel", "one", pg_sql.CANCEL_READY), ("retry_dead", "one", pg_sql.RETRY_DEAD),
              ("release_in_doubt", "one", pg_sql.RELEASE_IN_DOUBT),
              ("run_now", "one", pg_sql.RUN_NOW)]
    return found


def test_every_transition_but_the_claim_has_a_statement_in_each_store():
    # The claim is rendered too (``sql.CLAIM_TAKE_TEMPLATE``, ``pg_sql.CLAIM``) and checked
    # by every test that claims; the in-doubt release exists on PostgreSQL alone.
    for postgres in (False, True):
        named = {name for name, _form, _text in statements(postgres)}
        wanted = set(lifecycle.TRANSITIONS) - {"claim"} - (set() if postgres else {"release_in_doubt"})
        assert named == wanted


def test_each_statement_changes_exactly_what_the_table_says(store_url, any_store):
    postgres = store_url.startswith("postgresql")
    table = Rows(any_store, postgres)
    for name, form, statement in statements(postgres):
        transition = lifecycle.TRANSITIONS[name]
        job_id = table.make(transition.source)
        before = table.read(job_id)
        attempt = before["attempts"]
        params = dict(GIVEN, ids=[job_id], held=[], held_attempts=[], **_attempt_log(job_id, attempt))
        if form == "turn":
            params.update(_many(job_id, attempt), kinds=[name])
        if not postgres:
            params["ids"] = f"[{job_id}]"
        table.apply(statement, params)
        after = table.read(job_id)
        want = expected(transition, before)
        # Every column the row has before and after, and every one the transition sets
        # that its table has (a PostgreSQL row that moved tables keeps no lease).
        compared = (set(before) & set(after)) | (set(transition.columns()) & set(after))
        # R61: a success's attempt line, written into its row by the settle itself
        # (NULL in every other row the table's transitions leave).
        kept = dict(pg_sql.DONE_LINE if postgres else sql.DONE_LINE_HERE)
        line = {column: after.get(column) for column in kept}
        given = {"owner": OWNER, "pid": 1, "exit_status": "0"}  # as ``_attempt_log`` gives
        assert line == ({column: given.get(field) for column, field in kept.items()}
                        if name == "done" else dict.fromkeys(kept)), name
        compared -= set(kept)
        wrong = {c: (after[c], want[c]) for c in compared if after[c] != want[c]}
        assert not wrong, f"{name} ({form}): column: (found, the table's) {wrong}"


def test_the_table_shadows_no_outcome_kind():
    # A transition named like an outcome kind (``CANCEL``) once replaced the kind, and
    # every cancelled child then crashed its supervisor's settle.
    kinds = ("DONE", "ERROR", "FATAL", "CRASH", "TIMEOUT", "RETRY", "DEFER", "RESCHEDULE",
             "RELEASE", "CANCEL", "EXPIRED", "OWNER_DIED", "INTERRUPTED", "UNSTARTED")
    assert [getattr(lifecycle, kind) for kind in kinds] == list(range(len(lifecycle.KIND_NAMES)))
