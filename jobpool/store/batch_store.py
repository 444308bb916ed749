"""R34 in a store: open, grow, close and cancel batches, read them, and a running
member's adds to its own batch.

The counts are kept in the transaction of whatever ends a member (a settle, a
reclaim, a cancel): on SQLite by the transition engine of both cores and by the
cancels (``sql.MEMBER_DONE`` and the rest), on PostgreSQL by a trigger on a row's
move to ``finished_jobs``; the callbacks are enqueued by a trigger on the batch row
in both. What is here writes the batch rows, and checks what a caller asked before
anything is written. One class serves both stores: their
statements have the same names and take the same parameters (PostgreSQL's read
the server's clock instead of ``now``).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from types import ModuleType
from typing import Any, List

from jobpool import bounds, lifecycle
from jobpool.bounds import INT64_MAX, MAX_RESULTS_PAGE, RESULTS_PAGE_BYTES
from jobpool.errors import BatchNotFound, EnqueueError, LeaseLostError, StoreError
from jobpool.handles import Batch, Signature
from jobpool.options import options_of
from jobpool.store import held_rows
from jobpool.store.records import BatchStatus, MemberResult
from jobpool.store.rows import NewJob, listing_limit, meta_json, stamp, step_dict

#: The keyword argument a batch's callback receives.
BATCH_KWARG = "batch"

#: Finished batches swept per call of the pool's sweep.
PURGE_BATCH = 500

#: R34 on PostgreSQL: how long a batch cancel comes back for members a pool's turn held.
CANCEL_PATIENCE = 30.0

#: R60: members' results read in one page unless asked otherwise.
RESULTS_PAGE = 100


class StoreBatches:
    """The batches of one store (``store.batches``). ``statements`` is the store's
    SQL module; the store gives ``transaction(what, fn)``, ``read_rows(what,
    query, params)``, ``insert_job(conn, row)`` and ``take_lanes(conn, rows)``."""

    def __init__(self, store: Any, statements: ModuleType) -> None:
        self.store = store
        self.sql = statements

    def open_batch(self, on_success: Signature | None, on_complete: Signature | None) -> Batch:
        """``store.batch(...)``: the callbacks checked before the batch is written."""
        success = callback_json(on_success, "on_success", self.store.max_payload)
        complete = callback_json(on_complete, "on_complete", self.store.max_payload)
        return Batch(self.store, self.open(success, complete))

    def open(self, on_success: str | None, on_complete: str | None,
             now: float | None = None) -> int:
        """A new, open batch with its callbacks (``rows.step_dict`` JSON); its id."""
        params = {"now": bounds.now_or(now), "on_success": on_success,
                  "on_complete": on_complete}
        return self.store.transaction("opening a batch", lambda conn: conn.execute(
            self.sql.OPEN_BATCH, params).fetchone()[0])

    def discard_unused(self, batch_id: int) -> bool:
        """Delete a batch that no member joined and no one closed: one opened for an
        enqueue that was refused (``enqueue --from F --on-success N``), which would
        otherwise stay listed as an empty, cancelled batch. Whether it was deleted."""
        params = {"id": bounds.row_id(batch_id, "a batch id")}
        return self.store.transaction(f"discarding batch {batch_id}", lambda conn: conn.execute(
            self.sql.DISCARD_UNUSED_BATCH, params).rowcount == 1)

    def grow(self, conn: Any, batch_id: int, count: int) -> None:
        """``count`` members join ``batch_id`` in ``conn``'s transaction; a batch that
        is finished, cancelled or unknown takes none (``EnqueueError`` naming why)."""
        if conn.execute(self.sql.GROW_BATCH, {"batch_id": batch_id, "count": count}).fetchone():
            return
        row = conn.execute(self.sql.GET_BATCH, {"id": bounds.row_id(batch_id, "a batch id")}).fetchone()
        if row is None:
            raise EnqueueError(f"no batch with id {batch_id}")
        if BatchStatus.from_row(row).cancelled:
            raise EnqueueError(f"batch {batch_id} is cancelled: it takes no more jobs")
        raise EnqueueError(f"batch {batch_id} is finished (closed, and every member ended): "
                           f"it takes no more jobs")

    def join(self, conn: Any, batch_id: int, ids: Sequence[int]) -> None:
        """The members just written with these ids join ``batch_id``, in ``conn``'s
        transaction: counted in its shards (PostgreSQL), then in its total, the
        batch's rows in the order a member's end takes them (shards, then the batch),
        so the two never wait on each other. A batch that takes no more members
        raises, and the transaction (the rows with it) is rolled back."""
        if not ids:
            return
        if self.sql.MEMBERS_JOINED is not None:
            conn.execute(self.sql.MEMBERS_JOINED, {"batch_id": batch_id, "ids": list(ids)})
        self.grow(conn, batch_id, len(ids))

    def close(self, batch_id: int, now: float | None = None) -> BatchStatus:
        """Arm the callbacks (they fire now if every member has ended); closing a
        closed batch changes nothing."""
        params = {"id": bounds.row_id(batch_id, "a batch id"), "now": bounds.now_or(now)}

        def close(conn: Any) -> BatchStatus:
            conn.execute(self.sql.CLOSE_BATCH, params)
            return self._status(conn, batch_id)
        return self.store.transaction(f"closing batch {batch_id}", close)

    def cancel(self, batch_id: int, now: float | None = None) -> BatchStatus:
        """No callback will fire; ready members are dead ("cancelled") now, running
        ones are cancelled by their pools (R31). A finished batch is left as it is; a
        cancelled one not yet finished has what of it is still unfinished cancelled (a
        member retried since, one an earlier cancel could not reach)."""
        params = {"id": bounds.row_id(batch_id, "a batch id"), "now": bounds.now_or(now),
                  "error": lifecycle.CANCELLED}

        def cancel(conn: Any) -> tuple[int, BatchStatus]:
            if self.sql.LOCK_SHARDS is not None:
                conn.execute(self.sql.LOCK_SHARDS, params)  # before the batch row (``join``)
            conn.execute(self.sql.CANCEL_BATCH, params)
            status = self._status(conn, batch_id)
            if not status.cancelled or status.finished:
                return 0, status
            return self._cancel_members(conn, params), self._status(conn, batch_id)
        left, status = self.store.transaction(f"cancelling batch {batch_id}", cancel)
        if left:
            status = self._cancel_members_left(batch_id, params)
        return status

    def _cancel_members(self, conn: Any, params: dict) -> int:
        """A cancelled batch's ready members dead now, its running ones flagged for
        their pools (on PostgreSQL, those no pool's turn holds at the moment): how many
        are left to reach (``MEMBERS_LEFT``; none on SQLite, one writer at a time)."""
        cancelled = conn.execute(self.sql.CANCEL_READY_MEMBERS, params).rowcount
        if self.sql.MEMBERS_CANCELLED is not None and cancelled:
            conn.execute(self.sql.MEMBERS_CANCELLED, dict(params, cancelled=cancelled))
        conn.execute(self.sql.REQUEST_CANCEL_MEMBERS, params)
        if self.sql.MEMBERS_LEFT is None:
            return 0
        return conn.execute(self.sql.MEMBERS_LEFT, params).fetchone()[0]

    def _cancel_members_left(self, batch_id: int, params: dict) -> BatchStatus:
        """PostgreSQL: the members the cancel passed over because another transaction
        held their rows (a pool's turn, until it commits: one statement, or a limited
        turn until its pool lands it; the cancel never waits for one while it holds the
        batch's shards: see ``CANCEL_READY_MEMBERS``), taken in short transactions of
        their own until none is left. Rows still held after ``CANCEL_PATIENCE`` are a
        store error naming how many (the batch stays cancelled and its callbacks never
        fire; cancelling it again, or ``jobs cancel``, reaches them)."""
        def again(conn: Any) -> tuple[int, BatchStatus]:
            conn.execute(self.sql.LOCK_SHARDS, params)
            return self._cancel_members(conn, params), self._status(conn, batch_id)

        def gave_up(left: int) -> StoreError:
            one = left == 1
            return StoreError(f"batch {batch_id} is cancelled, but {left} of its members "
                              f"{'was' if one else 'were'} held by other transactions for "
                              f"{CANCEL_PATIENCE:g} s and {'is' if one else 'are'} not: "
                              f"cancel the batch again, or {'it' if one else 'them'} by id "
                              f"(jobpool jobs cancel)")
        return held_rows.until_none_left(self.store, f"cancelling batch {batch_id}'s members",
                                         again, CANCEL_PATIENCE, gave_up)

    def status(self, batch_id: int) -> BatchStatus:
        rows = self.store.read_rows(f"reading batch {batch_id}", self.sql.GET_BATCH,
                                    {"id": bounds.row_id(batch_id, "a batch id")})
        if not rows:
            raise BatchNotFound(f"no batch with id {batch_id}")
        return BatchStatus.from_row(rows[0])

    def list(self, *, open_only: bool = False, limit: int = 100) -> List[BatchStatus]:
        """Newest first; ``open_only``: those whose callbacks have not fired."""
        limit = listing_limit(limit)
        query = self.sql.LIST_BATCHES.format(
            where="WHERE finished_at IS NULL" if open_only else "")
        return [BatchStatus.from_row(r)
                for r in self.store.read_rows("listing batches", query, {"limit": limit})]

    def members(self, batch_id: int) -> dict[str, int]:
        """The members still in the store, counted by status (swept ones are gone)."""
        counts: dict[str, int] = {}
        for status, count in self.store.read_rows(f"reading the members of batch {batch_id}",
                                                  self.sql.BATCH_MEMBERS,
                                                  {"id": bounds.row_id(batch_id, "a batch id")}):
            counts[status] = counts.get(status, 0) + count
        return counts

    def results(self, batch_id: int, *, after: int = 0,
                limit: int = RESULTS_PAGE) -> List[MemberResult]:
        """R60: up to ``limit`` members of ``batch_id`` that stored a result, in id
        order after ``after``, as stored. A page also stops once it holds
        ``RESULTS_PAGE_BYTES`` (never before its first row): the sizes are read
        first, then only the results that fit, so one page of 1 MB results is a
        bounded read and a bounded message. Swept members are gone."""
        for what, value, least, most in (("batch", batch_id, 1, INT64_MAX),
                                          ("after", after, 0, INT64_MAX),
                                          ("limit", limit, 1, MAX_RESULTS_PAGE)):
            if not bounds.whole_within(value, least, most):
                raise ValueError(f"{what} must be an integer from {least} to {most}, "
                                 f"not {value!r}")
        where = f"the results of batch {batch_id}"
        sizes = self.store.read_rows(f"reading {where}", self.sql.BATCH_RESULT_SIZES,
                                     {"id": batch_id, "after": after, "limit": limit})
        if not sizes:
            return []
        through, total = sizes[0][0], 0
        for job_id, size in sizes:
            total += size
            if total > RESULTS_PAGE_BYTES and job_id != sizes[0][0]:
                break
            through = job_id
        found = self.store.read_rows(f"reading {where}", self.sql.BATCH_RESULTS,
                                     {"id": batch_id, "after": after, "through": through})
        return [MemberResult(job_id, name, serializer,
                             bytes(result) if isinstance(result, memoryview) else result)
                for job_id, name, serializer, result in found]

    def add_from_member(self, owner: str, job_id: int, attempt: int, first_position: int,
                        jobs: Sequence[NewJob]) -> List[tuple[int, bool]]:
        """A running member's adds to its own batch, fenced by its lease (R8). Each
        is keyed by the member's id and its position among the attempt's adds, so a
        retried member that adds again gets the jobs its earlier attempt made:
        ``(id, duplicate)`` per job, in order. A job without metadata of its own gets
        the member's (R54)."""
        def add(conn: Any) -> List[tuple[int, bool]]:
            row = conn.execute(self.sql.MEMBER_BATCH, {"id": job_id, "owner": owner,
                                                       "attempt": attempt}).fetchone()
            if row is None:
                raise LeaseLostError(f"job {job_id} (attempt {attempt}) no longer holds "
                                     f"its lease: its adds are not written")
            batch_id, member_meta = row
            if batch_id is None:
                raise EnqueueError(f"job {job_id} is not a member of a batch")
            answers: List[tuple[int, bool]] = []
            fresh = []
            for position, job in enumerate(jobs, first_position):
                key = {"batch_id": batch_id, "add_key": f"{job_id}:{position}"}
                found = conn.execute(self.sql.FIND_ADD, key).fetchone()
                if found is None:
                    fresh.append((len(answers), key, job))
                answers.append((found[0], True) if found else (0, False))
            self.store.take_lanes(conn, [job for _index, _key, job in fresh])  # R35
            for index, key, job in fresh:
                # R54: an add carries its member's metadata unless it names its own.
                new_id = self.store.insert_job(conn, job._replace(
                    batch_id=batch_id, meta=member_meta if job.meta is None else job.meta))
                conn.execute(self.sql.RECORD_ADD, dict(key, job_id=new_id))
                answers[index] = (new_id, False)
            self.join(conn, batch_id, [answers[index][0] for index, _key, _job in fresh])
            return answers
        return self.store.transaction(f"adding to the batch of job {job_id}", add)

    def purge(self, before: float, limit: int = PURGE_BATCH) -> int:
        """R34: batches finished before ``before`` go, with their add keys; one
        bounded batch per call."""
        return self.store.transaction("sweeping finished batches",
                                      lambda conn: self.purge_in(conn, before, limit))

    def purge_in(self, conn: Any, before: float, limit: int = PURGE_BATCH) -> int:
        """``purge`` inside the caller's transaction (a store's own sweep)."""
        params = {"before": before, "limit": limit}
        if self.sql.PURGE_BATCH_ADDS is not None:
            conn.execute(self.sql.PURGE_BATCH_ADDS, params)
        return conn.execute(self.sql.PURGE_BATCHES, params).rowcount

    def _status(self, conn: Any, batch_id: int) -> BatchStatus:
        row = conn.execute(self.sql.GET_BATCH, {"id": bounds.row_id(batch_id, "a batch id")}).fetchone()
        if row is None:
            raise BatchNotFound(f"no batch with id {batch_id}")
        return BatchStatus.from_row(row)


def callback_json(signature: Signature | None, label: str, max_payload: int) -> str | None:
    """A callback as the store keeps it, refused (one ``EnqueueError``) when it could
    never be called: its own ``batch`` argument, or a function registered in this
    process that takes no ``batch`` keyword. Its arguments travel as JSON."""
    if signature is None:
        return None
    if not isinstance(signature, Signature):
        step_dict(signature, label, "batch callbacks", max_payload)  # refuses it
    signature.refuse_previous(label)  # R59: a callback follows no one step
    if signature.kwargs and BATCH_KWARG in signature.kwargs:
        raise EnqueueError(f"{label}: the callback is given batch= by the store; "
                           f"it cannot have its own")
    registered = options_of(signature.name)
    if registered is not None and not _takes_batch(registered.arguments):
        raise EnqueueError(f"{label}: {signature.name} cannot take the keyword argument "
                           f"batch= that a callback receives; add it to its parameters")
    # R1: its arguments, with the batch= the store adds, bind to its function.
    step = step_dict(signature, label, "batch callbacks", max_payload, given={BATCH_KWARG: {}})
    if "\\u0000" in step["payload"]:
        raise EnqueueError(f"{label}: a callback's arguments cannot hold a NUL character "
                           f"(a PostgreSQL store's JSON cannot)")
    # R54, R55: its own metadata (``with_meta``), as the producer's hooks stamp it now,
    # as they stamp a chain's steps at the enqueue.
    meta = stamp(signature.name, signature.args, signature.kwargs, signature.meta, f"{label}: ")
    if meta is not None:
        meta_json(meta, f"{label}: meta")
        step["meta"] = meta
    return json.dumps(step, separators=(",", ":"))


def _takes_batch(arguments: Any) -> bool:
    """Whether a registered job's function (its ``jobs.Arguments``) takes ``batch=``."""
    signature = getattr(arguments, "signature", None)
    if signature is None:
        return True  # nothing to judge by: let it run
    return any(p.kind is p.VAR_KEYWORD
               or (p.name == BATCH_KWARG and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
               for p in signature.parameters.values())
