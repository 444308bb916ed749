"""SQL for a transition, rendered from ``lifecycle``'s table of what it does to a row.

The two dialects write the same effects; they differ in how a statement names a
value it is given (``:run_at`` or ``%(run_at)s`` or a column of an unnested input),
how it names the row's own column (``attempts`` or ``j.attempts``), a policy's
default for a column a row left NULL, and the name of the two-argument minimum. A
``Dialect`` says those; ``assignments`` renders a ``SET`` list, ``select_list`` the
values an ``INSERT … SELECT`` writes when a row moves between tables (PostgreSQL's
``finished_jobs``).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from jobpool import bounds
from jobpool.lifecycle import (ClearedIf, Defaulted, Earliest, Given, LeaseEnd, OneMoreAttempt,
                               Shifted, Transition)


class Dialect(NamedTuple):
    """How one dialect (and one statement shape) names what a rendered value uses."""

    given: Callable[[str], str]        # a given value's placeholder
    column: Callable[[str], str]       # the row's own column, as the statement sees it
    default_of: Callable[[str], str] | None = None   # R8: the policy's value of a column
    least: str = "min"                 # the two-argument minimum: SQLite min, PostgreSQL LEAST


def quote_literal(text: str) -> str:
    """Quote ``text`` as an SQL string literal (job names are validated printable)."""
    return "'" + text.replace("'", "''") + "'"


def literal(value: object) -> str:
    """A constant of the effects table as SQL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"no SQL literal for {value!r}")
    if isinstance(value, str):
        return quote_literal(value)
    return repr(value)


def value_sql(value: object, dialect: Dialect) -> str:
    """One value of the table as SQL in ``dialect``."""
    col = dialect.column
    if isinstance(value, Given):
        return dialect.given(value.name)
    if isinstance(value, Shifted):
        if value.by > 0:
            # R44: a count at the top of its 32-bit column (a row written by hand) stays
            # there, for the codec to refuse the row it reads: an increment past it
            # failed the whole statement on PostgreSQL, every turn, and stopped the pool.
            return (f"{dialect.least}({col(value.column)}, {bounds.INT32_MAX - value.by}) "
                    f"+ {value.by}")
        return f"{col(value.column)} - {abs(value.by)}"
    if isinstance(value, Earliest):
        return f"{dialect.least}({col(value.column)}, {dialect.given(value.given)})"
    if isinstance(value, ClearedIf):
        return f"CASE WHEN {dialect.given(value.flag)} THEN NULL ELSE {col(value.column)} END"
    if isinstance(value, OneMoreAttempt):
        return (f"CASE WHEN {col('attempts')} >= {col('max_attempts')} "
                f"THEN {dialect.least}({col('attempts')}, {bounds.INT32_MAX - 1}) + 1 "
                f"ELSE {col('max_attempts')} END")
    if isinstance(value, (Defaulted, LeaseEnd)):
        if dialect.default_of is None:
            raise ValueError("this statement has no policy defaults to draw on")
        if isinstance(value, Defaulted):
            return f"COALESCE({col(value.column)}, {dialect.default_of(value.column)})"
        return (f"{dialect.given('now')} + COALESCE({col('timeout')}, "
                f"{dialect.default_of('timeout')}) + {dialect.given('slack')}")
    return literal(value)


def assignments(transition: Transition, dialect: Dialect, *, status: bool = True) -> str:
    """The ``SET`` list of ``transition`` (its status first, unless it keeps it)."""
    pairs = [f"{column} = {value_sql(value, dialect)}" for column, value in transition.sets]
    if status and transition.status != transition.source:
        pairs.insert(0, f"status = {literal(transition.status)}")
    return ", ".join(pairs)


def select_list(transition: Transition, columns: tuple[str, ...], dialect: Dialect,
                dropped: frozenset[str] = frozenset(),
                overrides: dict[str, str] | None = None) -> str:
    """The values a moved row is written with, for each of ``columns`` of the target
    table: the transition's value where it sets that column, else the row's own.
    ``dropped`` names columns the target table does not have (the transition's values
    for them are not kept); ``overrides`` gives a column's SQL where something other
    than the transition decides it (a chain that could not go on, R44). Every column
    the transition sets must be one of the two, so no effect is lost silently."""
    sets = dict(transition.sets)
    sets["status"] = transition.status
    missing = set(sets) - set(columns) - dropped
    if missing:
        raise ValueError(f"{transition.name} sets {sorted(missing)}, which the target lacks")
    overrides = overrides or {}
    return ", ".join(overrides[c] if c in overrides
                     else value_sql(sets[c], dialect) if c in sets else dialect.column(c)
                     for c in columns)
