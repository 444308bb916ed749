"""Whether a pool's row in the store still stands for a running supervisor (R24, R24b).

One judgement, used by every reader: ``pools``, ``status``, ``stop``, ``scale``, the
dashboard, and the supervisors that reclaim a dead pool's leases. A pool is dead
when its process is gone (same host: the pid is free or now names a newer
process, R24) or when it has not heartbeated for ``DEAD_AFTER`` seconds (any host,
R24b: paused, partitioned, or killed where no pid can be checked).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jobpool import bounds, procinfo

#: R24b: seconds without a heartbeat after which a pool is dead. Pools beat every
#: second (``JOBPOOL_HEARTBEAT``), so ten missed beats are not a slow turn.
DEAD_AFTER = bounds.env_seconds("JOBPOOL_DEAD_AFTER", 10.0)


def pool_death(pool: Mapping[str, Any], now: float, dead_after: float = DEAD_AFTER) -> str | None:
    """Why the pool of this row is dead (``"process gone"``, ``"no heartbeat for 42 s"``),
    or None while it lives. A heartbeat that is no time (a row written by hand, R44)
    judges nothing: the pool is not taken for dead by it (its leases still expire,
    R23), as taking a live pool's jobs back would run them twice."""
    if procinfo.owner_is_dead(pool["owner"]):
        return "process gone"
    beat = pool["heartbeat_at"]
    if not bounds.finite_number(beat):
        return None
    silent = now - beat
    if silent > dead_after:
        return f"no heartbeat for {silent:.0f} s"
    return None


def live_pools(pools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ``store.pools()`` whose supervisor is running."""
    return [pool for pool in pools if pool.get("dead") is None]


def chosen(pools: list[dict[str, Any]], *, owner: str | None = None,
           host: str | None = None) -> list[dict[str, Any]]:
    """The live pools an operator's request goes to: all of them, or those with this
    ``owner`` (``--pool``) and/or on this ``host`` (``--host``)."""
    return [pool for pool in live_pools(pools)
            if (owner is None or pool["owner"] == owner) and (host is None or pool["host"] == host)]


def describe_unserved(group: Mapping[str, Any]) -> str:
    """One group of ``unserved`` as the log and ``status`` name it ("10000+ x name" when
    its count stopped at its bound, R47)."""
    return f"{group['count']}{'+' if group.get('capped') else ''} x {group['name']} " \
           f"(queue {group['queue']})"


def unserved(pairs: Iterable[tuple[Any, Any]], live: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """Of the ``(queue, name)`` pairs of ready rows, those no live pool serves (R7,
    R28). Empty while no pool runs: then nothing is served, and the pools list says
    so. A pool of an earlier release does not record its names; it is taken to serve
    every name of its queues."""
    if not live:
        return []
    served = [(set(p["queues"].split(",")), set(p["names"].split(",")) if p.get("names") else None)
              for p in live]
    return [(queue, name) for queue, name in pairs
            if not any(queue in queues and (names is None or name in names)
                       for queues, names in served)]
