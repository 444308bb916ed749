"""A pool's slots: one forked child each, and the job it runs.

Spawn, read the child's replies, reap it, kill it (timeout, memory, cancel,
stop), and grow or shrink the pool (R27). What a slot's job is lives here and
nowhere else: the claimed record on the slot, and its deadline in the core's
``SlotTable`` (the loop asks the table which slots are overdue).
"""
from __future__ import annotations

import logging
import math
import os
import selectors
import signal
import time
from typing import Any, Callable

from jobpool import bounds, channel, core, events, lifecycle, procinfo, proctree, protocol, tracing
from jobpool.child import child_main
from jobpool.config import PoolConfig
from jobpool.forked import Forked
from jobpool.lifecycle import Claimed, Outcome
from jobpool.store.records import ProgressReport
from jobpool.supervisor.state import Finished, PoolState


#: How often the RSS of children running memory-limited jobs is sampled, seconds.
MEMORY_SAMPLE_EVERY = 0.1

log = logging.getLogger(__name__)

#: A death the pool decided, as the metrics count it (``jobpool_child_deaths_total``):
#: a kill settled as a crash is the memory limit's unless its caller says otherwise
#: (``kill``'s ``death``: R65's child whose pipe carried no message is a crash); a
#: release is no death.
_DEATH_BY_KILL = {core.CRASH: "memory", core.TIMEOUT: "timeout", core.CANCEL: "cancel"}

#: Exit codes of a child ended by the signals that stop a pool (SIGTERM, SIGINT).
_STOP_SIGNALS = (-signal.SIGTERM, -signal.SIGINT)


class Slot:
    """One child process and what it is doing."""

    __slots__ = ("index", "proc", "conn", "pid", "job", "killing", "kill_at", "kill_kind", "kill_death",
                 "started", "progress", "stage", "progress_dirty", "retiring", "checkpointed",
                 "interrupting", "interrupt_until", "cpu_reported", "queued", "claimed_at")

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Forked | None = None    # the child process
        self.conn: Any = None    # the supervisor's end of the slot's pipe
        self.pid = 0
        self.job: Claimed | None = None   # the job it runs
        self.killing: str | None = None  # reason, once we decided to kill it
        self.kill_at = math.inf
        self.kill_kind = core.TIMEOUT
        #: How ``jobpool_child_deaths_total`` counts the kill (None: no death, a release).
        self.kill_death: str | None = None
        self.started = 0.0       # when its job went to the child
        self.progress: float | None = None
        self.stage: str | None = None
        self.progress_dirty = False
        self.retiring = False
        self.checkpointed = False   # R37: its job saved a state in this attempt
        self.interrupting: str | None = None   # R37: asked to stop at a save point: why
        self.interrupt_until = math.inf        # a cancel's kill follows if none came by then
        #: CPU seconds its child's finished attempts reported: what the kernel's total
        #: for the child (at its exit) held before the attempt it died in.
        self.cpu_reported = 0.0
        #: R63: the rows of its chunk that run after its job in its child, in order
        #: (claimed, not started: none of them runs until its turn).
        self.queued: list[Claimed] | tuple[()] = ()
        #: When its job was claimed: ``started`` for a job of its own; for a row of a
        #: chunk (R63), when the chunk's first row went to the child (its claim).
        self.claimed_at = 0.0

    def runs(self, job_id: int, attempt: int) -> bool:
        """Whether this slot's child runs that very attempt now."""
        job = self.job
        return job is not None and job.job_id == job_id and job.attempt == attempt


class Slots:
    """The children of one pool and what each runs."""

    def __init__(self, config: PoolConfig, state: PoolState, selector: selectors.BaseSelector,
                 *, memory_limits: dict[str, int],
                 other_children: Callable[[], set[int]],
                 write_final_progress: Callable[[list[ProgressReport]], None],
                 answer_request: Callable[[tuple], tuple]) -> None:
        """``other_children``: the pool's processes that are not slot children (never
        strays, R40); ``write_final_progress``: where a failed attempt's last
        report goes before its settle (R22); ``answer_request``: carries out a
        running job's request (an add to its batch, R34; its state, R37) and makes
        the answer its child waits for."""
        self.config = config
        self.state = state
        self.selector = selector
        self.memory_limits = memory_limits
        self.other_children = other_children
        self.write_final_progress = write_final_progress
        self.answer_request = answer_request
        #: How many children this pool runs now: ``--procs`` until a scale says more
        #: or fewer (R27).
        self.procs = config.procs
        self.table = core.SlotTable(config.procs)
        #: R68: whether the children send a plain success as a frame (the supervisor
        #: decides, once it knows whether the pump may serve the pool); else as the
        #: outcome message.
        self.frames = False
        self.all = [Slot(i) for i in range(config.procs)]
        #: The last scale request past this pool's bound, as ``pools`` shows it (R41).
        self.scale_refused: str | None = None
        self._next_memory_sample = 0.0

    # -- children -----------------------------------------------------------------------

    def spawn(self, slot: Slot) -> None:
        parent_conn, child_conn = channel.pair()
        # R43: the child keeps its own ends of its pipes and its standard streams only.
        proc = Forked.start(child_main, child_conn, os.getpid(),
                            self.config.max_tasks_per_child,
                            (self.config.max_memory_per_child or 0) * 2**20,
                            self.frames, keep=child_conn.descriptors())
        child_conn.close()
        slot.proc, slot.conn, slot.pid = proc, parent_conn, proc.pid
        slot.killing, slot.kill_at = None, math.inf
        slot.cpu_reported = 0.0
        slot.retiring = False
        slot.checkpointed, slot.interrupting, slot.interrupt_until = False, None, math.inf
        self.selector.register(parent_conn.fileno(), selectors.EVENT_READ, ("conn", slot, parent_conn))
        self.selector.register(proc.sentinel, selectors.EVENT_READ, ("exit", slot, proc))
        self.state.want_claim = True

    def spawn_all(self) -> None:
        for slot in self.all:
            self.spawn(slot)

    def read(self, slot: Slot, now: float, *, drain: bool = False) -> None:
        """Read one message (the selector said the pipe is readable), or all of them.

        One read per readiness event: the selector is level-triggered, so a second
        queued message shows up on the next turn, and ``Connection.poll`` (which
        builds a selector per call) stays off the hot path.
        """
        conn = slot.conn
        try:
            while True:
                self.handle(slot, protocol.decode(conn.recv_bytes()), now)
                if not drain or not procinfo.readable(conn.fileno()):
                    break
        except ValueError as exc:  # R65: no message (a length, a stall, its bytes)
            self.no_message(slot, conn, str(exc), now)
        except (EOFError, OSError):
            self.pipe_lost(slot, conn)

    def pipe_lost(self, slot: Slot, conn: Any) -> None:
        """The child's pipe ended (it exited, or died mid-message): its exit sentinel
        settles the job."""
        self.selector.unregister(conn.fileno())
        slot.conn = None
        conn.close()

    def no_message(self, slot: Slot, conn: Any, why: str, now: float) -> None:
        """What came down the child's pipe was no message (R65: a job that wrote onto
        its pipe, a message that stalled): the pipe is lost and can carry no job or
        outcome again, so the child is killed now, and its job settles as a crash that
        says why (it was left to run to its timeout, holding its slot)."""
        self.pipe_lost(slot, conn)
        if slot.proc is not None and slot.killing is None:
            what = f"job {slot.job.job_id} ({slot.job.name})" if slot.job else "no job"
            log.warning("slot %d (child %d, %s): its pipe carried no message (%s); killing "
                        "the child", slot.index, slot.pid, what, why)
            self.kill(slot, f"its pipe to the pool carried no message: {why}", core.CRASH, now,
                      at_once=True, death="crash")

    def handle(self, slot: Slot, message: tuple, now: float) -> None:
        """Act on one message of the slot's child: an outcome, a progress report or a
        request (answered at once). Raises what ``read`` takes for a lost pipe."""
        if message[0] == protocol.OUTCOME:
            self._outcome(slot, message, now)
        elif message[0] == protocol.PROGRESS:
            self._progress(slot, message)
        elif message[0] in protocol.REQUESTS:
            self._request(slot, slot.conn, message)

    def finish_plain(self, slot: Slot, message: tuple, now: float) -> bool:
        """The pump's common case (``supervisor/pump.py``): ``_outcome`` and ``_finish``
        for an outcome that needs none of their other branches, done here with none of
        them; False, with nothing done, for any other message or slot (the caller
        hands it to ``handle``). Plain: an outcome of the attempt the slot runs, not an
        interrupt's, with no strays and no recycling, from a slot with no chunk, no
        progress, no saved state, no cancel or stop asked, inside ``--procs``. The
        parity test (tests/test_pump.py) holds the two roads to the same settles."""
        if message[0] != protocol.OUTCOME or len(message) != 11:
            return False
        (_tag, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s, retiring,
         strays) = message
        if retiring or strays or kind == core.INTERRUPTED:
            return False
        return self._finish_plain(slot, job_id, attempt, kind, bounds.attempt_error(error), delay, result,
                                  peak_rss, cpu_s, now)

    def finish_success(self, slot: Slot, fields: tuple, now: float) -> bool:
        """``finish_plain`` for a success frame's fields (R68, ``protocol.SUCCESS``),
        with no message tuple built; False, with nothing done, as there."""
        job_id, attempt, peak_rss, cpu_s, retiring = fields
        if retiring:
            return False
        return self._finish_plain(slot, job_id, attempt, core.DONE, None, None, None,
                                  peak_rss, cpu_s, now)

    def _finish_plain(self, slot: Slot, job_id: int, attempt: int, kind: int,
                      error: str | None, delay: float | None, result: Any, peak_rss: Any,
                      cpu_s: Any, now: float) -> bool:
        job = slot.job
        if (job is None or not slot.runs(job_id, attempt)
                or slot.interrupting is not None or slot.killing is not None
                or slot.progress is not None
                or slot.stage is not None or slot.checkpointed or slot.queued
                or slot.index >= self.procs):
            return False
        if isinstance(cpu_s, (int, float)):
            slot.cpu_reported += cpu_s
        state = self.state
        state.pending.append(Finished(
            Outcome(job_id, attempt, kind, error, delay, result, slot.pid, "0", peak_rss, cpu_s,
                    None),
            round(now - slot.started, 6), job.queue))
        slot.job = None
        self.table.clear(slot.index)
        state.want_claim = True
        return True

    def _outcome(self, slot: Slot, message: tuple, now: float) -> None:
        (_tag, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s, retiring,
         strays) = message
        job = slot.job
        if job is None or not slot.runs(job_id, attempt):
            return  # a reply for a job this slot no longer holds (it was killed)
        error = bounds.attempt_error(error)
        if kind == core.INTERRUPTED:
            kind, error = self._interrupted(slot, error)
        if isinstance(cpu_s, (int, float)):
            slot.cpu_reported += cpu_s
        if retiring:
            slot.retiring = True  # it exits now; its exit sentinel brings a fresh child
        self._finish(slot, Outcome(job_id, attempt, kind, error, delay, result, slot.pid, "0",
                                   peak_rss, cpu_s, strays or None), now)
        if strays:
            self.state.strays_killed(strays, job_id, job.name, attempt)

    @staticmethod
    def _interrupted(slot: Slot, error: str | None) -> tuple[int, str | None]:
        """R37: a job that stopped at a save point, as the pool asked (a cancel's is
        made "cancelled" by ``_finish``, as any end of a cancelled attempt). Unasked,
        the job raised ``Interrupted`` itself: an ordinary error."""
        if slot.interrupting is None:
            return core.ERROR, "Interrupted raised by the job itself, with no stop or cancel asked"
        return core.INTERRUPTED, error

    def _progress(self, slot: Slot, message: tuple) -> None:
        _tag, job_id, attempt, percent, stage = message
        if slot.runs(job_id, attempt):
            slot.progress, slot.progress_dirty = percent, True
            slot.stage = bounds.stage_text(stage)

    def _request(self, slot: Slot, conn: Any, message: tuple) -> None:
        """A running job's request: its child waits for the answer, and its settle
        comes after it on the pipe, so what it asked is written before it ends."""
        tag, job_id, attempt, seq = message[:4]
        if not slot.runs(job_id, attempt):
            answer = (job_id, attempt, seq, None, protocol.LEASE_LOST,
                      f"job {job_id} is no longer run by this slot")
        else:
            answer = self.answer_request(message)
            if tag == protocol.SAVE_STATE and answer[4] is None:
                slot.checkpointed = True  # R37: from now on a stop gives its attempt back
        conn.send_bytes(protocol.reply_message(*answer))

    def _finish(self, slot: Slot, outcome: Outcome, now: float) -> None:
        """The slot's attempt ended: queue its settle and free the slot."""
        assert slot.job is not None
        if slot.interrupting == "cancel" and outcome.kind != core.CANCEL:
            # R31 with R37: asked to cancel, however the attempt ended after that
            # (stopped at a save point, returned, crashed, timed out, released).
            outcome = outcome._replace(kind=core.CANCEL, error=lifecycle.CANCELLED)
        self.state.pending.append(Finished(outcome, round(now - slot.started, 6), slot.job.queue))
        if slot.progress_dirty:
            # The last report before a failure stays with the error (R22).
            self.write_final_progress(progress_reports([slot]))
        slot.job = None
        slot.progress, slot.stage, slot.progress_dirty = None, None, False
        slot.checkpointed, slot.interrupting, slot.interrupt_until = False, None, math.inf
        self.table.clear(slot.index)
        self.state.want_claim = True
        if slot.index >= self.procs:
            self._retire(slot)
        if slot.queued:
            self._next_in_chunk(slot, now)

    def _next_in_chunk(self, slot: Slot, now: float) -> None:
        """R63: the next row of the slot's chunk starts in the same child, at once. A
        row past its deadline when its turn comes is dead without running (R10). A
        chunk that ends early (its child going: crashed, killed, recycled; the pool
        stopping or shrinking) gives back every row that has not started."""
        if (slot.conn is None or slot.killing is not None or slot.retiring
                or self.state.stopping or self._out_of_touch()):
            self.give_back(slot, out_of_touch=self._out_of_touch())
            return
        queued = slot.queued
        while queued:
            job = queued.pop(0)  # type: ignore[union-attr]
            retired = lifecycle.retired_at_its_turn(job.job_id, job.attempt, job.deadline, now)
            if retired is not None:
                self.state.pending.append(Finished(retired, 0.0, job.queue))
                continue
            self.dispatch(slot, job, now, in_chunk=True)
            return
        slot.queued = ()

    def undelivered(self, slot: Slot, now: float) -> None:
        """The slot's job found no reader on its child's pipe: the child is gone (killed
        from outside after its last answer) and the job never reached it. It did not
        start, so it goes back in line with the attempt its claim spent (R63), not
        settled as the crash of a child that never ran it (R19); so does the rest of
        a chunk. The child (killed, should it live on without its pipe) is replaced
        when its exit shows."""
        assert slot.job is not None
        slot.retiring = True  # nothing more goes to it
        _signal(slot, signal.SIGKILL)
        self._finish(slot, Outcome(slot.job.job_id, slot.job.attempt, lifecycle.UNSTARTED,
                                   lifecycle.NOT_DELIVERED), now)

    def _out_of_touch(self) -> bool:
        """R9, R24b, R63: the store has failed this pool (a turn or a beat) and none of
        its heartbeats has reached it for half of ``dead_after``, so another pool may
        judge it dead and take back the rows waiting in its chunks: it starts none of
        them (cut off from the store, a pool went on through a chunk whose rows another
        pool was running too). On the monotonic clock: a wall clock stepped back during
        the outage would have hidden it."""
        state = self.state
        return (state.store_trouble and state.beaten_at is not None
                and time.monotonic() - state.beaten_at > self.config.dead_after / 2)

    def give_back(self, slot: Slot, *, out_of_touch: bool = False) -> None:
        """R63: the rows of the slot's chunk that have not started go back in line where
        they were, the attempts their claim spent given back."""
        if self.state.stopping:
            why = "the pool is stopping"
        elif slot.killing is not None:
            why = slot.killing.partition("\n")[0]
        elif out_of_touch:
            why = "the pool has not reached the store for half of --dead-after"
        else:
            why = "its child exited"
        reason = lifecycle.chunk_ended_early(why)
        for job in slot.queued:
            self.state.pending.append(Finished(
                Outcome(job.job_id, job.attempt, lifecycle.UNSTARTED, reason), 0.0, job.queue))
        slot.queued = ()

    def exited(self, slot: Slot, now: float) -> None:
        """The slot's child exited: settle its job as what killed it, and refill the slot."""
        # Nothing more goes to it: the rest of a chunk (R63) is given back, not sent.
        slot.retiring = True
        if slot.conn is not None:
            if procinfo.readable(slot.conn.fileno()):
                self.read(slot, now, drain=True)  # an outcome sent just before exiting counts
        proc = slot.proc
        assert proc is not None  # the selector reports exits only of a slot's own child
        self.selector.unregister(proc.sentinel)
        # wait4 gives the child's resource usage for the forensics (R19a).
        reaped = proc.reap()
        assert reaped is not None  # its sentinel said it exited
        code, usage = reaped
        proc.close()
        if slot.conn is not None:
            self.selector.unregister(slot.conn.fileno())
            slot.conn.close()
            slot.conn = None
        cause = procinfo.exit_cause(code)
        job = slot.job
        # R40: a child killed mid-job (timeout, crash, cancel, stop) leaves what its job
        # started reparented to us, a subreaper: kill it with the attempt.
        strays = proctree.kill_strays(exclude=self.known_children(), count_ended=True)
        if strays:
            self.state.strays_killed(strays, job.job_id if job else None,
                                     job.name if job else None, job.attempt if job else None)
        state = self.state
        if job is not None:
            death: str | None = "crash"
            if slot.killing is not None:
                kind, error = slot.kill_kind, slot.killing
                death = slot.kill_death
                if kind == core.CRASH:
                    state.counters["crashes"] += 1
            elif state.stop_requests and code in _STOP_SIGNALS:
                # The stop signal reached the whole process group (systemd stops a
                # unit's cgroup so): the child did not crash, the pool is stopping (R25);
                # a job that saved a state gets its attempt back (R37).
                kind = core.INTERRUPTED if slot.checkpointed else core.RELEASE
                error, death = f"released at shutdown ({cause})", None
            else:
                kind, error = core.CRASH, cause
                state.counters["crashes"] += 1
            if kind not in (core.RELEASE, core.INTERRUPTED):
                # A child the pool itself ended to give its job back (R25) did not die:
                # ``job_released`` says what happened, with why.
                events.emit(events.CHILD_DIED, slot=slot.index, pid=slot.pid,
                            job_id=job.job_id, name=job.name, attempt=job.attempt, cause=cause)
            if death is not None and state.metrics is not None:
                state.metrics.child_died(death)
            peak = usage.ru_maxrss * 1024 if usage else None
            # The kernel's CPU total is the child's lifetime (and its reaped processes'):
            # less what its earlier attempts reported, the attempt it died in.
            cpu = max(0.0, usage.ru_utime + usage.ru_stime - slot.cpu_reported) \
                if usage else None
            self._finish(slot, Outcome(job.job_id, job.attempt, kind, error, None, None, slot.pid,
                                       procinfo.exit_status_text(code), peak, cpu,
                                       strays or None), now)
        elif slot.killing is None and not state.stop_requests:
            events.emit(events.CHILD_RECYCLED, slot=slot.index, pid=slot.pid, cause=cause)
        slot.proc = None
        if slot.index < self.procs and not state.stopping and not state.stop_requests:
            self.spawn(slot)
        else:
            self._trim()

    def known_children(self) -> frozenset[int]:
        """Every child of the pool (slot children and the rest): never strays."""
        pids = {slot.pid for slot in self.all if slot.proc is not None}
        return frozenset(pids | self.other_children())

    def dispatch(self, slot: Slot, job: Claimed, now: float,
                 rest: list[Claimed] | None = None, in_chunk: bool = False) -> None:
        """Give a claimed job to the slot's idle child; ``rest``: the rows of its chunk,
        run after it in the same child (R63); ``in_chunk``: the job is the next row of
        the chunk the slot runs (claimed with its first row, not now)."""
        if rest:
            slot.queued = rest
        if not in_chunk:
            slot.claimed_at = now
        state = self.state
        state.rollups.claimed(job.name, now - job.run_at)
        if state.metrics is not None:
            state.metrics.claimed(job.name, job.queue, now - job.run_at)
        self.table.assign(slot.index, job.job_id, job.attempt, now + job.timeout)
        slot.job = job
        slot.started = now
        slot.checkpointed, slot.interrupting, slot.interrupt_until = False, None, math.inf
        self.state.counters["claimed"] += 1
        events.emit(events.JOB_CLAIMED, job_id=job.job_id, name=job.name, attempt=job.attempt,
                    slot=slot.index, pid=slot.pid)
        try:
            core.write_message(slot.conn, protocol.job_message(
                job.job_id, job.attempt, job.name, job.payload, job.serializer, job.queue,
                job.batch, job.meta))
        except OSError:
            self.undelivered(slot, now)
            return
        if job.meta is not None and tracing.carries_context(job.meta):
            # R57: the first traced job loads OpenTelemetry here too (its child loads it
            # itself), so the children forked from now on inherit it.
            tracing.active()

    def free(self) -> list[Slot]:
        """Slots whose child is idle and may take a job now."""
        procs = self.procs
        slots = self.all
        return [slots[i] for i in self.table.free_slots()
                if i < procs and slots[i].proc is not None and slots[i].conn is not None
                and slots[i].killing is None and not slots[i].retiring]

    def busy_count(self) -> int:
        return self.table.busy_count()

    def next_deadline(self, now: float) -> float:
        """The earliest time a slot needs the loop: a hard timeout, a SIGKILL after
        the grace, or the next memory sample."""
        deadline = self.table.next_deadline()
        for slot in self.all:
            if slot.killing is not None:
                deadline = min(deadline, slot.kill_at)
                continue
            if slot.job is None:
                continue
            if slot.job.name in self.memory_limits:
                deadline = min(deadline, self._next_memory_sample)
            deadline = min(deadline, slot.interrupt_until)
        return deadline

    # -- killing (R19, R20, R25, R31) ----------------------------------------------------

    def check_memory(self, now: float) -> None:
        """Kill a child whose RSS passed its job's memory limit; a crash (R19)."""
        if not self.memory_limits or now < self._next_memory_sample:
            return
        self._next_memory_sample = now + MEMORY_SAMPLE_EVERY
        for slot in self.all:
            job = slot.job
            if job is None or slot.killing is not None or slot.proc is None:
                continue
            limit = self.memory_limits.get(job.name)
            if not limit:
                continue
            rss = procinfo.rss_bytes(slot.pid)
            if rss is not None and rss > limit * 2**20:
                self.kill(slot, f"child killed: memory limit {limit} MiB exceeded "
                                f"(RSS {rss / 2**20:.0f} MiB)", core.CRASH, now, at_once=True)

    def kill_overdue(self, now: float) -> None:
        for index in self.table.overdue(now):
            slot = self.all[index]
            if slot.killing is None and slot.job is not None:
                self.kill(slot, f"timed out after {slot.job.timeout:g} s", core.TIMEOUT, now)
        for slot in self.all:
            if slot.killing is not None and slot.proc is not None and now >= slot.kill_at:
                _signal(slot, signal.SIGKILL)
                slot.kill_at = now + 1.0
            elif slot.killing is None and slot.job is not None and now >= slot.interrupt_until:
                # R37: no save point came within the grace: the cancel kills it.
                self.kill(slot, lifecycle.CANCELLED, core.CANCEL, now, at_once=True)

    def kill(self, slot: Slot, reason: str, kind: int, now: float, *, at_once: bool = False,
             death: str | None = None) -> None:
        """SIGTERM now and SIGKILL after the grace (R20), or SIGKILL at once. ``death``:
        how the metrics count it, when not by ``kind``."""
        slot.killing, slot.kill_kind = reason, kind
        slot.kill_death = death or _DEATH_BY_KILL.get(kind)
        if at_once:
            _signal(slot, signal.SIGKILL)
            slot.kill_at = now + 1.0
        else:
            _signal(slot, signal.SIGTERM)
            slot.kill_at = now + self.config.kill_grace
        self.table.extend_deadline(slot.index, math.inf)

    def cancel(self, job_id: int, attempt: int, reason: str, now: float) -> None:
        """R31: kill the child running that attempt, if this pool runs it; a job that
        saves its state is asked to stop at its next save point first (R37), and
        killed if none comes within the kill grace."""
        for slot in self.all:
            for job in slot.queued:
                if job.job_id == job_id and job.attempt == attempt:
                    # R63: a row of a chunk that has not started: dead, nothing to kill.
                    slot.queued.remove(job)  # type: ignore[union-attr]
                    self.state.pending.append(Finished(
                        Outcome(job_id, attempt, core.CANCEL, reason), 0.0, job.queue))
                    return
            if not slot.runs(job_id, attempt) or slot.killing is not None:
                continue
            if slot.checkpointed and slot.interrupting != "cancel":
                self._interrupt(slot, "cancel")
                slot.interrupt_until = now + self.config.kill_grace
            elif slot.interrupting != "cancel":
                self.kill(slot, reason, core.CANCEL, now, at_once=True)

    def interrupt_all(self) -> None:
        """R25 with R37: a graceful stop asks every running job to stop at its next
        save point (a job that never saves one runs on, for the drain)."""
        for slot in self.all:
            if slot.queued:
                self.give_back(slot)  # R63: the rest of a chunk never starts
            if slot.job is not None and slot.killing is None and slot.interrupting is None:
                self._interrupt(slot, "stop")

    def _interrupt(self, slot: Slot, reason: str) -> None:
        assert slot.job is not None
        slot.interrupting = reason
        try:
            slot.conn.send_bytes(protocol.interrupt_message(slot.job.job_id, slot.job.attempt,
                                                            reason))
        except (OSError, AttributeError):
            pass  # the child just died (or its pipe closed): its exit settles the job

    def release_all(self, now: float, reason: str = "released at shutdown") -> int:
        """R25: the drain is over (or a second stop came): give every running job back
        (R24b: or its leases are no longer this pool's); one that saved a state gets
        its attempt back too (R37). How many were running."""
        killed = 0
        for slot in self.all:
            if slot.job is not None and slot.killing is None:
                kind = core.INTERRUPTED if slot.checkpointed else core.RELEASE
                self.kill(slot, reason, kind, now, at_once=True)
                killed += 1
        return killed

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
            while len(self.all) < procs:
                self.all.append(Slot(len(self.all)))
            for slot in self.all[old:procs]:
                if slot.proc is None and not self.state.stopping:
                    self.spawn(slot)
            return
        for slot in self.all[procs:]:
            if slot.job is None:
                self._retire(slot)

    def _retire(self, slot: Slot) -> None:
        """Close an idle child of a slot past --procs; its exit trims the slot away."""
        if slot.conn is not None:
            self.selector.unregister(slot.conn.fileno())
            slot.conn.close()  # the idle child reads EOF and exits
            slot.conn = None
        if slot.proc is None:
            self._trim()

    def _trim(self) -> None:
        while (len(self.all) > self.procs and self.all[-1].proc is None
               and self.all[-1].job is None):
            self.all.pop()
        self.table.resize(len(self.all))

    def shutdown(self, deadline: float, monotonic: Callable[[], float]) -> None:
        """Stop every child (idle ones read EOF and return) by ``deadline`` on the
        ``monotonic`` clock, then kill what they left behind (R40)."""
        for slot in self.all:
            if slot.conn is not None:
                slot.conn.close()
                slot.conn = None
        for slot in self.all:
            proc = slot.proc
            if proc is None:
                continue
            self.selector.unregister(proc.sentinel)
            proc.stop(max(0.0, deadline - monotonic()))
            slot.proc = None
        strays = proctree.kill_strays(exclude=self.known_children(), count_ended=True)
        if strays:
            self.state.strays_killed(strays, None, None, None)

    # -- what the heartbeat reports (R22, R29) -------------------------------------------------

    def views(self) -> list[dict]:
        """Each slot as the dashboard shows it."""
        views = []
        for slot in self.all[: self.procs]:
            job = slot.job
            views.append({"slot": slot.index, "pid": slot.pid if slot.proc else None,
                          "job_id": job.job_id if job else None, "name": job.name if job else None,
                          "attempt": job.attempt if job else None,
                          "started": slot.started if job else None,
                          # R63: how long a chunk's row waited behind the rows before
                          # it, so a dashboard counts its time from its own start.
                          "waited": round(slot.started - slot.claimed_at, 3) if job else None,
                          "timeout": job.timeout if job else None,
                          "progress": slot.progress, "stage": slot.stage,
                          "rss": procinfo.rss_bytes(slot.pid) if slot.proc else None,
                          # R63: its chunk's rows waiting behind its job, in order.
                          "waiting": [queued.job_id for queued in slot.queued]})
        return views

    def unreported_progress(self) -> list[Slot]:
        return [s for s in self.all if s.progress_dirty and s.job is not None]


def progress_reports(slots: list[Slot]) -> list[ProgressReport]:
    """The progress the slots' jobs reported since it was last written."""
    return [ProgressReport(job_id=slot.job.job_id, attempt=slot.job.attempt,
                           percent=slot.progress, stage=slot.stage)
            for slot in slots if slot.job is not None]


def _signal(slot: Slot, signum: int) -> None:
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
