"""R35/R36 in a store: the limits every pool obeys, as written by the pools that
declare them and by ``jobpool limits``, and what ``limits list`` shows.

A name's limits come from its ``@job`` declaration: a pool writes those of the
names it serves when it starts (``declare``); a change is logged, and from then
on every pool reads the new numbers at its next heartbeat. A name that becomes
limited has its live rows put in their groups and its lanes made; one
that stops being limited has its lanes dropped, and its rows are claimed the
ordinary way again. A queue's limit is an operator's (``set_queue``). One class
serves both stores (``statements`` is the store's SQL module).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Callable

from jobpool import bounds
from jobpool.errors import EnqueueError, JobpoolError, StoreError
from jobpool.limits import LimitPlan, NameLimit, parse_rate, refill
from jobpool.store import held_rows
from jobpool.store import rows as store_rows
from jobpool.store.records import LimitRow

log = logging.getLogger(__name__)

#: Groups ``limits list`` shows at most.
GROUPS_SHOWN = 1000
#: A group without a lane, untouched this long, is swept (its bucket is full again).
GROUP_IDLE = 86400.0

#: R35 on PostgreSQL: how long a declare comes back for rows of a newly limited name
#: that other transactions held when it gave the name's rows their groups, seconds.
ADOPT_PATIENCE = 30.0


#: The unreadable limit rows this process has warned of (once each, not every beat).
_warned: set[tuple[Any, Any, str]] = set()


def _unreadable(limit: LimitRow) -> str | None:
    """What makes a ``jobpool_limits`` row no limit a pool can obey (R44: written by
    hand or by another release), or None."""
    if limit.max_running is not None and not bounds.whole_within(limit.max_running, 0,
                                                                 bounds.INT32_MAX):
        return f"max_running {limit.max_running!r} is not a whole number from 0"[:200]
    if limit.scope == "queue":
        return None
    if not bounds.whole_within(limit.burst, 1, bounds.INT32_MAX):
        return f"burst {limit.burst!r} is not a whole number from 1"[:200]
    if limit.group_by is not None and not isinstance(limit.group_by, str):
        return f"group_by {limit.group_by!r} is not text"[:200]
    if limit.rate is not None:
        try:
            parse_rate(limit.rate)
        except JobpoolError as exc:
            return str(exc)[:200]
    return None


def plan_from_rows(rows: list[tuple]) -> LimitPlan:
    """The store's ``jobpool_limits`` rows as a ``LimitPlan``.

    Every pool reads every row at each heartbeat, so a row no pool can obey stops none
    (R44): its name's or queue's jobs are held (a limit of none running) and each
    process warns of it once, until a pool that serves the name declares it again at
    its start, or an operator sets it (``jobpool limits``)."""
    names: dict[str, NameLimit] = {}
    queues: dict[str, int] = {}
    for row in rows:
        limit = LimitRow(*row)
        if not isinstance(limit.target, str):
            continue  # names no job or queue: nothing it could limit
        why = _unreadable(limit)
        if why is not None:
            if (limit.scope, limit.target, why) not in _warned:
                if len(_warned) >= 1000:
                    _warned.clear()  # a bound: at worst, each warned of again
                _warned.add((limit.scope, limit.target, why))
                log.warning("the %s limit of %r cannot be read (%s): its jobs are held until "
                            "it is set again", limit.scope, limit.target, why)
            if limit.scope == "queue":
                queues[limit.target] = 0
            else:
                names[limit.target] = NameLimit(limit.target, 0, None, 1, None)
            continue
        if limit.scope == "queue":
            if limit.max_running is not None:
                queues[limit.target] = int(limit.max_running)
            continue
        names[limit.target] = NameLimit(limit.target, limit.max_running,
                                        parse_rate(limit.rate) if limit.rate else None,
                                        int(limit.burst), limit.group_by)
    return LimitPlan(names, queues)


def describe(limit: NameLimit | None) -> str:
    """A name's limits as one phrase, for logs and ``limits list``."""
    if limit is None:
        return "no limit"
    parts = []
    if limit.max_running is not None:
        parts.append(f"max_running={limit.max_running}")
    if limit.rate is not None:
        parts.append(f"rate={limit.rate.text}")
        parts.append(f"burst={limit.burst}")
    if limit.group_by is not None:
        parts.append(f"per {limit.group_by}")
    return " ".join(parts)


class StoreLimits:
    """The limits of one store (``store.limits``); the store gives
    ``transaction(what, fn)`` and ``read_rows(what, query, params)``."""

    def __init__(self, store: Any, statements: ModuleType) -> None:
        self.store = store
        self.sql = statements

    def plan(self) -> LimitPlan:
        return plan_from_rows(self.store.read_rows("reading limits", self.sql.READ_LIMITS))

    def declare(self, declared: Mapping[str, NameLimit | None], owner: str,
                now: float | None = None, *,
                on_change: Callable[[str], None] | None = None) -> list[str]:
        """Write the limits a pool declares for the names it serves, in one
        transaction; returns what changed, one line each (logged by the pool).
        ``on_change`` is given each line as soon as the limits are committed, before
        the rows of a newly limited name that other transactions held are given their
        groups: that may run out of patience (a store error), and the next declare
        finds nothing changed, so lines returned only at the end would be lost."""
        now = bounds.now_or(now)

        def write(conn: Any) -> list[str]:
            stored = plan_from_rows(conn.execute(self.sql.READ_LIMITS).fetchall()).names
            changes = []
            for name, limit in sorted(declared.items()):
                before = stored.get(name)
                if before == limit:
                    continue
                changes.append(f"limits of {name}: {describe(before)} -> {describe(limit)} "
                               f"(declared by pool {owner})")
                if limit is None:
                    conn.execute(self.sql.DELETE_LIMIT, {"scope": "name", "target": name})
                    conn.execute(self.sql.DROP_LANES_OF_NAME, {"name": name})
                    continue
                conn.execute(self.sql.PUT_LIMIT, {
                    "scope": "name", "target": name, "max_running": limit.max_running,
                    "rate": limit.rate.text if limit.rate else None, "burst": limit.burst,
                    "group_by": limit.group_by, "set_by": owner, "now": now})
                if before is None:
                    conn.execute(self.sql.ADOPT_LIMITED, {"name": name})
                    conn.execute(self.sql.LANES_OF_NAME, {"name": name})
            return changes
        changes = self.store.transaction("writing declared limits", write)
        if on_change is not None:
            for change in changes:
                on_change(change)
        if self.sql.ADOPT_LEFT is not None:
            for name in sorted(n for n, limit in declared.items() if limit is not None):
                self._adopt_left(name)
        return changes

    def _adopt_left(self, name: str) -> None:
        """PostgreSQL: the rows of limited ``name`` still without a group (passed over
        by the adoption because another transaction held them: a pool's turn, until it
        commits), adopted in short transactions of their own until none is left; also
        what an earlier declare left. Rows still held after ``ADOPT_PATIENCE`` are a
        store error naming how many: the pool's next heartbeat declares again."""
        params = {"name": name}
        if not self.store.read_rows(f"reading {name}'s rows without a group",
                                    self.sql.ADOPT_LEFT, params)[0][0]:
            return

        def adopt(conn: Any) -> tuple[int, None]:
            conn.execute(self.sql.ADOPT_LIMITED, params)
            conn.execute(self.sql.LANES_OF_NAME, params)
            return conn.execute(self.sql.ADOPT_LEFT, params).fetchone()[0], None

        def gave_up(left: int) -> StoreError:
            return StoreError(f"limits of {name} are declared, but {left} of its rows "
                              f"{'was' if left == 1 else 'were'} held by other "
                              f"transactions for {ADOPT_PATIENCE:g} s and "
                              f"{'has' if left == 1 else 'have'} no group yet")
        held_rows.until_none_left(self.store, f"giving {name}'s rows their groups", adopt,
                                  ADOPT_PATIENCE, gave_up)

    def set_queue(self, queue: str, running: int, set_by: str = "cli",
                  now: float | None = None) -> None:
        """R35: at most ``running`` jobs of ``queue`` run at once, across all pools
        (``EnqueueError`` for a queue name or a number it cannot be)."""
        queue = store_rows.queue_name(queue)
        try:
            running = bounds.queue_running(running)
        except ValueError as exc:
            raise EnqueueError(str(exc)) from None
        params = {"scope": "queue", "target": queue, "max_running": running, "rate": None,
                  "burst": 1, "group_by": None, "set_by": set_by,
                  "now": bounds.now_or(now)}
        self.store.transaction("setting a queue limit",
                               lambda conn: conn.execute(self.sql.PUT_LIMIT, params))

    def clear_queue(self, queue: str) -> bool:
        """The queue's limit gone; False if it had none."""
        queue = store_rows.queue_name(queue)
        return self.store.transaction("clearing a queue limit", lambda conn: conn.execute(
            self.sql.DELETE_LIMIT, {"scope": "queue", "target": queue}).rowcount > 0)

    def listing(self, now: float | None = None) -> dict[str, Any]:
        """What ``limits list`` shows: every limit with its running jobs, and the
        groups met so far with their running jobs and tokens left."""
        now = bounds.now_or(now)
        read = self.store.read_rows
        rows = [LimitRow(*row) for row in read("reading limits", self.sql.READ_LIMITS)]
        plan = plan_from_rows([tuple(row) for row in rows])
        by_queue = dict(read("counting running jobs", self.sql.RUNNING_BY_QUEUE))
        groups = []
        for name, grp, tokens, refilled_at, running in read(
                "reading limit groups", self.sql.GROUP_ROWS, {"limit": GROUPS_SHOWN}):
            limit = plan.names.get(name)
            if limit is None:
                continue
            left = None
            if limit.rate is not None:
                left = refill(tokens, refilled_at, limit.rate, limit.burst, now)
            groups.append({"name": name, "group": grp, "running": int(running),
                           "max_running": limit.max_running,
                           "rate": limit.rate.text if limit.rate else None,
                           "tokens": None if left is None else round(left, 3)})
        limits = []
        for row in rows:
            entry = row._asdict()
            if row.scope == "queue":
                entry["running"] = int(by_queue.get(row.target, 0))
            limits.append(entry)
        return {"limits": limits, "groups": groups}

    def purge_groups(self, conn: Any, now: float) -> int:
        """The sweep: groups with no lane, untouched for a day."""
        return conn.execute(self.sql.PURGE_GROUPS, {"before": now - GROUP_IDLE}).rowcount
