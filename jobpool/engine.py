"""The engine: one claimer for every store (the ``Claimer`` protocol, ``store/base.py``).

The job's life on a supervisor's hot path is written here once: a turn settles
then claims in one transaction; a settle passes the fence test on the lease this
claimer holds, then ``lifecycle.decide``; a claim goes queue by queue in shares
(``queueplan``), under limits when the pool obeys some (R35, R36), every row through
the codec (R44: a refused row is dead at once), in claim order (R7), and a row past
its deadline is retired without running (R10); a row of a name declared with
``chunk=`` brings more rows of its name to its slot, with leases that cover their wait
(R63, R64); a reclaim settles leases nobody will settle (R23, R24) as any attempt's end.
The statements, the transaction, the clock and what a dialect must do around them
(SQLite's follow-ups; PostgreSQL's pipelined, grouped settles and its commits in doubt)
are a driver's (``store.base.Driver``):
``store/sqlite/driver.py``, ``store/postgres/driver.py``.

Time (``now``) and randomness (``rng``) are parameters (STYLE habit 4). This module
imports no dialect: the layers test holds it (DESIGN section 11).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from jobpool.lifecycle import (DEADLINE_PASSED, DEFAULT_POLICY, DONE, EXPIRED, FATAL,
                               OWNER_DIED, PLAIN_FOLLOW_UPS, Claimed, Lease, Outcome, Policy,
                               Settled, decide, logged_as)
from jobpool.limits import LimitPlan, charge, plan_claim, sooner
from jobpool.queueplan import Share, as_shares, claim_in_shares, first_claim
from jobpool.store import row_codec
from jobpool.store.base import Answer, Driver, Fenced, Turn


class TurnInFlight(NamedTuple):
    """R66: a turn ``Claimer.begin_turn`` sent. ``flight``: the driver's, while its
    answer may still be on its way (None: the turn ran whole, its result in ``done``);
    ``n`` and ``shares``: the slots it claims for and how they are shared, the rest of
    its claims made once the answer is read."""

    flight: Any
    done: tuple[list[Settled], list[Claimed], list[Settled]] | None
    taken: list[int]
    n: int
    shares: Sequence[Share] | None
    now: float

    def fileno(self) -> int | None:
        """The socket the answer comes on; None: nothing in flight."""
        return None if self.flight is None else self.flight.fileno()

    def ready(self) -> bool:
        """Whether ``finish_turn`` can read the answer without waiting."""
        return self.flight is None or self.flight.ready()

    def holds_locks(self) -> bool:
        """Whether it is a transaction left open until ``finish_turn`` (a limited
        claim's, R66), holding the locks of what it settled (the driver's flight says)."""
        return self.flight is not None and self.flight.holds_locks()


class Claimer:
    """Claims and settles jobs for one supervisor over ``driver`` (see the module
    docstring). ``policies``: each name's ``lifecycle.Policy`` (or its 5 fields);
    names without one settle by the default."""

    def __init__(self, driver: Driver, owner: str, names: Sequence[str], queues: Sequence[str],
                 policies: dict[str, Any] | None = None) -> None:
        self.driver = driver
        self.owner = owner
        self.queues = tuple(queues)
        # Named once here, not per settle (a caller may pass plain 5-tuples).
        self.policies: dict[str, Policy] = {
            name: Policy(*policy) for name, policy in (policies or {}).items()}
        self._names = tuple(names)
        #: The leases this supervisor holds: what settling each attempt needs, and the
        #: fence test's answer to an outcome for an attempt it does not hold.
        self._inflight: dict[int, Lease] = {}
        #: R35/R36: the limits this pool obeys (``set_limits``); None: the ordinary claim.
        self._limits: Any = None
        #: R36: after a turn, the seconds until a group its claim passed over for want
        #: of a token has one (the Claimer protocol); None: no such group.
        self.token_wait: float | None = None
        #: R63: each chunked name's chunk size (``set_chunks``); empty: no chunks.
        self._chunks: dict[str, int] = {}
        #: R63: after a turn, the rows each chunk's first row brings to its slot, by
        #: the first row's id (the Claimer protocol); empty without chunks.
        self.chunked: dict[int, list[Claimed]] = {}
        #: R66: how the driver sends a turn and leaves it in flight; None: its turns
        #: run whole (SQLite's).
        self._begin_turn = getattr(driver, "begin_turn", None)
        #: R68: how the driver runs a plain turn whole in compiled code (the compiled
        #: SQLite driver's ``plain_turn``); None: every turn is this module's.
        self._plain_turn = getattr(driver, "plain_turn", None)
        #: How many turns ``plain_turn`` answered (the parity tests ask that it ran).
        self.plain_turns = 0
        #: R26: whether the driver's turns can end in doubt (PostgreSQL's): see
        #: ``claims_in_doubt``.
        self._may_doubt = hasattr(type(driver), "claims_in_doubt")
        driver.serve(owner, self._names, self.policies)

    @property
    def name(self) -> str:
        """What claims, as ``pools`` shows it (the driver's name)."""
        return self.driver.name

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    @property
    def plain(self) -> bool:
        """Whether a turn is the ordinary claim: no limits to plan (R35, R36) and no
        chunks to fill (R63). The supervisor's pump runs only then."""
        return self._limits is None and not self._chunks

    @property
    def claims_in_doubt(self) -> bool:
        """R26: whether rows a failed turn may have claimed wait for a turn to give them
        back (PostgreSQL, its commit's reply lost): a turn with nothing to settle or
        claim is then still taken (``turn``), so a stopping pool leaves none running."""
        return self._may_doubt and self.driver.claims_in_doubt  # type: ignore[attr-defined]

    @property
    def turns_whole(self) -> bool:
        """Whether every turn runs whole in ``begin_turn`` (a driver that leaves no
        statement in flight, R66: SQLite's)."""
        return self._begin_turn is None

    # -- one turn: settle, then claim (R6-R10, section 4) ------------------------------------

    def claim(self, n: int, now: float) -> tuple[list[Claimed], list[Settled]]:
        """A turn with nothing to settle: ``(claimed, expired)``."""
        _settled, claimed, expired = self.turn((), n, now, None)
        return claimed, expired

    def settle(self, outcomes: Sequence[Outcome], now: float, rng: Any) -> list[Settled]:
        """A turn that claims nothing: what became of each outcome."""
        return self.turn(outcomes, 0, now, rng)[0]

    def turn(self, outcomes: Sequence[Outcome], n: int, now: float, rng: Any,
             shares: Sequence[Share] | None = None, *, plain: bool = True
             ) -> tuple[list[Settled], list[Claimed], list[Settled]]:
        """Settle ``outcomes`` (``lifecycle.Outcome`` records), then claim up to ``n``,
        shared among queues by ``shares`` (``queueplan.Share`` records; None: the
        claimer's queues in order), in one transaction.

        Returns ``(settled, claimed, expired)``. Sharing the commit halves what a job
        costs the store; on a failure nothing is applied, the leases stay as they
        were, and the caller keeps its outcomes (R26). ``plain=False``: not through the
        driver's plain step (R68), which has just declined this turn (the compiled pump's
        own plain turn)."""
        claimed: list[Claimed] = []
        self.token_wait = None
        if not outcomes and n <= 0 and not self.claims_in_doubt:
            return [], claimed, []
        if plain and self._plain_turn is not None and self.plain:
            answer = self._turn_plain(outcomes, n, now, shares)
            if answer is not None:
                return answer
        taken: list[int] = []
        leases: dict[int, Lease] = {}
        chunked: dict[int, list[Claimed]] = {}

        def body(turn: Turn) -> tuple[list[Answer], list[Answer]]:
            sent = self._settle_outcomes(turn, outcomes, rng, taken)
            expiring: list[Answer] = []
            # Claimed.run_at is handed over on the pool's clock (``now``), where the
            # pool measures a job's wait; the row has it on the store's (R7a).
            to_pool_clock = now - turn.now
            claim_in_shares(shares, self.queues, n, claimed,
                            lambda queue, want: self._claim_queue(
                                turn, queue, want, to_pool_clock, claimed, expiring, leases,
                                chunked))
            return sent, expiring

        settled, expired = self.driver.turn(now, self._inflight, body)
        # A job settled back to ready may be claimed again in this turn: its old
        # lease goes before the new one is recorded.
        for job_id in taken:
            self._inflight.pop(job_id, None)
        self._inflight.update(leases)
        self.chunked = chunked
        return settled, claimed, expired

    def _turn_plain(self, outcomes: Sequence[Outcome], n: int, now: float,
                    shares: Sequence[Share] | None
                    ) -> tuple[list[Settled], list[Claimed], list[Settled]] | None:
        """R68: ``turn`` through the driver's ``plain_turn`` (the compiled SQLite
        driver's, stepped in C), for a turn it gives the same answer to: every outcome
        a success (``decide``: done, no reason, its crash count kept) of an attempt
        this claimer holds, with no follow-ups but a chain's next step and a batch's count
        (R12, R34; no lane, R35: ``PLAIN_FOLLOW_UPS``); the claim is shared among
        the queues as ``claim_in_shares`` shares it (``as_shares``). None: the turn is
        not plain, or the driver met a row only this turn reads (R10, R44) and applied
        nothing; ``turn`` then runs its own."""
        inflight = self._inflight
        done = []
        for outcome in outcomes:
            lease = inflight.get(outcome[0])
            if (lease is None or lease.attempt != outcome[1] or outcome[2] != DONE
                    or lease.follow_ups not in PLAIN_FOLLOW_UPS):
                return None
            done.append((lease, outcome))
        answer = self._plain_turn(now, done, as_shares(shares, self.queues, n), n)
        if answer is None:
            return None
        self.plain_turns += 1
        settled, decoded = answer
        for lease, _outcome in done:
            inflight.pop(lease.job_id, None)
        claimed = []
        for lease, job, _priority, _line_at in decoded:
            inflight[job.job_id] = lease
            claimed.append(job)
        self.chunked = {}
        return settled, claimed, []

    def _settle_outcomes(self, turn: Turn, outcomes: Sequence[Outcome], rng: Any,
                         taken: list[int]) -> list[Answer]:
        """The fence test and ``lifecycle.decide`` for each outcome, handed to the
        turn's settle; ``taken``: the jobs whose lease the turn settles."""
        decided: list[Settled | Fenced] = []
        for outcome in outcomes:
            lease = self._inflight.get(outcome[0])
            if lease is None or lease.attempt != outcome[1]:
                decided.append(Settled(outcome[0], lease.name if lease else "", outcome[1],
                                       "lost", "not leased by this supervisor"))
                continue
            taken.append(outcome[0])
            decided.append(self._fenced(turn, lease, outcome, rng, logged_as(outcome)))
        return turn.settle(decided)

    # -- a turn in flight (R66) ----------------------------------------------------------------

    def begin_turn(self, outcomes: Sequence[Outcome], n: int, now: float, rng: Any,
                   shares: Sequence[Share] | None = None) -> TurnInFlight:
        """``turn``, in two halves (R66): this one sends the turn, ``finish_turn`` reads
        its answer and applies it. With a driver that can leave a statement in flight
        (PostgreSQL's ``begin_turn``), the turn's settles and its first claim (the one
        ``claim_in_shares`` makes first) go out here as one statement without waiting:
        ``TurnInFlight.fileno`` is the socket its answer comes on. A crash's earlier
        causes (R19) are read before it is sent. What depends on that answer (the
        claims of the other queues, a chunk's rows, R63, a second claim for a row put
        back due now) is sent by ``finish_turn`` once it is read. Under limits (R35,
        R36) the settles go with the first statement of the limited claim instead, in a
        transaction its page's locks are held in until ``finish_turn`` has planned,
        taken and charged the rows and committed. Every turn of a driver without
        ``begin_turn`` (SQLite) runs whole here, and ``finish_turn`` hands its result
        back. The leases are the engine's as
        they were until ``finish_turn``; no other call may use the claimer in between."""
        begin = self._begin_turn
        if begin is None or (not outcomes and n <= 0):
            return TurnInFlight(None, self.turn(outcomes, n, now, rng, shares), [], 0, None,
                                now)
        self.token_wait = None
        taken: list[int] = []
        first = first_claim(shares, self.queues, n)
        limited = self._limits

        def send(turn: Turn) -> tuple[list[Answer], Any]:
            sent = self._settle_outcomes(turn, outcomes, rng, taken)
            if not first:
                return sent, None
            if limited is None:
                return sent, turn.claim_later(*first)  # type: ignore[attr-defined]
            return sent, turn.limited_later(limited, *first)  # type: ignore[attr-defined]

        flight = begin(now, self._inflight, send)
        if flight is None:  # the driver must look up what is in doubt first: a whole turn
            return TurnInFlight(None, self.turn(outcomes, n, now, rng, shares), [], 0, None,
                                now)
        return TurnInFlight(flight, None, taken, n, shares, now)

    def finish_turn(self, turn_in_flight: TurnInFlight
                    ) -> tuple[list[Settled], list[Claimed], list[Settled]]:
        """The turn ``begin_turn`` sent: its answer read (waited for, if it has not
        come), the rows it claimed through the codec and R10 as in ``turn``, the rest
        of its claims made as ``turn`` makes them, and ``(settled, claimed, expired)``.
        A failure raises ``StoreError`` as ``turn`` does: nothing applied, or in doubt
        (R26), the caller keeping its outcomes."""
        flight = turn_in_flight.flight
        if flight is None:
            assert turn_in_flight.done is not None
            return turn_in_flight.done
        claimed: list[Claimed] = []
        leases: dict[int, Lease] = {}
        chunked: dict[int, list[Claimed]] = {}
        now = turn_in_flight.now

        def body(turn: Turn, sent_late: tuple[list[Answer], Any]
                 ) -> tuple[list[Answer], list[Answer]]:
            sent, late = sent_late
            expiring: list[Answer] = []
            to_pool_clock = now - turn.now
            first = [late] if late is not None else []
            # The claim sent with the turn answers the first ask (``first_claim``).
            claim_in_shares(turn_in_flight.shares, self.queues, turn_in_flight.n, claimed,
                            lambda queue, want: self._claim_queue(
                                turn, queue, want, to_pool_clock, claimed, expiring, leases,
                                chunked, first.pop() if first else None))
            return sent, expiring

        settled, expired = self.driver.finish_turn(flight, body)  # type: ignore[attr-defined]
        for job_id in turn_in_flight.taken:
            self._inflight.pop(job_id, None)
        self._inflight.update(leases)
        self.chunked = chunked
        return settled, claimed, expired

    def _fenced(self, turn: Turn, lease: Lease, outcome: Outcome, rng: Any,
                log_as: str | None = None, owner: str | None = None) -> Fenced:
        """``lifecycle.decide`` for one attempt, as the settle the driver applies."""
        decision = decide(lease, outcome, self.policies.get(lease.name, DEFAULT_POLICY),
                          turn.now, rng, turn.crash_causes)
        # A reclaim settles another owner's lease.
        return Fenced(lease, outcome, decision, owner or self.owner, log_as)

    # -- claiming (R6-R10, R35, R36, R44) ----------------------------------------------------

    def set_limits(self, plan: LimitPlan | None) -> None:
        """R35/R36: the part of the store's limits this pool obeys from now on
        (``LimitPlan.for_pool``); None: the ordinary claim."""
        if plan == (self._limits.plan if self._limits else None):
            return
        self._limits = None if plan is None else self.driver.limited_claim(plan)

    def set_chunks(self, chunks: dict[str, int]) -> None:
        """R63: from the next turn, a row of a name in ``chunks`` brings up to that many
        of its name's ready rows to its slot (sizes of 1 are no chunk)."""
        self._chunks = {name: size for name, size in chunks.items() if size > 1}

    def _claim_queue(self, turn: Turn, queue: str, want: int, to_pool_clock: float,
                     claimed: list[Claimed], expiring: list[Answer],
                     leases: dict[int, Lease], chunked: dict[int, list[Claimed]],
                     sent: Any = None) -> int:
        """Claim up to ``want`` rows of ``queue`` into ``claimed`` (``sent``: the claim
        already sent for them, R66) and fill their chunks; how many rows it took."""
        now = turn.now
        # R66: a claim sent in flight keeps the limits it was sent under (a heartbeat
        # may have read others since).
        limited = self._limits if sent is None else sent.limited
        if sent is not None and limited is None:
            found = sent.found()
        elif limited is None:
            found = turn.claim(queue, want)
        else:
            # R35/R36: the groups' counts and buckets decide which rows to take.
            source = turn.limited_source(limited)
            picked = plan_claim(source, limited.plan, queue, want, now, limited.has_unlimited)
            found = turn.claim_chosen(limited, picked) if picked.ids else []
            # Only the rows the statement took (under their caps) cost a token and a
            # turn of the rotation.
            charge(source, picked, {row[0] for row in found}, now)
            self.token_wait = sooner(self.token_wait, picked.token_wait)
        first = len(claimed)
        self._admit(turn, found, queue, to_pool_clock, claimed, expiring, leases)
        if self._chunks:
            chunks = self._chunks
            # R63 gives way to R35/R36: a limited name, or a capped queue, is claimed a
            # row per slot, as the limits plan it. A chunk's rows are a claim made now,
            # so the limits read since a claim in flight was sent count too (R66).
            plans = [each.plan for each in (limited, self._limits) if each is not None]
            for job in claimed[first:]:
                size = chunks.get(job.name)
                if size and not any(job.name in plan.names or queue in plan.queues
                                    for plan in plans):
                    self._fill_chunk(turn, job, size, queue, to_pool_clock, expiring, leases,
                                     chunked)
        return len(found)

    def _admit(self, turn: Turn, found: list[tuple], queue: str, to_pool_clock: float,
               into: list[Claimed], expiring: list[Answer], leases: dict[int, Lease]) -> None:
        """The rows a claim took, to run (into ``into``) or settled at once."""
        now = turn.now
        # R44: every row through the codec, in claim order (R7: RETURNING has none);
        # a row it refuses is dead at once, in a statement of its own.
        decoded, refused = self.driver.decode_claims(found, queue, now, to_pool_clock)
        for bad in refused:
            expiring.append(turn.settle_malformed(bad, self.owner))
        for lease, job, _priority, _line_at in decoded:
            if job.deadline is not None and job.deadline < now:
                # R10: claimed after its deadline, it is retired without running.
                retired = Outcome(job.job_id, job.attempt, FATAL, DEADLINE_PASSED)
                expiring.extend(turn.settle([self._fenced(turn, lease, retired, None,
                                                          logged_as(retired))]))
                continue
            leases[job.job_id] = lease
            into.append(job)

    def _fill_chunk(self, turn: Turn, head: Claimed, size: int, queue: str,
                    to_pool_clock: float, expiring: list[Answer], leases: dict[int, Lease],
                    chunked: dict[int, list[Claimed]]) -> None:
        """R63: the next ``size - 1`` ready rows of ``head``'s name, in claim order, for
        the slot ``head`` goes to; they run after it, one after the other, in its child.

        R8 for a chunk: each row's lease is its own timeout plus those of the rows before
        it in the chunk, plus the slack, so no lease runs out while its row waits its
        turn. The rows carry their deadline on the pool's clock (as ``run_at``): the
        slot judges R10 again when a row's turn comes."""
        rest: list[Claimed] = []
        self._admit(turn, turn.claim_name(queue, head.name, size - 1), queue, to_pool_clock,
                    rest, expiring, leases)
        if not rest:
            return
        waits = []
        before = head.timeout
        for job in rest:
            waits.append((job.job_id, job.attempt, before))
            before += job.timeout
        turn.extend_leases(waits)
        chunked[head.job_id] = [job if job.deadline is None
                                else job._replace(deadline=job.deadline + to_pool_clock)
                                for job in rest]

    # -- recovery (R23, R24) -----------------------------------------------------------------

    def reclaim(self, now: float) -> list[Settled]:
        """R23: expired leases of any owner go back to ready, or dead without attempts."""
        return self._recover(None, EXPIRED, lambda owner: f"lease expired (owner {owner})", now)

    def reclaim_owner(self, owner: str, reason: str, now: float) -> list[Settled]:
        """R24, R24b: a dead supervisor's leases come back at once."""
        if owner == self.owner:
            raise ValueError("a supervisor cannot reclaim its own leases")
        return self._recover(owner, OWNER_DIED, lambda _owner: reason, now)

    def lease_owners(self) -> list[str]:
        return self.driver.lease_owners()

    def _recover(self, owner: str | None, kind: int, reason_of: Callable[[Any], str],
                 now: float) -> list[Settled]:
        """Settle leases nobody will settle through ``lifecycle.decide``, like any
        attempt's end, fenced by their old owner; one transaction."""
        follow_ups = self.driver.reclaim_follow_ups

        def body(turn: Turn) -> list[Answer]:
            answers: list[Answer] = []
            for row in turn.reclaimable(owner):
                lease_owner = row[7]
                lease = row_codec.decode_lease(row, follow_ups)
                if isinstance(lease, row_codec.Malformed):  # R44
                    answers.append(turn.settle_malformed(lease, lease_owner))
                    continue
                answers.extend(turn.settle([self._fenced(
                    turn, lease, Outcome(lease.job_id, lease.attempt, kind, reason_of(lease_owner)),
                    None, owner=lease_owner)]))
            return answers
        return self.driver.transaction("reclaim", now, body)

    def close(self) -> None:
        self.driver.close()
