"""What the dashboard's buttons and the API's writes do: one store call each, logged as
a ``web_action`` event naming who asked and what became of each id (R30, R47).

Pages and the JSON API both act through here, so the two cannot drift apart.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from jobpool import events


class Done(NamedTuple):
    """What became of an action: ``ok`` when the store did what was asked, ``what`` the
    store's word for it (``retried``, ``not dead (ready)``, ``no such job``...)."""

    ok: bool
    what: str


def retry(store: Any, who: str, job_id: int) -> Done:
    """R32: a dead job back in line under its id, with fresh attempts."""
    what = store.dead.retry([job_id])[job_id]
    _log("retry", who, job_id=job_id, result=what)
    return Done(what == "retried", what)


def delete(store: Any, who: str, job_id: int) -> Done:
    """R32: a dead job's row removed (only a dead one: the store refuses others)."""
    what = store.dead.delete([job_id])[job_id]
    _log("delete", who, job_id=job_id, result=what)
    return Done(what == "deleted", what)


def cancel(store: Any, who: str, job_id: int) -> Done:
    """R31: a ready job dead at once; a running one stopped by its pool."""
    what = store.cancel(job_id)
    _log("cancel", who, job_id=job_id, result=what)
    return Done(what in ("cancelled", "requested"), what)


def pause(store: Any, who: str, queue: str) -> Done:
    """R38: no pool claims from ``queue`` from its next heartbeat on."""
    changed = store.pause(queue)
    what = "paused" if changed else "already paused"
    _log("pause", who, queue=queue, result=what)
    return Done(changed, what)


def resume(store: Any, who: str, queue: str) -> Done:
    changed = store.resume(queue)
    what = "resumed" if changed else "not paused"
    _log("resume", who, queue=queue, result=what)
    return Done(changed, what)


def _log(action: str, who: str, **fields: Any) -> None:
    events.emit(events.WEB_ACTION, action=action, who=who, **fields)


#: The most jobs one "all matching" action changes; the confirmation says when more
#: match (the next press takes the next ones).
BULK_MOST = 10_000
#: Ids per store call (one transaction each), so no write holds the store for long.
BULK_CHUNK = 500
#: The statuses each "all matching" action is offered for: what its store call accepts.
BULK_STATUSES = {"retry": ("dead",), "delete": ("dead",),
                 "cancel": ("ready", "scheduled", "running")}


def bulk_applies(action: str, status: str | None) -> bool:
    return status in BULK_STATUSES.get(action, ())


def matching(store: Any, chosen: dict[str, Any], through: int | None,
             most: int = BULK_MOST) -> list[int]:
    """The ids of at most ``most`` jobs matching ``chosen``, newest first, none above
    ``through`` (the newest id the confirmation saw: nothing enqueued since is
    touched), read by keyset pages (R28)."""
    ids: list[int] = []
    after = None if through is None else through + 1
    while len(ids) < most:
        page = store.list_jobs(**chosen, limit=min(1000, most - len(ids)), newest_first=True,
                               after=after)
        if not page:
            break
        ids.extend(job["id"] for job in page)
        after = page[-1]["id"]
    return ids


def bulk(store: Any, who: str, action: str, chosen: dict[str, Any], through: int) -> Done:
    """R47: ``action`` on every job matching ``chosen`` up to id ``through`` (at most
    ``BULK_MOST``), one ``web_action`` event with the filter, the ids and a count of
    what became of them."""
    ids = matching(store, chosen, through)
    outcome: dict[int, str] = {}
    for start in range(0, len(ids), BULK_CHUNK):
        chunk = ids[start:start + BULK_CHUNK]
        if action == "retry":
            outcome.update(store.dead.retry(chunk))
        elif action == "delete":
            outcome.update(store.dead.delete(chunk))
        else:
            outcome.update((job_id, store.cancel(job_id)) for job_id in chunk)
    counts: dict[str, int] = {}
    for what in outcome.values():
        counts[what] = counts.get(what, 0) + 1
    said = ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "none matched"
    _log(action, who, filter={k: v for k, v in chosen.items() if v is not None},
         job_ids=ids, result=counts)
    return Done(bool(ids), said)
