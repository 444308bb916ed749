"""What the dashboard's buttons and the API's writes do: one store call each, logged as
a ``web_action`` event naming who asked and what became of each id (R30, R47).

Pages and the JSON API both act through here, so the two cannot drift apart.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from jobpool import bounds, events
from jobpool.display import counted
from jobpool.errors import BatchNotFound, EnqueueError
from jobpool.store.rows import DUE_ALREADY, MADE_DUE


class Done(NamedTuple):
    """What became of an action: ``ok`` when the store did what was asked, ``what`` the
    store's word for it (``retried``, ``not dead (ready)``, ``no such job``...), and
    ``note``, what else its user should know (a retried batch member no callback follows)."""

    ok: bool
    what: str
    note: str | None = None


def retry(store: Any, who: str, job_id: int) -> Done:
    """R32: a dead job back in line under its id, with fresh attempts; R34: a member of a
    finished batch runs alone, and one of a cancelled batch is followed by no callback,
    which the note says (``jobpool dead retry`` says it too)."""
    report = store.dead.retry_report([job_id])
    what = report.answers[job_id]
    _log("retry", who, job_id=job_id, result=what)
    note = None  # one job: at most one batch
    for batch in report.unfollowed():
        note = (f"its batch {batch.batch_id} "
                + ("was cancelled: it counts in it again" if batch.cancelled
                   else "is finished: it runs outside it")
                + ", and no callback of the batch follows its end")
    return Done(what == "retried", what, note)


def _batch_note(alone: int, cancelled: int) -> str | None:
    """R34: what a retry of many says of the members among them no batch callback
    follows: those of finished batches (they run alone), those of cancelled ones
    (counted in them again)."""
    said = []
    if alone:
        said.append(f"{alone} ran in {'a finished batch' if alone == 1 else 'finished batches'} "
                    f"({'it runs' if alone == 1 else 'they run'} alone)")
    if cancelled:
        where = "is in a cancelled batch" if cancelled == 1 else "are in cancelled batches"
        said.append(f"{cancelled} {where} (counted in {'it' if cancelled == 1 else 'them'} again)")
    if not said:
        return None
    return (f"of them, {' and '.join(said)}: no batch callback follows "
            f"{'it' if alone + cancelled == 1 else 'them'}")


def delete(store: Any, who: str, job_id: int) -> Done:
    """R32: a dead job's row removed (only a dead one: the store refuses others)."""
    what = store.dead.delete([job_id])[job_id]
    _log("delete", who, job_id=job_id, result=what)
    return Done(what == "deleted", what)


def cancel(store: Any, who: str, job_id: int) -> Done:
    """R31: a ready job dead at once; a running one stopped by its pool."""
    what = store.cancel_many([job_id])[job_id]  # "no such job" for one deleted since
    _log("cancel", who, job_id=job_id, result=what)
    return Done(what in ("cancelled", "requested"), what)


#: R51: what ``run_now`` answers when the job is due now (moved, or due already);
#: any other answer is the status that refused it, or ``no such job``.
RUN_NOW_OK = (MADE_DUE, DUE_ALREADY)


def run_now(store: Any, who: str, job_id: int) -> Done:
    """R51: a job waiting for its time (scheduled, or out a retry's backoff) due now,
    its attempts kept; a running, done or dead one is refused, naming its status."""
    what = store.run_now([job_id])[job_id]
    _log("run-now", who, job_id=job_id, result=what)
    return Done(what in RUN_NOW_OK, what)



def pause(store: Any, who: str, queue: str) -> Done:
    """R38: no pool claims from ``queue`` from its next heartbeat on."""
    try:
        changed = store.pause(queue)
    except EnqueueError as exc:  # a queue name the store refuses
        changed, what = False, str(exc)
    else:
        what = "paused" if changed else "already paused"
    _log("pause", who, queue=queue, result=what)
    return Done(changed, what)


def resume(store: Any, who: str, queue: str) -> Done:
    try:
        changed = store.resume(queue)
    except EnqueueError as exc:
        changed, what = False, str(exc)
    else:
        what = "resumed" if changed else "not paused"
    _log("resume", who, queue=queue, result=what)
    return Done(changed, what)


def set_limit(store: Any, who: str, target: tuple[str, int]) -> Done:
    """R35: at most ``running`` jobs of ``queue`` at once across every pool, from each
    pool's next heartbeat (``jobpool limits set --queue Q --running N``)."""
    queue, running = target
    try:
        store.limits.set_queue(queue, running, set_by="web")
    except EnqueueError as exc:  # a queue name or number the store refuses
        ok, what = False, str(exc)
    else:
        ok, what = True, f"at most {running} running"
    _log("limit", who, queue=queue, running=running, result=what)
    return Done(ok, what)


def clear_limit(store: Any, who: str, queue: str) -> Done:
    """R35: the queue's limit gone (``jobpool limits clear --queue Q``)."""
    try:
        cleared = store.limits.clear_queue(queue)
    except EnqueueError as exc:
        cleared, what = False, str(exc)
    else:
        what = "no limit" if cleared else "had no limit"
    _log("clear-limit", who, queue=queue, result=what)
    return Done(cleared, what)


def scale(store: Any, who: str, target: tuple[str, int]) -> Done:
    """R27: ask the running pool ``owner`` to run ``procs`` children (it takes the
    request at its next heartbeat)."""
    owner, procs = target
    try:
        asked = store.request_scale(procs, owner=owner)
    except EnqueueError as exc:  # not a number of processes the store takes
        asked, what = 0, str(exc)
    else:
        what = (f"asked to run {counted(procs, 'process', 'processes')}" if asked
                else "no such running pool")
    _log("scale", who, pool=owner, procs=procs, result=what)
    return Done(bool(asked), what)


def stop(store: Any, who: str, owner: str) -> Done:
    """R25: ask the running pool ``owner`` to stop gracefully."""
    asked = store.request_stop(owner=owner)
    what = "asked to stop" if asked else "no such running pool"
    _log("stop", who, pool=owner, result=what)
    return Done(bool(asked), what)


def cancel_batch(store: Any, who: str, batch_id: int) -> Done:
    """R34: no callback of the batch fires; its ready members are dead now and its
    running ones are cancelled by their pools. A finished batch is left as it is."""
    try:
        before = store.batches.status(batch_id)
        # A cancelled batch not yet finished is cancelled again: what of it is still
        # unfinished (a member retried since, one a first cancel could not reach) is.
        after = None if before.finished else store.batches.cancel(batch_id)
    except BatchNotFound:
        what = "no such batch"
    else:
        what = ("cancelled already" if before.cancelled else "finished already"
                if after is None or not after.cancelled else "cancelled")
    ok = what == "cancelled"
    _log("cancel-batch", who, batch_id=batch_id, result=what)
    return Done(ok, what)


def _log(action: str, who: str, **fields: Any) -> None:
    events.emit(events.WEB_ACTION, action=action, who=who, **fields)


#: The most jobs one "all matching" action changes; the confirmation says when more
#: match (the next press takes the next ones).
BULK_MOST = 10_000
#: Ids per store call (one transaction each), so no write holds the store for long.
BULK_CHUNK = 500
#: The statuses each "all matching" action is offered for: what its store call accepts.
BULK_STATUSES = {"retry": ("dead",), "delete": ("dead",),
                 "cancel": ("ready", "scheduled", "running"), "run-now": ("scheduled",)}
#: How the confirmation's button says each action on ``{n}`` jobs.
BULK_BUTTONS = {"retry": "retry {n}", "delete": "delete {n}", "cancel": "cancel {n}",
                "run-now": "run {n} now"}


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
    outcome, unfollowed = _applied(store, action, ids)
    counts = _counted(outcome)
    _log(action, who, filter={k: v for k, v in chosen.items() if v is not None},
         job_ids=ids, result=counts)
    return Done(bool(ids), _said(counts) or "none matched", _batch_note(*unfollowed))


def _applied(store: Any, action: str,
             ids: list[int]) -> tuple[dict[int, str], tuple[int, int]]:
    """``action`` on each of ``ids``, ``BULK_CHUNK`` a store call: what the store
    answered for each, and how many retried members no batch callback follows (R34:
    those of finished batches, which run alone, and those of cancelled ones)."""
    outcome: dict[int, str] = {}
    alone = cancelled = 0
    for start in range(0, len(ids), BULK_CHUNK):
        chunk = ids[start:start + BULK_CHUNK]
        if action == "retry":
            report = store.dead.retry_report(chunk)
            outcome.update(report.answers)
            alone += sum(map(len, report.alone.values()))
            cancelled += sum(map(len, report.cancelled.values()))
        elif action == "delete":
            outcome.update(store.dead.delete(chunk))
        elif action == "run-now":
            outcome.update(store.run_now(chunk))
        else:
            outcome.update(store.cancel_many(chunk))
    return outcome, (alone, cancelled)


def _counted(outcome: dict[int, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for what in outcome.values():
        counts[what] = counts.get(what, 0) + 1
    return counts


def _said(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))


#: The most jobs one action on a selection takes: a jobs page's largest size.
SELECTED_MOST = 1000
#: What each action on a selection answers for a job it changed (any other answer is
#: the store's refusal, as the one-job button would show it).
SELECTED_OK = {"retry": ("retried",), "delete": ("deleted",),
               "cancel": ("cancelled", "requested"), "run-now": RUN_NOW_OK}


#: The jobs page's buttons for a selection, by action.
SELECTED_BUTTONS = {"retry": "retry selected", "cancel": "cancel selected",
                    "delete": "delete selected", "run-now": "run selected now"}


def selected_ids(sent: Any) -> list[int]:
    """The ids of a selection, checked: 1 to ``SELECTED_MOST`` job ids (whole numbers,
    as numbers or digits), each once, in the order sent; ``ValueError`` saying what is
    wrong."""
    if not isinstance(sent, list) or not sent:
        raise ValueError("select one job or more")
    ids: list[int] = []
    for value in sent:
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)
        if not bounds.whole_within(value, 1, bounds.INT64_MAX):  # past 64 bits: a driver's error
            raise ValueError(f"a job id is a whole number from 1 to {bounds.INT64_MAX}, not "
                             f"{value!r}")
        if value not in ids:
            ids.append(value)
    if len(ids) > SELECTED_MOST:
        raise ValueError(f"select at most {SELECTED_MOST} jobs at once, not {len(ids)}")
    return ids


def selected(store: Any, who: str, action: str, ids: list[int]) -> tuple[Done, dict[int, str]]:
    """R47: ``action`` (a key of ``BULK_STATUSES``) on the jobs ``ids`` a person
    ticked, each as its one-job button would do it (the store refuses a job whose
    status the action does not take, naming it); one ``web_action`` event with the
    ids and a count of what became of them. Also what became of each id."""
    outcome, unfollowed = _applied(store, action, ids)
    counts = _counted(outcome)
    _log(action, who, selected=True, job_ids=ids, result=counts)
    return Done(any(what in SELECTED_OK[action] for what in outcome.values()), _said(counts),
                _batch_note(*unfollowed)), outcome


#: The options an enqueue by name takes besides ``name``, ``args`` and ``kwargs``, with
#: the types each must be (as ``jobpool enqueue`` without ``--app`` takes them).
ENQUEUE_OPTIONS = {"queue": (str,), "key": (str,), "delay": (int, float), "priority": (int,),
                   "max_attempts": (int,)}


def enqueue_spec(body: Any) -> dict[str, Any]:
    """What an enqueue by name asks for, checked: ``{"name": ..., "args": [...],
    "kwargs": {...}}`` and any of ``ENQUEUE_OPTIONS``; ``ValueError`` saying what is
    wrong. The name need not be registered in this process (the store checks the rest)."""
    if not isinstance(body, dict):
        raise ValueError('send {"name": ..., "args": [...], "kwargs": {...}}')
    unknown = sorted(set(body) - {"name", "args", "kwargs", *ENQUEUE_OPTIONS})
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    name, args, kwargs = body.get("name"), body.get("args", []), body.get("kwargs", {})
    if not isinstance(name, str) or not name:
        raise ValueError("name must be a job's name")
    if not isinstance(args, list):
        raise ValueError("args must be a JSON list")
    if not isinstance(kwargs, dict):
        raise ValueError("kwargs must be a JSON object")
    spec: dict[str, Any] = {"name": name, "args": args, "kwargs": kwargs}
    for key, types in ENQUEUE_OPTIONS.items():
        value = body.get(key)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{key} must be {'text' if types == (str,) else 'a number'}")
        spec[key] = value
    return spec


def enqueue(store: Any, who: str, spec: dict[str, Any]) -> tuple[Done, Any]:
    """A job queued by name (R1: the store validates before it writes); one
    ``web_action`` event with the name and the id, not the arguments (they may hold
    secrets). Also the job's handle (None when the store refused it)."""
    options = {k: v for k, v in spec.items() if k != "name"}
    try:
        handle = store.enqueue_with(spec["name"], **options)
    except EnqueueError as exc:
        _log("enqueue", who, name=spec["name"], result=str(exc))
        return Done(False, str(exc)), None
    what = f"duplicate of job {handle.id}" if handle.duplicate else f"queued job {handle.id}"
    _log("enqueue", who, name=spec["name"], job_id=handle.id, result=what)
    return Done(True, what), handle
