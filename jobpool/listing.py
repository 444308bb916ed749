"""A page of the job list, as ``jobpool jobs list`` and the web dashboard show it (R28).

``Store.list_jobs`` reads each filter through an index, so a page is the newest
``limit`` matching jobs (a chain's steps in the order they run) and a count of how many
more match, counted no further than ``count_to`` past the page (each counted row is an
index entry read). ``chosen`` may hold ``after``, the keyset of a next page: the last
id the page before showed, so the page goes on below it (above it, for a chain)
however many rows came and went since, reading no row it skips.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
