"""What a pool adds to the store's per-minute rollups (R56) between two heartbeats.

The loop tells it of each claim (pickup latency) and each settle (done, retried, dead,
run time); each costs a dict lookup and a few list additions, no store call. The
heartbeat takes what was counted (``rows``) and writes it in its own transaction;
only once the store took it is it cleared (``clear``), so a beat the store refused
leaves the counts for the next one (R26). The store adds them to the row of the
minute the beat is written in, on its own clock (R7a).
"""
from __future__ import annotations

from bisect import bisect_left

from jobpool.rollups import BOUNDS, BUCKETS, COUNTS, Rollup

_DONE, _RETRIED, _DEAD = COUNTS.index("done"), COUNTS.index("retried"), COUNTS.index("dead")
_WAIT_N = COUNTS.index("wait_n")
_WAIT_HIST = COUNTS.index("w0")
_RUN_N = COUNTS.index("run_n")
_RUN_HIST = COUNTS.index("r0")
_WIDTH = len(COUNTS)
assert COUNTS[_WAIT_N:_WAIT_N + 3] == ("wait_n", "wait_sum", "wait_max")
assert COUNTS[_RUN_N:_RUN_N + 3] == ("run_n", "run_sum", "run_max")
assert _RUN_HIST + BUCKETS == _WIDTH

#: What a settle adds to, by what ``lifecycle.settled_as`` names it (the pool's own
#: counters ``completed``, ``retried`` and ``dead``); other ways back to ready (defer,
#: reschedule, release) are not failures and add nothing.
_SETTLED = {"done": _DONE, "retried": _RETRIED, "dead": _DEAD}


class Rollups:
    """Counts by job name since the last beat that wrote them."""

    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: dict[str, list[float]] = {}

    def _row(self, name: str) -> list[float]:
        row = self._names.get(name)
        if row is None:
            row = self._names[name] = [0] * _WIDTH
        return row

    def claimed(self, name: str, waited: float) -> None:
        """A job claimed ``waited`` seconds after it was due (its pickup latency)."""
        waited = waited if waited > 0.0 else 0.0
        row = self._names.get(name) or self._row(name)
        row[_WAIT_N] += 1
        row[_WAIT_N + 1] += waited
        if waited > row[_WAIT_N + 2]:
            row[_WAIT_N + 2] = waited
        row[_WAIT_HIST + bisect_left(BOUNDS, waited)] += 1  # rollups.bucket, inlined

    def settled(self, name: str, outcome: str, ran: float | None) -> None:
        """An attempt settled as ``outcome`` (``settled_as``'s word) after running ``ran``
        seconds (None: it never ran here, as a row past its deadline at claim)."""
        index = _SETTLED.get(outcome)
        if index is None and ran is None:
            return
        row = self._names.get(name) or self._row(name)
        if index is not None:
            row[index] += 1
        if ran is not None:
            ran = ran if ran > 0.0 else 0.0
            row[_RUN_N] += 1
            row[_RUN_N + 1] += ran
            if ran > row[_RUN_N + 2]:
                row[_RUN_N + 2] = ran
            row[_RUN_HIST + bisect_left(BOUNDS, ran)] += 1

    def rows(self) -> tuple[Rollup, ...]:
        """What was counted, by name in order (so concurrent beats of several pools lock
        the rows of a minute in one order)."""
        return tuple(Rollup(name, tuple(self._names[name])) for name in sorted(self._names))

    def clear(self) -> None:
        self._names.clear()
