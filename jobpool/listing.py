"""A page of the job list, as ``jobpool jobs list`` and the web dashboard show it (R28).

``Store.list_jobs`` reads each filter through an index and has no keyset ("after this
id"), so a page is the newest ``limit`` matching jobs (a chain's steps in the order
they run) and a count of how many more match, counted no further than ``count_to``
past the page (each counted row is an index entry read).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def page(store: Any, chosen: Mapping[str, Any], limit: int,
         count_to: int) -> tuple[list[dict[str, Any]], int]:
    """The page's rows and how many more match (0 when the page holds them all; at
    most ``count_to``, so ``more >= count_to`` means "at least that many")."""
    rows = store.list_jobs(**chosen, limit=limit, newest_first=chosen.get("chain") is None)
    more = 0
    if len(rows) == limit:
        more = store.count_jobs(**chosen, at_most=limit + count_to) - len(rows)
    return rows, more
