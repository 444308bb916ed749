"""The supervisor: one per host and store; owns the store's claimer and the children.

Split by responsibility:

- ``loop.py``: the loop, settling and claiming in one turn, counting, stopping;
- ``slots.py``: the children, one per slot: spawn, reap, kill, resize (R19-R20, R27);
- ``operations.py``: the heartbeat and what rides on it: operators' requests, dead
  pools, the retention sweep, on_dead hooks, periodic jobs;
- ``state.py``: the little the three share (counters, unsettled outcomes, stop state).

It runs no SQL: every store call goes through ``jobpool.store.Store`` and its claimer.
"""
from jobpool.supervisor.loop import EXIT_STORE_GAVE_UP, STORE_PAUSE_MAX, Supervisor

__all__ = ["Supervisor", "EXIT_STORE_GAVE_UP", "STORE_PAUSE_MAX"]
