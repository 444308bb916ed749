"""What a pool does beside running jobs: the heartbeat and the operators' requests it
brings back (stop, scale, cancel), burying dead pools, the retention sweep, on_dead
hooks and periodic jobs (R21, R22, R24, R27, R29, R31, R32, R33).

None of it is on a job's path: every call here is best effort, and a store that
does not answer is tried again at the next heartbeat (R26).
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any, Callable

from jobpool import events, jobs, lifecycle, liveness, periodic, procinfo, protocol, requests
from jobpool.config import HEARTBEAT_EVERY, PoolConfig
from jobpool.errors import JobpoolError, StoreError
from jobpool.hooks import HookRunner
from jobpool.limits import LimitPlan
from jobpool.queueplan import QueuePlan
from jobpool.store.base import Store
from jobpool.store.limit_store import describe, plan_from_rows
from jobpool.store.records import SWEEP_BATCH, Heartbeat, ProgressReport
from jobpool.supervisor.slots import Slots, progress_reports
from jobpool.supervisor.state import PoolState

log = logging.getLogger(__name__)

#: R33: how long a periodic job whose schedule failed waits before it is asked again.
PERIODIC_RETRY = 60.0

#: How often the pool sweeps expired done rows and surplus dead rows (R32), seconds.
SWEEP_EVERY = 10.0


class Operations:
    """The heartbeat and the work that rides on it, for one pool."""

    def __init__(self, config: PoolConfig, state: PoolState, store: Store, owner: str,
                 names: tuple[str, ...], plan: QueuePlan, *, claimer_name: str,
                 take_back: Callable[[str, str, float], list | None],
                 request_stop: Callable[[], None],
                 apply_limits: Callable[[LimitPlan | None], None] | None = None,
                 turn_holds_locks: Callable[[], bool] = lambda: False) -> None:
        """``take_back(owner, reason, now)`` settles every lease of a dead pool (the
        loop's, since it settles through the claimer); ``request_stop`` is what a
        ``jobpool stop`` does to this pool; ``apply_limits(plan)`` hands the claimer
        the store's limits each heartbeat reads (R35, R36); ``turn_holds_locks()``
        says whether the loop's turn in flight is a transaction holding what it settled
        (R66): the sweep and the periodic enqueues, which could need those locks, wait
        for a later pass of the loop rather than for the loop itself."""
        self.config = config
        self.state = state
        self.store = store
        self.owner = owner
        self.names = names
        self.plan = plan
        self.claimer_name = claimer_name  # the pool row's "core" (R29)
        self.take_back = take_back
        self.request_stop = request_stop
        self.apply_limits = apply_limits
        self.turn_holds_locks = turn_holds_locks
        self.slots: Slots | None = None  # set by the loop once the slots exist
        self.next_heartbeat = 0.0
        self._next_sweep = 0.0
        #: R24b: since when this pool's heartbeats have succeeded without a break.
        self._beating_since: float | None = None
        #: R24b: this pool has had its row (a later beat without it means it was buried).
        self._registered = False
        registered = jobs.registered()
        self.hooks = HookRunner()
        self._hook_queue: list[tuple[int, str]] = []
        self._with_hooks = {n: registered[n].on_dead for n in names
                            if n in registered and registered[n].on_dead is not None}
        self.periodic = {n: registered[n].schedule for n in names
                         if n in registered and registered[n].schedule is not None}
        for name, schedule in self.periodic.items():
            warning = periodic.zone_warning(name, schedule)
            if warning:
                log.warning("%s", warning)
        self._periodic_done: dict[str, float] = {}
        #: R33: the periodic jobs whose schedule failed: when to ask it again, and why.
        self._periodic_failed: dict[str, tuple[float, str]] = {}
        #: R35/R36: the limits this release declares for the names it serves, written
        #: into the store before the first claim; what the store says instead, as last
        #: logged.
        self._declared = {n: registered[n].limit for n in names if n in registered}
        self._limits_declared = False
        self._limit_plan: LimitPlan | None = None
        self._disagreements: frozenset[str] = frozenset()

    # -- heartbeat (R22, R25, R27, R29, R31) ------------------------------------------------

    def first_beat(self, now: float) -> bool:
        """The beat a pool makes before its first claim: registered, and the pauses
        read (R24b, R38); the next one is due a heartbeat later."""
        self.heartbeat_due(now)
        return self.heartbeat(now)

    def heartbeat_due(self, now: float) -> bool:
        if now < self.next_heartbeat:
            return False
        self.next_heartbeat = now + HEARTBEAT_EVERY  # advanced even when skipped
        return True

    def heartbeat(self, now: float) -> bool:
        """Write this pool's row and its jobs' progress, act on what operators asked;
        False if the store did not take it."""
        slots = self.slots
        assert slots is not None
        state = self.state
        beat = self._beat()
        unreported = slots.unreported_progress()
        try:
            if not self._limits_declared:
                self.store.limits.declare(self._declared, self.owner,
                                          on_change=lambda change: log.warning("%s", change))
                self._limits_declared = True
            requests = self.store.heartbeat(beat, progress_reports(unreported), now)
        except StoreError as exc:
            log.debug("heartbeat skipped: %s", exc)  # the hot path reports store errors (R26)
            self._beating_since = None  # R24b: a break in our own beats; judge nobody yet
            state.store_trouble = True
            return False
        for slot in unreported:
            slot.progress_dirty = False
        state.rollups.clear()  # R56: written; a refused beat keeps them for the next
        if requests.registered_anew and self._registered:
            # R24b: another pool judged this one dead, took its leases back and removed
            # its row; what its children run now belongs to nobody here. Kill them (the
            # fence refuses their settles anyway) and go on as a newly registered pool.
            killed = slots.release_all(now, "this pool was judged dead by another; its "
                                            "lease was taken back")
            events.emit(events.POOL_JUDGED_DEAD, owner=self.owner, jobs_killed=killed)
        if not self._registered:
            self.state.want_claim = True  # the claims held back until now (R24b, R38)
        self._registered = True
        self._beating_since = self._beating_since or now
        state.beaten_at, state.store_trouble = time.monotonic(), False  # R63: a duration
        self._obey_pauses(requests.paused)
        self._obey_limits(requests.limit_rows)
        self._bury_dead_pools(now)
        if requests.stop:
            self.request_stop()
        if requests.procs is not None:
            slots.resize(int(requests.procs))
        for job_id, attempt in requests.cancels:
            slots.cancel(job_id, attempt, lifecycle.CANCELLED, now)
        return True

    def sweep_if_due(self, now: float) -> None:
        """R32: the retention sweep, every ``SWEEP_EVERY`` seconds once this pool is
        registered, again at the next heartbeat when it took a full batch. R66: never
        while a limited turn in flight holds what it settled (lanes, shards the sweep
        may delete or read: it would wait for this very loop); the loop asks at each of
        its passes, and one finds no such turn."""
        if not self._registered or now < self._next_sweep or self.turn_holds_locks():
            return
        self._next_sweep = now + SWEEP_EVERY
        try:
            removed = self.store.sweep(now, result_ttl=self.config.result_ttl,
                                       dead_letter_limit=self.config.dead_letter_limit)
        except StoreError as exc:
            log.debug("retention sweep skipped: %s", exc)
        else:
            if removed >= SWEEP_BATCH:
                self._next_sweep = self.next_heartbeat  # behind: again at the next beat

    def _beat(self) -> Heartbeat:
        slots = self.slots
        assert slots is not None
        state = self.state
        counters: dict[str, Any] = dict(state.counters, busy=slots.busy_count(),
                                        unsettled=len(state.pending))
        if slots.scale_refused:
            counters["scale_refused"] = slots.scale_refused
        if self.plan.weights is not None:
            # R38: the weights this pool serves its queues by, for the dashboard's queues.
            counters["weights"] = dict(zip(self.plan.queues, self.plan.weights))
        if state.stopping:
            # R25/R29: the dashboard shows a draining pool and when its drain ends.
            counters["stopping"] = {"running": slots.busy_count(),
                                    "drain_ends_at": state.drain_until}
        return Heartbeat(owner=self.owner, host=procinfo.host_id(), pid=os.getpid(),
                         procs=slots.procs, queues=self.plan.queues, names=self.names,
                         core=self.claimer_name, counters_json=json.dumps(counters),
                         slots_json=json.dumps(slots.views()), rollups=state.rollups.rows())

    def _obey_pauses(self, paused: frozenset[str]) -> None:
        """R38: claim from none of the store's paused queues from now on; running jobs
        of a paused queue finish as they would."""
        newly, resumed = self.plan.set_paused(paused)
        for queue in sorted(newly):
            events.emit(events.QUEUE_PAUSED, queue=queue)
        for queue in sorted(resumed):
            events.emit(events.QUEUE_RESUMED, queue=queue)
        if resumed:
            self.state.want_claim = True

    def _obey_limits(self, limit_rows: tuple[tuple, ...]) -> None:
        """R35/R36: claim under the store's limits from now on; say once where they
        differ from what this release declares (another release wrote them last)."""
        store_plan = plan_from_rows(list(limit_rows))
        plan = store_plan.for_pool(self.names, self.plan.queues)
        if plan != self._limit_plan:
            self._limit_plan = plan
            if self.apply_limits is not None:
                self.apply_limits(plan)
            self.state.want_claim = True
        disagreements = frozenset(
            f"job {name}: this pool declares {describe(limit)}, the store says "
            f"{describe(store_plan.names.get(name))}; obeying the store"
            for name, limit in self._declared.items() if store_plan.names.get(name) != limit)
        for line in sorted(disagreements - self._disagreements):
            log.warning("%s", line)
        self._disagreements = disagreements

    @property
    def registered(self) -> bool:
        """Whether a heartbeat has written this pool's row (and read the pauses)."""
        return self._registered

    def write_final_progress(self, reports: list[ProgressReport]) -> None:
        """A failed attempt's last report, written before its settle (R22). Best
        effort: a busy store loses this report, never the pool (R26)."""
        try:
            self.store.set_progress(self.owner, reports)
        except StoreError as exc:
            log.debug("progress of job %s not written: %s",
                      ", ".join(str(r.job_id) for r in reports), exc)

    def answer_request(self, request: tuple) -> tuple:
        """A running job's request (an add to its batch, R34; its state, R37), carried
        out now, before its settle (which comes later on the same pipe): the fields
        of the answer its child waits for (``requests.answer``)."""
        answer = requests.answer(self.store, self.owner, request)
        if request[0] == protocol.BATCH_ADD:
            self.state.want_claim = True  # the new members may run in a free slot now
        return answer

    def _bury_dead_pools(self, now: float) -> None:
        """Reclaim the leases of pools that are dead, then remove their rows (R24, R24b).

        A pool on this host whose process is gone is judged at once (R24). A stale
        heartbeat is judged only once this pool has itself beaten without a break
        for ``dead_after``: after an outage of the store every pool's beat looks
        stale, and nobody may mass-reclaim on that evidence. The row goes only
        after its leases came back, so a failure in between leaves it for the next
        heartbeat (of this pool or another)."""
        dead_after = self.config.dead_after
        trusted = self._beating_since is not None and now - self._beating_since >= dead_after
        try:
            # Judged by the store (on its clock, R7a), with this pool's --dead-after.
            pools = self.store.pools(now, dead_after=dead_after)
        except StoreError as exc:
            log.debug("pools not read: %s", exc)
            return
        for pool in pools:
            owner = pool["owner"]
            if owner == self.owner:
                continue
            death = pool["dead"]
            if death is None or (death != "process gone" and not trusted):
                continue
            rows = self.take_back(owner, f"supervisor {owner} is dead ({death})", now)
            if rows is None:
                return  # the store is down: next heartbeat
            try:
                self.store.forget_pool(owner)
            except StoreError as exc:
                log.debug("dead pool %s not removed yet: %s", owner, exc)
                return
            events.emit(events.POOL_DEAD, owner=owner, cause=death, jobs=len(rows))

    def warn_unserved(self) -> None:
        """R28: "drained" says nothing of ready jobs no pool serves (a name nobody
        registers, a queue nobody reads); a --burst pool names them as it exits."""
        try:
            unserved = self.store.unserved()
        except StoreError:
            return
        if unserved:
            events.emit(events.UNSERVED_LEFT,
                        jobs=", ".join(liveness.describe_unserved(u) for u in unserved))

    def leave(self, now: float) -> None:
        """Remove this pool's row as it stops, after a last beat that writes what its
        rollups counted since the one before (R56; what the beat brings back is for a
        pool that goes on)."""
        try:
            if self.state.rollups.rows() and self.slots is not None:
                self.store.heartbeat(self._beat(), (), now)
                self.state.rollups.clear()
            self.store.forget_pool(self.owner)
        except StoreError as exc:
            log.warning("could not remove this pool from the pools table: %s", exc)

    # -- hooks (R21) ---------------------------------------------------------------------------

    def run_start_hooks(self) -> None:
        for hook in jobs.start_hooks():
            try:
                hook(self.store)
            except Exception:  # noqa: BLE001 - a start hook must not stop the pool
                log.exception("on_start hook %s failed", getattr(hook, "__qualname__", hook))

    def job_dead(self, job_id: int, name: str, reason: str | None) -> None:
        """A job of this pool went dead: its on_dead hook, if it has one, runs soon."""
        if name in self._with_hooks:
            self._hook_queue.append((job_id, reason or ""))

    def queue_pending_hooks(self) -> None:
        """Hooks owed by earlier pools (dead rows whose hook never ran) run now."""
        if not self._with_hooks:
            return
        try:
            ids = self.store.pending_hooks(self._with_hooks)
        except StoreError as exc:
            log.warning("could not read pending on_dead hooks: %s", exc)
            return
        for job_id in ids:
            self._hook_queue.append((job_id, ""))

    @property
    def hooks_queued(self) -> bool:
        return bool(self._hook_queue)

    def run_hooks(self, now: float) -> None:
        queue, self._hook_queue = self._hook_queue, []
        for index, (job_id, reason) in enumerate(queue):
            try:
                job = self.store.get(job_id) if self.store.take_hook(job_id) else None
            except JobpoolError:
                self._hook_queue.extend(queue[index:])  # the store is down: try next turn
                return
            if job is None:
                continue
            hook = self._with_hooks.get(job["name"])
            if hook is not None:
                self.hooks.start(hook, job, reason or (job["last_error"] or ""), now)

    # -- periodic jobs (R33) -------------------------------------------------------------------

    def _schedule_failed(self, name: str, schedule: object, exc: Exception, now: float) -> None:
        """R33: a schedule that cannot say when its job is due is logged, naming the
        job and the schedule (once per distinct error), and asked again a minute
        later; the pool and its other jobs go on."""
        reason = f"{type(exc).__name__}: {exc}"
        if self._periodic_failed.get(name, (0.0, ""))[1] != reason:
            log.error("periodic job %s (%r) is not enqueued: its schedule failed (%s); "
                      "asking it again every %g s", name, schedule, reason, PERIODIC_RETRY)
        self._periodic_failed[name] = (now + PERIODIC_RETRY, reason)

    def enqueue_periodic(self, now: float) -> None:
        if self.turn_holds_locks():
            return  # R66: an occurrence's lane may be the turn's: after it lands
        for name, schedule in self.periodic.items():
            if now < self._periodic_failed.get(name, (-math.inf, ""))[0]:
                continue
            try:
                occurrence = schedule.occurrence(now)
            except Exception as exc:  # R33: one job's schedule, never the pool's end
                self._schedule_failed(name, schedule, exc, now)
                continue
            if self._periodic_failed.pop(name, None) is not None:
                log.info("periodic job %s (%r) is scheduled again", name, schedule)
            if occurrence <= self._periodic_done.get(name, -math.inf):
                continue
            try:
                handle = self.store.enqueue_occurrence(name, occurrence)
            except JobpoolError as exc:
                log.debug("periodic %s not enqueued yet: %s", name, exc)
                continue
            self._periodic_done[name] = occurrence
            if handle is not None:
                events.emit(events.JOB_SCHEDULED, job_id=handle.id, name=name, occurrence=occurrence)
                self.state.want_claim = True
