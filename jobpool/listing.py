"""A page of the job list, as ``jobpool jobs list`` and the web dashboard show it (R28).

``Store.list_jobs`` reads each filter through an index, so a page is the newest
``limit`` matching jobs (a chain's steps in the order they run) and a count of how many
more match, counted no further than ``count_to`` past the page (each counted row is an
index entry read). ``chosen`` may hold ``after``, the keyset of a next page: the last
id the page before showed, so the page goes on below it (above it, for a chain)
however many rows came and went since, reading no row it skips.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple

from jobpool import serialize
from jobpool.store import rows as store_rows


def page(store: Any, chosen: Mapping[str, Any], limit: int,
         count_to: int) -> tuple[list[dict[str, Any]], int]:
    """The page's rows and how many more match (0 when the page holds them all; at
    most ``count_to``, so ``more >= count_to`` means "at least that many")."""
    newest_first = chosen.get("chain") is None
    rows = store.list_jobs(**chosen, limit=limit, newest_first=newest_first)
    more = 0
    if len(rows) == limit:
        more = store.count_jobs(**chosen, at_most=limit + count_to,
                                newest_first=newest_first) - len(rows)
    return rows, more


class Window(NamedTuple):
    """The ids a search read (``low`` to ``high``, both in) and the keyset of the
    next, older window (None: it reached the first job)."""

    low: int
    high: int
    older: int | None


def search_page(store: Any, chosen: Mapping[str, Any], limit: int, count_to: int
                ) -> tuple[list[dict[str, Any]], int, Window | None]:
    """``page``, and for a search (R47: a group, a text or a time range among the
    filters; R54: metadata, where the store has no index for it) the window of ids
    it read. A search's keyset is the window's top:
    without one, the newest job's id plus one."""
    searched = store_rows.searched(**{k: chosen.get(k) for k in
                                      ("group", "error", "args", "created", "finished", "meta")},
                                   meta_indexed=store.meta_indexed)
    if not searched:
        return (*page(store, chosen, limit, count_to), None)
    if chosen.get("after") is None:
        newest = store.list_jobs(limit=1, newest_first=True)
        chosen = dict(chosen, after=(newest[0]["id"] if newest else 0) + 1)
    top, scan = chosen["after"], chosen.get("scan") or store_rows.SEARCH_ROWS
    found, more = page(store, chosen, limit, count_to)
    low = max(top - scan, 1)
    return found, more, Window(low, top - 1, low if low > 1 else None)


def next_after(rows: list[dict[str, Any]], more: int, window: Window | None) -> int | None:
    """The keyset of the page after this one (None: this is the last): past the last
    row shown while its window has more, else (a search) the next, older window."""
    if more and rows:
        return rows[-1]["id"]
    return window.older if window is not None else None


def parse_time(text: str, what: str) -> float:
    """A time as Unix seconds: a number, or an ISO 8601 date and time (UTC unless it
    names its offset; a date-time picker's ``2026-12-02T03:00`` is UTC)."""
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):  # "nan", "inf": no time (the web's form or the CLI's)
            raise ValueError(f"{what} must be Unix seconds or an ISO 8601 time, not {text!r}")
        return number
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{what} must be Unix seconds or an ISO 8601 time, not {text!r}") \
            from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def meta_pair(text: str, what: str = "--meta") -> tuple[str, Any]:
    """R54: a metadata filter's ``KEY=VALUE`` (``jobs list --meta``, the dashboard's
    ``meta``): VALUE as JSON when it reads as a JSON scalar (``7``, ``true``,
    ``null``, ``"7"``), else as the text it is; ``ValueError`` naming ``what`` for
    text that is not KEY=VALUE."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise ValueError(f"{what} takes KEY=VALUE, not {text!r}")
    try:
        parsed = serialize.loads(value)
    except (ValueError, RecursionError):  # not JSON, or nested past any scalar: text
        return key, value
    if isinstance(parsed, (dict, list)) or (
            isinstance(parsed, float) and not abs(parsed) < float("inf")):  # NaN, Infinity
        return key, value
    return key, parsed
