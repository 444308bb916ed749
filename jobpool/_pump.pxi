# The supervisor's pump (R68), compiled: included by ``_core.pyx``.
#
# ``supervisor/pump.py``'s ``Pump`` is the specification; this is its accelerator, the
# one twin the project allows (STYLE habit 2), built for the same pools and handed
# the same objects: the pool's state, slots, claimer, queue plan and selector. It
# keeps no state of its own beyond its turn count: what a slot runs stays on the
# ``Slot`` and in the ``SlotTable``, the outcomes waiting for their settle stay in
# ``PoolState.pending``, so the general loop finds everything where the Python pump
# leaves it, whichever pump ran. What is compiled is the road of a plain job's end
# and its successor's start: the wait (``epoll_wait`` on the selector's own epoll
# set, without the selector's key objects), the read of the child's success frame,
# the outcome put in line, the report of a turn whose settles are all successes, and
# the dispatch (the job's message marshalled and written here). Every other branch
# calls the very Python the Python pump calls (``Slots.handle``, ``finish_plain``,
# ``pipe_lost``, ``no_message``, the supervisor's report and road to the store), and
# the turn is the claimer's (``Claimer.turn``: the engine decides, the compiled driver
# steps it), except a plain turn after one that went through: its test and its
# bookkeeping of the claimer's leases are done here (``_plain_turn``, the twin of
# ``Claimer._turn_plain``), the compiled driver steps it, and only a failure goes the
# supervisor's road to the store. tests/test_pump.py runs one workload through the
# general loop, the Python pump and this one and compares the rows, counters, events,
# rollups and series.

from libc.math cimport ceil

# marshal.h by name: Python.h stopped including it in 3.11 (Cython's own declaration
# names Python.h, which would leave the function undeclared in C).
cdef extern from "marshal.h":
    bytes PyMarshal_WriteObjectToString(object value, int version)


cdef extern from "<sys/epoll.h>" nogil:
    ctypedef union epoll_data_t:
        void* ptr
        int fd
        uint32_t u32
    cdef struct epoll_event:
        uint32_t events
        epoll_data_t data
    int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout)

cdef extern from "<sched.h>" nogil:
    int sched_yield()


cdef enum:
    PUMP_EVENTS = 64            # ready descriptors taken per wait (more: the next wait)
    MAX_WAIT_MS = 1000000000    # a wait's bound in ms (epoll's timeout is an int)


cdef inline int _wait_ms(double wait) noexcept nogil:
    """A wait of ``wait`` seconds as ``epoll_wait``'s timeout: whole milliseconds,
    rounded up (never less than asked), bounded to an int."""
    if wait <= 0:
        return 0
    if wait >= MAX_WAIT_MS / 1000.0:
        return MAX_WAIT_MS
    return <int>ceil(wait * 1000.0)


#: ``Pump._plain_turn``: the turn is not plain; the claimer's own takes it.
cdef object _NOT_PLAIN = object()
#: ``Pump._plain_turn``: the driver declined it, nothing applied; the engine's own turn
#: takes it, without the driver's step again.
cdef object _DECLINED = object()


def _raise(exc):
    """A failure of the pump's own plain turn, raised again inside the supervisor's
    road to the store (``store_call``), so that it meets R26 as any turn's would."""
    raise exc


cdef class Pump:
    """``supervisor.pump.Pump`` compiled (see above): the same constructor and
    ``run``, the same answers and effects."""

    cdef object _state, _slots, _claimer, _plan, _selector, _clock, _rng
    cdef object _store_call, _report, _may_run, _partial, _as_shares
    #: The shares of a turn in the claimer's strict order (``as_shares`` of no shares)
    #: by the slots it claims for: the same every turn (a claimer's queues are fixed
    #: when it is made), made once (a tuple of records, never changed).
    cdef dict _strict_shares
    #: Whether the last turn went through: the next may be taken without the road to
    #: the store (``_plain_turn``), whose only work after a turn that went through is
    #: the call (R26's pause and its end are met on the first turn of a run).
    cdef bint _steady
    #: Whether the claimer is the engine's (``engine.Claimer``), whose plain turn the
    #: pump may take itself; any other (a wrapper) has every turn asked of it.
    cdef bint _engine_claimer
    cdef SlotTable _table
    cdef object _finished, _outcome, _success_message, _message_of
    cdef object _events, _claimed_event, _completed_event, _logger, _info, _tracing
    cdef int _marshal_version   # ``marshal.version``: what ``protocol.job_message`` writes
    #: How many turns the pump has run (the parity test asks that it ran).
    cdef public long long turns
    #: ``Pump._wait``'s (see there): how long a wait looks before it sleeps, whether the
    #: next wait looks first, and how many waits' looks found something and nothing.
    cdef public double spin
    #: ``Pump.window``: how long a turn waits for the outcomes of children still running
    #: (``--coalesce-us``, R6a; ``PoolState.holding`` says when).
    cdef public double window
    cdef public bint look_first
    cdef public long long looks_answered, looks_missed

    def __init__(self, state, slots, claimer, plan, selector, *, clock, rng, store_call,
                 report, may_run, spin=0.0, window=0.0):
        # Imported here: this module is loaded by children too (R43), which need none.
        import functools
        import logging
        import marshal
        from jobpool import events, protocol, tracing
        from jobpool.engine import Claimer
        from jobpool.lifecycle import Outcome
        from jobpool.queueplan import as_shares
        from jobpool.supervisor.state import Finished
        self._state, self._slots, self._claimer = state, slots, claimer
        self._plan, self._selector, self._clock, self._rng = plan, selector, clock, rng
        self._store_call, self._report, self._may_run = store_call, report, may_run
        self._table = slots.table
        self._finished, self._outcome = Finished, Outcome
        self._success_message, self._message_of = protocol.success_message, protocol.message_of
        self._events, self._tracing = events, tracing
        self._claimed_event, self._completed_event = events.JOB_CLAIMED, events.JOB_COMPLETED
        self._logger, self._info = events.logger, logging.INFO
        self._marshal_version = marshal.version
        self._partial = functools.partial
        self._engine_claimer = isinstance(claimer, Claimer)
        self._as_shares = as_shares
        self._strict_shares = {}
        self.turns = 0
        self.spin = spin
        self.window = window
        self.look_first = True
        self.looks_answered = self.looks_missed = 0

    def run(self, double until):
        """Serve plain jobs until something else needs the general loop, at the latest
        at ``until``. Returns True when the last claim found nothing (for ``--burst``)."""
        cdef object state = self._state
        cdef object slots = self._slots
        cdef object clock = self._clock
        cdef SlotTable table = self._table
        cdef bint loud = self._logger.isEnabledFor(self._info)  # R30: asked once
        cdef int epfd = self._selector.fileno()
        cdef epoll_event ready[PUMP_EVENTS]
        cdef int n, i
        cdef double now, due
        cdef bint leave
        # Which descriptor is which slot's pipe, as the selector's keys say now: a key
        # of anything else (a child's exit, a wake-up, a signal) is the general loop's.
        cdef dict pipes = {}
        self._steady = False
        for key in self._selector.get_map().values():
            if key.data[0] == "conn":
                pipes[key.fd] = key.data
        while True:
            now = clock()
            if now >= until:
                return False
            if (state.pending or state.want_claim) and not (
                    self.window > 0 and state.holding(now, self.window, table.busy_count(),
                                                      slots.procs)):
                claimed_none = self._turn(now, loud)
                if claimed_none is None:
                    return False  # R26: the general loop pauses
                if claimed_none:
                    return True
                if not self._may_run(now):
                    return False
                # R20: a job running (one just dispatched among them) times out first
                until = min(until, table.next_deadline())
            if not (state.pending or table.busy_count()):
                return False  # idle: the general loop waits for what comes
            # R6a: a held turn runs when its window ends, if nothing comes before.
            hold = state.hold_until
            due = until if hold is None or <double>hold >= until else <double>hold
            n = self._wait(epfd, ready, due - now)
            if n < 0:
                if errno == EINTR:
                    PyErr_CheckSignals()  # its handler's own raise, if any
                    return False  # the general loop serves what the signal asked
                PyErr_SetFromErrno(OSError)
            if n == 0:
                if due < until:
                    continue  # the held turn's window ended: it runs now
                return False  # a timer is due
            now = clock()
            leave = False
            for i in range(n):
                data = pipes.get(ready[i].data.fd)
                if data is None:
                    return False  # the general loop serves it: its selector sees it again
                slot, owner = data[1], data[2]
                if slot.conn is not owner:
                    return False
                try:
                    got = _read_message_from(owner.fileno())
                    if type(got) is tuple:
                        if not self._finish_success(slot, <tuple>got, now):  # R68's frame
                            slots.handle(slot, self._success_message(got), now)
                            leave = True
                    else:
                        message = self._message_of(got)
                        if not slots.finish_plain(slot, message, now):
                            slots.handle(slot, message, now)
                            leave = True
                except ValueError as exc:
                    slots.no_message(slot, owner, str(exc), now)  # R65
                    leave = True
                except (EOFError, OSError):
                    slots.pipe_lost(slot, owner)
                    leave = True
            if leave:
                return False

    cdef int _wait(self, int epfd, epoll_event* ready, double wait) noexcept:
        """``Pump._wait`` in C: ``epoll_wait``'s answer within ``wait`` seconds, after up
        to ``spin`` (or ``wait``, if shorter) of looks (``epoll_wait`` that does not
        sleep, the core given to whatever else is ready between two) while waits are
        answered within ``spin`` of their start. ``errno`` is ``epoll_wait``'s when it
        fails (nothing after it sets it)."""
        cdef int n
        cdef double started, now, end
        if self.spin <= 0 or wait <= 0:
            with nogil:
                n = epoll_wait(epfd, ready, PUMP_EVENTS, _wait_ms(wait))
            return n
        started = _monotonic()
        if self.look_first:
            end = started + (self.spin if self.spin < wait else wait)
            with nogil:
                while True:
                    n = epoll_wait(epfd, ready, PUMP_EVENTS, 0)
                    if n != 0:
                        break
                    now = _monotonic()
                    if now >= end:
                        break
                    sched_yield()
            if n != 0:
                if n > 0:
                    self.looks_answered += 1
                return n
            self.looks_missed += 1
            self.look_first = False
            wait -= now - started
        with nogil:
            n = epoll_wait(epfd, ready, PUMP_EVENTS, _wait_ms(wait))
        if n > 0 and _monotonic() - started <= self.spin:
            self.look_first = True
        return n

    cdef bint _finish_success(self, slot, tuple fields, double now) except -1:
        """``Slots.finish_success`` and ``_finish_plain``: a plain success of the attempt
        the slot runs, put in line for the next turn; False, with nothing done, for
        any other (the caller hands it to ``Slots.handle``)."""
        job_id, attempt, peak_rss, cpu_s, retiring = fields
        if retiring:
            return False
        job = slot.job
        if (job is None or (<tuple>job)[0] != job_id or (<tuple>job)[4] != attempt
                or slot.interrupting is not None or slot.killing is not None
                or slot.progress is not None or slot.stage is not None or slot.checkpointed
                or slot.queued or slot.index >= self._slots.procs):
            return False
        slot.cpu_reported += cpu_s
        state = self._state
        state.pending.append(_record(self._finished, (
            _record(self._outcome, (job_id, attempt, _DONE, None, None, None, slot.pid, "0",
                                    peak_rss, cpu_s, None)),
            round(now - slot.started, 6), (<tuple>job)[7])))
        slot.job = None
        self._table.clear(slot.index)
        state.want_claim = True
        return True

    cdef object _turn(self, double now, bint loud):
        """``Pump._turn``: settle what finished and claim for the free slots, in one
        transaction (R6): whether a claim was made and found nothing, or None when the
        store failed (R26: the outcomes wait again, first in line)."""
        state = self._state
        cdef list free = self._slots.free() if state.want_claim else []
        cdef Py_ssize_t want = len(free)
        cdef list pending = state.pending
        cdef Py_ssize_t i
        if not pending and not want:
            return False
        shares = self._plan.shares(want) if want else None
        got = (self._plain_turn(now, pending, want, shares) if self._steady
               and self._engine_claimer else _NOT_PLAIN)
        if got is _NOT_PLAIN or got is _DECLINED:
            # Declined by the driver: its step is not asked again (``plain=False``).
            turn = self._claimer.turn
            got = self._store_call(turn if got is _NOT_PLAIN else self._partial(turn, plain=False),
                                   now, [(<tuple>f)[0] for f in pending], want, now, self._rng,
                                   shares, settles=True)
        self._steady = got is not None
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
        for i in range(min(want, len(claimed))):
            self._dispatch(free[i], claimed[i], now, loud)
        if not want:
            return False
        state.want_claim = len(claimed) + len(expired) >= want
        return not claimed and not expired

    cdef object _plain_turn(self, double now, list pending, Py_ssize_t want, object shares):
        """``Claimer.turn`` of a plain turn, the road to the store left out (its R26 work
        after a turn that went through is the call alone): ``Claimer._turn_plain``'s
        twin, R68. The same test of the turn (no limits or chunks, every outcome a
        success of a lease the claimer holds with no follow-ups but a chain's next step
        and a batch's count, ``PLAIN_FOLLOW_UPS``), the same shares,
        the same step (the compiled driver's ``plain_turn``) and the same bookkeeping of
        the claimer's leases. ``_NOT_PLAIN``, with nothing done, when the turn is not
        plain; ``_DECLINED``, with nothing applied, when the driver met a row only the
        engine's own turn reads (the caller then asks for that turn alone). A store
        error goes the supervisor's road (``store_call``), which pauses the pool (None)."""
        claimer = self._claimer
        driver_turn = claimer._plain_turn
        if driver_turn is None or not claimer.plain:
            return _NOT_PLAIN
        cdef dict inflight = claimer._inflight
        cdef list done = []
        cdef tuple outcome
        for f in pending:
            outcome = <tuple>(<tuple>f)[0]
            lease = inflight.get(outcome[0])
            if (lease is None or (<tuple>lease)[2] != outcome[1] or outcome[2] != _DONE
                    or (<tuple>lease)[7] not in _PLAIN_FOLLOW_UPS):
                return _NOT_PLAIN
            done.append((lease, outcome))
        claimer.token_wait = None
        try:
            answer = driver_turn(now, done, self._claim_shares(shares, claimer.queues, want),
                                 want)
        except StoreError as exc:  # R26: the supervisor's road says what it is
            return self._store_call(_raise, now, exc, settles=True)
        if answer is None:
            return _DECLINED
        claimer.plain_turns += 1
        settled, decoded = answer
        for lease, _outcome in done:
            inflight.pop((<tuple>lease)[0], None)
        cdef list claimed = []
        for lease, job, _priority, _line_at in decoded:
            inflight[(<tuple>job)[0]] = lease
            claimed.append(job)
        claimer.chunked = {}
        return settled, claimed, []

    cdef object _claim_shares(self, object shares, object queues, Py_ssize_t want):
        """``queueplan.as_shares``, kept for the strict order (no shares)."""
        if shares is not None:
            return self._as_shares(shares, queues, want)
        made = self._strict_shares.get(want)
        if made is None:
            made = self._strict_shares[want] = self._as_shares(None, queues, want)
        return made

    cdef int _report_settled(self, list settled, list pending, bint loud) except -1:
        """``Pump._report_settled``: a turn whose settles are all successes of the
        attempts sent, in order, in a pool with no metrics, needs only its counter,
        its rollup (R56) and, when somebody listens, its event; any other turn goes
        to the supervisor's report."""
        state = self._state
        cdef Py_ssize_t i, n = len(settled)
        cdef bint plain = state.metrics is None and n == len(pending)
        if plain:
            for i in range(n):
                row = <tuple>settled[i]
                if row[3] != "done" or row[0] != (<tuple>(<tuple>pending[i])[0])[0]:
                    plain = False
                    break
        if not plain:
            self._report(settled, {((<tuple>(<tuple>f)[0])[0], (<tuple>(<tuple>f)[0])[1]): f
                                   for f in pending})
            return 0
        rollups = state.rollups
        for i in range(n):
            row = <tuple>settled[i]
            duration = (<tuple>pending[i])[1]
            rollups.settled(row[1], "done", duration)
            if loud:
                self._events.emit(self._completed_event, job_id=row[0], name=row[1],
                                  attempt=row[2], duration=duration)
        state.counters["completed"] += n
        return 0

    cdef int _dispatch(self, slot, object job, double now, bint loud) except -1:
        """``Slots.dispatch`` of a job of its own (the pump claims no chunk): the slot
        reserved, the job's message written to its child."""
        state = self._state
        (job_id, name, payload, serializer, attempt, timeout, _deadline, queue, run_at,
         batch, meta) = job
        slot.claimed_at = now
        state.rollups.claimed(name, now - run_at)
        if state.metrics is not None:
            state.metrics.claimed(name, queue, now - run_at)
        self._table.assign(slot.index, job_id, attempt, now + timeout)
        slot.job = job
        slot.started = now
        slot.checkpointed, slot.interrupting, slot.interrupt_until = False, None, INFINITY
        state.counters["claimed"] += 1
        if loud:
            self._events.emit(self._claimed_event, job_id=job_id, name=name, attempt=attempt,
                              slot=slot.index, pid=slot.pid)
        message = PyMarshal_WriteObjectToString(
            (job_id, attempt, name, payload, serializer, queue, batch, meta),
            self._marshal_version)
        try:
            _write_message_to(slot.conn.write_fileno(), message)
        except OSError:
            self._slots.undelivered(slot, now)  # its child is gone: see ``Slots.undelivered``
            return 0
        if meta is not None and self._tracing.carries_context(meta):
            self._tracing.active()  # R57: see ``Slots.dispatch``
        return 0
