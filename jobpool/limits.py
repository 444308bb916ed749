"""Concurrency limits (R35) and rate limits (R36): what they say, and how a claim
honours them.

A limit belongs to the store, not to a pool: a job's declared policy
(``@job(max_running=2, group_by="customer", rate="30/m", burst=5)``) is written
into the store when a pool that registers it starts, a queue's limit by
``jobpool limits set``, and every pool reads them back at each heartbeat, so
two releases running side by side during a rolling restart enforce the same
numbers (the last pool to start wins, and the others log the disagreement).

**Groups.** A limited job belongs to a group: the value of its ``group_by``
keyword argument, ``enqueue_with(group=...)``, or ``""`` (the name as a
whole). ``max_running`` and ``rate`` count per name and group. A row of a
limited name written without one (by a process that never imported the job, a
chain's next step the store enqueues, a row enqueued before the limit existed)
gets it from the store: the keyword argument the stored limit's ``group_by``
names, read from the row's JSON payload, or ``""`` when it has none; so a limit
can never be dodged by the enqueuer.

**The claim.** Rows of limited names are left out of the ordinary claim (it
names only the unlimited ones); each (queue, priority, name, group) with ready
rows has a *lane* in the store, and a limited claim walks a queue's lanes by
priority, then the one served longest ago first (rotation), reading with each
its group's running jobs, bucket and first due row. A group at its limit, or
without a token, is passed over: its jobs keep their place and spend no
attempt, and the rows behind them (other groups, other names) are claimed at
once. ``choose`` then merges the candidates in R7's order: priority, then
rotation (every group's first row before any group's second), then place in
line and id.
"""
from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from jobpool import bounds
from jobpool.errors import EnqueueError, JobpoolError, RegistryError

#: The most characters a group value may have (it is stored with every row).
MAX_GROUP_CHARS = 200

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_UNIT_SECONDS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
                 "h": 3600, "hour": 3600}


class Rate(NamedTuple):
    """A token bucket's refill: ``per_second`` tokens a second, as ``text`` said."""

    per_second: float
    text: str

    def __str__(self) -> str:
        return self.text


def parse_rate(text: Any, what: str = "rate") -> Rate:
    """``"30/m"``, ``"5/s"``, ``"100/h"``, ``"10/5m"``: a ``Rate``, or a
    ``JobpoolError`` naming what is wrong."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise JobpoolError(f"{what} must read like '30/m', '5/s' or '100/h', not {text!r}")
    count, span, unit = float(match[1]), match[2], match[3]
    window = (int(span) if span else 1) * _UNIT_SECONDS[unit]
    if not count > 0 or window <= 0:
        raise JobpoolError(f"{what} must allow more than 0 jobs per window, not {text!r}")
    return Rate(count / window, text.strip())


class NameLimit(NamedTuple):
    """One job name's limits as the store keeps them (``jobpool_limits``)."""

    name: str
    max_running: int | None   # per group; None: no concurrency limit
    rate: Rate | None         # per group; None: no rate limit
    burst: int                # the most tokens a group's bucket holds
    group_by: str | None      # the keyword argument that names a row's group


class LimitPlan(NamedTuple):
    """Every limit of a store, as a pool last read it (R35, R36)."""

    names: Mapping[str, NameLimit]
    #: queue -> at most this many of its jobs running at once, across all pools.
    queues: Mapping[str, int]

    def for_pool(self, names: Iterable[str], queues: Iterable[str]) -> "LimitPlan | None":
        """The part of the plan a pool serving these names and queues obeys; None
        when nothing it serves is limited (it keeps the ordinary claim)."""
        limited = {n: self.names[n] for n in names if n in self.names}
        queue_limits = {q: self.queues[q] for q in queues if q in self.queues}
        if not limited and not queue_limits:
            return None
        return LimitPlan(limited, queue_limits)


NO_LIMITS = LimitPlan({}, {})


def check_max_running(value: Any, what: str = "max_running") -> int | None:
    if value is None:
        return None
    if not bounds.whole_within(value, 1, bounds.INT32_MAX):
        raise RegistryError(f"{what} must be a whole number from 1 to {bounds.INT32_MAX}, "
                            f"not {value!r}")
    return value


def check_burst(value: Any) -> int:
    # R41: both stores keep it as a 32-bit integer (PostgreSQL's `integer` refused a
    # larger one at every heartbeat, and the pool never claimed).
    if not bounds.whole_within(value, 1, bounds.INT32_MAX):
        raise RegistryError(f"burst must be a whole number from 1 to {bounds.INT32_MAX}, "
                            f"not {value!r}")
    return value


def declared(name: str, *, max_running: Any, rate: Any, burst: Any,
             group_by: Any) -> NameLimit | None:
    """A job's limits from its decorator, validated at import; None without any."""
    max_running = check_max_running(max_running)
    parsed = None
    if rate is not None:
        try:
            parsed = parse_rate(rate)
        except JobpoolError as exc:
            raise RegistryError(str(exc)) from None
    burst = check_burst(burst)
    if group_by is not None and (not isinstance(group_by, str) or not group_by.isidentifier()):
        raise RegistryError(f"group_by must name a keyword argument, not {group_by!r}")
    if max_running is None and parsed is None:
        if group_by is not None:
            raise RegistryError("group_by needs max_running= or rate=: it says what the limit "
                                "counts per")
        if burst != 1:
            raise RegistryError("burst needs rate=")
        return None
    if parsed is None and burst != 1:
        raise RegistryError("burst needs rate=")
    return NameLimit(name, max_running, parsed, burst, group_by)


def check_group(value: Any, what: str = "group") -> str:
    """A row's group: a non-empty string or an integer, kept as text."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise EnqueueError(f"{what} must be a string or an integer (it names the row's group "
                           f"for max_running and rate), not {value!r}")
    text = str(value)
    if not text or len(text) > MAX_GROUP_CHARS or "\0" in text:
        raise EnqueueError(f"{what} must be 1 to {MAX_GROUP_CHARS} characters without NUL, "
                           f"not {value!r}")
    if bounds.not_unicode(text):
        raise EnqueueError(f"{what} {bounds.NOT_UNICODE}")
    return text


def group_of(name: str, group_by: str | None, kwargs: Mapping | None, group: Any) -> str | None:
    """The group an enqueue puts its row in: ``group=``, else the ``group_by``
    keyword argument; an enqueue of a per-group job without either is refused, never
    left unlimited."""
    if group is not None:
        return check_group(group)
    if group_by is None:
        return None
    if not kwargs or group_by not in kwargs:
        raise EnqueueError(f"{name} is limited per {group_by!r}: pass {group_by}= as a keyword "
                           f"argument (or group=) when you enqueue it")
    return check_group(kwargs[group_by], f"{group_by} (the group of {name})")


# --- the claim ------------------------------------------------------------------------------


class Lane(NamedTuple):
    """Ready rows of one (queue, priority, name, group) may exist: a limited claim's
    unit of rotation, visited in order of ``served_at`` (None: never served)."""

    id: int
    queue: str
    priority: int
    name: str
    group: str
    served_at: float | None
    seq: int = 0   # how often it was made again: a claim drops only the lane it read


class LaneState(NamedTuple):
    """A lane as a claim reads it, with its group's state: whether this claim holds
    the group (on PostgreSQL, another claim may: the group is skipped this turn), its
    bucket, its running jobs, and the lane's first due row (id, priority, line_at)."""

    lane: Lane
    held: bool
    tokens: float | None
    refilled_at: float | None
    running: int
    head: tuple[int, int, float] | None


class Candidate(NamedTuple):
    """A row a limited claim may take: where it stands in R7's order, and the lane
    it came from (None: a row of an unlimited name)."""

    job_id: int
    priority: int
    line_at: float
    round: int      # 0 for its group's first row this turn, 1 for the second, ...
    lane: Lane | None


def refill(tokens: float | None, refilled_at: float | None, rate: Rate, burst: int,
           now: float) -> float:
    """R36: the tokens a bucket holds at ``now``: it starts full, refills at the
    rate on the store's clock, and holds at most ``burst``."""
    if not (bounds.finite_number(tokens) and bounds.finite_number(refilled_at)):
        # Never written, or written by hand as no number (R44): a bucket starts full.
        return float(burst)
    return min(float(burst), tokens + max(0.0, now - refilled_at) * rate.per_second)


#: A group's room when nothing but its rate limits it and its bucket is not read.
UNLIMITED_ROOM = 1 << 30


def room_of(limit: NameLimit, running: int, tokens: float | None) -> int:
    """How many more rows of a group a claim may take: its limit less its running
    jobs, and no more than the whole tokens in its bucket (``tokens`` None: no rate)."""
    room = UNLIMITED_ROOM if limit.max_running is None else max(0, limit.max_running - running)
    if limit.rate is not None and tokens is not None:
        room = min(room, math.floor(tokens))
    return room


def choose(candidates: Sequence[Candidate], want: int) -> list[Candidate]:
    """R7 among the candidates: priority, then rotation between groups (every
    group's first row before any group's second), then place in line, then id."""
    ranked = sorted(candidates, key=_claim_order)
    return ranked[:max(0, want)]


def _claim_order(candidate: Candidate) -> tuple:
    """R7's sort key of a candidate. A row's priority or line that is no number (a row
    written by hand, R44) sorts first: the claim takes it, and the codec's refusal
    settles it dead at once naming the column."""
    priority = -candidate.priority if bounds.finite_number(candidate.priority) else -math.inf
    line = candidate.line_at if bounds.finite_number(candidate.line_at) else -math.inf
    return (priority, candidate.round, line, candidate.job_id)


class LimitedSource(Protocol):
    """What a store gives a limited claim, inside the claim's transaction: reads of
    lanes, running counts and buckets (locked where several hosts claim), probes
    of rows, and the writes that follow a claim. ``store/limit_claim.py`` has the
    one both stores use."""

    def running_in_queue(self, queue: str) -> int: ...

    def lane_page(self, queue: str, names: Sequence[str], offset: int, count: int,
                  now: float) -> list[LaneState]:
        """The next ``count`` lanes of these names in rotation order, each with its
        group's state (where several hosts claim, its group locked, or not ``held``
        when another claim holds it; the running jobs may be counted before the lock,
        which is why ``Picked`` carries caps)."""
        ...

    def probe_lane(self, lane: Lane, now: float,
                   count: int) -> list[tuple[int, int, float]]: ...

    def drop_lane_if_empty(self, lane: Lane) -> None: ...

    def probe_unlimited(self, queue: str, now: float,
                        count: int) -> list[tuple[int, int, float]]: ...

    def served(self, lanes: Iterable[Lane], now: float) -> None: ...

    def set_tokens(self, group: tuple[str, str], tokens: float, now: float) -> None: ...


#: Lanes read per page while a claim looks for groups with room: a few more than the
#: rows it wants (every lane on a page is read with its group, so not many more).
LANE_PAGE_EXTRA = 2


class Picked(NamedTuple):
    """The rows a limited claim chose, in claim order, each with its ``cap``: the most
    running jobs its group may have, counted when the row is taken, for it to be
    taken (its limit, less the rows of its group this claim takes before it; None
    without a concurrency limit), and its lane (None: a row of an unlimited name).
    SQLite's counts are exact (one writer at a time); PostgreSQL's page counts in a
    snapshot taken before its locks, so its claim statement counts again and takes a
    row only under its cap. ``tokens``: each rated group's bucket as the claim read
    it, for ``charge``. ``token_wait``: the seconds until the first group passed over
    for want of a token (with a due row and room under its concurrency limit) has a
    whole one; None when none was (R36: the pool claims again then, not at its
    poll)."""

    ids: list[int]
    caps: list[int | None]
    lanes: list[Lane | None]
    tokens: dict[tuple[str, str], float]
    token_wait: float | None = None


NOTHING_PICKED = Picked([], [], [], {})


def sooner(wait: float | None, other: float | None) -> float | None:
    """The earlier of two token waits (None: no wait)."""
    if wait is None:
        return other
    return wait if other is None else min(wait, other)


def plan_claim(source: LimitedSource, plan: LimitPlan, queue: str, want: int, now: float,
               has_unlimited: bool) -> Picked:
    """The rows a limited claim chooses from ``queue`` (at most ``want``), in claim
    order. Once the claim statement has taken them, ``charge`` writes what the rows
    it took cost, in the same transaction."""
    queue_limit = plan.queues.get(queue)
    if queue_limit is not None:
        want = min(want, max(0, queue_limit - source.running_in_queue(queue)))
    if want <= 0:
        return NOTHING_PICKED
    candidates: list[Candidate] = []
    if has_unlimited:
        candidates.extend(Candidate(job_id, priority, line_at, 0, None) for job_id, priority,
                          line_at in source.probe_unlimited(queue, now, want))
    groups = _Groups()
    if plan.names:
        _walk_lanes(source, plan, queue, want, now, groups, candidates)
    return _picked(plan, groups, choose(candidates, want))


def charge(source: LimitedSource, picked: Picked, claimed: Collection[int] | None,
           now: float) -> None:
    """What the rows a claim took cost, written through ``source``: their lanes go to
    the back of the rotation, and each row of a rated group takes a token from its
    bucket as the claim read it (R36). ``claimed``: the ids the claim statement took
    (None: every row picked); a row it refused (PostgreSQL: over its cap, or taken by
    another host since the page was read) costs nothing."""
    served: dict[Lane, None] = {}
    spent: dict[tuple[str, str], int] = {}
    for job_id, lane in zip(picked.ids, picked.lanes):
        if lane is None or (claimed is not None and job_id not in claimed):
            continue
        served[lane] = None
        key = (lane.name, lane.group)
        spent[key] = spent.get(key, 0) + 1
    if served:
        source.served(served, now)
    for key, count in spent.items():
        tokens = picked.tokens.get(key)
        if tokens is not None:
            source.set_tokens(key, tokens - count, now)


class _Groups:
    """The groups a claim has sized so far: how many more rows of each it may take,
    and the tokens each rated one's bucket held when the claim read it."""

    def __init__(self) -> None:
        self.room: dict[tuple[str, str], int] = {}
        self.tokens_at_lock: dict[tuple[str, str], float] = {}
        #: rated groups: (tokens, rate per second, room under the concurrency limit).
        self.rated: dict[tuple[str, str], tuple[float, float, int]] = {}
        #: the groups found with a due row (taken or passed over).
        self.with_rows: set[tuple[str, str]] = set()

    def token_wait(self, taken: Mapping[tuple[str, str], int]) -> float | None:
        """R36: the seconds until the first rated group with a due row, left without a
        whole token once this claim takes ``taken`` rows of each, has one again (its
        concurrency limit leaving room). A group whose rows this claim took all is
        counted too: the wake-up it costs finds its lane empty, once."""
        wait = None
        for key in self.with_rows:
            found = self.rated.get(key)
            if found is None:
                continue
            tokens, per_second, room = found
            spent = taken.get(key, 0)
            if tokens - spent < 1.0 and room - spent > 0:
                wait = sooner(wait, (1.0 - (tokens - spent)) / per_second)
        return wait


def _walk_lanes(source: LimitedSource, plan: LimitPlan, queue: str, want: int, now: float,
                groups: _Groups, candidates: list[Candidate]) -> None:
    """Visit lanes in rotation order: a first pass takes each group's head row, a
    second (only when the first left slots) takes more rows of groups with room."""
    names = sorted(plan.names)
    rooms = groups.room
    visited: list[Lane] = []
    offset = 0
    page_size = want + LANE_PAGE_EXTRA
    while len(visited) < want:
        page = source.lane_page(queue, names, offset, page_size, now)
        offset += len(page)
        for state in page:
            if not state.held:
                continue  # another claim holds its group: it is passed over this turn
            lane = state.lane
            key = (lane.name, lane.group)
            room = rooms.get(key)
            if room is None:
                room = rooms[key] = _room(plan.names[lane.name], state, groups, now)
            if state.head is None:
                source.drop_lane_if_empty(lane)
                continue
            groups.with_rows.add(key)
            if room <= 0:
                continue
            job_id, priority, line_at = state.head
            candidates.append(Candidate(job_id, priority, line_at, 0, lane))
            rooms[key] = room - 1
            visited.append(lane)
            if len(visited) >= want:
                return
        if len(page) < page_size:
            break
    # Second pass, over the few lanes the first found rows in (fewer than ``want``):
    # more rows from each group with room, as many as could be wanted; ``choose``
    # then takes them round by round, so the slots alternate between the groups.
    for lane in visited:
        key = (lane.name, lane.group)
        room = rooms[key]
        if room <= 0:
            continue
        rows = source.probe_lane(lane, now, 1 + min(room, want - 1))[1:room + 1]
        candidates.extend(Candidate(job_id, priority, line_at, index, lane)
                          for index, (job_id, priority, line_at) in enumerate(rows, 1))
        rooms[key] = room - len(rows)


def _room(limit: NameLimit, state: LaneState, groups: _Groups, now: float) -> int:
    """How many rows of a group this claim may take: its limit less its running
    jobs, and no more than the whole tokens in its bucket (noted, to spend)."""
    tokens = None
    if limit.rate is not None:
        key = (state.lane.name, state.lane.group)
        tokens = refill(state.tokens, state.refilled_at, limit.rate, limit.burst, now)
        groups.tokens_at_lock[key] = tokens
        groups.rated[key] = (tokens, limit.rate.per_second,
                             room_of(limit, state.running, None))
    return room_of(limit, state.running, tokens)


def _picked(plan: LimitPlan, groups: _Groups, chosen: list[Candidate]) -> Picked:
    """The chosen rows, each with its cap and lane."""
    caps: list[int | None] = []
    taken: dict[tuple[str, str], int] = {}
    for candidate in chosen:
        lane = candidate.lane
        if lane is None:
            caps.append(None)
            continue
        key = (lane.name, lane.group)
        before = taken.get(key, 0)
        taken[key] = before + 1
        limit = plan.names[lane.name].max_running
        caps.append(None if limit is None else limit - before)
    return Picked([c.job_id for c in chosen], caps, [c.lane for c in chosen],
                  groups.tokens_at_lock, groups.token_wait(taken))
