"""The supervisor's loop: one per host and store; owns the claimer and the stop.

Each loop turn: read what children sent and which children died, kill children
past their hard timeout, settle finished attempts in one transaction, then
reserve the free slots and claim at most that many jobs (R6), and dispatch them.
It waits in one ``select`` over the child pipes, child exit sentinels, the
wake-up socket and the signal pipe, so it never busy-polls and never blocks
where a signal could not reach it (R11). On PostgreSQL a turn goes out and is
applied when its answer comes (R66): meanwhile the loop waits on that answer, the
signal pipe and its timers.

The children are ``slots.py``'s, the heartbeat and what rides on it are
``operations.py``'s; this module settles, claims, counts and stops.
"""
from __future__ import annotations

import logging
import os
import random
import selectors
import signal
import socket
import time
from typing import TYPE_CHECKING, Any, Callable

from jobpool import core, events, jobs, lifecycle, procinfo, proctree, terminal, tracing
from jobpool.config import PoolConfig
from jobpool.errors import JobpoolError, StoreError
from jobpool.forked import refuse_other_threads
from jobpool.lifecycle import Outcome, Settled, settled_as
from jobpool.queueplan import QueuePlan
from jobpool.store.base import Store
from jobpool.store.factory import connect
from jobpool.store.sqlite.options import CLAIM_BUSY_TIMEOUT
from jobpool.supervisor import pump
from jobpool.supervisor.operations import Operations
from jobpool.supervisor.slots import Slots
from jobpool.supervisor.state import Finished, PoolState

if TYPE_CHECKING:
    from jobpool.metrics import MetricsServer

log = logging.getLogger(__name__)

#: R26: the longest pause after a store error, seconds (far below job backoff's cap).
STORE_PAUSE_MAX = 30.0
#: The exit code of a --burst pool that gave up on its store.
EXIT_STORE_GAVE_UP = 3
#: R45: the pool stopped because its store's path no longer names the file it opened.
EXIT_STORE_REPLACED = 4

class Supervisor:
    """Runs one pool until it is stopped, drained (``--burst``) or done (``--max-jobs``)."""

    def __init__(self, config: PoolConfig, *, store: Store | None = None,
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        config.validate()
        listener = None
        if config.metrics:
            # prometheus_client loads only for --metrics (its import is a tenth of a
            # second); the port is bound first, so one in use is a one-line error
            # before the store is opened or a child exists.
            from jobpool import metrics
            listener = metrics.bind(metrics.parse_address(config.metrics), config.metrics)
        try:
            self._setup(config, store, rng, clock, listener)
        except BaseException:
            if listener is not None:
                listener.close()
            raise

    def _setup(self, config: PoolConfig, store: Store | None, rng: random.Random | None,
               clock: Callable[[], float], listener: Any) -> None:
        self.config = config
        #: Where "now" comes from (STYLE habit 4): the time every lease, run_at,
        #: deadline and heartbeat this pool writes is read from it, so a test can
        #: run a pool at any date without waiting for it.
        self.clock = clock
        registered = jobs.registered()
        names = tuple(config.names) if config.names else tuple(sorted(registered))
        if not names:
            raise JobpoolError("no jobs are registered: pass --app with the module that defines them")
        self.names = names
        # R57: OpenTelemetry, where the application uses it, loaded once here, before
        # any child is forked: each child inherits it instead of importing it at its
        # start. Elsewhere the first job that carries a context loads it (``Slots``).
        tracing.preload()
        self.queues = tuple(config.queues) if config.queues else jobs.served_queues(names)
        #: R7, R38: which queues each turn claims from, and how it shares the slots.
        self.plan = QueuePlan(self.queues, config.weights)
        self.store = store or connect(config.db, check=True, busy_timeout=CLAIM_BUSY_TIMEOUT,
                                      mode=config.mode,
                                      allow_world_writable=config.allow_world_writable)
        # A store this user cannot write is a mistake to report now, in one line, not a
        # pool that idles for ever (a store that *becomes* unwritable later is R26's).
        self.store.check_writable()
        self.owner = procinfo.owner_identity()
        policies = {}
        memory_limits = {}
        for n in names:
            if n in registered:
                job = registered[n]
                policy = job.policy
                if job.max_crashes is None and config.max_crashes is not None:
                    # --max-crashes, for jobs that set none
                    policy = policy._replace(max_crashes=config.max_crashes)
                policies[n] = policy
            limit = (registered[n].memory_limit if n in registered else None) or config.memory_limit
            if limit:
                memory_limits[n] = limit
        self.core = self.store.claimer(self.owner, names, self.queues, policies)
        # R63: chunked names, by their jobs or by --chunk (never with --max-jobs: a
        # chunk would claim past it).
        chunks = {n: registered[n].chunk for n in names if n in registered}
        for name, size in config.chunks:
            if name not in names:
                raise JobpoolError(f"--chunk {name}={size}: this pool does not serve {name!r}")
            chunks[name] = size
        if config.max_jobs is None and any(size > 1 for size in chunks.values()):
            self.core.set_chunks(chunks)
        self.rng = rng or random.Random()
        self._selector = selectors.DefaultSelector()
        #: R66: what the loop waits on while a turn is in flight: its answer, a signal
        #: (the children's messages wait in their pipes until it lands).
        self._flight_selector = selectors.DefaultSelector()
        #: --metrics: the pool's series, served from this loop (no thread: it forks).
        self.metrics_server: MetricsServer | None = None
        pool_metrics = None
        if listener is not None:
            from jobpool import metrics
            pool_metrics = metrics.PoolMetrics()
        self.state = PoolState(pool_metrics)
        self._last_turn = time.monotonic()
        self.operations = Operations(config, self.state, self.store, self.owner, names,
                                     self.plan, claimer_name=self.core.name,
                                     take_back=self._take_back,
                                     request_stop=self.request_stop,
                                     apply_limits=self.core.set_limits,
                                     turn_holds_locks=self._turn_holds_locks)
        self.slots = Slots(config, self.state, self._selector, memory_limits=memory_limits,
                           other_children=self._other_children,
                           write_final_progress=self.operations.write_final_progress,
                           answer_request=self.operations.answer_request)
        self.operations.slots = self.slots
        if pool_metrics is not None:
            assert listener is not None
            pool_metrics.slot_counts = self._slot_counts
            self.metrics_server = metrics.MetricsServer(listener, self._selector,
                                                        pool_metrics.exposition, self._healthy)
        #: R68: the pump of plain jobs, or why this pool never runs it.
        self.pump_off = pump.off_because(config, self.core, self.slots)
        self.pump = None if self.pump_off else pump.make(
            self.state, self.slots, self.core, self.plan, self._selector, clock=clock,
            rng=self.rng, store_call=self._store_call, report=self._report,
            may_run=self._pump_may_run, spin=config.spin, window=config.coalesce)
        # R68: success frames on the compiled road only, and only where the pump reads
        # them in C; elsewhere (no pump: PostgreSQL, --max-jobs, ...) the general loop
        # would decode each in Python. The pure road (``JOBPOOL_PURE=1``), the
        # reference, sends the outcome message.
        self.slots.frames = core.NAME == "compiled" and self.pump is not None
        self._maintenance: Any = None  # the store's helper while running (R26a)
        self._store_pause_until = 0.0
        self._store_pause = 0.0
        self._next_poll = 0.0
        #: R36: when a rate-limited group held back by its bucket has a token again
        #: (the claimer's ``token_wait``); the pool claims then. None: no such group.
        self._next_token: float | None = None
        #: R11c: when the pool claims once more after a wake-up (None: no such look due).
        self._look_again_at: float | None = None
        #: R66: the turn in flight (the claimer's ``TurnInFlight``), the outcomes it
        #: settles, the slots it claims for and how many; None: no turn in flight.
        self._flight: tuple[Any, int | None, list[Finished], list[Any], int, bool] | None = None
        #: R66: R23's look for expired leases came due while a turn was in flight.
        self._reclaim_after_turn = False
        self._next_status = 0.0
        self._old_handlers: dict[int, Any] = {}
        self._signal_r: Any = None  # the signal wake-up socket pair, once running
        self._signal_w: Any = None
        self._old_wakeup_fd = -1
        #: R27: the descriptors this pool had on its controlling terminal, when SIGHUP
        #: means that terminal hung up (None: SIGHUP reloads, or stays ignored).
        self._terminal_fds: tuple[int, ...] | None = None
        self._hung_up = False  # set by the signal handler; acted on by the loop
        #: R25: the jobs this pool gave back at its stop, named once as it exits.
        self._released: list[int] = []
        self._listener: Any = None  # a Listener once running
        self._listening: Any = None  # the listener's socket the selector watches
        #: Processes started beside the pool by its caller (the dashboard of
        #: ``jobpool start``): its children, but never a job's strays (R40).
        self.companions: set[int] = set()
        #: R26: since when every store call has failed (None: the store answers).
        self._store_down_since: float | None = None
        #: What ``run`` returns: 0, or non-zero once a --burst pool gave up.
        self.exit_code = 0

    @property
    def counters(self) -> dict[str, int]:
        """R29a/R30: what this pool did, by outcome."""
        return self.state.counters

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0: clean)."""
        try:
            refuse_other_threads()  # before anything is forked (the checkpointer first)
        except JobpoolError:
            self._let_go()
            raise
        self._install_signals()
        # R40: orphans of a killed child are reparented here, not to PID 1.
        proctree.become_subreaper()
        self._listener = self.store.listener()
        self._rewire_listener()
        self._maintenance = self.store.maintenance()
        try:
            self._recover_dead_owners(self.clock())
            self.operations.run_start_hooks()
            self.operations.queue_pending_hooks()
            self.slots.spawn_all()
            self.operations.first_beat(self.clock())
            events.emit(events.POOL_STARTED, owner=self.owner, procs=self.slots.procs,
                        queues=str(self.plan), core=self.core.name,
                        pump=self.pump_off or "on",
                        metrics=self.metrics_server.address if self.metrics_server else None)
            self._loop()
        finally:
            self.slots.shutdown(time.monotonic() + 2.0, time.monotonic)
            self.operations.run_hooks(self.clock())
            self.operations.hooks.wait(5.0)
            if self.config.burst:
                self.operations.warn_unserved()
            self.operations.leave(self.clock())
            if self._maintenance is not None:
                self._maintenance.stop()
            self._restore_signals()
            proctree.become_subreaper(False)
            self._listener.close()
            self._let_go()
        if self._released:
            self._say_released()
        events.emit(events.POOL_STOPPED, **self.counters)
        return self.exit_code

    def _let_go(self) -> None:
        """Close what the pool opened when it was made (its store last)."""
        if self._listening is not None:
            self._listening.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        self._selector.close()
        self._flight_selector.close()
        self.core.close()
        self.store.close()  # the last connection out checkpoints and removes the WAL

    def _say_released(self) -> None:
        """R25: what the stop gave back, once, where the operator reads warnings."""
        ids = self._released
        shown = ", ".join(str(i) for i in ids[:10]) + (f" and {len(ids) - 10} more"
                                                        if len(ids) > 10 else "")
        log.warning("stopped with %d job(s) still running, given back to the queue (%s): "
                    "the next start runs them at once (R25)",
                    len(ids), shown)

    def request_stop(self) -> None:
        """Ask for a graceful stop (what SIGTERM and SIGINT do); twice means at once."""
        self.state.stop_requests += 1
        if self._signal_w is not None:
            try:
                self._signal_w.send(b"\0")
            except OSError:
                pass

    def _loop(self) -> None:
        state = self.state
        slots = self.slots
        operations = self.operations
        pump = self.pump
        while True:
            now = self.clock()
            pumped_none = False
            if pump is not None and self._pump_may_run(now):
                # R68: plain jobs go round in the pump until something else needs us.
                pumped_none = pump.run(self._pump_until(now))
                now = self.clock()
            timeout = 0.0 if pumped_none else self._wait_time(now)
            selector = self._selector if self._flight is None else self._flight_selector
            for key, _mask in selector.select(timeout):
                kind, slot, owner = key.data
                # One batch can hold events of a child replaced earlier in the same
                # batch, whose fd number the new child may already reuse: act only on
                # events of the very pipe or process the slot holds now.
                if kind == "conn":
                    if slot.conn is owner:
                        slots.read(slot, self.clock())
                elif kind == "exit":
                    if slot.proc is owner:
                        slots.exited(slot, self.clock())
                elif kind == "metrics":
                    assert self.metrics_server is not None
                    self.metrics_server.ready(owner)
                elif kind == "turn":
                    pass  # R66: the turn in flight is answered; ``_turn`` reads it
                elif kind == "wake":
                    self._listener.drain()
                    look_again = self._listener.look_again
                    self._rewire_listener()  # a listener that lost its connection leaves
                    state.want_claim = True
                    if look_again is not None:
                        # R11c: enqueues this notification covered may commit up to
                        # look_again after it was sent: the second look follows the latest
                        # wake-up (an earlier one's would come before what a producer that
                        # notified since counts on).
                        self._look_again_at = self.clock() + look_again
                else:
                    self._drain_signal_pipe()
            now = self.clock()
            self._handle_stop(now)
            slots.kill_overdue(now)
            slots.check_memory(now)
            self._timers(now)
            claimed_none = self._turn(now) or pumped_none
            store_up = now >= self._store_pause_until  # R26: no store calls while paused
            if operations.heartbeat_due(now) and store_up:
                # R66: the heartbeat writes through the store's own connection, so it
                # goes on while a turn is in flight (a leases' take-back lands it first);
                # a slot it retires takes no job that turn claimed for it.
                self._watch_store_file()
                if operations.heartbeat(now):
                    self._keep_wakeups_reachable()
            self._writes_between_turns(now)
            if store_up and operations.hooks_queued:
                operations.run_hooks(now)
            if len(operations.hooks):
                operations.hooks.reap(now)
            self._maybe_status(now)
            self._last_turn = time.monotonic()
            if self.metrics_server is not None:
                self.metrics_server.expire()
            if self._finished(now, claimed_none):
                return

    def _timers(self, now: float) -> None:
        """What comes due with time rather than with an event: the poll (a claim, and
        R23's reclaim of expired leases), R36's next token for a group held back by
        its rate, and R11c's second look after a wake-up."""
        state = self.state
        if now >= self._next_poll:
            self._next_poll = now + self.config.poll_interval
            state.want_claim = True
            if not state.stopping:
                self._reclaim(now)
        if self._next_token is not None and now >= self._next_token:
            self._next_token = None
            state.want_claim = True
        if self._look_again_at is not None and now >= self._look_again_at:
            self._look_again_at = None
            state.want_claim = True

    def _watch_store_file(self) -> None:
        """R45: the store's path names another file, or none: producers write where
        this pool no longer claims. Stop claiming, let what runs finish and settle
        into the file still open, and exit non-zero saying so (once)."""
        if self.exit_code == EXIT_STORE_REPLACED:
            return
        found = self.store.replaced()
        if found is None:
            return
        events.emit(events.STORE_REPLACED, path=self.store.path, found=found)
        log.error("the store %s now names %s; this pool stops claiming, settles what runs "
                  "into the file it has open, and exits", self.store.path, found)
        self.exit_code = EXIT_STORE_REPLACED
        self.request_stop()

    def _pump_may_run(self, now: float) -> bool:
        """R68: whether nothing but plain jobs needs the loop now: children running or
        outcomes to settle, no stop, no store pause, no turn in flight (a turn held for
        ``--coalesce-us`` the pump holds too, R6a), no limits or chunks to plan, no
        hooks to run, a registered pool with a queue to claim from (the pump's entry,
        and after each of its turns)."""
        state = self.state
        operations = self.operations
        return bool((state.pending or self.slots.busy_count()) and not state.stop_requests
                    and self._flight is None
                    and now >= self._store_pause_until and self.core.plain
                    and operations.registered and self.plan.active
                    and not operations.hooks_queued and not len(operations.hooks))

    def _pump_until(self, now: float) -> float:
        """R68: when the general loop is due at the latest: its timers, and the status
        line. Not a held turn's window (R6a): the pump runs that turn itself."""
        until = self._next_due(now, held=False)
        if self.config.status_every:
            until = min(until, self._next_status)
        return until

    def _wait_time(self, now: float) -> float:
        state = self.state
        if (state.want_claim and not state.stopping and now >= self._store_pause_until
                and self.slots.free() and state.hold_until is None and self._flight is None):
            return 0.0
        deadline = self._next_due(now)
        if state.pending and self._flight is None and state.hold_until is None:
            # (With a turn in flight its answer wakes the loop: R66. A held turn's
            # outcomes wait for its window, R6a, which ``_next_due`` counts.)
            deadline = min(deadline, self._store_pause_until)
        return max(0.0, deadline - now)

    def _next_due(self, now: float, held: bool = True) -> float:
        """The earliest time something comes due with time rather than with an event
        (``_timers``, a slot's deadline, the heartbeat, the drain's end, a held turn
        unless ``held`` is False, a metrics client), a poll interval from now at the
        latest."""
        state = self.state
        deadline = min(self._next_poll, self.slots.next_deadline(now), state.drain_until,
                       self.operations.next_heartbeat, now + self.config.poll_interval)
        if held and state.hold_until is not None:
            deadline = min(deadline, state.hold_until)
        if self._next_token is not None:
            deadline = min(deadline, self._next_token)
        if self._look_again_at is not None:
            deadline = min(deadline, self._look_again_at)
        if self.metrics_server is not None:  # R28a: a client's deadline, if sooner
            deadline = min(deadline, now + self.metrics_server.wait_time())
        return deadline

    def _finished(self, now: float, claimed_none: bool) -> bool:
        state = self.state
        if (self.config.burst and not state.stop_requests and self._store_down_since is not None
                and now - self._store_down_since >= self.config.store_timeout):
            # A graceful stop from here on: running jobs drain, what cannot be settled
            # is left to its lease (R25, R26), and the exit code says it was no drain.
            events.emit(events.STORE_GAVE_UP, seconds=round(now - self._store_down_since, 1),
                        unsettled=len(state.pending))
            self.exit_code = EXIT_STORE_GAVE_UP
            self.request_stop()
        busy = self.slots.busy_count()
        if self._flight is not None:
            return False  # R66: its answer settles outcomes and may bring jobs
        # R26: claims in doubt are given back by a turn (``_send_turn`` takes one): left,
        # their rows stayed running under an owner gone, and came back with their
        # attempt spent (R24), dead if it was their last.
        if busy or state.pending or self.core.claims_in_doubt:
            if state.stopping and not busy and now >= state.drain_until + 5:
                if state.pending:
                    log.error("stopping with %d outcomes the store did not accept; their "
                              "leases will expire and the jobs run again", len(state.pending))
                if self.core.claims_in_doubt:
                    log.error("stopping with claims in doubt the store could not be asked "
                              "about; a pool will take their rows back as a dead owner's")
                return True
            return False
        if state.stopping:
            return True
        limit = self.config.max_jobs
        if limit is not None and self.counters["claimed"] >= limit:
            return True
        if self.config.burst and claimed_none:
            try:  # R38: a paused queue's jobs wait for its resume
                due = self.store.next_due(self.names, self.plan.active)
            except StoreError:
                return False  # cannot tell: keep running; the claim path reports (R26)
            # Due later than this is left in the store: a retry in backoff past
            # --wait-retries waits for the next pool.
            return due is None or due > now + max(self.config.poll_interval,
                                                   self.config.wait_retries)
        return False

    def _healthy(self) -> bool:
        """/healthz: the loop has turned lately. An idle loop waits up to a poll
        interval in ``select``; a store outage is no reason to restart a pool (R26
        pauses it), so it does not count."""
        from jobpool.metrics import HEALTHY_WITHIN
        within = max(HEALTHY_WITHIN, 2 * self.config.poll_interval)
        return time.monotonic() - self._last_turn <= within

    def _slot_counts(self) -> tuple[int, int]:
        busy = self.slots.busy_count()
        return busy, max(0, self.slots.procs - busy)

    def _other_children(self) -> set[int]:
        """The pool's processes beside the slot children: hook processes, the
        store's maintenance process, companions. Never strays (R40)."""
        pids = set(self.companions) | self.operations.hooks.pids()
        maintenance = getattr(self._maintenance, "pid", None)
        if maintenance:
            pids.add(maintenance)
        return pids

    # -- the store ------------------------------------------------------------------------

    def _store_call(self, what, now, *args, settles: bool = False, answer: bool = False):
        """Call the claimer; on a store error pause (R26) and return None. ``answer``:
        it reads a turn in flight (R66), called even during a pause.

        The outage ends (``store_recovered``) when the store takes a turn that
        ``settles`` this pool's outcomes, or any call while none wait: a read that
        works on a store that cannot be written (a full disk passes a reclaim that
        finds nothing) is no recovery while outcomes still wait for their settle."""
        if now < self._store_pause_until and not answer:
            return None
        state = self.state
        try:
            result = what(*args)
        except StoreError as exc:
            self.store.on_store_error(exc)
            state.store_trouble = True  # R63: until a heartbeat gets through again
            first = self._store_pause == 0.0  # log once per episode, not once per try
            if first:
                self._store_down_since = self.clock()
            if self.store.contended(exc):
                # Another writer's lock (a bulk enqueue, a checkpoint): the busy wait
                # already spaced the tries, and the next one should come soon after the
                # lock is let go, not after a pause grown through a long holding.
                self._store_pause = self.config.poll_interval
            else:
                self._store_pause = min(STORE_PAUSE_MAX, max(self.config.poll_interval,
                                                             self._store_pause * 2))
            if first:
                events.emit(events.STORE_ERROR, error=str(exc), pause=self._store_pause,
                            unsettled=len(state.pending))
            self._store_pause_until = self.clock() + self._store_pause
            return None
        if self._store_pause and (settles or not state.pending):
            events.emit(events.STORE_RECOVERED, unsettled=len(state.pending))
            self._store_pause = 0.0
            self._store_pause_until = 0.0
            self._store_down_since = None
        return result

    def _recover_dead_owners(self, now: float) -> None:
        """R24 at start: leases held by a supervisor of this host that is gone, even one
        that died before its pools row was written (the heartbeat buries rows)."""
        self._land(now, wait=True)  # R66: one statement at a time on the claimer's connection
        owners = self._store_call(self.core.lease_owners, now) or []
        for owner in owners:
            if owner and procinfo.owner_is_dead(owner):
                self._take_back(owner, f"supervisor {owner} died", now)

    def _take_back(self, owner: str, reason: str, now: float) -> list | None:
        """Settle every lease of a dead ``owner`` now (R24, R24b); None if the store
        is down (the caller tries again later)."""
        self._land(now, wait=True)  # R66: one statement at a time on the claimer's connection
        rows = self._store_call(self.core.reclaim_owner, now, owner, reason, now)
        if rows:
            events.emit(events.LEASES_RECLAIMED, owner=owner, jobs=len(rows))
            self._report(rows, reclaimed=True)
            self.state.want_claim = True
        return rows

    def _reclaim(self, now: float) -> None:
        if self._flight is not None:
            # R66: the look for expired leases waits for no turn: it follows this one.
            self._reclaim_after_turn = True
            return
        rows = self._store_call(self.core.reclaim, now, now)
        if rows:
            events.emit(events.LEASES_RECLAIMED, owner="expired", jobs=len(rows))
            self._report(rows, reclaimed=True)

    def _report(self, settled: list[Settled], finished: dict[tuple[int, int], Finished] | None = None,
                *, reclaimed: bool = False) -> None:
        """Count and log what settling did (R29a, R30). ``finished`` maps (job id,
        attempt) to the attempt this pool ran; ``reclaimed`` rows were other pools'
        attempts, taken back (R23, R24): not this pool's retries."""
        counters = self.counters
        series = self.state.metrics
        rollups = self.state.rollups
        for job_id, name, attempt, status, reason in settled:
            ran = finished.get((job_id, attempt)) if finished else None
            duration = ran.duration if ran is not None else None
            if series is not None and ran is not None:
                # An attempt this pool ran, counted once (reclaimed rows were another
                # pool's; rows retired at claim past their deadline never ran).
                series.settled(name, ran.queue, settled_as(status, ran.outcome.kind), duration)
            if status == "done":
                rollups.settled(name, "done", duration)
                counters["completed"] += 1
                events.emit(events.JOB_COMPLETED, job_id=job_id, name=name, attempt=attempt,
                            duration=duration)
            elif status == "ready":
                if reclaimed:
                    event, counter = events.JOB_RECLAIMED, "reclaimed"
                else:
                    # R29a: each way back to ready has its own event and counter
                    counter = settled_as(status, ran.outcome.kind if ran else core.ERROR)
                    event = events.SETTLED[counter]
                counters[counter] += 1
                rollups.settled(name, counter, duration)
                events.emit(event, job_id=job_id, name=name, attempt=attempt,
                            duration=duration, reason=reason)
                if counter == "released" and (ran is None or self.state.stopping
                                              or ran.outcome.kind != lifecycle.UNSTARTED):
                    # R25's list; a chunk's rows given back mid-run are not a stop's (R63)
                    self._released.append(job_id)
            elif status == "dead":
                counters["dead"] += 1
                rollups.settled(name, "dead", duration)
                events.emit(events.JOB_DEAD, job_id=job_id, name=name, attempt=attempt,
                            duration=duration, reason=reason)
                self.operations.job_dead(job_id, name, reason)
            else:
                counters["lost"] += 1
                events.emit(events.JOB_LEASE_LOST, job_id=job_id, name=name, attempt=attempt)

    def _turn(self, now: float) -> bool:
        """Settle what finished and claim for the free slots, in one transaction: the
        turn in flight lands first when its answer is here (R66), and the next is
        sent at once with the outcomes that came meanwhile.

        Returns True when a claim was made and found nothing (for --burst).
        """
        claimed_none = False
        if self._flight is not None:
            if not self._flight[0].ready():
                return False  # R66: one turn in flight at a time
            held_locks = self._flight[0].holds_locks()
            claimed_none = self._land(now)
            if held_locks:
                # The one moment no turn of this pool is in flight: a pool whose limited
                # turns follow one another would otherwise seldom reach a pass without.
                self._writes_between_turns(now)
        return self._send_turn(now) or claimed_none

    def _writes_between_turns(self, now: float) -> None:
        """R66: the writes that must not meet a limited turn's locks (the retention
        sweep, periodic enqueues; ``Operations`` skips them while one is in flight)."""
        operations = self.operations
        if now < self._store_pause_until:
            return  # R26: no store calls while paused
        operations.sweep_if_due(now)
        if operations.periodic and not self.state.stopping:
            operations.enqueue_periodic(now)

    def _send_turn(self, now: float) -> bool:
        state = self.state
        if state.hold_until is not None and now < state.hold_until and self._holding(now):
            return False
        if state.stopping or not state.want_claim:
            free, want = [], 0
        else:
            # R6: reserve the free slots, and claim at most that many jobs.
            free = self.slots.free()
            want = len(free)
            limit = self.config.max_jobs
            if limit is not None:
                want = max(0, min(want, limit - self.counters["claimed"]))
                if self.counters["claimed"] >= limit:
                    # --max-jobs spent: no claim comes again, so none is wanted (or the
                    # loop, which waits for nothing while a claim is wanted and a slot
                    # is free, would spin until the last jobs end).
                    state.want_claim = False
        # R38: with every queue paused there is nothing to claim (as if a claim found none);
        # R24b, R38: nor before a heartbeat registered the pool and read the pauses.
        all_paused = want > 0 and not self.plan.active
        if want and (all_paused or not self.operations.registered):
            want = 0
            state.want_claim = False  # the heartbeat that registers it asks again
        if ((not state.pending and not want and not self.core.claims_in_doubt)
                or now < self._store_pause_until):
            if now < self._store_pause_until:
                # R26: no turn runs before the pause ends, held or not (R6a): the loop
                # sleeps until then, not until a window that ended meanwhile.
                state.hold_until = None
            return all_paused and now >= self._store_pause_until
        if self._holding(now):
            return False
        pending = state.pending
        shares = self.plan.shares(want) if want else None
        sent = self._store_call(self.core.begin_turn, now, [f.outcome for f in pending], want,
                                now, self.rng, shares, settles=True)
        if sent is None:
            if pending:
                self.counters["settle_failures"] += 1
            return False
        # R66: the outcomes go with the turn; those that come meanwhile wait for the next.
        state.pending = []
        fileno = sent.fileno()
        self._flight = (sent, fileno, pending, free[:want], want, all_paused)
        if fileno is None:
            return self._land(now)
        self._flight_selector.register(fileno, selectors.EVENT_READ, ("turn", None, None))
        return False

    def _turn_holds_locks(self) -> bool:
        """R66: whether the turn in flight is a limited claim's transaction, which holds
        what it settled (a batch member's shard, a group's lane) until this loop lands
        it: a write of this loop through the store's own connection that needed such a
        lock would wait for the loop itself."""
        return self._flight is not None and self._flight[0].holds_locks()

    def _land(self, now: float, wait: bool = False) -> bool:
        """R66: apply the turn in flight, if there is one and its answer is here (or
        ``wait``: waiting for it): report what it settled, hand what it claimed to the
        slots reserved when it was sent. On a store error its outcomes wait again,
        first in line (R26). Returns True when its claim found nothing."""
        if self._flight is None or not (wait or self._flight[0].ready()):
            return False
        sent, fileno, pending, free, want, all_paused = self._flight
        self._flight = None
        if fileno is not None:
            self._flight_selector.unregister(fileno)
        state = self.state
        if fileno is None:
            got = sent.done  # a turn that ran whole: nothing left to read or to fail
        else:
            # Read even while paused: the answer is on its way, the connection is not
            # free until it has been read.
            got = self._store_call(self.core.finish_turn, now, sent, settles=True,
                                   answer=True)
        if self._reclaim_after_turn:
            self._reclaim_after_turn = False
            self._reclaim(now)
        if got is None:
            state.pending[:0] = pending
            if pending:
                self.counters["settle_failures"] += 1
            return False
        settled, claimed, expired = got
        if pending:
            self._report(settled, {(f.outcome.job_id, f.outcome.attempt): f for f in pending})
        self._report(expired)
        chunked = self.core.chunked  # R63: empty unless a name is chunked
        # R66: a slot reserved when the turn was sent may have gone while it was in
        # flight (a turn that ran whole had no while).
        usable = (None if fileno is None else
                  set(map(id, self.slots.free())) if not state.stopping else set())
        for slot, job in zip(free, claimed):
            rest = chunked.get(job.job_id) if chunked else None
            if usable is None or id(slot) in usable:
                self.slots.dispatch(slot, job, now, rest)
            else:
                # R66: claimed for a slot that went (the pool stopped, shrank, or its
                # child died) while the claim was in flight: back in line, unstarted,
                # with the rows of its chunk (R63).
                state.pending.extend(Finished(Outcome(
                    row.job_id, row.attempt, lifecycle.UNSTARTED,
                    "not started: its slot went while its claim was in flight"), 0.0, row.queue)
                    for row in [job, *(rest or ())])
        if not want:
            return all_paused
        wait_s = self.core.token_wait
        self._next_token = None if wait_s is None else now + wait_s
        state.want_claim = len(claimed) + len(expired) >= want
        return not claimed and not expired

    def _holding(self, now: float) -> bool:
        """``--coalesce-us``: whether this turn waits for the outcomes of children still
        running (``PoolState.holding``, which the pump asks too, R6a)."""
        return self.state.holding(now, self.config.coalesce, self.slots.busy_count(),
                                  self.slots.procs)

    def _maybe_status(self, now: float) -> None:
        if self.config.status_every and now >= self._next_status:
            if self._next_status:
                events.emit(events.POOL_STATUS, busy=self.slots.busy_count(), **self.counters)
            self._next_status = now + self.config.status_every

    def _keep_wakeups_reachable(self) -> None:
        """At each heartbeat: let the listener move into a gap a departed supervisor
        left (SQLite, R11) or reconnect a dropped one (PostgreSQL, R11a)."""
        self._listener.move_down()  # the socket it gave up is closed as it is unwatched
        self._rewire_listener()  # a wake-up still queued on it is lost: the claim covers it

    def _rewire_listener(self) -> None:
        """Watch the socket the listener has now; when it changed, claim once (a job
        enqueued while nobody listened would otherwise wait for the poll)."""
        sock = self._listener.sock if self._listener else None
        if sock is self._listening:
            return
        if self._listening is not None:
            self._selector.unregister(self._listening)
            self._listening.close()  # unregistered first: a closed fd cannot be
        if sock is not None:
            self._selector.register(sock, selectors.EVENT_READ, ("wake", None, None))
        self._listening = sock
        self.state.want_claim = True

    # -- stopping (R25) and signals ----------------------------------------------------------

    def _handle_stop(self, now: float) -> None:
        state = self.state
        if self._hung_up and self._terminal_fds is not None:
            self._terminal_closed()
        if state.stop_requests and not state.stopping:
            state.stopping = True
            state.drain_until = now + self.config.drain
            self.operations.next_heartbeat = 0.0  # tell the store (and the dashboard) at once
            events.emit(events.POOL_STOPPING, busy=self.slots.busy_count(), drain=self.config.drain)
            self.slots.interrupt_all()  # R37: checkpointing jobs stop at their next save point
            if self.core.claims_in_doubt:
                # R26: the stop cuts the store's pause short: its claims in doubt are
                # given back by the next turn, tried now.
                self._store_pause_until = 0.0
        if not state.stopping:
            return
        if state.stop_requests >= 2 or now >= state.drain_until:
            if state.stop_requests >= 2:
                self.slots.release_all(now, "released at shutdown: a second stop came")
            else:
                self.slots.release_all(now, f"released at shutdown: still running when the "
                                            f"{self.config.drain:g} s drain ended")

    def _install_signals(self) -> None:
        self._signal_r, self._signal_w = socket.socketpair()
        self._signal_r.setblocking(False)
        self._signal_w.setblocking(False)
        self._selector.register(self._signal_r, selectors.EVENT_READ, ("signal", None, None))
        self._flight_selector.register(self._signal_r, selectors.EVENT_READ, ("signal", None, None))
        try:
            self._old_wakeup_fd = signal.set_wakeup_fd(self._signal_w.fileno(),
                                                       warn_on_full_buffer=False)
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._old_handlers[signum] = signal.signal(signum, self._on_signal)
            self._old_handlers[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._on_reload)
            # R27 (terminal.py): a hang-up of the terminal this pool runs on stops it;
            # without a terminal SIGHUP reloads; under nohup it stays ignored.
            if not terminal.hangup_ignored():
                on_terminal = terminal.has_controlling_terminal()
                self._terminal_fds = terminal.terminal_fds() if on_terminal else None
                self._old_handlers[signal.SIGHUP] = signal.signal(
                    signal.SIGHUP, self._on_hangup if on_terminal else self._on_reload)
        except ValueError:
            pass  # not the main thread: stop with request_stop()

    def _on_signal(self, signum, frame) -> None:
        # Handlers only count; the loop acts (STYLE habit 7).
        self.state.stop_requests += 1

    def _on_reload(self, signum, frame) -> None:
        # R27: re-read the operators' requests (scale, stop) at once.
        self.operations.next_heartbeat = 0.0

    def _on_hangup(self, signum, frame) -> None:
        # R27: the terminal went away: a graceful stop, the loop does the rest.
        self._hung_up = True
        self.state.stop_requests += 1

    def _terminal_closed(self) -> None:
        """The terminal hung up: this pool and every process it forked stop writing
        to it (each write would fail with EIO), and the graceful stop that the
        hang-up counted drains the pool (R25). Once."""
        fds, self._terminal_fds = self._terminal_fds, None
        events.emit(events.TERMINAL_CLOSED, busy=self.slots.busy_count(), drain=self.config.drain)
        terminal.point_at_null(fds or ())
        # The children lead process groups of their own: the kernel told only this
        # one (and the dashboard beside it). Each moves off the terminal itself.
        for pid in self.slots.known_children():
            try:
                os.kill(pid, signal.SIGHUP)
            except OSError:
                pass

    def _drain_signal_pipe(self) -> None:
        try:
            while self._signal_r.recv(512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _restore_signals(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        if self._old_handlers:
            signal.set_wakeup_fd(self._old_wakeup_fd)
        self._old_handlers.clear()
        for sock in (self._signal_r, self._signal_w):
            if sock is not None:
                sock.close()
