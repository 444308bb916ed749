"""The supervisor: one per host and store; owns the store connection and the children.

Each loop turn: read what children sent and which children died, kill children
past their hard timeout, settle finished attempts in one transaction, then
reserve the free slots and claim at most that many jobs (R6), and dispatch them.
It waits in one ``select`` over the child pipes, child exit sentinels, the
wake-up socket and the signal pipe, so it never busy-polls and never blocks
where a signal could not reach it (R11).
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import selectors
import signal
import socket
import time
from typing import Any, Callable

import multiprocess

from jobpool import (bounds, core, events, jobs, lifecycle, liveness, procinfo, proctree,
                     protocol)
from jobpool.child import child_main
from jobpool.config import HEARTBEAT_EVERY, PoolConfig
from jobpool.forked import Forked
from jobpool.errors import JobpoolError, StoreError
from jobpool.hooks import HookRunner
from jobpool.lifecycle import Outcome
from jobpool.store.records import Heartbeat, ProgressReport
from jobpool.store.base import Store
from jobpool.store.sqlite import CLAIM_BUSY_TIMEOUT, connect

log = logging.getLogger(__name__)

#: R26: the longest pause after a store error, seconds (far below job backoff's cap).
STORE_PAUSE_MAX = 30.0
#: The exit code of a --burst pool that gave up on its store.
EXIT_STORE_GAVE_UP = 3
#: How often the pool sweeps expired done rows and surplus dead rows (R32), seconds.
SWEEP_EVERY = 10.0
#: How often the RSS of children running memory-limited jobs is sampled, seconds.
MEMORY_SAMPLE_EVERY = 0.1


#: Exit codes of a child ended by the signals that stop a pool (SIGTERM, SIGINT).
_STOP_SIGNALS = (-signal.SIGTERM, -signal.SIGINT)


class Slot:
    """One child process and what it is doing."""

    __slots__ = ("index", "proc", "conn", "pid", "job", "killing", "kill_at", "kill_kind",
                 "started", "progress", "stage", "progress_dirty", "retiring")

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Forked | None = None    # the child process
        self.conn: Any = None    # the supervisor's end of the slot's pipe
        self.pid = 0
        self.job: Any = None   # the claimed tuple it runs, or None
        self.killing: str | None = None  # reason, once we decided to kill it
        self.kill_at = math.inf
        self.kill_kind = core.TIMEOUT
        self.started = 0.0
        self.progress: float | None = None
        self.stage: str | None = None
        self.progress_dirty = False
        self.retiring = False


class Supervisor:
    """Runs one pool until it is stopped, drained (``--burst``) or done (``--max-jobs``)."""

    def __init__(self, config: PoolConfig, *, store: Store | None = None,
                 rng: random.Random | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        config.validate()
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
        if config.queues:
            self.queues = tuple(config.queues)
        else:
            found = sorted({registered[n].queue for n in names if n in registered})
            self.queues = tuple(["default"] + [q for q in found if q != "default"])
        self.store = store or connect(config.db, check=True, busy_timeout=CLAIM_BUSY_TIMEOUT,
                                      mode=config.mode)
        # A store this user cannot write is a mistake to report now, in one line, not a
        # pool that idles for ever (a store that *becomes* unwritable later is R26's).
        self.store.check_writable()
        self.owner = procinfo.owner_identity()
        policies = {}
        for n in names:
            if n in registered:
                job = registered[n]
                policy = job.policy
                if job.max_crashes is None and config.max_crashes is not None:
                    # --max-crashes, for jobs that set none
                    policy = policy._replace(max_crashes=config.max_crashes)
                policies[n] = policy
        self.core = self.store.claimer(self.owner, names, self.queues, policies)
        self._maintenance: Any = None  # the store's helper while running (R26a)
        #: How many children this pool runs now: ``--procs`` until a scale says more
        #: or fewer (R27).
        self.procs = config.procs
        self.table = core.SlotTable(config.procs)
        self.slots = [Slot(i) for i in range(config.procs)]
        self.rng = rng or random.Random()
        self.pending: list[Outcome] = []
        self.counters = dict(claimed=0, completed=0, retried=0, deferred=0, rescheduled=0,
                             released=0, reclaimed=0, dead=0, lost=0, crashes=0,
                             settle_failures=0, strays_killed=0)
        # Pipes from multiprocess's public API (marshalled messages over them, R6).
        self._ctx = multiprocess.get_context("fork")
        self._selector = selectors.DefaultSelector()
        self._stop_requests = 0
        self._stopping = False
        self._drain_until = math.inf
        self._store_pause_until = 0.0
        self._store_pause = 0.0
        self._want_claim = True
        self._next_poll = 0.0
        self._next_status = 0.0
        self._old_handlers: dict[int, Any] = {}
        self._signal_r: Any = None  # the signal wake-up socket pair, once running
        self._signal_w: Any = None
        self._old_wakeup_fd = -1
        self._listener: Any = None  # a Listener once running
        self._started_at = self.clock()
        self._next_heartbeat = 0.0
        self._next_sweep = 0.0
        self._hooks = HookRunner()
        self._hook_queue: list[tuple[int, str, str]] = []
        self._with_hooks = {n: registered[n].on_dead for n in names
                            if n in registered and registered[n].on_dead is not None}
        self._periodic = {n: registered[n].schedule for n in names
                          if n in registered and registered[n].schedule is not None}
        self._periodic_done: dict[str, float] = {}
        self._memory_limits = {}
        for n in names:
            limit = registered[n].memory_limit if n in registered else None
            limit = limit or config.memory_limit
            if limit:
                self._memory_limits[n] = limit
        self._next_memory_sample = 0.0
        self._dispatched: dict[int, float] = {}  # job id -> when it went to a child (R30)
        #: The last scale request past this pool's bound, as ``pools`` shows it (R41).
        self.scale_refused: str | None = None
        #: Processes started beside the pool by its caller (the dashboard of
        #: ``jobpool start``): its children, but never a job's strays (R40).
        self.companions: set[int] = set()
        #: R24b: since when this pool's heartbeats have succeeded without a break.
        self._beating_since: float | None = None
        #: R26: since when every store call has failed (None: the store answers).
        self._store_down_since: float | None = None
        #: What ``run`` returns: 0, or non-zero once a --burst pool gave up.
        self.exit_code = 0

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0: clean)."""
        self._install_signals()
        # R40: orphans of a killed child are reparented here, not to PID 1.
        proctree.become_subreaper()
        self._listener = self.store.listener()
        if self._listener.sock is not None:
            self._selector.register(self._listener.sock, selectors.EVENT_READ, ("wake", None, None))
        self._maintenance = self.store.maintenance()
        try:
            self._recover_dead_owners(self.clock())
            self._run_start_hooks()
            self._queue_pending_hooks()
            for slot in self.slots:
                self._spawn(slot)
            events.emit(events.POOL_STARTED, owner=self.owner, procs=self.procs,
                        queues=",".join(self.queues), core=core.NAME)
            self._loop()
        finally:
            self._shutdown_children()
            self._run_hooks(self.clock())
            self._hooks.wait(5.0)
            if self.config.burst:
                self._warn_unserved()
            self._leave_pools_table()
            if self._maintenance is not None:
                self._maintenance.stop()
            self._restore_signals()
            proctree.become_subreaper(False)
            self._listener.close()
            self._selector.close()
            self.core.close()
            self.store.close()  # the last connection out checkpoints and removes the WAL
        events.emit(events.POOL_STOPPED, **self.counters)
        return self.exit_code

    def request_stop(self) -> None:
        """Ask for a graceful stop (what SIGTERM and SIGINT do); twice means at once."""
        self._stop_requests += 1
        if self._signal_w is not None:
            try:
                self._signal_w.send(b"\0")
            except OSError:
                pass

    def _loop(self) -> None:
        config = self.config
        while True:
            now = self.clock()
            timeout = self._wait_time(now)
            for key, _mask in self._selector.select(timeout):
                kind, slot, owner = key.data
                # One batch can hold events of a child replaced earlier in the same
                # batch, whose fd number the new child may already reuse: act only on
                # events of the very pipe or process the slot holds now.
                if kind == "conn":
                    if slot.conn is owner:
                        self._read_child(slot)
                elif kind == "exit":
                    if slot.proc is owner:
                        self._child_exited(slot, self.clock())
                elif kind == "wake":
                    self._listener.drain()
                    self._want_claim = True
                else:
                    self._drain_signal_pipe()
            now = self.clock()
            self._handle_stop(now)
            self._kill_overdue(now)
            self._check_memory(now)
            if now >= self._next_poll:
                self._next_poll = now + config.poll_interval
                self._want_claim = True
                if not self._stopping:
                    self._reclaim(now)
            claimed_none = self._turn(now)
            store_up = now >= self._store_pause_until  # R26: no store calls while paused
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + HEARTBEAT_EVERY  # advanced even when skipped
                if store_up:
                    self._heartbeat(now)
            if store_up and self._periodic and not self._stopping:
                self._enqueue_periodic(now)
            if store_up and self._hook_queue:
                self._run_hooks(now)
            if len(self._hooks):
                self._hooks.reap(now)
            self._maybe_status(now)
            if self._finished(now, claimed_none):
                return

    def _wait_time(self, now: float) -> float:
        if self._want_claim and not self._stopping and self._free_slots() and now >= self._store_pause_until:
            return 0.0
        deadline = min(self._next_poll, self.table.next_deadline(), self._drain_until,
                       self._next_heartbeat)
        if self.pending:
            deadline = min(deadline, self._store_pause_until)
        for slot in self.slots:
            if slot.killing is not None:
                deadline = min(deadline, slot.kill_at)
            elif slot.job is not None and slot.job[1] in self._memory_limits:
                deadline = min(deadline, self._next_memory_sample)
        return max(0.0, min(deadline - now, self.config.poll_interval))

    def _finished(self, now: float, claimed_none: bool) -> bool:
        if (self.config.burst and not self._stop_requests and self._store_down_since is not None
                and now - self._store_down_since >= self.config.store_timeout):
            # A graceful stop from here on: running jobs drain, what cannot be settled
            # is left to its lease (R25, R26), and the exit code says it was no drain.
            events.emit(events.STORE_GAVE_UP, seconds=round(now - self._store_down_since, 1),
                        unsettled=len(self.pending))
            self.exit_code = EXIT_STORE_GAVE_UP
            self.request_stop()
        busy = self.table.busy_count()
        if busy or self.pending:
            if self._stopping and self.pending and not busy and now >= self._drain_until + 5:
                log.error("stopping with %d outcomes the store did not accept; their leases "
                          "will expire and the jobs run again", len(self.pending))
                return True
            return False
        if self._stopping:
            return True
        limit = self.config.max_jobs
        if limit is not None and self.counters["claimed"] >= limit:
            return True
        if self.config.burst and claimed_none:
            try:
                due = self.store.next_due(self.names, self.queues)
            except StoreError:
                return False  # cannot tell: keep running; the claim path reports (R26)
            # Due later than this is left in the store: a retry in backoff past
            # --wait-retries waits for the next pool.
            return due is None or due > now + max(self.config.poll_interval,
                                                   self.config.wait_retries)
        return False

    # -- children --------------------------------------------------------------------

    def _spawn(self, slot: Slot) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        inherited = [s.conn.fileno() for s in self.slots if s.conn is not None]
        inherited += [s.proc.sentinel for s in self.slots if s.proc is not None]
        inherited.append(parent_conn.fileno())
        for sock in (self._signal_r, self._signal_w, self._listener.sock if self._listener else None):
            if sock is not None:
                inherited.append(sock.fileno())
        proc = Forked.start(child_main, child_conn, os.getpid(), inherited,
                            self.config.max_tasks_per_child,
                            (self.config.max_memory_per_child or 0) * 2**20)
        child_conn.close()
        slot.proc, slot.conn, slot.pid = proc, parent_conn, proc.pid
        slot.killing, slot.kill_at = None, math.inf
        slot.retiring = False
        self._selector.register(parent_conn.fileno(), selectors.EVENT_READ, ("conn", slot, parent_conn))
        self._selector.register(proc.sentinel, selectors.EVENT_READ, ("exit", slot, proc))
        self._want_claim = True

    def _read_child(self, slot: Slot, *, drain: bool = False) -> None:
        """Read one message (the selector said the pipe is readable), or all of them.

        One read per readiness event: the selector is level-triggered, so a second
        queued message shows up on the next turn, and ``Connection.poll`` (which
        builds a selector per call) stays off the hot path.
        """
        conn = slot.conn
        try:
            while True:
                message = protocol.loads(conn.recv_bytes())
                if message[0] == protocol.OUTCOME:
                    self._outcome(slot, message)
                elif message[0] == protocol.PROGRESS:
                    self._progress(slot, message)
                if not drain or not procinfo.readable(conn.fileno()):
                    break
        except (EOFError, OSError, ValueError):
            # The child died mid-message; its exit sentinel settles the job.
            self._selector.unregister(conn.fileno())
            slot.conn = None
            conn.close()

    def _outcome(self, slot: Slot, message: tuple) -> None:
        (_tag, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s, retiring,
         strays) = message
        if slot.job is None or slot.job[0] != job_id or slot.job[4] != attempt:
            return  # a reply for a job this slot no longer holds (it was killed)
        self.pending.append(Outcome(job_id, attempt, kind, error, delay, result, slot.pid, "0",
                                    peak_rss, cpu_s, strays or None))
        if strays:
            self._strays_killed(strays, job_id, slot.job[1], attempt)
        if retiring:
            slot.retiring = True  # it exits now; its exit sentinel brings a fresh child
        self._free(slot)

    def _progress(self, slot: Slot, message: tuple) -> None:
        _tag, job_id, attempt, percent, stage = message
        if slot.job is not None and slot.job[0] == job_id and slot.job[4] == attempt:
            slot.progress, slot.stage, slot.progress_dirty = percent, stage, True

    def _free(self, slot: Slot) -> None:
        if slot.progress_dirty and slot.job is not None and self.pending:
            # The last report before a failure stays with the error (R22). Best effort:
            # a busy store loses this report, never the pool (R26).
            try:
                self.store.set_progress(self.owner, self._progress_reports([slot]))
            except StoreError as exc:
                log.debug("progress of job %s not written: %s", slot.job[0], exc)
        slot.job = None
        slot.progress, slot.stage, slot.progress_dirty = None, None, False
        self.table.clear(slot.index)
        self._want_claim = True
        if slot.index >= self.procs:
            self._retire(slot)

    def _child_exited(self, slot: Slot, now: float) -> None:
        if slot.conn is not None:
            if procinfo.readable(slot.conn.fileno()):
                self._read_child(slot, drain=True)  # an outcome sent just before exiting counts
        proc = slot.proc
        assert proc is not None  # the selector reports exits only of a slot's own child
        self._selector.unregister(proc.sentinel)
        # wait4 gives the child's resource usage for the forensics (R19a).
        reaped = proc.reap()
        assert reaped is not None  # its sentinel said it exited
        code, usage = reaped
        proc.close()
        if slot.conn is not None:
            self._selector.unregister(slot.conn.fileno())
            slot.conn.close()
            slot.conn = None
        cause = procinfo.exit_cause(code)
        # R40: a child killed mid-job (timeout, crash, cancel, stop) leaves what its job
        # started reparented to us, a subreaper: kill it with the attempt.
        strays = proctree.kill_strays(exclude=self._known_children(), count_ended=True)
        if strays:
            job = slot.job
            self._strays_killed(strays, job[0] if job else None, job[1] if job else None,
                                job[4] if job else None)
        if slot.job is not None:
            job_id, attempt = slot.job[0], slot.job[4]
            if slot.killing is not None:
                kind, error = slot.kill_kind, slot.killing
                if kind == core.CRASH:
                    self.counters["crashes"] += 1
            elif self._stop_requests and code in _STOP_SIGNALS:
                # The stop signal reached the whole process group (systemd stops a
                # unit's cgroup so): the child did not crash, the pool is stopping (R25).
                kind, error = core.RELEASE, f"released at shutdown ({cause})"
            else:
                kind, error = core.CRASH, cause
                self.counters["crashes"] += 1
            events.emit(events.CHILD_DIED, slot=slot.index, pid=slot.pid, job_id=job_id,
                        name=slot.job[1], attempt=attempt, cause=cause)
            peak = usage.ru_maxrss * 1024 if usage else None
            cpu = usage.ru_utime + usage.ru_stime if usage else None
            self.pending.append(Outcome(job_id, attempt, kind, error, None, None, slot.pid,
                                        procinfo.exit_status_text(code), peak, cpu,
                                        strays or None))
            self._free(slot)
        elif slot.killing is None and not self._stop_requests:
            events.emit(events.CHILD_RECYCLED, slot=slot.index, pid=slot.pid, cause=cause)
        slot.proc = None
        if slot.index < self.procs and not self._stopping and not self._stop_requests:
            self._spawn(slot)
        else:
            self._trim_slots()

    def _known_children(self) -> frozenset[int]:
        """Our own children (slot children, hook processes, the store's maintenance
        process, companions): never strays."""
        pids = {slot.pid for slot in self.slots if slot.proc is not None} | self.companions
        maintenance = getattr(self._maintenance, "pid", None)
        if maintenance:
            pids.add(maintenance)
        return frozenset(pids | self._hooks.pids())

    def _strays_killed(self, count: int, job_id: int | None, name: str | None,
                       attempt: int | None) -> None:
        self.counters["strays_killed"] += count
        events.emit(events.STRAYS_KILLED, job_id=job_id, name=name, attempt=attempt, processes=count)

    def _check_memory(self, now: float) -> None:
        """Kill a child whose RSS passed its job's memory limit; a crash (R19)."""
        if not self._memory_limits or now < self._next_memory_sample:
            return
        self._next_memory_sample = now + MEMORY_SAMPLE_EVERY
        for slot in self.slots:
            job = slot.job
            if job is None or slot.killing is not None or slot.proc is None:
                continue
            limit = self._memory_limits.get(job[1])
            if not limit:
                continue
            rss = procinfo.rss_bytes(slot.pid)
            if rss is not None and rss > limit * 2**20:
                self._kill(slot, f"child killed: memory limit {limit} MiB exceeded "
                                 f"(RSS {rss / 2**20:.0f} MiB)", core.CRASH, now, at_once=True)

    def _kill_overdue(self, now: float) -> None:
        for index in self.table.overdue(now):
            slot = self.slots[index]
            if slot.killing is None:
                timeout = slot.job[5]
                self._kill(slot, f"timed out after {timeout:g} s", core.TIMEOUT, now)
        for slot in self.slots:
            if slot.killing is not None and slot.proc is not None and now >= slot.kill_at:
                self._signal(slot, signal.SIGKILL)
                slot.kill_at = now + 1.0

    def _kill(self, slot: Slot, reason: str, kind: int, now: float, *, at_once: bool = False) -> None:
        """SIGTERM now and SIGKILL after the grace (R20), or SIGKILL at once."""
        slot.killing, slot.kill_kind = reason, kind
        if at_once:
            self._signal(slot, signal.SIGKILL)
            slot.kill_at = now + 1.0
        else:
            self._signal(slot, signal.SIGTERM)
            slot.kill_at = now + self.config.kill_grace
        self.table.extend_deadline(slot.index, math.inf)

    def _signal(self, slot: Slot, signum: int) -> None:
        """Signal a child and its job's process group (R40): the job's own subprocesses
        get the same SIGTERM grace as the job; anything that left the group is killed
        when the child's exit is reaped."""
        if slot.proc is None:
            return
        try:
            os.killpg(slot.pid, signum)
        except (ProcessLookupError, PermissionError):
            # Not yet its own group leader (just forked): the child alone.
            try:
                os.kill(slot.pid, signum)
            except ProcessLookupError:
                pass

    def _free_slots(self) -> list[int]:
        procs = self.procs
        return [i for i in self.table.free_slots()
                if i < procs and self.slots[i].proc is not None and self.slots[i].conn is not None
                and self.slots[i].killing is None and not self.slots[i].retiring]

    # -- scaling (R27) -------------------------------------------------------------------

    def resize(self, procs: int) -> None:
        """Grow at once; shrink by retiring slots as their jobs finish, never by cancelling.

        A scale request is fleet-wide, so each pool judges it against its own bound
        (R41): past it, the pool grows to its bound, says so (``scale_refused``) and
        shows the refusal in ``pools``."""
        bound, why = bounds.procs_bound(self.config.max_procs)
        if procs > bound:
            self.scale_refused = f"asked for {procs} procs; ran {bound} ({why})"
            events.emit(events.SCALE_REFUSED, procs_asked=procs, procs_bound=bound, reason=why)
            procs = bound
        else:
            self.scale_refused = None
        if procs < 1 or procs == self.procs:
            return
        old = self.procs
        self.procs = procs
        events.emit(events.POOL_SCALED, procs_from=old, procs_to=procs)
        if procs > old:
            self.table.resize(max(procs, self.table.size))
            while len(self.slots) < procs:
                self.slots.append(Slot(len(self.slots)))
            for slot in self.slots[old:procs]:
                if slot.proc is None and not self._stopping:
                    self._spawn(slot)
            return
        for slot in self.slots[procs:]:
            if slot.job is None:
                self._retire(slot)

    def _retire(self, slot: Slot) -> None:
        """Close an idle child of a slot past --procs; its exit trims the slot away."""
        if slot.conn is not None:
            self._selector.unregister(slot.conn.fileno())
            slot.conn.close()  # the idle child reads EOF and exits
            slot.conn = None
        if slot.proc is None:
            self._trim_slots()

    def _trim_slots(self) -> None:
        while (len(self.slots) > self.procs and self.slots[-1].proc is None
               and self.slots[-1].job is None):
            self.slots.pop()
        self.table.resize(len(self.slots))

    def _shutdown_children(self) -> None:
        for slot in self.slots:
            if slot.conn is not None:
                slot.conn.close()  # an idle child sees EOF and returns
                slot.conn = None
        deadline = time.monotonic() + 2.0
        for slot in self.slots:
            proc = slot.proc
            if proc is None:
                continue
            self._selector.unregister(proc.sentinel)
            proc.stop(max(0.0, deadline - time.monotonic()))
            slot.proc = None
        strays = proctree.kill_strays(exclude=self._known_children(), count_ended=True)
        if strays:
            self._strays_killed(strays, None, None, None)

    # -- the store ------------------------------------------------------------------------

    def _store_call(self, what, now, *args):
        """Call the core; on a store error pause (R26) and return None."""
        if now < self._store_pause_until:
            return None
        try:
            result = what(*args)
        except StoreError as exc:
            first = self._store_pause == 0.0  # log once per episode, not once per try
            if first:
                self._store_down_since = self.clock()
            self._store_pause = min(STORE_PAUSE_MAX, max(self.config.poll_interval,
                                                         self._store_pause * 2))
            if first:
                events.emit(events.STORE_ERROR, error=str(exc), pause=self._store_pause,
                            unsettled=len(self.pending))
            self._store_pause_until = self.clock() + self._store_pause
            return None
        if self._store_pause:
            events.emit(events.STORE_RECOVERED, unsettled=len(self.pending))
            self._store_pause = 0.0
            self._store_pause_until = 0.0
            self._store_down_since = None
        return result

    def _recover_dead_owners(self, now: float) -> None:
        """R24 at start: leases held by a supervisor of this host that is gone, even one
        that died before its pools row was written (``_bury_dead_pools`` handles rows)."""
        owners = self._store_call(self.core.lease_owners, now) or []
        for owner in owners:
            if owner and procinfo.owner_is_dead(owner):
                self._take_back(owner, f"supervisor {owner} died", now)

    def _take_back(self, owner: str, reason: str, now: float) -> list | None:
        """Settle every lease of a dead ``owner`` now (R24, R24b); None if the store
        is down (the caller tries again later)."""
        rows = self._store_call(self.core.reclaim_owner, now, owner, reason, now)
        if rows:
            events.emit(events.LEASES_RECLAIMED, owner=owner, jobs=len(rows))
            self._report(rows, reclaimed=True)
            self._want_claim = True
        return rows

    def _reclaim(self, now: float) -> None:
        rows = self._store_call(self.core.reclaim, now, now)
        if rows:
            events.emit(events.LEASES_RECLAIMED, owner="expired", jobs=len(rows))
            self._report(rows, reclaimed=True)

    #: R29a/R30: a settle back to ``ready`` means different things by the outcome
    #: that caused it; each has its own event and counter.
    _READY_BY_KIND = {core.DEFER: (events.JOB_DEFERRED, "deferred"),
                      core.RESCHEDULE: (events.JOB_RESCHEDULED, "rescheduled"),
                      core.RELEASE: (events.JOB_RELEASED, "released")}

    def _report(self, settled: list[tuple], kinds: dict[tuple[int, int], int] | None = None,
                *, reclaimed: bool = False) -> None:
        """Count and log what settling did (R29a, R30). ``kinds`` maps (job id,
        attempt) to the outcome kind this pool sent; ``reclaimed`` rows were other
        pools' attempts, taken back (R23, R24): not this pool's retries."""
        counters = self.counters
        now = self.clock()
        for job_id, name, attempt, status, reason in settled:
            started = self._dispatched.pop(job_id, None)
            duration = round(now - started, 6) if started is not None else None
            if status == "done":
                counters["completed"] += 1
                events.emit(events.JOB_COMPLETED, job_id=job_id, name=name, attempt=attempt,
                            duration=duration)
            elif status == "ready":
                kind = kinds.get((job_id, attempt), core.ERROR) if kinds else core.ERROR
                if reclaimed:
                    event, counter = events.JOB_RECLAIMED, "reclaimed"
                else:
                    event, counter = self._READY_BY_KIND.get(kind, (events.JOB_RETRIED, "retried"))
                counters[counter] += 1
                events.emit(event, job_id=job_id, name=name, attempt=attempt,
                            duration=duration, reason=reason)
            elif status == "dead":
                counters["dead"] += 1
                events.emit(events.JOB_DEAD, job_id=job_id, name=name, attempt=attempt,
                            duration=duration, reason=reason)
                if name in self._with_hooks:
                    self._hook_queue.append((job_id, name, reason or ""))
            else:
                counters["lost"] += 1
                events.emit(events.JOB_LEASE_LOST, job_id=job_id, name=name, attempt=attempt)

    def _claim_wanted(self) -> tuple[list[int], int]:
        """The free slots to reserve (R6) and how many jobs to claim for them."""
        if self._stopping or not self._want_claim:
            return [], 0
        free = self._free_slots()
        want = len(free)
        limit = self.config.max_jobs
        if limit is not None:
            want = max(0, min(want, limit - self.counters["claimed"]))
        return free, want

    def _turn(self, now: float) -> bool:
        """Settle what finished and claim for the free slots, in one transaction.

        Returns True when a claim was made and found nothing (for --burst).
        """
        free, want = self._claim_wanted()
        if (not self.pending and not want) or now < self._store_pause_until:
            return False
        got = self._store_call(self.core.turn, now, self.pending, want, now, self.rng)
        if got is None:
            if self.pending:
                self.counters["settle_failures"] += 1
            return False
        settled, claimed, expired = got
        kinds = {(outcome.job_id, outcome.attempt): outcome.kind for outcome in self.pending}
        self.pending = []
        self._report(settled, kinds)
        self._report(expired)
        for slot_index, job in zip(free, claimed):
            self._dispatch(self.slots[slot_index], job, now)
        if not want:
            return False
        self._want_claim = len(claimed) + len(expired) >= want
        return not claimed and not expired

    def _dispatch(self, slot: Slot, job: tuple, now: float) -> None:
        job_id, name, payload, serializer, attempt, timeout, _deadline = job
        self.table.assign(slot.index, job_id, attempt, now + timeout)
        slot.job = job
        slot.started = now
        self._dispatched[job_id] = now
        self.counters["claimed"] += 1
        events.emit(events.JOB_CLAIMED, job_id=job_id, name=name, attempt=attempt, slot=slot.index,
                    pid=slot.pid)
        try:
            slot.conn.send_bytes(protocol.job_message(job_id, attempt, name, payload, serializer))
        except OSError:
            pass  # the child just died; its exit sentinel settles the job as a crash

    def _maybe_status(self, now: float) -> None:
        if self.config.status_every and now >= self._next_status:
            if self._next_status:
                events.emit(events.POOL_STATUS, busy=self.table.busy_count(), **self.counters)
            self._next_status = now + self.config.status_every

    # -- heartbeat: progress, counters, operator requests (R22, R25, R27, R29, R31) -----------

    def _slot_views(self, now: float) -> list[dict]:
        views = []
        for slot in self.slots[: self.procs]:
            job = slot.job
            views.append({"slot": slot.index, "pid": slot.pid if slot.proc else None,
                          "job_id": job[0] if job else None, "name": job[1] if job else None,
                          "attempt": job[4] if job else None,
                          "started": slot.started if job else None,
                          "timeout": job[5] if job else None,
                          "progress": slot.progress, "stage": slot.stage,
                          "rss": procinfo.rss_bytes(slot.pid) if slot.proc else None})
        return views

    @staticmethod
    def _progress_reports(slots: list[Slot]) -> list[ProgressReport]:
        return [ProgressReport(job_id=slot.job[0], attempt=slot.job[4], percent=slot.progress,
                               stage=slot.stage) for slot in slots]

    def _heartbeat(self, now: float) -> None:
        counters: dict[str, Any] = dict(self.counters, busy=self.table.busy_count(),
                                        unsettled=len(self.pending))
        if self.scale_refused:
            counters["scale_refused"] = self.scale_refused
        if self._stopping:
            # R25/R29: the dashboard shows a draining pool and when its drain ends.
            counters["stopping"] = {"running": self.table.busy_count(),
                                    "drain_ends_at": self._drain_until}
        beat = Heartbeat(owner=self.owner, host=socket.gethostname(), pid=os.getpid(),
                         procs=self.procs, queues=self.queues, names=self.names,
                         core=core.NAME, counters_json=json.dumps(counters),
                         slots_json=json.dumps(self._slot_views(now)))
        dirty = [s for s in self.slots if s.progress_dirty and s.job is not None]
        try:
            requests = self.store.heartbeat(beat, self._progress_reports(dirty), now)
        except StoreError as exc:
            log.debug("heartbeat skipped: %s", exc)  # the hot path reports store errors (R26)
            self._beating_since = None  # R24b: a break in our own beats; judge nobody yet
            return
        for slot in dirty:
            slot.progress_dirty = False
        self._beating_since = self._beating_since or now
        self._keep_wakeups_reachable()
        self._bury_dead_pools(now)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY
            try:
                self.store.sweep(now, result_ttl=self.config.result_ttl,
                                 dead_letter_limit=self.config.dead_letter_limit)
            except StoreError as exc:
                log.debug("retention sweep skipped: %s", exc)
        if requests.stop:
            self.request_stop()
        if requests.procs is not None:
            self.resize(int(requests.procs))
        for job_id, attempt in requests.cancels:
            for slot in self.slots:
                if slot.job is not None and slot.job[0] == job_id and slot.job[4] == attempt \
                        and slot.killing is None:
                    self._kill(slot, lifecycle.CANCELLED, core.CANCEL, now, at_once=True)

    def _bury_dead_pools(self, now: float) -> None:
        """Reclaim the leases of pools that are dead, then remove their rows (R24, R24b).

        A pool on this host whose process is gone is judged at once (R24). A stale
        heartbeat is judged only once this pool has itself beaten without a break
        for ``dead_after``: after an outage of the store every pool's beat looks
        stale, and nobody may mass-reclaim on that evidence. The row goes only
        after its leases came back, so a failure in between leaves it for the next
        heartbeat (of this pool or another)."""
        dead_after = self.config.dead_after
        trusted = self._beating_since is not None and now - self._beating_since >= dead_after
        try:
            pools = self.store.pools(now)
        except StoreError as exc:
            log.debug("pools not read: %s", exc)
            return
        for pool in pools:
            owner = pool["owner"]
            if owner == self.owner:
                continue
            death = liveness.pool_death(pool, now, dead_after)
            if death is None or (death != "process gone" and not trusted):
                continue
            rows = self._take_back(owner, f"supervisor {owner} is dead ({death})", now)
            if rows is None:
                return  # the store is down: next heartbeat
            try:
                self.store.forget_pool(owner)
            except StoreError as exc:
                log.debug("dead pool %s not removed yet: %s", owner, exc)
                return
            events.emit(events.POOL_DEAD, owner=owner, cause=death, jobs=len(rows))

    def _keep_wakeups_reachable(self) -> None:
        """Move our wake-up socket down into a gap a departed supervisor left (R11)."""
        replaced = self._listener.move_down() if self._listener else None
        if replaced is None:
            return
        self._selector.unregister(replaced)
        replaced.close()  # a wake-up still queued on it is lost: the claim below covers it
        self._selector.register(self._listener.sock, selectors.EVENT_READ, ("wake", None, None))
        self._want_claim = True

    def _warn_unserved(self) -> None:
        """R28: "drained" says nothing of ready jobs no pool serves (a name nobody
        registers, a queue nobody reads); a --burst pool names them as it exits."""
        try:
            unserved = self.store.unserved()
        except StoreError:
            return
        if unserved:
            events.emit(events.UNSERVED_LEFT, jobs=", ".join(
                f"{u['count']} x {u['name']} (queue {u['queue']})" for u in unserved))

    def _leave_pools_table(self) -> None:
        try:
            self.store.forget_pool(self.owner)
        except StoreError as exc:
            log.warning("could not remove this pool from the pools table: %s", exc)

    # -- hooks and periodic jobs (R21, R33) -------------------------------------------------

    def _run_start_hooks(self) -> None:
        for hook in jobs.start_hooks():
            try:
                hook(self.store)
            except Exception:  # noqa: BLE001 - a start hook must not stop the pool
                log.exception("on_start hook %s failed", getattr(hook, "__qualname__", hook))

    def _queue_pending_hooks(self) -> None:
        if not self._with_hooks:
            return
        try:
            ids = self.store.pending_hooks(self._with_hooks)
        except StoreError as exc:
            log.warning("could not read pending on_dead hooks: %s", exc)
            return
        for job_id in ids:
            self._hook_queue.append((job_id, "", ""))

    def _run_hooks(self, now: float) -> None:
        queue, self._hook_queue = self._hook_queue, []
        for index, (job_id, _name, reason) in enumerate(queue):
            try:
                job = self.store.get(job_id) if self.store.take_hook(job_id) else None
            except JobpoolError:
                self._hook_queue.extend(queue[index:])  # the store is down: try next turn
                return
            if job is None:
                continue
            hook = self._with_hooks.get(job["name"])
            if hook is not None:
                self._hooks.start(hook, job, reason or (job["last_error"] or ""), now)

    def _enqueue_periodic(self, now: float) -> None:
        for name, schedule in self._periodic.items():
            occurrence = schedule.occurrence(now)
            if occurrence <= self._periodic_done.get(name, -math.inf):
                continue
            try:
                handle = self.store.enqueue_occurrence(name, occurrence)
            except JobpoolError as exc:
                log.debug("periodic %s not enqueued yet: %s", name, exc)
                continue
            self._periodic_done[name] = occurrence
            if handle is not None:
                events.emit(events.JOB_SCHEDULED, job_id=handle.id, name=name, occurrence=occurrence)
                self._want_claim = True

    # -- stopping (R25) and signals ----------------------------------------------------------

    def _handle_stop(self, now: float) -> None:
        if self._stop_requests and not self._stopping:
            self._stopping = True
            self._drain_until = now + self.config.drain
            self._next_heartbeat = 0.0  # tell the store (and the dashboard) at once
            events.emit(events.POOL_STOPPING, busy=self.table.busy_count(), drain=self.config.drain)
        if not self._stopping:
            return
        if self._stop_requests >= 2 or now >= self._drain_until:
            for slot in self.slots:
                if slot.job is not None and slot.killing is None:
                    self._kill(slot, "released at shutdown", core.RELEASE, now, at_once=True)

    def _install_signals(self) -> None:
        self._signal_r, self._signal_w = socket.socketpair()
        self._signal_r.setblocking(False)
        self._signal_w.setblocking(False)
        self._selector.register(self._signal_r, selectors.EVENT_READ, ("signal", None, None))
        try:
            self._old_wakeup_fd = signal.set_wakeup_fd(self._signal_w.fileno(),
                                                       warn_on_full_buffer=False)
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._old_handlers[signum] = signal.signal(signum, self._on_signal)
            self._old_handlers[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hangup)
        except ValueError:
            pass  # not the main thread: stop with request_stop()

    def _on_signal(self, signum, frame) -> None:
        # Handlers only count; the loop acts (STYLE habit 7).
        self._stop_requests += 1

    def _on_hangup(self, signum, frame) -> None:
        # R27: re-read the operators' requests (scale, stop) at once.
        self._next_heartbeat = 0.0

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
