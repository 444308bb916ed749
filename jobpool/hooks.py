"""Running ``on_dead`` hooks where they cannot hurt the supervisor (R21).

Each hook runs in its own forked process: an exception, a crash or a hang in it
kills only that process. The supervisor takes the hook in the store first
(``hook_done = 1``), so two supervisors never both run it, then forks; a hook
still running after ``HOOK_TIMEOUT`` seconds is killed.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from typing import Any, Callable

import multiprocess

log = logging.getLogger(__name__)

#: Seconds an on_dead hook may run before it is killed.
HOOK_TIMEOUT = 60.0


def _run_hook(fn: Callable, job: dict, reason: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        fn(job, reason)
    except BaseException:  # noqa: BLE001 - report and exit non-zero, nothing else
        traceback.print_exc()
        os._exit(1)


class HookRunner:
    """Forks hook processes and reaps them without ever blocking the loop."""

    def __init__(self) -> None:
        self._ctx = multiprocess.get_context("fork")
        self._running: list[tuple[Any, float, int]] = []

    def start(self, fn: Callable, job: dict, reason: str, now: float) -> None:
        # The supervisor forks from a single thread (see Supervisor._spawn).
        assert threading.active_count() == 1, \
            f"forking a hook with {threading.active_count()} threads running"
        proc = self._ctx.Process(target=_run_hook, args=(fn, job, reason), daemon=True,
                                 name=f"jobpool-on-dead-{job['id']}")
        proc.start()
        self._running.append((proc, now + HOOK_TIMEOUT, job["id"]))

    def reap(self, now: float) -> None:
        still = []
        for proc, deadline, job_id in self._running:
            if proc.exitcode is None and now < deadline:
                still.append((proc, deadline, job_id))
                continue
            if proc.exitcode is None:
                log.warning("on_dead hook of job %s ran past %s s; killed", job_id, HOOK_TIMEOUT)
                proc.kill()
                proc.join(1.0)
            elif proc.exitcode != 0:
                log.warning("on_dead hook of job %s failed (exit %s)", job_id, proc.exitcode)
            proc.close()
        self._running = still

    def wait(self, timeout: float) -> None:
        """At shutdown: give running hooks ``timeout`` seconds, then kill them."""
        end = time.time() + timeout
        for proc, _deadline, _job_id in self._running:
            proc.join(max(0.0, end - time.time()))
        self.reap(float("inf"))

    def pids(self) -> set[int]:
        """The hook processes still running (the supervisor's own children)."""
        return {proc.pid for proc, _deadline, _job_id in self._running if proc.pid}

    def __len__(self) -> int:
        return len(self._running)
