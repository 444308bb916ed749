"""The Store protocol: what producers, operators, the dashboard and a supervisor need
from wherever jobs live, method by method with its contract (as Huey's storage base
and Dramatiq's broker state theirs).

``SQLiteStore`` (``jobpool.store.sqlite``) implements it; a PostgreSQL store will
implement the same methods and pass the same contract tests. Nothing outside
``jobpool/store/`` runs SQL or touches a store's private attributes: they call these.

Every write is atomic: it happens whole or not at all, and a failure raises
``StoreError`` (R26: a supervisor pauses and retries; nothing is half-written).
Times passed in as ``now`` are the caller's clock; a store whose clock is its own
(PostgreSQL, R7a) may use that instead.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, runtime_checkable

from jobpool import liveness
from jobpool.lifecycle import Claimed, Decision, Lease, Outcome, Policy, Settled
from jobpool.limits import LimitedSource, LimitPlan, Picked
from jobpool.queueplan import Share
from jobpool.store.records import (DashboardRows, Heartbeat, ProgressReport, QueueMetrics,
                                   Requests)


@runtime_checkable
class Claimer(Protocol):
    """A supervisor's hot path over a store: one per supervisor, its own connection.

    Claims honour R6-R10 (at most ``n``; claim order; attempts counted at claim;
    leases fenced); settles apply ``lifecycle.decide`` fenced by (id, owner,
    attempt, running), so a stale supervisor's write changes nothing and comes back
    as ``Settled(status="lost")``."""

    #: What claims, as ``pools`` and the dashboard show it: ``compiled`` or ``pure``
    #: (the SQLite cores), ``postgres``.
    name: str

    #: R36: after a turn, the seconds until a rate-limited group its claim passed over
    #: for want of a token (or left without one) has a whole token again; None when
    #: there was none. The pool claims again then rather than at its next poll.
    token_wait: float | None

    #: R63: after a turn, the rest of each chunk it claimed: the rows that follow a
    #: claimed row (by its id) to its slot, in the order they run; empty without chunks.
    chunked: dict[int, list[Claimed]]

    def turn(self, outcomes: Sequence[Outcome], n: int, now: float, rng: random.Random,
             shares: Sequence[Share] | None = None
             ) -> tuple[list[Settled], list[Claimed], list[Settled]]:
        """Settle ``outcomes`` then claim up to ``n`` jobs, in one transaction; the
        slots are shared among queues by ``shares`` (``queueplan``: paused queues
        left out, weights), or by the claimer's queues in order when None.

        Returns (settled, claimed, expired): what became of each outcome, the jobs
        to run, and jobs found past their deadline (R10), settled dead. On a
        failure nothing is applied and ``StoreError`` is raised; the caller keeps
        its outcomes for the next turn."""
        ...

    def set_limits(self, plan: LimitPlan | None) -> None:
        """R35/R36: claim under these limits from the next turn (the store's, as
        ``LimitPlan.for_pool`` cuts them for this pool); None: the ordinary claim."""
        ...

    def set_chunks(self, chunks: dict[str, int]) -> None:
        """R63: from the next turn, a claimed row of a name in ``chunks`` brings up to
        that many rows of its name (itself included) to its slot (``chunked``)."""
        ...

    def reclaim(self, now: float) -> list[Settled]:
        """R23: settle every lease that expired before ``now`` (any owner)."""
        ...

    def reclaim_owner(self, owner: str, reason: str, now: float) -> list[Settled]:
        """R24, R24b: settle at once every lease of ``owner``, a supervisor known dead."""
        ...

    def lease_owners(self) -> list[str]:
        """The owners holding leases now (to find dead supervisors, R24)."""
        ...

    def close(self) -> None:
        ...


class Fenced(NamedTuple):
    """One attempt's end as the engine hands it to a driver: ``decision`` is
    ``lifecycle.decide``'s for ``outcome``, applied by ``SETTLE[decision.statement]``
    fenced by (id, ``owner``, attempt, running). ``log_as``: the attempt log's outcome
    when it is not the outcome's own kind (``deadline``)."""

    lease: Lease
    outcome: Outcome
    decision: Decision
    owner: str
    log_as: str | None = None


class Pending(Protocol):
    """A write's answer a driver reads only after its transaction commits (PostgreSQL's
    pipeline); a driver that knows it at once answers with the ``Settled`` itself."""

    def settled(self) -> Settled:
        ...


#: What a driver answers a settle with: the ``Settled`` now, or one read after the commit.
Answer = Settled | Pending


def settled_of(answers: Iterable[Answer]) -> list[Settled]:
    """The answers of a committed transaction, in order."""
    return [item if isinstance(item, Settled) else item.settled() for item in answers]


class Turn(Protocol):
    """What the engine (``jobpool.engine``) does inside one of a driver's transactions.
    Every statement runs in that transaction; answers are read after it commits."""

    #: The store's clock for this transaction: the caller's ``now`` (SQLite), or the
    #: server's (PostgreSQL, R7a). Everything the transaction writes is dated by it.
    now: float

    def crash_causes(self, job_id: int) -> list[str]:
        """R19a: the errors of this job's earlier child deaths, oldest first."""
        ...

    def settle(self, items: Sequence[Settled | Fenced]) -> list[Answer]:
        """Apply a batch of fenced settles with their follow-ups (R12's next step, R34's
        counts, R35's lane, the attempt's line in the log, R19a): one answer per item,
        in order, ``lost`` where the fence held no row. A ``Settled`` item (an outcome
        the engine's fence test refused) is its own answer."""
        ...

    def settle_malformed(self, bad: Any, owner: Any) -> Answer:
        """R44: settle dead a row the codec refused (``row_codec.Malformed``), in a
        statement of its own that names none of the row's other columns."""
        ...

    def claim(self, queue: str, want: int) -> list[tuple]:
        """R6-R9: claim up to ``want`` due rows of ``queue`` (``row_codec.CLAIM_COLUMNS``)."""
        ...

    def claim_name(self, queue: str, name: str, want: int) -> list[tuple]:
        """R63: the claim, of ``name``'s rows only: the rest of a chunk."""
        ...

    def extend_leases(self, waits: Sequence[tuple[int, int, float]]) -> None:
        """R63 with R8: each (id, attempt, seconds) row claimed in this turn keeps its
        lease that many seconds longer (the timeouts of the chunk's rows before it)."""
        ...

    def limited_source(self, limited: Any) -> LimitedSource:
        """R35/R36: what ``limits.plan_claim`` reads and writes in this transaction."""
        ...

    def claim_chosen(self, limited: Any, picked: Picked) -> list[tuple]:
        """R35/R36: claim the rows ``plan_claim`` chose (under their caps)."""
        ...

    def reclaimable(self, owner: str | None) -> list[tuple]:
        """R23, R24: the running rows whose lease expired (``owner`` None) or that
        ``owner`` holds (``row_codec.LEASE_COLUMNS``)."""
        ...


class Driver(Protocol):
    """One dialect under the engine: its connection, transactions and statements.

    The engine (``jobpool.engine.Claimer``) owns the job's life on the hot path: the
    fence test, ``lifecycle.decide``, the claim order, R10, limits and the in-flight
    leases; a driver runs what it is handed in one transaction and says what held.
    Every failure is ``StoreError`` with nothing applied."""

    #: What claims, as ``pools`` shows it (``Claimer.name``).
    name: str
    #: The ``Lease.follow_ups`` of a reclaimed row (a reclaim does not ask the row).
    reclaim_follow_ups: int

    def serve(self, owner: str, names: Sequence[str], policies: dict[str, Policy]) -> None:
        """Prepare the claim for ``owner`` serving ``names`` (their ``policies``)."""
        ...

    def decode_claims(self, rows: Sequence[tuple], queue: str, now: float,
                      to_pool_clock: float) -> tuple[list[Any], list[Any]]:
        """R44: the claim's rows through the codec: ``row_codec.decode_claims``'s
        answer, which a driver may compute faster (the compiled SQLite driver's, in C)
        but never differently."""
        ...

    def limited_claim(self, plan: LimitPlan) -> Any:
        """R35/R36: the ``limit_claim.LimitedClaim`` for this pool under ``plan``."""
        ...

    def turn(self, now: float, held: Mapping[int, Lease],
             body: Callable[[Turn], tuple[list[Answer], list[Answer]]]
             ) -> tuple[list[Settled], list[Settled]]:
        """A supervisor's turn: ``body`` in one transaction, then its two lists of
        answers read. ``held``: the leases the engine holds (a driver whose commit
        may be in doubt gives back the rest, R6)."""
        ...

    def transaction(self, what: str, now: float,
                    body: Callable[[Turn], list[Answer]]) -> list[Settled]:
        """``body`` in one transaction (a reclaim), then its answers read."""
        ...

    # Optional, found by ``getattr``: ``plain_turn(now, done, shares, want)``, a whole
    # turn of successes (``(lease, outcome)`` pairs of leases whose follow-ups are
    # ``lifecycle.PLAIN_FOLLOW_UPS``: none, a chain's next step, a batch's count) and
    # a claim shared among queues by ``shares`` (``queueplan.as_shares``), answered
    # as ``(settled, decoded)`` or None with nothing applied when the engine must run
    # that turn itself (R68: the compiled SQLite driver's, stepped in C);
    # ``begin_turn``/``finish_turn``, a turn in flight (R66);
    # and ``claims_in_doubt``, True while a turn's claims may have committed unseen (R26:
    # the next turn gives them back, so a pool with some takes one before it exits).

    def lease_owners(self) -> list[str]:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class Store(Protocol):
    """Where jobs live."""

    #: What the store was opened from (a path; later a URL), as shown to operators.
    path: str
    #: R54: whether an index serves ``list_jobs(meta=...)`` (else it is a search, R47).
    meta_indexed: bool

    # -- producers (R1-R5) -------------------------------------------------------------

    def enqueue(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Queue ``name(*args, **kwargs)``; a ``Handle``. Validates before it writes (R1)."""
        ...

    def enqueue_with(self, name: str, *, args: tuple | list = (), kwargs: dict | None = None,
                     key: str | None = None, delay: float | timedelta | None = None,
                     priority: int | None = None, deadline: datetime | float | None = None,
                     max_attempts: int | None = None, queue: str | None = None,
                     timeout: float | None = None, then: Any = None, connection: Any = None,
                     now: float | None = None, batch: int | None = None,
                     key_period: float | timedelta | None = None, group: Any = None,
                     meta: dict[str, Any] | None = None) -> Any:
        """Queue one job with per-call options: ``key`` unique among live jobs of the
        name (R3) and, with ``key_period``, among those that finished within it;
        ``then`` the chain enqueued as each step completes (R12), ``connection`` the
        caller's own open transaction (R5), ``batch`` the id of an unfinished batch
        it joins (R34; not with ``key`` or ``connection``), ``group`` the row's group
        for its name's limits (R35, R36; else its ``group_by`` keyword argument),
        ``meta`` its metadata, a dict JSON can carry (R54: shown by ``get``, read by
        the running job as ``current_job().meta``)."""
        ...

    def enqueue_many(self, name: str, items: Iterable[Any], *, delay: float | None = None,
                     priority: int | None = None, queue: str | None = None,
                     max_attempts: int | None = None, keys: Iterable[str | None] | None = None,
                     now: float | None = None, batch: int | None = None,
                     meta: dict[str, Any] | None = None) -> Sequence[Any]:
        """Queue many in one transaction, all or nothing (R4); their handles in order.
        With ``keys``, one per item (R3): an item whose key a live job holds writes
        nothing and gets that job's handle (``duplicate``; ``Handles.duplicates``).
        ``batch``: they all join that unfinished batch (R34; not with ``keys``).
        ``meta``: every job's metadata (R54), unless an item (a ``Signature``) has
        its own; the producer's ``before_enqueue`` hooks stamp each job (R55)."""
        ...

    async def aenqueue(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``enqueue`` off the event loop, in a worker thread on its own connection
        (R49: ``store.async_enqueue``); the same checks and errors."""
        ...

    async def aenqueue_with(self, name: str, **options: Any) -> Any:
        """``enqueue_with`` off the event loop (R49); ``connection=`` is refused."""
        ...

    async def aenqueue_many(self, name: str, items: Any, **options: Any) -> Any:
        """``enqueue_many`` off the event loop (R49); all or nothing (R4)."""
        ...

    # -- batches (R34) -------------------------------------------------------------------

    @property
    def limits(self) -> Any:
        """R35/R36: the limits every pool obeys (``limit_store.StoreLimits``): declared
        by pools, set for queues, listed with their groups."""
        ...

    def batch(self, *, on_success: Any = None, on_complete: Any = None) -> Any:
        """A new ``handles.Batch``: its callbacks (``job.s(...)``) are checked
        now, and fire when the last member of the closed batch ends."""
        ...

    def batch_status(self, batch_id: int) -> Any:
        """The batch's ``BatchStatus``; ``BatchNotFound`` if there is none."""
        ...

    @property
    def batches(self) -> Any:
        """``batch_store.StoreBatches``: ``open``, ``close``, ``cancel``, ``status``,
        ``list(open_only=, limit=)``, ``members`` (counts by status)."""
        ...

    # -- checkpoints (R37) -----------------------------------------------------------------

    def save_state(self, owner: str, job_id: int, attempt: int, state: str) -> bool:
        """A running attempt's state (JSON text), fenced like a settle: False when the
        attempt no longer holds its lease. The next attempt resumes from it."""
        ...

    def read_state(self, owner: str, job_id: int, attempt: int) -> str | None:
        """The state the running attempt resumes from (fenced; None if none)."""
        ...

    def reset_state(self, job_id: int) -> bool:
        """Forget a job's state (``jobs reset-state``); False if it had none."""
        ...

    def add_to_own_batch(self, owner: str, job_id: int, attempt: int, first_position: int,
                         jobs: list[Any]) -> list[tuple[int, bool]]:
        """A running member's adds to its batch, fenced by its lease (``LeaseLostError``
        when it is gone; ``EnqueueError`` when it is in no batch): rows made on a clock
        of 0, each keyed by (member, position), ``(id, duplicate)`` per row."""
        ...

    # -- reading --------------------------------------------------------------------------

    def get(self, job_id: int, *, raw_result: bool = False) -> dict[str, Any]:
        """One job's row; ``JobNotFound`` if there is none."""
        ...

    def list_jobs(self, *, status: str | None = None, name: str | None = None,
                  queue: str | None = None, chain: int | None = None, limit: int = 100,
                  newest_first: bool = False, after: int | None = None,
                  **more: Any) -> list[dict[str, Any]]:
        """At most ``limit`` jobs in id order, or the newest first; ``status``
        ``scheduled`` means ready but not yet due. ``after``: the next page's keyset,
        the last id of the page before (newest first, the jobs below it; else those
        above it). Each filter is read through an index (R28). ``more``: ``key``,
        ``batch``, and the searched ``group``, ``error``, ``args``, ``created``,
        ``finished`` and ``scan``, read within a window of ids (``rows.more_filters``,
        R47), and ``meta`` (R54: ``{key: value}`` pairs the job's metadata holds),
        through an index where ``meta_indexed``, else searched so."""
        ...

    def count_jobs(self, *, status: str | None = None, name: str | None = None,
                   queue: str | None = None, chain: int | None = None,
                   at_most: int, newest_first: bool = False, after: int | None = None,
                   **more: Any) -> int:
        """How many jobs ``list_jobs`` with these filters could list, counting no
        further than ``at_most``."""
        ...

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        """The attempt log of one job, oldest first (R19a)."""
        ...

    def waiting_steps(self, job_id: int) -> list[dict[str, Any]]:
        """R12: the steps of a chain that one job's success will enqueue, not enqueued
        yet, in the order they run: each one's ``name``, ``queue`` and ``priority``
        (never its arguments); [] when none (no chain, or its last step)."""
        ...

    def stats(self, now: float | None = None) -> dict[str, Any]:
        """Counts by status and each running supervisor's counters (R29a)."""
        ...

    def pools(self, now: float | None = None, *,
              dead_after: float = liveness.DEAD_AFTER) -> list[dict[str, Any]]:
        """Every pool row, with ``dead`` saying why its supervisor is gone (or None):
        its process is gone, or its heartbeat is older than ``dead_after`` by the
        store's clock (a store with a clock of its own, R7a, ignores ``now``)."""
        ...

    def clock(self) -> float:
        """R7a: the time by which this store dates its rows, as a Unix time: the
        server's on a store with a clock of its own, else this host's. What a viewer
        shows of the rows' times (a chart's last hour, a schedule's next time) is read
        against it, not against the viewer's host."""
        ...

    def dashboard(self, now: float, *, failures: int = 5) -> DashboardRows:
        """R29: what one dashboard frame shows, read in one consistent transaction
        that blocks no writer and scans no whole table."""
        ...

    def queue_metrics(self, now: float) -> QueueMetrics:
        """The per-queue counts and oldest due job that ``jobpool metrics`` exports,
        read in one transaction from indexes only."""
        ...

    def unserved(self, now: float | None = None) -> list[dict[str, Any]]:
        """Ready jobs no running pool serves (R7, R28)."""
        ...

    def next_due(self, names: Iterable[str], queues: Iterable[str]) -> float | None:
        """When the earliest ready job of these names and queues is due (None: none,
        and for no queues at all)."""
        ...

    # -- operators (R25, R27, R31, R32) --------------------------------------------------

    @property
    def dead(self) -> Any:
        """R32: the dead letters, with ``list(name=, limit=)``, ``ids(name=)``,
        ``retry(ids)`` (back in line under the same id with a fresh budget, unless a
        live job holds its key), ``delete(ids)`` and ``purge(older_than)``; retry and
        delete answer id -> what happened. ``retry_report(ids)``: ``retry``'s answers and
        the retried members no batch callback follows: those of finished batches, which
        run alone, and those of cancelled ones (a ``RetryReport``)."""
        ...

    def cancel(self, job_id: int, now: float | None = None) -> str:
        """R31: ``cancelled`` (a ready job, now dead), ``requested`` (running: its
        pool kills it), or the status that could not be cancelled."""
        ...

    def cancel_many(self, ids: Iterable[int], now: float | None = None) -> dict[int, str]:
        """R31: ``cancel`` of each of ``ids`` in one transaction (all or none written);
        answers id -> ``cancelled``, ``requested``, ``no such job``, or the status that
        could not be cancelled."""
        ...

    def run_now(self, ids: Iterable[int], now: float | None = None) -> dict[int, str]:
        """R51: each waiting job of ``ids`` (scheduled, or out a retry's backoff) is due
        now, keeping its attempts and its place rules (R7). Answers id -> ``due now``,
        ``due already`` (ready and due), ``no such job``, or the status that refused it
        (``running``, ``done``, ``dead``)."""
        ...

    def run_now_matching(self, *, name: str | None = None, queue: str | None = None,
                         now: float | None = None) -> int:
        """R51: every waiting job (of ``name``, in ``queue``, when given) due now; how
        many were moved."""
        ...

    def request_stop(self, *, owner: str | None = None, host: str | None = None) -> int:
        """R25: ask every running pool (or the one ``owner``, or those on ``host``) to
        stop gracefully; how many were asked."""
        ...

    def request_scale(self, procs: int, *, owner: str | None = None,
                      host: str | None = None) -> int:
        """R27: ask the running pools (chosen as for ``request_stop``) to run ``procs``
        children; how many were asked."""
        ...

    def pause(self, queue: str) -> bool:
        """R38: no pool claims from ``queue`` from its next heartbeat on; running jobs
        finish and enqueues still succeed. False if it was paused already."""
        ...

    def resume(self, queue: str) -> bool:
        """R38: pools claim from ``queue`` again; False if it was not paused."""
        ...

    def paused_queues(self) -> list[str]:
        """R38: the paused queues, by name."""
        ...

    # -- a supervisor's side --------------------------------------------------------------

    def claimer(self, owner: str, names: Sequence[str], queues: Sequence[str],
                policies: dict[str, Policy]) -> Claimer:
        """The hot path for one supervisor: claims for ``names`` in ``queues`` (in
        order), settling by ``policies`` (names without one: the default)."""
        ...

    def check_writable(self) -> None:
        """Raise ``ReadOnlyStoreError`` if this process can never write the store."""
        ...

    def heartbeat(self, beat: Heartbeat, progress: Iterable[ProgressReport],
                  now: float) -> Requests:
        """R24b, R29: register or refresh the pool's row, write progress (R22), and
        take the operators' requests for it, each acted on once."""
        ...

    def set_progress(self, owner: str, progress: Iterable[ProgressReport]) -> None:
        """R22: write progress reports now, fenced like a settle."""
        ...

    def forget_pool(self, owner: str) -> None:
        """Remove a pool's row (its own at exit; a dead one's after its leases came back)."""
        ...

    def pending_hooks(self, names: Iterable[str]) -> list[int]:
        """R21: dead jobs of these names whose on_dead hook nobody took."""
        ...

    def take_hook(self, job_id: int) -> bool:
        """R21: take a dead job's hook; False if another pool took it first."""
        ...

    def enqueue_occurrence(self, name: str, occurrence: float) -> Any:
        """R33: enqueue a periodic job's occurrence unless another pool did; a Handle or None."""
        ...

    def periodic_occurrences(self) -> dict[str, float]:
        """R33: the last occurrence a pool enqueued, per periodic job name (the store
        keeps no schedule: those are the app's registrations)."""
        ...

    def rollups(self, since: float) -> list[dict[str, Any]]:
        """R56: the pools' per-minute rollups from the minute ``since`` falls in on, by
        minute then name: ``minute``, ``name`` and ``jobpool.rollups.COUNTS``. Read as
        a range of the rollups' own key, never from the jobs."""
        ...

    def rollup_totals(self, since: float, *, by: str,
                      name: str | None = None) -> list[dict[str, Any]]:
        """R56: the rollups from the minute ``since`` falls in on, added up by the
        store's query (``jobpool.rollups.merged``'s sums and maxima) per minute
        (``by="minute"``: of ``name``, or of every name) or per name (``by="name"``),
        in that order; the other key is None. What a chart reads, a row per minute."""
        ...

    def sweep(self, now: float, *, result_ttl: float, dead_letter_limit: int) -> int:
        """R32: remove done rows older than ``result_ttl`` and dead rows past the limit,
        one bounded batch per call; how many went."""
        ...

    def maintenance(self) -> Any:
        """A started helper that keeps the store healthy while a pool runs (SQLite:
        the WAL checkpointer), with ``stop()``; or None."""
        ...

    def finish_waiter(self, job_id: int, poll: float) -> Any:
        """R69: what ``Handle.result`` waits on after finding ``job_id`` unfinished: an
        object with ``wait(seconds)``, ``await_(seconds)`` (each True when the store
        told of the job's end, False when the time passed) and ``close()``; the store
        tells where it can (PostgreSQL), else the caller looks every ``poll`` s."""
        ...

    def listener(self) -> Any:
        """What wakes an idle pool when a job is enqueued (R11): an object with
        ``sock`` (selectable, or None), ``drain()``, ``move_down()``, ``close()`` and
        ``look_again`` (R11c: seconds after a wake-up at which the pool claims once
        more, or None)."""
        ...

    def on_store_error(self, error: BaseException) -> None:
        """R26: a claimer call failed with ``error``; the store's chance to act on it
        before the pool pauses and retries (SQLite: a full disk)."""
        ...

    def contended(self, error: BaseException) -> bool:
        """R26: whether ``error`` says only that another writer held the store's lock
        past the caller's busy timeout (SQLite's "database is locked": a bulk enqueue,
        a checkpoint), so the pool tries again at its poll interval instead of
        backing off as from a failure."""
        ...

    def replaced(self) -> str | None:
        """R45: what the store's path names now, in words, if no longer the file this
        store opened (None: it still does, or the store is no file)."""
        ...

    def close(self) -> None:
        ...
