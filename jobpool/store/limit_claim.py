"""A limited claim's reads and writes (R35, R36) over either store's SQL, inside the
claim's own transaction.

``limits.plan_claim`` decides which rows a claim takes; this is what it reads
and writes to decide. One class serves SQLite (both cores) and PostgreSQL: the
statements have the same names and parameters in ``store/sqlite/statements.py`` and
``store/postgres/statements.py``, and ``query(text, params)`` runs one on the claim's
connection. PostgreSQL's page locks each group's row (``FOR UPDATE SKIP LOCKED``:
a group another host is claiming is skipped this turn, never waited for), and a
queue's limit row is locked before its running jobs are counted; since the page
counts a group's running jobs in a snapshot taken before its locks, the claim
statement counts them again for each chosen row (``limits.Picked.caps``), so two
hosts can never both take the last free place. SQLite has one writer at a time.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

from jobpool.limits import Lane, LaneState, LimitPlan, plan_claim

Query = Callable[[str, dict], list]


class SqlLimitedSource:
    """``limits.LimitedSource`` over a store's statements (see the module docstring):
    each read and write is one statement, a page of lanes included."""

    def __init__(self, statements: ModuleType, query: Query, claim: "LimitedClaim") -> None:
        self.sql = statements
        self.query = query
        self._probe_unlimited = claim.probe_unlimited
        self._probe_params = claim.probe_params
        self._listed: dict[tuple[str, ...], Any] = {}

    def listed(self, names: Sequence[str]) -> Any:
        """The limited names as the statements take them, encoded once per set."""
        key = tuple(names)
        found = self._listed.get(key)
        if found is None:
            found = self._listed[key] = self.sql.listed(key)
        return found

    def running_in_queue(self, queue: str) -> int:
        if self.sql.LOCK_QUEUE_LIMIT is not None:
            self.query(self.sql.LOCK_QUEUE_LIMIT, {"queue": queue})
        return int(self.query(self.sql.RUNNING_IN_QUEUE, {"queue": queue})[0][0])

    def lane_page(self, queue: str, names: Sequence[str], offset: int, count: int,
                  now: float) -> list[LaneState]:
        return [LaneState(Lane(*row[:7]), bool(row[7]), row[8], row[9], int(row[10]),
                          None if row[11] is None else (row[11], row[12], row[13]))
                for row in self.query(self.sql.LANE_PAGE, {
                    "queue": queue, "names": self.listed(names), "count": count,
                    "offset": offset, "now": now})]

    def probe_lane(self, lane: Lane, now: float, count: int) -> list[tuple[int, int, float]]:
        return self.query(self.sql.PROBE_LANE, {
            "queue": lane.queue, "priority": lane.priority, "name": lane.name, "grp": lane.group,
            "now": now, "count": count})

    def drop_lane_if_empty(self, lane: Lane) -> None:
        self.query(self.sql.DROP_EMPTY_LANE, {
            "id": lane.id, "seq": lane.seq, "queue": lane.queue, "priority": lane.priority,
            "name": lane.name, "grp": lane.group})

    def probe_unlimited(self, queue: str, now: float,
                        count: int) -> list[tuple[int, int, float]]:
        if self._probe_unlimited is None:
            return []
        return self.query(self._probe_unlimited, dict(self._probe_params, queue=queue, now=now,
                                                      count=count))

    def served(self, lanes: Iterable[Lane], now: float) -> None:
        self.query(self.sql.SERVE_LANES, {
            "now": now, "ids": self.sql.listed(lane.id for lane in lanes)})

    def set_tokens(self, group: tuple[str, str], tokens: float, now: float) -> None:
        self.query(self.sql.SET_TOKENS, {"name": group[0], "grp": group[1], "tokens": tokens,
                                         "now": now})


class LimitedClaim:
    """What a claimer holds while its pool obeys limits: the plan, and its two
    statements (a claim of chosen ids, a probe of its unlimited names)."""

    def __init__(self, plan: LimitPlan, claim_ids: str, probe_unlimited: str | None,
                 probe_params: dict | None = None, take: str | None = None) -> None:
        self.plan = plan
        self.claim_ids = claim_ids
        #: SQLite's: the take of each row ``claim_ids`` picks (R9; PostgreSQL's
        #: ``claim_ids`` claims them itself).
        self.take = take
        self.probe_unlimited = probe_unlimited
        self.probe_params = probe_params or {}
        self.has_unlimited = probe_unlimited is not None


def sqlite_limited_claim(plan: LimitPlan, names: Sequence[str], policies: dict,
                         default_policy: Any) -> LimitedClaim:
    """A SQLite core's limited claim for a pool serving ``names``."""
    from jobpool.store.sqlite import statements as sql
    unlimited = [n for n in names if n not in plan.names]
    claim_ids, probe = sql.limited_claim_sql(names, unlimited, policies, default_policy)
    return LimitedClaim(plan, claim_ids.pick, probe, take=claim_ids.take)


def rows_of(conn: Any) -> Query:
    """``query`` over a psycopg connection: a statement's rows, none for a write
    without RETURNING."""
    def query(text: str, params: dict) -> list:
        cursor = conn.execute(text, params)
        # In pipeline mode a cursor knows it has rows only once they are read: ask by
        # what the statement is, not by its cursor.
        return cursor.fetchall() if _returns_rows(text) else []
    return query


class _FirstStatement(Exception):
    """Raised by ``first_statement``'s query to stop ``plan_claim`` there."""


def first_statement(statements: ModuleType, limited: LimitedClaim, queue: str, want: int,
                    now: float) -> tuple[str, dict] | None:
    """The first statement ``plan_claim`` runs for this claim, ``(text, params)``
    (None: it runs none), whatever its answer: what a turn in flight can send with its
    settles before it knows anything (R66). Read from ``plan_claim`` itself, stopped at
    that statement, so the statement sent and the one its answer is given to cannot
    drift apart (``answered_first``)."""
    asked: list[tuple[str, dict]] = []

    def record(text: str, params: dict) -> list:
        asked.append((text, params))
        raise _FirstStatement

    try:
        plan_claim(SqlLimitedSource(statements, record, limited), limited.plan, queue, want,
                   now, limited.has_unlimited)
    except _FirstStatement:
        pass
    return asked[0] if asked else None


def answered_first(query: Query, first: tuple[str, dict], answer: Any) -> Query:
    """``query``, whose first statement, when it is ``first``, is answered by
    ``answer.fetchall()`` (``first`` already ran, in this transaction); any other is
    run by ``query``."""
    waiting = [first]

    def ask(text: str, params: dict) -> list:
        if waiting:
            sent_text, sent_params = waiting.pop()
            if text == sent_text and params == sent_params:
                rows = answer.fetchall()
                return rows if _returns_rows(text) else []
        return query(text, params)
    return ask


def _returns_rows(text: str) -> bool:
    head = text.lstrip()[:6].upper()
    return head == "SELECT" or "RETURNING" in text.upper()


def pg_limited_claim(plan: LimitPlan, names: Sequence[str]) -> LimitedClaim:
    """A PostgreSQL claimer's limited claim for a pool serving ``names`` (its
    per-name defaults travel in the claim's parameters, as its ordinary claim's do)."""
    from jobpool.store.postgres import statements as pg_sql
    unlimited = sorted({n for n in names if n not in plan.names})
    return LimitedClaim(plan, pg_sql.CLAIM_IDS, pg_sql.PROBE_UNLIMITED if unlimited else None,
                        {"unlimited": unlimited})
