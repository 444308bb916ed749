"""Running ``on_dead`` hooks where they cannot hurt the supervisor (R21).

Each hook runs in its own forked process: an exception, a crash or a hang in it
kills only that process. The supervisor takes the hook in the store first
(``hook_done = 1``), so two supervisors never both run it, then forks; a hook
still running after ``HOOK_TIMEOUT`` seconds is killed.
"""
from __future__ import annotations

import logging
import os
import time
import traceback
from typing import Callable

from jobpool import proctree
from jobpool.forked import Forked

log = logging.getLogger(__name__)

#: Seconds an on_dead hook may run before it is killed.
HOOK_TIMEOUT = 60.0


def _run_hook(fn: Callable, job: dict, reason: str, parent_pid: int) -> None:
    proctree.settle_forked(parent_pid, "jobpool-hook")
    try:
        fn(job, reason)
    except BaseException:  # noqa: BLE001 - report and exit non-zero, nothing else
        traceback.print_exc()
        os._exit(1)


class HookRunner:
    """Forks hook processes and reaps them without ever blocking the loop."""

    def __init__(self) -> None:
        self._running: list[tuple[Forked, float, int]] = []

    def start(self, fn: Callable, job: dict, reason: str, now: float) -> None:
        proc = Forked.start(_run_hook, fn, job, reason, os.getpid())
        self._running.append((proc, now + HOOK_TIMEOUT, job["id"]))

    def reap(self, now: float) -> None:
        still = []
        for proc, deadline, job_id in self._running:
            if proc.returncode is None and proc.reap(block=False) is None and now < deadline:
                still.append((proc, deadline, job_id))
                continue
            if proc.returncode is None:
                log.warning("on_dead hook of job %s ran past %s s; killed", job_id, HOOK_TIMEOUT)
            elif proc.returncode != 0:
                log.warning("on_dead hook of job %s failed (exit %s)", job_id, proc.returncode)
            proc.stop(0.0)
        self._running = still

    def wait(self, timeout: float) -> None:
        """At shutdown: give running hooks ``timeout`` seconds, then kill them."""
        end = time.monotonic() + timeout
        for proc, _deadline, _job_id in self._running:
            proc.wait(max(0.0, end - time.monotonic()))
        self.reap(float("inf"))

    def pids(self) -> set[int]:
        """The hook processes still running (the supervisor's own children)."""
        return {proc.pid for proc, _deadline, _job_id in self._running}

    def __len__(self) -> int:
        return len(self._running)
