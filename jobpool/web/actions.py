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
