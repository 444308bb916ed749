"""Run queued jobs in the calling process, for tests: ``drain()`` and what it counted.

A test that enqueues work wants it done before it asserts, without starting a
pool, forking children or sleeping through a poll. ``drain`` claims and settles
through the store's own claimer (``Store.claimer``, one ``turn`` per job), so
every transition is the one a pool makes: attempts spent at claim (R8), backoff
(R13), the attempt budget (R16), deferrals (R17), chains (R12), fenced settles
and the attempt log. The body runs here, one job at a time, so a debugger,
``monkeypatch`` and coverage reach it. What that changes, and what a pool does
that a drain does not:

- timeouts, hard and soft, are not enforced: nothing here may kill the caller,
  and a soft timeout's SIGALRM would replace the caller's own (pytest-timeout's);
- periodic jobs are not enqueued (that is a pool's heartbeat, R33); an occurrence
  enqueued by hand runs like any job;
- ``on_dead`` hooks run here, synchronously, right after the dead settle (R21),
  isolated as in a pool: what a hook raises is logged, not raised;
- ``on_child_start`` hooks do not run (there is no child); middleware does;
- paused queues (R38) are skipped, as a pool skips them: read once, as the drain
  starts;
- ``jobpool.progress()`` writes each report through the store at once (R22);
- a coroutine job runs in a new event loop, as in a pool's child (R20); a drain
  called from async code (an async test), whose loop is running, runs it in a
  thread of its own while the drain waits;
- a job declared ``chunk=N`` (R63) is claimed as a pool's slot claims it: up to N
  ready rows of its name in one turn, run here one after the other, each settled
  on its own before the next starts; a row past its deadline when its turn comes
  is dead without running; an interrupted drain gives back the rows that had not
  started. A chunk never takes the drain past ``max_jobs`` (it is cut to what is
  left); ``jobpool start --chunk`` has no counterpart here. Operators' cancels are
  not read by a drain, so a row cancelled while it waits in a chunk still runs;
- a store error ends the drain (``StoreError`` is raised) where a pool would retry
  (R26), after one more turn settles the job that ran and gives back a chunk's rows
  that had not started: nothing is left running under the drain's owner.
"""
from __future__ import annotations

import copy
import logging
import os
import random
import threading
import time
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from jobpool import bounds, coroutines, events, jobs, procinfo, protocol, requests, running
from jobpool.child import run_attempt
from jobpool.errors import Interrupted, JobpoolError, StoreError
from jobpool.lifecycle import (ERROR, INTERRUPTED, RELEASE, UNSTARTED, Claimed, Outcome, Policy,
                               Settled, chunk_ended_early, retired_at_its_turn, settled_as)
from jobpool.queueplan import QueuePlan
from jobpool.store.base import Claimer, Store
from jobpool.store.rows import queue_name
from jobpool.store.records import ProgressReport

__all__ = ["drain", "Drained", "DrainError", "DrainLimitError", "SCHEDULED_WAIT_MAX"]

log = logging.getLogger(__name__)


#: A store that dates claims by its own clock (PostgreSQL, R7a) cannot be told to
#: claim a job before it is due: ``drain(run_scheduled=True)`` waits for such a
#: job when it is due within this many seconds, and refuses a longer wait.
SCHEDULED_WAIT_MAX = 10.0
#: How far the store's clock may lag this host's before a wait is given up, seconds.
_CLOCK_SLACK = 2.0
#: How often a waiting drain asks the store again, seconds.
_WAIT_STEP = 0.05


class Drained(NamedTuple):
    """What one ``drain`` did: its attempts, by how each was settled."""

    done: int = 0
    retried: int = 0
    dead: int = 0
    deferred: int = 0
    rescheduled: int = 0


class DrainError(JobpoolError):
    """``drain`` could not run what is queued; ``drained`` is what it did before."""

    def __init__(self, message: str, drained: Drained) -> None:
        super().__init__(message)
        self.drained = drained


class DrainLimitError(DrainError):
    """``drain`` ran ``max_jobs`` attempts and jobs were still ready: without the
    limit, a job that always defers or reschedules would keep it running for ever."""


class _Served(NamedTuple):
    """What the drain claims and how it settles: as a pool started without
    ``--queues`` or names would (``supervisor/loop.py``)."""

    names: tuple[str, ...]
    queues: tuple[str, ...]
    policies: dict[str, Policy]
    hooks: dict[str, Callable[..., Any]]
    #: R63: the chunk size of each name declared with ``chunk=`` above 1.
    chunks: dict[str, int]


#: The attempts drains run now, in every thread, oldest first: ``running.current`` is
#: the latest, for the threads a job starts (R48).
_RUNNING: list = []
_RUNNING_LOCK = threading.Lock()
#: ``running.current`` when the first of them started (a pool's child's job, or None).
_OUTSIDE: list = [None]


def drain(store: Store | None = None, *, max_jobs: int = 10_000,
          run_scheduled: bool = False, queues: Iterable[str] | None = None) -> Drained:
    """Run ready jobs in this process until none is ready; what happened, counted.

    ``store`` defaults to the one ``job.enqueue()`` writes to (``$JOBPOOL_DB``, else
    ``./jobpool.db``). Only jobs due now run: a retry in its backoff or a deferred
    job stays queued, unless ``run_scheduled``, which runs them at once, dated as
    if their time had come. More than ``max_jobs`` attempts raise
    ``DrainLimitError``, each attempt settled first, so nothing is left running.
    ``queues``: the queues served, in order, as a pool's ``--queues``; by default, as a
    pool's, ``default`` and the queues the registered jobs name (a job enqueued into
    another queue, ``queue="other"``, waits for a drain or a pool that serves it).
    """
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
        raise ValueError(f"max_jobs must be a positive integer, not {max_jobs!r}")
    chosen = None
    if queues is not None:
        if isinstance(queues, str):
            raise ValueError(f"queues takes a list of queue names, not the text {queues!r}")
        chosen = tuple(dict.fromkeys(queue_name(q) for q in queues))
        if not chosen:
            raise ValueError("queues names no queue: leave it out to serve the default ones")
    if store is None:
        from jobpool.store.factory import default_store
        store = default_store()
    served = _served()
    if chosen is not None:
        served = served._replace(queues=chosen)
    owner = procinfo.owner_identity()  # leases look like any pool's (R24 can judge them)
    claimer = store.claimer(owner, served.names, served.queues, served.policies)
    try:
        # R35/R36: the jobs' declared limits hold here too, as they would in a pool.
        registered = jobs.registered()
        store.limits.declare({n: registered[n].limit for n in served.names if n in registered},
                             owner)
        claimer.set_limits(store.limits.plan().for_pool(served.names, served.queues))
        return _Drain(store, claimer, owner, served).run(max_jobs, run_scheduled)
    finally:
        claimer.close()


def _to_completion(coroutine_fn: Callable[..., Any]) -> Callable[..., Any]:
    """A coroutine function as a plain one that runs its coroutine to completion,
    as a child does, with no soft timeout: a drain enforces none."""
    def run(*args: Any, **kwargs: Any) -> Any:
        return coroutines.run(coroutine_fn(*args, **kwargs))
    return run


def _served() -> _Served:
    registered = jobs.registered()
    if not registered:
        raise JobpoolError("no jobs are registered: import the module that defines them "
                           "before drain()")
    names = tuple(sorted(registered))
    return _Served(names, jobs.served_queues(names), {n: job.policy for n, job in registered.items()},
                   {n: job.on_dead for n, job in registered.items() if job.on_dead is not None},
                   {n: job.chunk for n, job in registered.items() if job.chunk > 1})


class _PipeToStore:
    """Stands where a child's pipe would: ``jobpool.progress()`` sends its report
    here, and it is written at once, fenced like a settle (R22); a store that
    cannot take it loses the report, never the job, as in a pool. A job's requests
    (adds to its batch, R34; its state, R37) are carried out at once too, their
    answer read back as a child reads its supervisor's. Nothing here ever
    interrupts a job: ``drain`` has no graceful stop."""

    def __init__(self, store: Store, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.answer: bytes | None = None

    def recv_bytes(self) -> bytes:
        answer, self.answer = self.answer, None
        assert answer is not None, "a reply is read only after a request"
        return answer

    def poll(self) -> bool:
        return False

    def send_bytes(self, message: bytes) -> None:
        request = protocol.loads(message)
        if request[0] in protocol.REQUESTS:
            self.answer = protocol.reply_message(*requests.answer(self.store, self.owner,
                                                                  request))
            return
        _tag, job_id, attempt, percent, stage = request
        try:
            # As a pool's slots take it (R41): bounded, storable text.
            self.store.set_progress(self.owner, [ProgressReport(job_id, attempt, percent,
                                                                bounds.stage_text(stage))])
        except StoreError as exc:
            log.debug("progress of job %s not written: %s", job_id, exc)


class _Drain:
    """One ``drain`` call: its claimer, clock and counts."""

    def __init__(self, store: Store, claimer: Claimer, owner: str, served: _Served) -> None:
        self.store = store
        self.claimer = claimer
        self.served = served
        self.progress = _PipeToStore(store, owner)
        self.rng = random.Random()
        self.counts = dict.fromkeys(Drained._fields, 0)
        #: R38: paused queues are left alone, as every pool leaves them.
        self.plan = QueuePlan(served.queues)
        self.plan.set_paused(store.paused_queues())
        #: Set when the test run interrupted a job's body: Ctrl-C, or what a test
        #: runner raises to stop a test (pytest-timeout's failure), which reach it
        #: here rather than in a child.
        self.interrupted: BaseException | None = None
        #: The time every claim and settle is dated by: this host's, moved forward to
        #: a job's due time when ``run_scheduled`` runs it early, and never back.
        self.clock = 0.0
        #: R63: the chunk sizes the claimer was last given (None: never given any).
        self._chunks: dict[str, int] | None = None

    @property
    def drained(self) -> Drained:
        return Drained(**self.counts)

    def _tick(self) -> float:
        """The drain's clock now (``clock``: never back)."""
        self.clock = max(self.clock, time.time())
        return self.clock

    def run(self, max_jobs: int, run_scheduled: bool) -> Drained:
        self.clock = time.time()
        pending: list[Outcome] = []
        ran = 0
        waiting_until: float | None = None  # monotonic: a wait for the store's clock ends
        while True:
            now = self._tick()
            # One job a turn, its settle in the same transaction as the next claim,
            # as a pool with one slot turns (R6).
            want = 0 if ran >= max_jobs or self.interrupted is not None else 1
            if want:
                self._cut_chunks(max_jobs - ran)
            settled, claimed, expired = self._turn(pending, want, now, self.plan.shares(want))
            self._report(settled, pending)
            self._report(expired, [])
            pending = []
            if self.interrupted is not None:
                raise self.interrupted
            if claimed:
                rest = self.claimer.chunked.get(claimed[0].job_id, [])
                ran += 1 + len(rest)
                waiting_until = None
                pending = self._chunk(claimed[0], rest, now)
                continue
            if ran >= max_jobs:
                due = self._next_due()
                if due is not None and (run_scheduled or due <= now):
                    raise DrainLimitError(f"drain ran {ran} attempt{'s' * (ran != 1)} (max_jobs) "
                                          f"and jobs are still ready: does a job always defer "
                                          f"or reschedule itself?", self.drained)
                return self.drained
            if not run_scheduled:
                return self.drained
            due = self._next_due()
            if due is None:
                return self.drained
            if due > self.clock:
                self.clock = due  # run it now, as if its time had come
                continue
            # Due by this clock, yet not claimed.
            real = time.time()
            if waiting_until is None:
                if due <= real:
                    # Held back by something other than time: left, as a pool leaves it.
                    return self.drained
                # The store dates claims by its own clock (R7a) and cannot run it
                # early: wait until it is due there.
                if due - real > SCHEDULED_WAIT_MAX:
                    raise DrainError(
                        f"a job is due in {due - real:.0f} s, and this store dates claims by "
                        f"its own clock: drain(run_scheduled=True) waits at most "
                        f"{SCHEDULED_WAIT_MAX:g} s for it", self.drained)
                waiting_until = time.monotonic() + (due - real) + _CLOCK_SLACK
            elif time.monotonic() > waiting_until:
                raise DrainError(f"a job due at {due:.3f} was not claimed by that time on the "
                                 f"store's clock (does it lag this host's?)", self.drained)
            time.sleep(_WAIT_STEP)

    def _cut_chunks(self, left: int) -> None:
        """R63 in a drain: each chunk as its job declares it, cut to the ``left``
        attempts ``max_jobs`` still allows, so that no claim takes the drain past it
        (a pool turns chunks off under ``--max-jobs`` for the same reason)."""
        if not self.served.chunks:
            return
        chunks = {name: min(size, left) for name, size in self.served.chunks.items()}
        if chunks != self._chunks:
            self.claimer.set_chunks(chunks)
            self._chunks = chunks

    def _chunk(self, head: Claimed, rest: list[Claimed], now: float) -> list[Outcome]:
        """Run a claimed job, then the rest of its chunk (R63) one after the other, as
        a slot's child runs them. Each row's outcome is settled in a turn of its own
        before the next row starts (that turn claims nothing: the slot is not free); the
        last one is returned, to be settled with the next claim. A row past its
        deadline when its turn comes is dead without running (R10); when the test run
        interrupts a row, the rows after it are given back unstarted, their attempt
        with them."""
        outcome = self._attempt(head, now)
        for position, job in enumerate(rest):
            if self.interrupted is not None:
                reason = chunk_ended_early(
                    f"the drain was interrupted: {type(self.interrupted).__name__}")
                return [outcome, *(Outcome(j.job_id, j.attempt, UNSTARTED, reason)
                                   for j in rest[position:])]
            now = self._tick()
            settled, _claimed, expired = self._turn([outcome], 0, now, None,
                                                    waiting=rest[position:])
            self._report(settled, [outcome])
            self._report(expired, [])
            outcome = (retired_at_its_turn(job.job_id, job.attempt, job.deadline, now)
                       or self._attempt(job, now))
        return [outcome]

    def _turn(self, outcomes: list[Outcome], n: int, now: float, shares: Any,
              waiting: Sequence[Claimed] = ()
              ) -> tuple[list[Settled], list[Claimed], list[Settled]]:
        """One turn of the claimer. A turn the store failed applied nothing (R26): the
        jobs whose outcomes it carried, and a chunk's rows still ``waiting`` their turn,
        would stay running under this drain's owner, their attempts spent, until a
        pool took them back as expired leases (R23). Before the error is raised, one
        more turn settles those outcomes and gives the waiting rows back unstarted (and
        PostgreSQL's claims in doubt with them); a store that fails it too leaves them
        to R23."""
        try:
            return self.claimer.turn(outcomes, n, now, self.rng, shares)
        except StoreError:
            reason = chunk_ended_early("the drain met a store error")
            back = [*outcomes, *(Outcome(job.job_id, job.attempt, UNSTARTED, reason)
                                 for job in waiting)]
            try:
                settled, _claimed, expired = self.claimer.turn(back, 0, self._tick(), self.rng)
            except StoreError as again:
                log.warning("%d job(s) left running after a store error (%s): a pool "
                            "takes them back when their leases expire", len(back), again)
            else:
                self._report(settled, back)
                self._report(expired, [])
            raise

    def _next_due(self) -> float | None:
        return self.store.next_due(self.served.names, self.plan.active)

    def _attempt(self, job: Claimed, now: float) -> Outcome:
        """Run one claimed job here, as a pool's child would, and say how it ended."""
        cpu_before = time.process_time()
        attempt = running.Attempt(self.progress, job.job_id, job.attempt, job.name,
                                  job.queue, job.batch, job.meta)
        # The drain's thread (and the tasks and threads that copy its context) sees its
        # own job; the threads a job starts see the process's, as in a pool's child.
        token = running.drained.set(attempt)
        with _RUNNING_LOCK:
            if not _RUNNING:
                # What was running before any drain: none, or the job of a pool's child
                # that called this drain, which it sees again once the drain ends.
                _OUTSIDE[0] = running.current
            _RUNNING.append(attempt)
            running.current = attempt
        try:
            kind, error, delay, result = self._body(job)
        finally:
            running.drained.reset(token)
            with _RUNNING_LOCK:
                _RUNNING.remove(attempt)
                # The latest attempt still running (a drain in another thread, or the
                # job whose body called this drain), else none.
                running.current = _RUNNING[-1] if _RUNNING else _OUTSIDE[0]
        if self.interrupted is not None:
            # R25: an interrupted attempt gives its lease back; the attempt stays spent.
            kind, error, delay, result = (RELEASE, f"interrupted ({type(self.interrupted).__name__})",
                                          None, None)
        elif kind == INTERRUPTED:
            # Nothing here asks a job to stop (R37): it raised Interrupted itself.
            kind, error = ERROR, "Interrupted raised by the job itself, with no stop or cancel asked"
        # As a pool's slots take it (R41): bounded, storable text.
        return Outcome(job.job_id, job.attempt, kind, bounds.attempt_error(error), delay, result,
                       pid=os.getpid(), cpu_s=time.process_time() - cpu_before)

    def _body(self, job: Claimed) -> tuple[int, str | None, float | None, Any]:
        registered = jobs.lookup(job.name)
        # No soft timeout: its SIGALRM would replace the caller's handler and timer.
        return run_attempt(job.job_id, job.attempt, job.name, job.payload, job.serializer,
                           soft_timeout=False,
                           job=self._in_process(registered) if registered else None)

    def _in_process(self, job: jobs.Job) -> jobs.Job:
        """The job as it runs here, with an interruption of the test run noted (the
        child's way of classifying outcomes counts it as the job's failure): Ctrl-C,
        or any ``BaseException`` that is neither an error nor ``SystemExit`` (which
        is a job's failure in a pool too)."""
        here = copy.copy(job)
        fn = job.fn
        if job.is_coroutine:
            # The body runs the coroutine to completion itself (R20), so what its
            # loop lets out (asyncio turns a Ctrl-C into a cancellation of the job,
            # then raises it again as the loop closes) is noted here too.
            fn = _to_completion(fn)
            here.is_coroutine = False

        def body(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except (Exception, SystemExit, GeneratorExit, Interrupted):
                raise  # a job's own failure (Interrupted: it raised it, unasked)
            except BaseException as exc:  # noqa: BLE001 - noted, then re-raised
                self.interrupted = exc
                raise
        here.fn = body
        return here

    def _report(self, settled: list[Settled], outcomes: list[Outcome]) -> None:
        """Count and log what a turn settled (R30), and run the hooks of the dead (R21)."""
        kinds = {(o.job_id, o.attempt): o.kind for o in outcomes}
        counts = self.counts
        for item in settled:
            outcome = settled_as(item.status, kinds.get((item.job_id, item.attempt), ERROR))
            if outcome in counts:  # a release or a lost lease is not counted (nor drained)
                counts[outcome] += 1
            fields = dict(job_id=item.job_id, name=item.name, attempt=item.attempt)
            if outcome not in ("done", "lease_lost"):
                fields["reason"] = item.reason
            events.emit(events.SETTLED[outcome], **fields)
            if outcome == "dead":
                self._on_dead(item)

    def _on_dead(self, item: Settled) -> None:
        """R21: the job's hook, once: taken in the store first, as a pool takes it,
        so a pool on the same store never runs it a second time."""
        hook = self.served.hooks.get(item.name)
        if hook is None or not self.store.take_hook(item.job_id):
            return
        job = self.store.get(item.job_id)
        try:
            hook(job, item.reason or job["last_error"] or "")
        except Exception:  # noqa: BLE001 - isolated as in a pool: the drain goes on
            log.exception("on_dead hook of job %s failed", item.job_id)
