"""A job's life, written once: the records that travel its path and every decision
about where an attempt goes next (DESIGN sections 2-5; docs/RULES.md).

Both cores and every store apply ``decide``; none of them holds a second copy of
a reason, a budget check or a backoff. A decision says which state the row moves
to, the reason to store, and the delay before it may run again, *relative* to
"now": each store adds it on its own clock (a PostgreSQL store will take the
server's). What the store does with a decision is its own business: SQLite runs
one fenced UPDATE per decision (``store/sqlite/statements.py``, ``Decision.statement`` names it).

Where a retry's delay comes from: ``decide`` -> ``backoff``, unless the job
raised ``Retry(after=...)``.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Protocol

#: R8: a lease lasts the job's hard timeout plus this slack, in seconds.
LEASE_SLACK = 30.0

# -- outcome kinds: how an attempt ended, carried in the child's reply --------------------------

DONE = 0        # returned normally (R12)
ERROR = 1       # raised an ordinary exception: retry with backoff (R13)
FATAL = 2       # Fatal or a listed fatal type: dead at once (R15)
CRASH = 3       # the child died without an outcome (R19), counts toward quarantine
TIMEOUT = 4     # killed at its hard timeout: retry (R20)
RETRY = 5       # Retry(after=...): retry, ``delay`` overrides the backoff (R14)
DEFER = 6       # Defer(delay): back in line without spending an attempt (R17)
RESCHEDULE = 7  # Reschedule(delay): fresh budget (R18)
RELEASE = 8     # graceful stop: lease given back, attempt stays spent (R25)
CANCEL = 9      # cancelled while running: dead (R31)
EXPIRED = 10    # its lease expired (R23): back in line at once, the attempt spent
OWNER_DIED = 11  # its supervisor died (R24, R24b): as an expired lease, without the wait
INTERRUPTED = 12  # R37: a checkpointing job stopped at a save point (or released having
                  # saved one): back in line, its attempt given back and its state kept
UNSTARTED = 13  # R63: a row of a chunk whose turn never came (the chunk ended early):
                # back in line where it was, the attempt its claim spent given back

#: Reasons the pool itself gives (the rest come from the job, or from ``decide``).
CANCELLED = "cancelled"               # R31
DEADLINE_PASSED = "deadline passed"   # R10

#: The attempt log's word for each kind.
KIND_NAMES = ("done", "error", "fatal", "crash", "timeout", "retry", "deferred",
              "rescheduled", "released", "cancelled", "lease_expired", "owner_died",
              "interrupted", "unstarted")


#: Outcomes that are not failures: success, and the steering outcomes a job or an
#: operator chose (Defer, Reschedule, a graceful stop's release).
QUIET_OUTCOMES = ("done", "deferred", "rescheduled", "released", "interrupted", "unstarted")


class Policy(NamedTuple):
    """A job name's policy, as its ``@job`` declared it (or the defaults).

    ``max_attempts`` and ``timeout`` apply to rows enqueued without them (by name,
    from a process that never imported the job)."""

    backoff_base: float = 1.0      # R13: first retry's delay, seconds (0: retry at once)
    backoff_max: float = 3600.0    # R13: the ceiling, seconds
    max_crashes: int = 3           # R19a: child deaths before quarantine
    max_attempts: int = 5          # R16
    timeout: float = 300.0         # R20: hard timeout, seconds


#: The one default policy: ``@job``'s defaults and names without a policy.
DEFAULT_POLICY = Policy()


class Claimed(NamedTuple):
    """A job a claim handed to this pool, to send to a child."""

    job_id: int
    name: str
    payload: bytes
    serializer: str
    attempt: int
    timeout: float
    deadline: float | None
    queue: str
    run_at: float     # when it was due: the wait it had is the claim's now minus this
    #: R58: what the child is given with the job, so that ``current_job()`` and the
    #: tracing need no request of it: its batch's id (R34) and its metadata as the
    #: stored JSON text (R54), each None when it has none. Carried, never read, here.
    batch: int | None = None
    meta: str | None = None


class Lease(NamedTuple):
    """What settling one claimed attempt needs, recorded when it was claimed."""

    job_id: int
    name: str
    attempt: int
    max_attempts: int | None     # None: the policy's (a row enqueued by name)
    crashes: int
    deadline: float | None
    started_at: float
    #: Its settle has more to write than the row, as flags: ``FOLLOW_ENDS``, a chain's
    #: next step (R12) and its batch's count (R34; on PostgreSQL a trigger keeps the count
    #: and may enqueue the callback, which the driver's next claim takes); ``FOLLOW_LANE``, on
    #: SQLite, its limit group's lane when it goes back to ready (R35); ``FOLLOW_MEMBER``,
    #: on SQLite, beside ``FOLLOW_ENDS``: the row is a batch's member with no chain, so its
    #: end's only follow-up is its batch's count (no next step to try). Claimed as such,
    #: so other jobs pay nothing.
    follow_ups: int


#: ``Lease.follow_ups`` flags (a claim computes them; a reclaim, which does not ask the
#: row, takes ``FOLLOW_ALL``).
FOLLOW_ENDS = 1
FOLLOW_LANE = 2
FOLLOW_ALL = FOLLOW_ENDS | FOLLOW_LANE
FOLLOW_MEMBER = 4
#: R68: the follow-ups a plain turn settles a success with: none, a chain's next step
#: and its batch's count, or a batch member's count alone; never a lane (R35).
PLAIN_FOLLOW_UPS = (0, FOLLOW_ENDS, FOLLOW_ENDS | FOLLOW_MEMBER)


class Outcome(NamedTuple):
    """How one attempt ended (from the child's reply, or from its death)."""

    job_id: int
    attempt: int
    kind: int
    error: str | None = None
    delay: float | None = None     # Retry(after) / Defer / Reschedule, seconds
    result: bytes | str | None = None
    pid: int | None = None
    exit_status: str | None = None
    peak_rss: int | None = None
    cpu_s: float | None = None
    strays: int | None = None      # R40: processes it left running, killed with it


def retired_at_its_turn(job_id: int, attempt: int, deadline: float | None,
                        now: float) -> Outcome | None:
    """R10 for a row that waited in a chunk (R63): past its deadline when its turn
    comes, it is dead without running (this outcome); None: it runs."""
    if deadline is not None and deadline < now:
        return Outcome(job_id, attempt, FATAL, DEADLINE_PASSED)
    return None


def logged_as(outcome: Outcome) -> str | None:
    """The attempt log's word for ``outcome`` where it is not its kind's: R10's
    ``deadline`` for a chunk's row retired at its turn (``retired_at_its_turn``), as a
    claim's R10 logs it; None: the kind's own word (``KIND_NAMES``). A job's own Fatal
    never reads as one: its error names its type."""
    if outcome[2] == FATAL and outcome[3] == DEADLINE_PASSED:
        return "deadline"
    return None


def chunk_ended_early(why: str) -> str:
    """R63: the reason a chunk's rows that never started are given back with."""
    return f"not started: its chunk ended early ({why})"


#: R63, R19: the reason of a job whose message found no reader on its child's pipe (the
#: child gone before the pool sent it): given back, never charged a crash.
NOT_DELIVERED = "not started: its child was gone before the job reached it"


class Settled(NamedTuple):
    """What became of one outcome: status ``done``, ``ready``, ``dead`` or ``lost``
    (the fenced settle matched no row: another pool holds that attempt now)."""

    job_id: int
    name: str
    attempt: int
    status: str
    reason: str | None


class Decision(NamedTuple):
    """Where an attempt goes, and what the store writes.

    ``statement``: which transition (``done``, ``retry``, ``defer``, ``reschedule``,
    ``release``, ``interrupt``, ``requeue``, ``dead``), each one fenced UPDATE in a store. ``delay``: seconds
    from the store's now before a ``ready`` row may run. ``reason``: the
    ``last_error`` a retry or a dead row keeps. ``crashes``: the row's new count."""

    statement: str
    status: str
    reason: str | None
    delay: float
    crashes: int

    @property
    def successor(self) -> bool:
        """R12: a completed job's chain enqueues its next step in this transaction."""
        return self.statement == "done"

    @property
    def hook(self) -> bool:
        """R21: a dead job's on_dead hook runs (once, after the settle commits)."""
        return self.status == "dead"


class Random(Protocol):
    def random(self) -> float: ...


#: How a settled attempt ended, by name (metrics' ``outcome`` label, ``drain``'s
#: counts): a settle back to ``ready`` is named by the outcome kind that caused it.
_READY_NAMES = {DEFER: "deferred", RESCHEDULE: "rescheduled", RELEASE: "released",
                INTERRUPTED: "released", UNSTARTED: "released"}


def settled_as(status: str, kind: int) -> str:
    """``done``, ``retried``, ``deferred``, ``rescheduled``, ``released``, ``dead`` or
    ``lease_lost``: what one settled attempt of this pool became."""
    if status == "ready":
        return _READY_NAMES.get(kind, "retried")
    return status if status in ("done", "dead") else "lease_lost"


def backoff(attempts: int, base: float, cap: float, u: float) -> float:
    """Delay before retry number ``attempts`` (R13).

    ``base * 2**(attempts-1)`` capped at ``cap``, then jitter that only subtracts
    up to 25 % (``u`` in [0, 1)), so ``cap`` is an honest ceiling. The exponent is
    bounded before it is computed, so huge attempt counts cannot overflow.
    """
    if base <= 0:
        return 0.0
    exponent = attempts - 1 if attempts > 1 else 0
    if exponent >= 1023 or base * math.ldexp(1.0, exponent) >= cap:
        delay = cap
    else:
        delay = base * math.ldexp(1.0, exponent)
    return delay - delay * 0.25 * u


def with_reason(error: str | None, reason: str) -> str:
    """Append ``reason`` to the first line of ``error``, keeping any traceback below it."""
    head, sep, tail = (error or "").partition("\n")
    return f"{head}; {reason}{sep}{tail}" if head else reason + sep + tail


def decide(lease: Lease, outcome: Outcome, policy: Policy, now: float, rng: Random | None,
           crash_causes: Callable[[int], list[str]]) -> Decision:
    """The transition for one attempt's outcome (R10, R12-R20, R23-R25, R31).

    ``now`` is only compared with the job's deadline; ``rng`` draws the backoff's
    jitter, only for a retry that uses the backoff; ``crash_causes(job_id)`` reads the
    errors of the job's earlier child deaths, only when it is quarantined.
    """
    kind = outcome.kind
    error = outcome.error
    crashes = lease.crashes
    deadline = lease.deadline
    # A row enqueued by name carries no budget until a pool that knows its job
    # claims it; a lease taken back from elsewhere may still have none.
    budget = lease.max_attempts if lease.max_attempts is not None else policy.max_attempts
    if kind == DONE:
        return Decision("done", "done", None, 0.0, crashes)
    if kind == DEFER:
        delay = outcome.delay or 0.0
        if deadline is not None and now + delay > deadline:
            return Decision("dead", "dead", with_reason(error or "deferred",
                                                        "deferred past its deadline"), 0.0, crashes)
        return Decision("defer", "ready", error, delay, crashes)
    if kind == RESCHEDULE:
        return Decision("reschedule", "ready", error, outcome.delay or 0.0, crashes)
    if kind == RELEASE:
        return Decision("release", "ready", error, 0.0, crashes)
    if kind == INTERRUPTED or kind == UNSTARTED:
        # R37 amending R25: the pool stopped a job that keeps its place by its state;
        # the attempt it was interrupted in is given back. R63: so is the attempt of a
        # chunk's row that never started.
        return Decision("interrupt", "ready", error, 0.0, crashes)
    if kind in (FATAL, CANCEL):
        return Decision("dead", "dead", error, 0.0, crashes)
    if kind in (EXPIRED, OWNER_DIED):
        # Nobody ran it to an end, so no backoff: back in line where it was (R23).
        if lease.attempt >= budget:
            return Decision("dead", "dead", with_reason(error, f"no attempts left after {budget}"),
                            0.0, crashes)
        return Decision("requeue", "ready", error, 0.0, crashes)
    # ERROR, CRASH, TIMEOUT, RETRY: a retry unless a budget is spent.
    if kind == CRASH:
        crashes += 1
    if kind == CRASH and crashes >= policy.max_crashes:
        causes = crash_causes(lease.job_id) + [error or "?"]
        return Decision("dead", "dead", f"quarantined: killed its child {crashes} times ("
                        + "; ".join(causes[-crashes:]) + ")", 0.0, crashes)
    if lease.attempt >= budget:
        return Decision("dead", "dead", with_reason(error, f"no attempts left after {budget}"),
                        0.0, crashes)
    if kind == RETRY and outcome.delay is not None:
        delay = outcome.delay
    else:
        delay = backoff(lease.attempt, policy.backoff_base, policy.backoff_max,
                        rng.random() if rng is not None else 0.0)
    if deadline is not None and now + delay > deadline:
        return Decision("dead", "dead", with_reason(error, "retry would fall past its deadline"),
                        0.0, crashes)
    return Decision("retry", "ready", error, delay, crashes)


# -- job statuses, named once -------------------------------------------------------------

#: A row's status: ``ready`` (waiting, due or not), ``running`` (a pool holds its lease),
#: ``done`` and ``dead``. The first two are *live* (PostgreSQL keeps them in ``jobs``),
#: the last two *finished* (in ``finished_jobs`` there; one table on SQLite).
READY, RUNNING, DONE_STATUS, DEAD = "ready", "running", "done", "dead"
LIVE_STATUSES = (READY, RUNNING)
FINISHED_STATUSES = (DONE_STATUS, DEAD)
STATUSES = LIVE_STATUSES + FINISHED_STATUSES


# -- what every transition does to a row, as values ----------------------------------------
# Each dialect renders its statements from these (``store/effects_sql.py``): no SQL
# states by hand what a transition does to a row's fields. A transition's ``sets``
# pairs a column with one of the values below, or with a constant (None is NULL).

class Given(NamedTuple):
    """A value the transition is applied with: ``now`` (the store's clock), ``owner``
    (the claiming pool) or what a decision carries (``run_at``, ``error``, ``crashes``,
    ``result``)."""

    name: str


class Shifted(NamedTuple):
    """The column's own value plus ``by``."""

    column: str
    by: int


class Earliest(NamedTuple):
    """The earlier of the column's value and a given value."""

    column: str
    given: str


class ClearedIf(NamedTuple):
    """NULL when the given flag is true, else the column's own value."""

    column: str
    flag: str


class OneMoreAttempt(NamedTuple):
    """R25: ``max_attempts`` raised to ``attempts + 1`` when the attempts are spent (a
    job stopped by its pool in its last attempt gets the one its next claim spends),
    else kept."""


class Defaulted(NamedTuple):
    """R8: the column, or the job's policy's value when the row has none (a row
    enqueued by name)."""

    column: str


class LeaseEnd(NamedTuple):
    """R8: the claim's lease: now plus the job's timeout (``Defaulted``) plus
    ``LEASE_SLACK``."""


class Transition(NamedTuple):
    """One transition of a row: from status ``source`` to ``status``, with ``sets``
    (column, value) for every other field it changes. A row leaving ``running`` gives
    its lease back in ``sets`` too, so the table says all of it."""

    name: str
    source: str
    status: str
    sets: tuple[tuple[str, object], ...]

    @property
    def finishes(self) -> bool:
        """It ends the job's life: on PostgreSQL the row moves to ``finished_jobs``."""
        return self.status in FINISHED_STATUSES

    def columns(self) -> tuple[str, ...]:
        return tuple(column for column, _ in self.sets)


_LEASE_BACK = (("lease_owner", None), ("lease_expires_at", None))
_NOW = Given("now")

#: R8: the claim: a ready row runs under this pool's lease; the attempt is spent here.
CLAIM = Transition("claim", READY, RUNNING, (
    ("lease_owner", Given("owner")), ("lease_expires_at", LeaseEnd()),
    ("max_attempts", Defaulted("max_attempts")), ("timeout", Defaulted("timeout")),
    ("attempts", Shifted("attempts", 1)), ("started_at", _NOW)))

#: The settles, by ``Decision.statement``; each is fenced by the attempt's lease
#: (section 4) and writes the attempt's line in the log (R19a).
SETTLES = {t.name: t for t in (
    # R12: success; progress closes at 100 %, the key is freed by the status change.
    Transition("done", RUNNING, DONE_STATUS, _LEASE_BACK + (
        ("finished_at", _NOW), ("progress", 100), ("result", Given("result")))),
    # R13/R14/R19: back in line after a backoff; the attempt stays spent.
    Transition("retry", RUNNING, READY, _LEASE_BACK + (
        ("run_at", Given("run_at")), ("line_at", Given("run_at")),
        ("last_error", Given("error")), ("crashes", Given("crashes")))),
    # R10/R15/R16/R19a/R31: dead, with the reason.
    Transition("dead", RUNNING, DEAD, _LEASE_BACK + (
        ("finished_at", _NOW), ("last_error", Given("error")), ("crashes", Given("crashes")))),
    # R17: not yet; the attempt is given back and the place in line kept.
    Transition("defer", RUNNING, READY, _LEASE_BACK + (
        ("run_at", Given("run_at")), ("attempts", Shifted("attempts", -1)),
        ("deferrals", Shifted("deferrals", 1)))),
    # R18: the next occurrence of a recurring job: a fresh budget, the error cleared,
    # the key kept, and a fresh run without saved state (R37).
    Transition("reschedule", RUNNING, READY, _LEASE_BACK + (
        ("run_at", Given("run_at")), ("line_at", Given("run_at")), ("attempts", 0),
        ("crashes", 0), ("last_error", None), ("state", None), ("state_at", None))),
    # R23/R24: a lease nobody will settle (expired, or its owner died) goes back in
    # line where it was, the attempt spent and the reason kept.
    Transition("requeue", RUNNING, READY, _LEASE_BACK + (
        ("last_error", Given("error")), ("crashes", Given("crashes")))),
    # R25: a graceful stop gives the lease back; ready at once, the attempt spent.
    Transition("release", RUNNING, READY, _LEASE_BACK + (
        ("max_attempts", OneMoreAttempt()),)),
    # R37: a checkpointing job stopped by its pool: ready at once where it was in
    # line, the attempt given back, its state kept.
    Transition("interrupt", RUNNING, READY, _LEASE_BACK + (
        ("attempts", Shifted("attempts", -1)),)),
)}

#: R44: a claimed row the row codec refused: dead at once with the reason naming the
#: column, changing no column the codec may have found wrong.
MALFORMED = Transition("malformed", RUNNING, DEAD, _LEASE_BACK + (
    ("finished_at", _NOW), ("last_error", Given("error"))))

#: R31: a ready job cancelled (alone, or as a member of a cancelled batch, R34).
CANCEL_READY = Transition("cancel", READY, DEAD, (
    ("finished_at", _NOW), ("last_error", Given("error"))))

#: R32: a dead job back in line now with a fresh budget; its history stays in the
#: attempt log, its reason on the row until it runs; its saved state kept unless the
#: operator asked for a fresh start (``reset_state``).
RETRY_DEAD = Transition("retry_dead", DEAD, READY, _LEASE_BACK + (
    ("attempts", 0), ("crashes", 0), ("deferrals", 0), ("run_at", _NOW), ("line_at", _NOW),
    ("finished_at", None), ("cancel_requested", 0), ("hook_done", 0),
    ("state", ClearedIf("state", "reset_state")),
    ("state_at", ClearedIf("state_at", "reset_state"))))

#: R26: a claim that committed while its answer was lost: by R6 the job never ran, so
#: its lease and its attempt are given back.
RELEASE_IN_DOUBT = Transition("release_in_doubt", RUNNING, READY, _LEASE_BACK + (
    ("attempts", Shifted("attempts", -1)), ("started_at", None)))

#: R51: ``run_now``: a job waiting for its time (scheduled, or a retry's backoff) is due
#: now, keeping its attempts; in line from now, or from its earlier place (a deferred
#: job's, R17), whichever is first.
RUN_NOW = Transition("run_now", READY, READY, (
    ("run_at", _NOW), ("line_at", Earliest("line_at", "now"))))

#: Every transition, by name.
TRANSITIONS = {t.name: t for t in (CLAIM, *SETTLES.values(), MALFORMED, CANCEL_READY,
                                    RETRY_DEAD, RELEASE_IN_DOUBT, RUN_NOW)}
