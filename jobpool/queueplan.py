"""Which queues a pool claims from, and how a turn's free slots are shared among them.

R7's one claim order starts here: paused queues are skipped (R38), then the
queues are taken in the order ``--queues`` lists them, or, with weights
(``--queues high:3,default:1``), each turn's free slots are shared in
proportion to the weights. Inside one queue the claim statement orders by
priority, place in line and id.

Weights use smooth weighted round robin: each slot to fill adds every queue's
weight to its credit, the queue with the most credit gets the slot and pays the
sum of the weights. Over any run of turns the shares stay within one slot of
the weights (3:1 gives high, high, default, high, ... exactly), whether a pool
claims one slot a turn or eight. A queue with nothing ready gives its share to
the others in the same turn (the claimers' second pass), so weights never
leave a slot idle while any served queue has work.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from jobpool.errors import JobpoolError, RegistryError
from jobpool.options import validate_queue

#: The largest weight ``--queues`` takes (a ratio, not a count of slots).
MAX_WEIGHT = 1000


class Share(NamedTuple):
    """One queue's part of a turn: claim at most ``quota`` from it in the first pass."""

    queue: str
    quota: int


class QueueSpec(NamedTuple):
    """What ``--queues`` said: the queues in order, and their weights if any were given."""

    queues: tuple[str, ...]
    weights: tuple[int, ...] | None

    def __str__(self) -> str:
        if self.weights is None:
            return ",".join(self.queues)
        return ",".join(f"{q}:{w}" for q, w in zip(self.queues, self.weights))


def parse_queues(text: str) -> QueueSpec:
    """``high,default`` (strict order) or ``high:3,default:1`` (weights; a queue
    listed without one weighs 1). One-line ``JobpoolError`` naming what is wrong."""
    queues: list[str] = []
    weights: list[int] = []
    weighted = False
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, weight_text = part.partition(":")
        name = name.strip()
        try:
            validate_queue(name)
        except RegistryError as exc:
            raise JobpoolError(f"--queues: {exc}") from None
        if name in queues:
            raise JobpoolError(f"--queues: queue {name!r} is listed twice")
        weight = 1
        if sep:
            weighted = True
            try:
                weight = int(weight_text)
            except ValueError:
                weight = 0
            if not 1 <= weight <= MAX_WEIGHT:
                raise JobpoolError(f"--queues: the weight of {name!r} must be a whole number "
                                   f"from 1 to {MAX_WEIGHT}, not {weight_text.strip()!r}")
        queues.append(name)
        weights.append(weight)
    if not queues:
        raise JobpoolError(f"--queues: no queue named in {text!r}")
    return QueueSpec(tuple(queues), tuple(weights) if weighted else None)


class QueuePlan:
    """A pool's queues, their weights and the paused ones; ``shares(n)`` plans one turn."""

    def __init__(self, queues: Sequence[str], weights: Sequence[int] | None = None) -> None:
        self.queues = tuple(queues)
        self.weights = tuple(weights) if weights is not None else None
        if self.weights is not None and len(self.weights) != len(self.queues):
            raise ValueError("one weight per queue")
        self._weight = dict(zip(self.queues, self.weights or ()))
        #: R38: queues no pool claims from, as the last heartbeat read them.
        self.paused: frozenset[str] = frozenset()
        #: The queues claimed from now, in order: ``queues`` less the paused ones (kept
        #: as the pauses change, since a turn reads it).
        self.active = self.queues
        self._credit = dict.fromkeys(self.queues, 0)

    def set_paused(self, paused: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
        """Take the store's paused queues; returns (newly paused, resumed) among this
        pool's own queues."""
        mine = frozenset(paused) & frozenset(self.queues)
        before, self.paused = self.paused, mine
        self.active = tuple(q for q in self.queues if q not in mine)
        return mine - before, before - mine

    def __str__(self) -> str:
        return str(QueueSpec(self.queues, self.weights))

    def shares(self, n: int) -> tuple[Share, ...] | None:
        """How ``n`` free slots are shared this turn, in the order a second pass
        gives away what a queue could not use; None when that is the claimer's
        own strict order (no weights, nothing paused)."""
        if self.weights is None and not self.paused:
            return None
        active = self.active
        if self.weights is None or n <= 0 or len(active) < 2:
            return tuple(Share(q, n) for q in active)
        weight = self._weight
        total = sum(weight[q] for q in active)
        credit = self._credit
        quota = dict.fromkeys(active, 0)
        for _ in range(n):
            for q in active:
                credit[q] += weight[q]
            best = max(active, key=credit.__getitem__)  # the first of equals: listed order
            credit[best] -= total
            quota[best] += 1
        order = sorted(active, key=lambda q: -weight[q])  # stable: listed order among equals
        return tuple(Share(q, quota[q]) for q in order)


class _FirstAsk(Exception):
    """Stops ``claim_in_shares`` at its first ask (``first_claim``)."""


def first_claim(shares: Sequence[Share] | None, queues: Sequence[str],
                n: int) -> tuple[str, int] | None:
    """The first ``(queue, want)`` that ``claim_in_shares`` asks for (None: it asks for
    none), whatever the claims answer: the claim a turn can send before it knows
    anything (R66). Read from ``claim_in_shares`` itself, stopped at that ask, so the
    claim sent and the one the turn's answer is given to cannot drift apart."""
    asked: list[tuple[str, int]] = []

    def record(queue: str, want: int) -> int:
        asked.append((queue, want))
        raise _FirstAsk

    try:
        claim_in_shares(shares, queues, n, [], record)
    except _FirstAsk:
        pass
    return asked[0] if asked else None


def as_shares(shares: Sequence[Share] | None, queues: Sequence[str],
              n: int) -> tuple[Share, ...]:
    """``claim_in_shares``'s claim of ``n`` as shares alone, for a claim that takes every
    row it finds (R68's compiled step, which declines a turn meeting a row past its
    deadline or one the codec must read): no shares (strict order) is every queue's
    share all of ``n``, which the two passes then claim as the strict order does (a
    queue that gave less than asked is empty; one that gave all filled the turn). A
    turn that claims nothing has none."""
    if n <= 0:
        return ()
    if shares is None:
        return tuple(Share(queue, n) for queue in queues)
    return tuple(shares)


def claim_in_shares(shares: Sequence[Share] | None, queues: Sequence[str], n: int,
                    claimed: list, claim_queue: Callable[[str, int], int]) -> None:
    """Fill up to ``n`` slots by ``shares``: each queue up to its quota, then what is
    left in the shares' order from queues that still had rows. ``claim_queue(queue,
    want)`` claims into ``claimed`` and returns how many rows it took (rows retired
    past their deadline included, R10), so a queue that returned fewer than asked
    is known to be empty for this turn and is not asked again. Without shares,
    ``queues`` in strict order, each asked for what the ones before left."""
    if shares is None:
        for queue in queues:
            want = n - len(claimed)
            if want <= 0:
                return
            claim_queue(queue, want)
        return
    emptied: set[str] = set()
    for queue, quota in shares:
        want = min(quota, n - len(claimed))
        if want <= 0:
            continue
        if claim_queue(queue, want) < want:
            emptied.add(queue)
    for queue, _quota in shares:
        want = n - len(claimed)
        if want <= 0:
            return
        if queue not in emptied and claim_queue(queue, want) < want:
            emptied.add(queue)
