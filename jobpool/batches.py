"""Batches with completion callbacks (R34): "import these 200 files, then rebuild
the index".

A batch is a row in the store with members and up to two callbacks. Members are
claimable as soon as they are added; ``close()`` only arms the callbacks. The store
itself counts each member's end in the transaction that ends it (done, dead,
cancelled, quarantined; never a retry, defer or reschedule), and the transaction
that ends the last member of a closed batch enqueues the callbacks: ``on_success``
only if no member went dead, ``on_complete`` always, each exactly once. A
callback is called with its own arguments plus ``batch=`` a dict: ``id``,
``total``, ``done``, ``dead``, ``dead_ids`` (at most 1 000) and
``dead_ids_truncated``.

    with store.batch(on_success=rebuild.s("sales"), on_complete=report.s()) as b:
        b.add(load.s("a.csv"))
        b.add_many("imports.load", [("b.csv",), ("c.csv",)])

A running member may add to its own batch with ``jobpool.current_batch()``.
"""
from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from typing import Any

from jobpool import jobs
from jobpool.errors import EnqueueError
from jobpool.handles import Handle, Handles, Signature
from jobpool.store import rows
from jobpool.store.records import BatchStatus

#: The keyword argument a callback receives.
BATCH_KWARG = "batch"


class Batch:
    """An open batch of one store: add members, then ``close()`` (or use it as a
    context manager: closed on exit; on an exception its unfinished members are
    cancelled and no callback ever fires)."""

    def __init__(self, store: Any, batch_id: int) -> None:
        self.store = store
        self.id = batch_id

    def __repr__(self) -> str:
        return f"Batch({self.id})"

    def add(self, signature: Signature) -> Handle:
        """One member (``job.s(...)``), claimable at once."""
        if not isinstance(signature, Signature):
            raise EnqueueError(f"Batch.add takes a signature (job.s(...)), "
                               f"not {type(signature).__name__}")
        return self.store.enqueue_with(signature.name, args=signature.args,
                                       kwargs=signature.kwargs, batch=self.id)

    def add_many(self, name: str, items: Iterable[Any]) -> Handles:
        """Many members of one job, in one transaction (as ``enqueue_many``)."""
        return self.store.enqueue_many(name, items, batch=self.id)

    def close(self) -> BatchStatus:
        """Arm the callbacks; if every member has ended already they fire now."""
        return self.store.batches.close(self.id)

    def cancel(self) -> BatchStatus:
        """No callback will fire; unfinished members are cancelled (R31)."""
        return self.store.batches.cancel(self.id)

    def status(self) -> BatchStatus:
        return self.store.batches.status(self.id)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.cancel()


def open_batch(store: Any, on_success: Signature | None, on_complete: Signature | None) -> Batch:
    """``store.batch(...)``: the callbacks checked before the batch is written."""
    success = callback_json(on_success, "on_success", store.max_payload)
    complete = callback_json(on_complete, "on_complete", store.max_payload)
    return Batch(store, store.batches.open(success, complete))


def callback_json(signature: Signature | None, label: str, max_payload: int) -> str | None:
    """A callback as the store keeps it, refused (one ``EnqueueError``) when it could
    never be called: its own ``batch`` argument, or a function registered in this
    process that takes no ``batch`` keyword. Its arguments travel as JSON."""
    if signature is None:
        return None
    if not isinstance(signature, Signature):
        rows.step_dict(signature, label, "batch callbacks", max_payload)  # refuses it
    if signature.kwargs and BATCH_KWARG in signature.kwargs:
        raise EnqueueError(f"{label}: the callback is given batch= by the store; "
                           f"it cannot have its own")
    job = jobs.lookup(signature.name)
    if job is not None and not _takes_batch(job.fn):
        raise EnqueueError(f"{label}: {signature.name} cannot take the keyword argument "
                           f"batch= that a callback receives; add it to its parameters")
    # R1: its arguments, with the batch= the store adds, bind to its function.
    step = rows.step_dict(signature, label, "batch callbacks", max_payload,
                          given={BATCH_KWARG: {}})
    if "\\u0000" in step["payload"]:
        raise EnqueueError(f"{label}: a callback's arguments cannot hold a NUL character "
                           f"(a PostgreSQL store's JSON cannot)")
    return json.dumps(step, separators=(",", ":"))


def _takes_batch(fn: Any) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # nothing to judge by: let it run
    return any(p.kind is p.VAR_KEYWORD
               or (p.name == BATCH_KWARG and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
               for p in parameters)
