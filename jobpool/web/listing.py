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
from jobpool.store import rows
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


#: How many ids a search reads a page unless ``scan`` says otherwise.
SEARCH_ROWS = rows.SEARCH_ROWS
#: The filters a jobs list takes besides status, name, queue, chain and the keyset:
#: read through an index (key, batch) or searched within a window of ids (R47).
INDEXED = ("key", "batch")
SEARCHED_TEXT = ("group", "error", "args")
TIMES = ("created_from", "created_to", "finished_from", "finished_to")


def filters(query: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """The filters a query names (``status``, ``name``, ``queue``, ``chain``: the
    chain started by that job, in the order its steps run; ``key``, ``batch``;
    the searched ``group``, ``error``, ``args``, ``created_from``/``_to`` and
    ``finished_from``/``_to``, ``meta`` (R54: ``KEY=VALUE``, as ``jobs list --meta``
    takes it; repeated, every pair must match) and ``scan``), the keyset ``after``
    (the page goes on below that id) and the page size; ``ValueError`` with a
    one-line reason for a status, cursor, time, metadata pair or limit that is not one."""
    status = query.get("status") or None
    if status is not None and status not in LISTED_STATUSES:
        raise ValueError(f"status must be one of {', '.join(LISTED_STATUSES)}, not {status!r}")
    after, chain = _job_id(query, "after"), _job_id(query, "chain")
    chosen: dict[str, Any] = {"status": status, "name": query.get("name") or None,
                              "queue": query.get("queue") or None, "chain": chain,
                              "after": after}
    for key in ("key", *SEARCHED_TEXT):
        chosen[key] = query.get(key) or None
    chosen["batch"] = _job_id(query, "batch", "a batch id")
    for key in TIMES:
        chosen[key] = _time(query, key)
    chosen["meta"] = _meta(query)
    chosen["scan"] = _scan(query.get("scan"))
    store_filters(chosen)  # the store's refusals, said before any page is read
    return chosen, page_size(query.get("limit"))


def store_filters(chosen: Mapping[str, Any]) -> dict[str, Any]:
    """``chosen`` as ``list_jobs`` takes it: the time ranges as ``(from, to)``, and
    only the filters that are set (a store that lists no more than the first four
    is asked for no more); ``ValueError`` for a combination the store refuses."""
    taken = {k: v for k, v in chosen.items() if v is not None and k not in TIMES}
    if "meta" in taken:
        taken["meta"] = dict(job_pages.meta_pair(text, "meta") for text in taken["meta"])
    for span in ("created", "finished"):
        low, high = chosen.get(f"{span}_from"), chosen.get(f"{span}_to")
        if low is not None or high is not None:
            taken[span] = (low, high)
    rows.more_filters(_NO_DIALECT, taken.get("status"), taken.get("name"),
                      newest_first=taken.get("chain") is None,
                      **{k: v for k, v in taken.items()
                         if k not in ("status", "name", "queue", "chain", "after")})
    return taken


def searching(chosen: Mapping[str, Any]) -> bool:
    """Whether the list is a search within a window of ids (R47) rather than an
    index's pages. A metadata filter counts as one on every store (R54: SQLite
    searches it; PostgreSQL reads it through an index), so that what an "all
    matching" action takes is the same filters on both."""
    return any(chosen.get(k) is not None for k in (*SEARCHED_TEXT, *TIMES, "meta"))


#: Any dialect will do to check the filters without running them.
_NO_DIALECT = rows.ListingDialect(mark=str, contains=lambda c, p: c,
                                  payload_contains=str, past_newest="0")


def _time(query: Mapping[str, str], key: str) -> float | None:
    text = query.get(key) or None
    return None if text is None else job_pages.parse_time(text, key)


def _meta(query: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The ``meta`` pairs a query names, as typed (a query string or form may repeat
    it; empty ones are left out), each checked to be ``KEY=VALUE``; None: none."""
    sent = query.getlist("meta") if hasattr(query, "getlist") else [query.get("meta")]
    typed = tuple(text for text in sent if isinstance(text, str) and text)
    for text in typed:
        job_pages.meta_pair(text, "meta")
    return typed or None


def _scan(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= rows.SEARCH_MOST:
        raise ValueError(f"scan must be a number from 1 to {rows.SEARCH_MOST}, not {text!r}")
    return int(text)


def _job_id(query: Mapping[str, str], key: str, what: str = "a job id") -> int | None:
    text = query.get(key) or None
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{key} must be {what}, not {text!r}")
    return int(text)


def next_after(rows: list[dict[str, Any]], more: int,
               window: job_pages.Window | None = None) -> int | None:
    """The keyset of the page after this one (``jobpool.listing.next_after``)."""
    return job_pages.next_after(rows, more, window)


def query_of(chosen: Mapping[str, Any], **changed: Any) -> str:
    """The query string of the jobs list with ``chosen`` and ``changed`` (None: left
    out), for a link to another page of it."""
    from urllib.parse import urlencode
    merged = {**chosen, **changed}
    return urlencode({k: v for k, v in merged.items() if v is not None}, doseq=True)


def page(store: Any, chosen: dict[str, str | None], limit: int) -> tuple[list[dict[str, Any]], int]:
    """The newest ``limit`` jobs matching ``chosen`` and how many more match (0 when
    the page holds them all; at most ``MORE_COUNTED``)."""
    return job_pages.page(store, store_filters(chosen), limit, MORE_COUNTED)


def searched_page(store: Any, chosen: dict[str, Any], limit: int
                  ) -> tuple[list[dict[str, Any]], int, job_pages.Window | None]:
    """``page``, and for a search the window it read (``jobpool.listing.search_page``)."""
    return job_pages.search_page(store, store_filters(chosen), limit, MORE_COUNTED)


def larger(limit: int) -> int | None:
    """The next page size a "show more" link asks for (None: the largest already)."""
    return None if limit >= MAX_PAGE else min(MAX_PAGE, limit * 4)
