"""Per-minute rollups of what pools ran (R56): their shape, their retention, and the
percentiles read back from their histograms.

A pool counts each job name's settles (done, retried, dead), its pickup latency
(claimed − due) and its run time into a small record, and its heartbeat adds that
record to the store's row for the minute and the name (one row per minute and name,
however many pools write it). The web dashboard draws its charts from those rows and
never from the jobs themselves, so a chart costs the same on a million-row store as on
an empty one.

Times go into coarse buckets (``BOUNDS``), fixed by the schema: a percentile read
back is an estimate, good to within its bucket, which is what a chart needs.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from jobpool import bounds

#: Upper bounds (seconds) of the histogram buckets of pickup latency and of run time;
#: one more bucket holds what is longer. The stores' columns ``w0…`` and ``r0…`` are
#: these buckets, so changing them is a schema change.
BOUNDS = (0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 1800.0)
BUCKETS = len(BOUNDS) + 1

#: How long a store keeps its rollups, seconds: three days, so "the last hours" and the
#: day before are there to compare with, and the table stays small (a row per minute
#: per job name: about 4 300 rows a name).
KEEP = 3 * 24 * 3600.0

#: A minute's length, and the longest window the dashboard reads (what is kept).
MINUTE = 60.0
MAX_HOURS = int(KEEP // 3600)

#: The counted columns of a row, in the stores' order after ``minute`` and ``name``.
COUNTS = ("done", "retried", "dead", "wait_n", "wait_sum", "wait_max",
          *(f"w{i}" for i in range(BUCKETS)), "run_n", "run_sum", "run_max",
          *(f"r{i}" for i in range(BUCKETS)))
#: Columns merged by taking the larger value rather than the sum.
MAXIMA = ("wait_max", "run_max")


class Rollup(NamedTuple):
    """One job name's counts since a pool's last beat, as its heartbeat writes them."""

    name: str
    values: tuple[float, ...]  # in ``COUNTS`` order


def bucket(seconds: float) -> int:
    """The histogram bucket of a duration (negative clock skew counts as 0)."""
    return bisect.bisect_left(BOUNDS, seconds)


def minute_of(now: float) -> float:
    """The start of the minute ``now`` falls in (the row a beat at ``now`` adds to)."""
    return math.floor(now / MINUTE) * MINUTE


def percentile(hist: Sequence[int], q: float, largest: float) -> float | None:
    """An estimate of the ``q`` quantile (0..1) of what ``hist`` counted: linear within
    the bucket it falls in, never above the largest value seen. None: nothing counted."""
    total = sum(hist)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(hist):
        if count and seen + count >= rank:
            low = BOUNDS[i - 1] if i else 0.0
            high = BOUNDS[i] if i < len(BOUNDS) else max(largest, low)
            return min(low + (high - low) * (rank - seen) / count, largest)
        seen += count
    return largest


def _figure(value: Any) -> Any:
    """A rollup's count or time as a chart adds it up: a number a float holds, else 0
    (a row is data, R44: SQLite's ``sum`` of huge counts is ``inf``; a hand's text)."""
    return value if bounds.finite_number(value) else 0


def merged(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Rows added together (several minutes, or several names): sums, and the maxima."""
    total: dict[str, Any] = dict.fromkeys(COUNTS, 0)
    for row in rows:
        for column in COUNTS:
            if column in MAXIMA:
                total[column] = max(total[column], _figure(row[column]))
            else:
                total[column] = _figure(total[column] + _figure(row[column]))
    return total


def summary(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a chart or the API shows of a row (one minute, or merged): the counts, and
    pickup latency and run time as count, mean, p50, p95 and max seconds."""
    shown: dict[str, Any] = {k: int(_figure(row[k])) for k in ("done", "retried", "dead")}
    for part, prefix in (("latency", "w"), ("run_time", "r")):
        key = "wait" if part == "latency" else "run"
        count = int(_figure(row[f"{key}_n"]))
        hist = [int(_figure(row[f"{prefix}{i}"])) for i in range(BUCKETS)]
        largest = float(_figure(row[f"{key}_max"]))
        shown[part] = {
            "count": count,
            "mean": _figure(row[f"{key}_sum"]) / count if count else None,
            "p50": percentile(hist, 0.5, largest),
            "p95": percentile(hist, 0.95, largest),
            "max": largest if count else None,
            "buckets": hist}
    return shown


def params(rows: Iterable[Rollup], now: float) -> list[tuple[Any, ...]]:
    """A beat's rows as a store's upsert takes them: the minute of ``now``, the name,
    the counts in ``COUNTS`` order."""
    minute = minute_of(now)
    return [(minute, row.name, *row.values) for row in rows]


def by_minute(by: str) -> bool:
    """Whether a store's ``rollup_totals(by=...)`` adds up per minute (else per name);
    ``ValueError`` for anything else."""
    if by not in ("minute", "name"):
        raise ValueError(f"rollups add up by 'minute' or 'name', not {by!r}")
    return by == "minute"


def as_dicts(found: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """A store's ``minute, name, COUNTS…`` rows as dicts."""
    keys = ("minute", "name", *COUNTS)
    return [dict(zip(keys, row)) for row in found]
