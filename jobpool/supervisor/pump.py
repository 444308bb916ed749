"""The pump: the supervisor's steady-state loop for plain jobs, taken out of the
general loop (``loop.py``; DESIGN section 12, R68).

While the pool only runs plain jobs, each iteration of the general loop still asks,
per job, everything the other features need: the stop, the timeouts, the memory
samples, the poll, R36's tokens, R11c's second look, the heartbeat, the periodic
jobs, the hooks, the status line, the metrics, a turn in flight (R66). The pump does
only what a plain job's end needs: it waits on the slots' pipes, takes each outcome
that needs none of the general branches (``Slots.finish_plain``), runs the turn through
the engine (settle what finished and claim for the free slots only, R6, in one
transaction; with ``--coalesce-us`` held, as the general loop holds it, while other
children run, R6a), reports the settles and dispatches what was claimed. Reporting a
turn whose settles are all successes skips what only other ends need (the general
``_report`` serves any other turn).

It hands the pool back to the general loop (``run`` returns) whenever anything else
needs serving: the earliest time the general loop waits for (a heartbeat, the poll
and R23's reclaim, a hard timeout R20, the status line: ``until``), any descriptor
other than a slot's pipe (a child's exit, a wake-up, a signal), a message that is not
a plain outcome (progress, a request, an interrupt's end: handled first, as the
general loop would; a plain success comes as R68's frame, read without building
its message), a store error (R26: the outcomes wait again, first in line, and
the general loop's pause applies), a claim that found no row,
or a turn after which the pool is no longer plain (a hook queued by a dead job).

When it may run at all is the supervisor's to say (``Supervisor._pump_may_run``),
and ``off_because`` names what keeps it off in a pool: turned off (``--no-pump``,
``JOBPOOL_PUMP=0``), a store whose turns go out in flight (PostgreSQL, R66: the pump
is SQLite-only for now), ``--max-jobs`` or memory limits. With
``--metrics`` it runs, and every turn is reported by the general ``_report`` (the
series count each settle by its queue); a metrics client's socket is a descriptor
the general loop serves.

Where the core is built, the pool runs this class compiled (``_core.Pump``, in
``_pump.pxi``; ``make`` chooses): the same constructor, answers and effects, with the
wait on the selector's epoll set, the read of a success frame, its outcome put in line,
the report of an all-success turn and the dispatch done in C, and every other branch
calling the same Python this class calls. This class is its specification, and serves
``JOBPOOL_PURE=1``.

The general loop stays the reference: tests/test_pump.py runs one scripted workload
through the general loop, this pump and the compiled one, and compares the rows, the
attempt lines, the counters, the events, the rollups and the metrics' counts.
"""
from __future__ import annotations

import logging
import os
import selectors
import time
from typing import Any, Callable

from jobpool import core, events, protocol
from jobpool.config import PoolConfig
from jobpool.lifecycle import Settled
from jobpool.queueplan import QueuePlan
from jobpool.supervisor.slots import Slots
from jobpool.supervisor.state import Finished, PoolState


def off_because(config: PoolConfig, claimer: Any, slots: Slots) -> str | None:
    """Why the pump never runs in this pool, or None when it may (see the module
    docstring): what needs the general loop at every job, for the pool's life."""
    if not config.pump:
        return "turned off"
    if not claimer.turns_whole:
        return "its store's turns go out in flight (R66)"
    if config.max_jobs is not None:
        return "--max-jobs"
    if slots.memory_limits:
        return "memory limits"
    return None


def make(state: PoolState, slots: Slots, claimer: Any, plan: QueuePlan,
         selector: selectors.BaseSelector, **roads: Any) -> Any:
    """The pool's pump: ``Pump`` compiled (``_core.Pump``, ``_pump.pxi``) where the core
    is built and the pool waits on an epoll set (which the compiled pump waits on
    itself), else ``Pump`` (``JOBPOOL_PURE=1``, the reference). Both take the same
    objects and leave the same state."""
    if core.NAME == "compiled" and isinstance(selector, selectors.EpollSelector):
        from jobpool import _core
        if isinstance(slots.table, _core.SlotTable):
            return _core.Pump(state, slots, claimer, plan, selector, **roads)
    return Pump(state, slots, claimer, plan, selector, **roads)


class Pump:
    """Serves the plain jobs of one pool between two iterations of its general loop."""

    def __init__(self, state: PoolState, slots: Slots, claimer: Any, plan: QueuePlan,
                 selector: selectors.BaseSelector, *, clock: Callable[[], float], rng: Any,
                 store_call: Callable[..., Any], report: Callable[..., None],
                 may_run: Callable[[float], bool], spin: float = 0.0,
                 window: float = 0.0) -> None:
        """``store_call``: the supervisor's road to the claimer (R26's pause and events);
        ``report``: its report of settles (R29a, R30); ``may_run``: whether nothing but
        plain jobs needs the loop now; ``spin``: how long a wait looks for an outcome
        before it sleeps (``--spin-us``, see ``_wait``); ``window``: how long a turn
        waits for the outcomes of children still running (``--coalesce-us``, R6a;
        ``PoolState.holding`` says when)."""
        self._state = state
        self._slots = slots
        self._claimer = claimer
        self._plan = plan
        self._selector = selector
        self._clock = clock
        self._rng = rng
        self._store_call = store_call
        self._report = report
        self._may_run = may_run
        #: How many turns the pump has run (the parity test asks that it ran).
        self.turns = 0
        #: How long a wait looks for something ready before it sleeps (``--spin-us``;
        #: the pool passes its own, ``PoolConfig.spin``; 0: never).
        self.spin = spin
        #: ``--coalesce-us`` in seconds (0: no turn is held).
        self.window = window
        #: Whether the next wait looks first: until a wait's looks find nothing, and
        #: again once a wait is answered within ``spin`` of its start.
        self.look_first = True
        #: Waits whose looks found something ready (an outcome, or anything else the
        #: pump hands back), and waits whose looks found nothing (they then slept).
        self.looks_answered = 0
        self.looks_missed = 0

    def _wait(self, timeout: float) -> list:
        """The selector's answer within ``timeout`` seconds (R68's amendment): while
        waits are answered within ``spin`` of their start, a wait first looks without
        sleeping, giving the core to whatever else is ready between two looks, for up to
        ``spin`` (or the wait, if shorter). A child's reply then finds the supervisor
        awake, and neither side pays for waking the other (on a virtual machine, a trip
        through the hypervisor), which costs more than the looks. A wait whose looks
        find nothing stops them until a wait is answered that soon again, counted from
        the wait's own start, so a pool whose jobs take longer than the window looks once
        and then sleeps at once."""
        select = self._selector.select
        spin = self.spin
        if spin <= 0 or timeout <= 0:
            return select(timeout)
        clock = time.monotonic  # not the pool's clock, which a test may shift or set
        started = clock()
        if self.look_first:
            end = started + min(spin, timeout)
            while True:
                ready = select(0)
                if ready:
                    self.looks_answered += 1
                    return ready
                now = clock()
                if now >= end:
                    break
                os.sched_yield()
            self.looks_missed += 1
            self.look_first = False
            timeout = max(0.0, timeout - (now - started))
        ready = select(timeout)
        if ready and clock() - started <= spin:
            self.look_first = True
        return ready

    def run(self, until: float) -> bool:
        """Serve plain jobs until something else needs the general loop, at the latest
        at ``until``. Returns True when the last claim found nothing (for ``--burst``)."""
        state = self._state
        slots = self._slots
        clock = self._clock
        wait = self._wait
        finish_plain = slots.finish_plain
        finish_success = slots.finish_success
        read_message = core.read_message  # in C when the core is built (R68)
        message_of = protocol.message_of
        # Events cost their arguments only when somebody listens (R30): asked once.
        loud = events.logger.isEnabledFor(logging.INFO)
        next_deadline = slots.table.next_deadline
        window = self.window
        while True:
            now = clock()
            if now >= until:
                return False
            if (state.pending or state.want_claim) and not (
                    window and state.holding(now, window, slots.busy_count(), slots.procs)):
                claimed_none = self._turn(now, loud)
                if claimed_none is None:
                    return False  # R26: the general loop pauses
                if claimed_none:
                    return True
                if not self._may_run(now):
                    return False
                # R20: a job running (one just dispatched among them) times out first
                until = min(until, next_deadline())
            if not (state.pending or slots.busy_count()):
                return False  # idle: the general loop waits for what comes
            # R6a: a held turn runs when its window ends, if nothing comes before.
            due = until if state.hold_until is None else min(until, state.hold_until)
            ready = wait(max(0.0, due - now))
            if not ready:
                if due < until:
                    continue  # the held turn's window ended: it runs now
                return False  # a timer is due
            now = clock()
            leave = False
            for key, _mask in ready:
                kind, slot, owner = key.data
                if kind != "conn" or slot.conn is not owner:
                    # The general loop serves it: the selector reports it again there.
                    return False
                try:
                    got = read_message(owner)
                    if isinstance(got, bytes):
                        message = message_of(got)
                        if not finish_plain(slot, message, now):
                            slots.handle(slot, message, now)
                            leave = True
                    elif not finish_success(slot, got, now):  # R68: a success frame's
                        slots.handle(slot, protocol.success_message(got), now)  # fields
                        leave = True
                except ValueError as exc:
                    slots.no_message(slot, owner, str(exc), now)  # R65
                    leave = True
                except (EOFError, OSError):
                    slots.pipe_lost(slot, owner)
                    leave = True
            if leave:
                return False

    def _turn(self, now: float, loud: bool) -> bool | None:
        """Settle what finished and claim for the free slots, in one transaction (R6):
        whether a claim was made and found nothing, or None when the store failed
        (R26: the outcomes wait again, first in line)."""
        state = self._state
        free = self._slots.free() if state.want_claim else []
        want = len(free)
        pending = state.pending
        if not pending and not want:
            return False
        got = self._store_call(self._claimer.turn, now, [f.outcome for f in pending], want,
                               now, self._rng, self._plan.shares(want) if want else None,
                               settles=True)
        if got is None:
            if pending:
                state.counters["settle_failures"] += 1
            return None
        self.turns += 1
        state.pending = []
        settled, claimed, expired = got
        if settled:
            self._report_settled(settled, pending, loud)
        if expired:
            self._report(expired)
        dispatch = self._slots.dispatch
        for slot, job in zip(free, claimed):
            dispatch(slot, job, now)
        if not want:
            return False
        state.want_claim = len(claimed) + len(expired) >= want
        return not claimed and not expired

    def _report_settled(self, settled: list[Settled], pending: list[Finished],
                        loud: bool) -> None:
        """Count and log a turn's settles as the general loop's ``_report`` does; a turn
        whose settles are all successes of the attempts sent, in order, in a pool with
        no metrics, needs only its counter, its rollup (R56) and, when somebody
        listens, its event."""
        if self._state.metrics is not None or len(settled) != len(pending) or any(
                row[3] != "done" or row[0] != ran.outcome.job_id
                for row, ran in zip(settled, pending)):
            self._report(settled, {(f.outcome.job_id, f.outcome.attempt): f for f in pending})
            return
        rollups = self._state.rollups
        for (job_id, name, attempt, _status, _reason), ran in zip(settled, pending):
            rollups.settled(name, "done", ran.duration)
            if loud:
                events.emit(events.JOB_COMPLETED, job_id=job_id, name=name, attempt=attempt,
                            duration=ran.duration)
        self._state.counters["completed"] += len(settled)
