"""What an enqueue returns (``Handle``, ``Handles``) and what a chain step or a
batch item is written as (``Signature``): plain values the store hands back and
callers keep, with no dependency on the store's internals.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, overload

from jobpool.errors import EnqueueError, JobFailed, JobpoolError, UnsafeResultError, seconds
from jobpool.options import options_of

if TYPE_CHECKING:  # ``import jobpool`` loads no store module
    from jobpool.store.records import BatchStatus


def stored_result(job_id: int, name: str, data: bytes | str | None,
                  allow_pickle: bool = False, row_serializer: str = "json") -> Any:
    """A job's stored result, decoded as this process may (R39): a pickled one only
    for a job it registers with pickle, or with ``allow_pickle``; otherwise
    ``UnsafeResultError`` naming the job."""
    from jobpool.serialize import SerializerRefused, decode_result, decoder_for, result_serializer
    registered = options_of(name)
    allowed = "pickle" if allow_pickle else (
        registered.serializer if registered is not None else "json")
    try:
        decoder = decoder_for(result_serializer(data, row_serializer), allowed, "result")
    except SerializerRefused as exc:
        raise UnsafeResultError(f"job {job_id}: {exc} (pass allow_pickle=True to trust it)") from None
    return decode_result(data, decoder)


def member_results(page_after: Any, allow_pickle: bool) -> Iterator[tuple[int, Any]]:
    """R60: ``(id, result)`` of a batch's members, page by page: ``page_after(id)``
    gives the ``(id, name, serializer, result)`` rows after ``id`` (none: the end),
    from the store (a producer) or through the pool (a job); each decoded as
    ``stored_result`` decodes it."""
    after = 0
    while True:
        found = page_after(after)
        for job_id, name, serializer, result in found:
            yield job_id, stored_result(job_id, name, result, allow_pickle, serializer)
        if not found:
            return
        after = found[-1][0]


def _wait_options(timeout: Any, poll: Any) -> tuple[float | None, float]:
    """``result()``'s ``timeout`` (None, or seconds not below 0: a number or a
    ``timedelta``) and ``poll`` (seconds above 0), checked: a NaN timeout waited for
    ever, text or a ``timedelta`` raised ``TypeError`` deep in the wait."""
    timeout = seconds(timeout, "timeout", bounded=False)
    checked = seconds(poll, "poll", allow_none=False, bounded=False)
    if not checked:
        raise EnqueueError(f"poll must be above 0 seconds, not {poll!r}")
    return timeout, checked


@dataclass(frozen=True)
class Handle:
    """What an enqueue returns: the job's id, and whether it already existed (R3)."""

    id: int
    duplicate: bool = False
    store: Any = field(default=None, compare=False, repr=False)

    def status(self) -> str:
        return self._store().get(self.id)["status"]

    def result(self, timeout: float | None = None, *, poll: float = 0.05,
               allow_pickle: bool = False) -> Any:
        """Wait for the job to finish and return what it returned.

        The value is there when the job was declared with ``store_result=True``
        (otherwise None). A job that went dead raises ``JobFailed`` carrying its
        reason; still unfinished after ``timeout`` seconds raises ``TimeoutError``.
        A pickled result is unpickled only when this process registers the job
        with ``serializer="pickle"`` or the caller passes ``allow_pickle=True``
        (R39: the row alone never decides to run an unpickler); otherwise
        ``UnsafeResultError``. R69: where the store can tell of the job's end
        (PostgreSQL) the wait wakes when it ends; elsewhere it looks every ``poll`` s.
        """
        import time
        timeout, poll = _wait_options(timeout, poll)
        store = self._store()
        end = None if timeout is None else time.monotonic() + timeout
        finished, value = self._look(store, allow_pickle)
        if finished:
            return value
        if end is not None and time.monotonic() >= end:
            raise self._still(value, timeout)  # "is it done?": no waiter to open
        with store.finish_waiter(self.id, poll) as waiter:
            while True:
                finished, value = self._look(store, allow_pickle)
                if finished:
                    return value
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise self._still(value, timeout)
                waiter.wait(left)

    async def aresult(self, timeout: float | None = None, *, poll: float = 0.05,
                      allow_pickle: bool = False) -> Any:
        """``result()`` for async code (R50): the same value and the same errors
        (``JobFailed``, ``TimeoutError``, ``UnsafeResultError``), each look at the
        store made in a worker thread and each wait on the loop itself (R69), so the
        event loop runs on while the job does. Cancelling
        the awaiting task stops the wait; the job runs on."""
        import asyncio
        import time
        timeout, poll = _wait_options(timeout, poll)
        loop = asyncio.get_running_loop()
        end = None if timeout is None else time.monotonic() + timeout
        store = await loop.run_in_executor(None, self._store)
        finished, value = await loop.run_in_executor(None, self._look, store, allow_pickle)
        if finished:
            return value
        if end is not None and time.monotonic() >= end:
            raise self._still(value, timeout)
        opening = loop.run_in_executor(None, store.finish_waiter, self.id, poll)
        try:
            waiter = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # Cancelled while the waiter's connection was being made: close it once made.
            opening.add_done_callback(
                lambda made: made.cancelled() or made.exception() or made.result().close())
            raise
        try:
            while True:
                finished, value = await loop.run_in_executor(None, self._look, store,
                                                             allow_pickle)
                if finished:
                    return value
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise self._still(value, timeout)
                await waiter.await_(left)
        finally:
            waiter.close()  # no thread is in it: its waits run on this loop

    def _look(self, store: Any, allow_pickle: bool) -> tuple[bool, Any]:
        """One look at the job: ``(True, its result)`` when done, ``(False, its
        status)`` while unfinished; ``JobFailed`` when dead, ``UnsafeResultError``
        for a pickled result this process may not unpickle (R39)."""
        job = store.get(self.id, raw_result=True)
        if job["status"] == "done":
            return True, stored_result(self.id, job["name"], job["result"], allow_pickle,
                                       job["serializer"])
        if job["status"] == "dead":
            raise JobFailed(self.id, job["last_error"] or "dead")
        return False, job["status"]

    def _still(self, status: str, timeout: float | None) -> TimeoutError:
        return TimeoutError(f"job {self.id} is still {status} after {timeout} s")

    def _store(self) -> Any:
        """The store that made this handle. One made without (``Handle(42)``, or what a
        running job's ``current_batch().add`` returns in its child, which opens no
        store) asks none: guessing the default store would read another store's job
        42 as readily as this one's."""
        if self.store is None:
            raise JobpoolError(f"this handle of job {self.id} has no store to ask: make it "
                               f"with Handle({self.id}, store=jobpool.connect(...))")
        return self.store


class Handles(Sequence):
    """The handles of one ``enqueue_many``, in item order, made on demand.

    It holds the ids the store gave the batch (a ``range`` when they are
    consecutive, as SQLite's are; PostgreSQL's need not be, since other sessions
    take ids from the same sequence meanwhile): building 100 000 ``Handle``
    objects up front took longer than writing the rows. Indexing, slicing,
    ``len`` and iteration behave as on the list of handles it stands for.
    """

    __slots__ = ("_ids", "_store", "_duplicates")

    def __init__(self, ids: Sequence[int], store: Any = None,
                 duplicates: frozenset[int] = frozenset()) -> None:
        self._ids = ids
        self._store = store
        #: Positions whose key a live job already held (R3): their id is that job's.
        self._duplicates = duplicates

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> Handle: ...
    @overload
    def __getitem__(self, index: slice) -> list[Handle]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._handle(i) for i in range(len(self._ids))[index]]
        position = range(len(self._ids))[index]  # negative indexes, IndexError
        return self._handle(position)

    def _handle(self, position: int) -> Handle:
        return Handle(self._ids[position], duplicate=position in self._duplicates,
                      store=self._store)

    def __iter__(self):
        if self._duplicates:
            return (self._handle(i) for i in range(len(self._ids)))
        store = self._store
        return (Handle(i, store=store) for i in self._ids)

    @property
    def duplicates(self) -> list[int]:
        """Positions of the items whose key a live job already held (R3): nothing was
        written for them, and their handle is that job's, ``duplicate=True``."""
        return sorted(self._duplicates)

    @property
    def ids(self) -> Sequence[int]:
        """Every id of the batch, in the order the items were given."""
        return self._ids

    def __eq__(self, other: object) -> bool:
        # Equal to the list of handles it stands for, as enqueue_many's list was.
        if isinstance(other, Handles):
            return list(self._ids) == list(other._ids)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self._ids) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-sequence semantics, like list

    def __repr__(self) -> str:
        ids = self._ids
        if not ids:
            return "Handles([])"
        if isinstance(ids, range):
            return f"Handles(ids {ids.start}..{ids.stop - 1})"
        return f"Handles({len(ids)} ids {ids[0]}..{ids[-1]})"


@dataclass(frozen=True)
class Signature:
    """A job call to make later (``load.s("a.csv")``), as in Celery."""

    name: str
    args: tuple = ()
    kwargs: dict | None = None
    #: Its own metadata (R54, R55): a chain step's, an ``enqueue_many`` item's or a
    #: ``Batch.add`` member's, instead of the call's; None: the call's.
    meta: dict | None = None
    #: R59: the keyword under which a chain step is given its predecessor's result
    #: (``with_previous``); None: it is called with its own arguments only.
    previous: str | None = None

    def with_meta(self, meta: dict[str, Any] | None) -> "Signature":
        """This call with ``meta`` as its own metadata (``step.s(...).with_meta({...})``)."""
        return replace(self, meta=meta)

    def with_previous(self, keyword: str = "previous") -> "Signature":
        """This chain step, called with its predecessor's result as the keyword
        argument ``keyword`` (R59): ``first.s(...)`` then ``load.s(path).with_previous()``
        runs ``load(path, previous=<what first returned>)``. The predecessor must store
        its result as JSON (``store_result=True``, the JSON serializer); the store
        writes it into this step's arguments in the transaction that ends the
        predecessor, so the value is the one it stored, never read twice."""
        return replace(self, previous=keyword)

    def refuse_previous(self, label: str) -> None:
        """R59: only a chain's step has a predecessor to take a result from; ``label``
        names the call that was given this one elsewhere."""
        if self.previous is not None:
            raise EnqueueError(f"{label}: {self.name} asks for its predecessor's result "
                               f"(with_previous), which only a chain's step (then=) has")


# -- batches (R34) ----------------------------------------------------------------------------
# "Import these 200 files, then rebuild the index". A batch is a row in the store with
# members and up to two callbacks. Members are claimable as soon as they are added;
# ``close()`` only arms the callbacks. The store counts each member's end in the
# transaction that ends it (done, dead, cancelled, quarantined; never a retry, defer or
# reschedule), and the transaction that ends the last member of a closed batch enqueues
# the callbacks: ``on_success`` only if no member went dead, ``on_complete`` always,
# each exactly once. A callback is called with its own arguments plus ``batch=`` a
# dict: ``id``, ``total``, ``done``, ``dead``, ``dead_ids`` (at most 1 000) and
# ``dead_ids_truncated``.
#
#     with store.batch(on_success=rebuild.s("sales"), on_complete=report.s()) as b:
#         b.add(load.s("a.csv"))
#         b.add_many("imports.load", [("b.csv",), ("c.csv",)])
#
# A running member may add to its own batch with ``jobpool.current_batch()``.

class Batch:
    """An open batch of one store: add members, then ``close()`` (or use it as a
    context manager: closed on exit; on an exception its unfinished members are
    cancelled and no callback ever fires)."""

    def __init__(self, store: Any, batch_id: int) -> None:
        self.store = store
        self.id = batch_id

    def __repr__(self) -> str:
        return f"Batch({self.id})"

    def add(self, signature: Signature, *, meta: dict[str, Any] | None = None) -> Handle:
        """One member (``job.s(...)``), claimable at once; its metadata is ``meta``,
        else the signature's own (R54)."""
        if not isinstance(signature, Signature):
            raise EnqueueError(f"Batch.add takes a signature (job.s(...)), "
                               f"not {type(signature).__name__}")
        signature.refuse_previous("Batch.add")
        return self.store.enqueue_with(signature.name, args=signature.args,
                                       kwargs=signature.kwargs, batch=self.id,
                                       meta=signature.meta if meta is None else meta)

    def add_many(self, name: str, items: Iterable[Any], *,
                 meta: dict[str, Any] | None = None) -> Handles:
        """Many members of one job, in one transaction (as ``enqueue_many``)."""
        return self.store.enqueue_many(name, items, batch=self.id, meta=meta)

    def results(self, *, allow_pickle: bool = False, page: int = 100
                ) -> Iterator[tuple[int, Any]]:
        """R60: ``(id, result)`` of each member that stored a result (``store_result``),
        in id order, read ``page`` members at a time as the iteration goes (a page
        also stops at 8 MB). A pickled result is decoded as ``Handle.result`` would
        (R39). Members swept with done jobs (``--result-ttl``) are gone."""
        return member_results(
            lambda after: self.store.batches.results(self.id, after=after, limit=page),
            allow_pickle)

    def close(self) -> BatchStatus:
        """Arm the callbacks; if every member has ended already they fire now."""
        return self.store.batches.close(self.id)

    def cancel(self) -> BatchStatus:
        """No callback will fire; unfinished members are cancelled (R31)."""
        return self.store.batches.cancel(self.id)

    def give_up(self) -> None:
        """After an add that failed: the batch deleted if no member joined it and it
        was never closed (nothing of it is kept), else cancelled (no callback fires for
        members not wholly added)."""
        if not self.store.batches.discard_unused(self.id):
            self.cancel()

    def status(self) -> BatchStatus:
        return self.store.batches.status(self.id)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.cancel()
