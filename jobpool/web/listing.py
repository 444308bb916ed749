"""The job list's filters and page, shared by ``/jobs`` and ``/api/jobs``.

``Store.list_jobs`` reads each filter through an index (R28), so a page is the newest
``limit`` jobs and a count line says how many more there are, counted no further than
``MORE_COUNTED`` (``count_jobs``' bound), as ``jobpool jobs list`` does. The next page
is a keyset: ``after`` the last id shown, the jobs below it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobpool import listing as job_pages
from jobpool.store.rows import LISTED_STATUSES

#: Jobs on a page unless ``limit`` says otherwise, and the most one page lists.
PAGE = 50
MAX_PAGE = 1000
#: How far past a page the count line counts (each counted row is an index entry read).
MORE_COUNTED = 10_000


def page_size(text: str | None) -> int:
    if text is None or text == "":
        return PAGE
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise ValueError(f"limit must be a number from 1 to {MAX_PAGE}, not {text!r}")
    return int(text)


def filters(query: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """The filters a query names (``status``, ``name``, ``queue``, ``chain``: the
    chain started by that job, in the order its steps run), the keyset
    ``after`` (the page goes on below that id) and the page size; ``ValueError`` with
    a one-line reason for a status, cursor or limit that is not one."""
    status = query.get("status") or None
    if status is not None and status not in LISTED_STATUSES:
        raise ValueError(f"status must be one of {', '.join(LISTED_STATUSES)}, not {status!r}")
    after, chain = _job_id(query, "after"), _job_id(query, "chain")
    chosen = {"status": status, "name": query.get("name") or None,
              "queue": query.get("queue") or None, "chain": chain, "after": after}
    return chosen, page_size(query.get("limit"))


def _job_id(query: Mapping[str, str], key: str) -> int | None:
    text = query.get(key) or None
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{key} must be a job id, not {text!r}")
    return int(text)


def next_after(rows: list[dict[str, Any]], more: int) -> int | None:
    """The keyset of the page after this one (None: this is the last)."""
    return rows[-1]["id"] if more and rows else None


def query_of(chosen: Mapping[str, Any], **changed: Any) -> str:
    """The query string of the jobs list with ``chosen`` and ``changed`` (None: left
    out), for a link to another page of it."""
    from urllib.parse import urlencode
    merged = {**chosen, **changed}
    return urlencode({k: v for k, v in merged.items() if v is not None})


def page(store: Any, chosen: dict[str, str | None], limit: int) -> tuple[list[dict[str, Any]], int]:
    """The newest ``limit`` jobs matching ``chosen`` and how many more match (0 when
    the page holds them all; at most ``MORE_COUNTED``)."""
    return job_pages.page(store, chosen, limit, MORE_COUNTED)


def larger(limit: int) -> int | None:
    """The next page size a "show more" link asks for (None: the largest already)."""
    return None if limit >= MAX_PAGE else min(MAX_PAGE, limit * 4)
