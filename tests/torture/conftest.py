"""Torture-suite helpers: the job module, producer processes, run modes, PostgreSQL schemas.

The torture suite (``test_torture.py``, issue 22 item 8) drives a model of the store's
contract against real stores, real pools and real producer processes. It runs in
two modes, chosen by ``$JOBPOOL_TORTURE``:

- unset (the normal suite): a few episodes per store, derandomized, so CI sees the
  same sequences: enough that between them they choose every rule but
  ``join_threads`` (the test fails when one goes unchosen), few enough that a store's
  run takes seconds;
- ``long``: many more episodes, fresh random sequences each run (pass
  ``--hypothesis-seed=N`` to pytest to replay one), shrunk on failure.
  ``$JOBPOOL_TORTURE_EXAMPLES`` sets how many episodes per store (default 40).

A failing episode is reported as the steps that failed; ``JOBPOOL_TORTURE_SHRINK=1``
has hypothesis shrink it first (each episode takes seconds: shrinking takes minutes).
"""
from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import App, PG_URL, _pg_admin  # noqa: F401 - PG_URL re-exported
from tests.faults.conftest import FAULT_APP, FaultApp

#: Jobs the torture suite adds to the fault suite's module (``f.work``, ``f.abort``,
#: ``f.segfault``, ``f.sleep_forever`` come from there): one that raises, and one
#: that attacks every descriptor it inherited (issue 22 item 3, R43).
TORTURE_JOBS = r'''

@job(name="x.raise", max_attempts=2, backoff_base=0)
def raises():
    raise RuntimeError("torture: this job always raises")


@job(name="x.scribble", max_attempts=2, max_crashes=2, backoff_base=0)
def scribble():
    # Garbage to, then close, every descriptor above 2: whatever this child was
    # left holding of the store, its WAL, its -shm, other slots' pipes or sockets.
    # First it notes what those are that are neither 0-2 nor a copy of them, by kind
    # ("pipe", "socket", "file", ...): R43 leaves it its slot's two pipes alone.
    fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
    def target(fd):
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None  # the descriptor listdir itself held
    standard = {target(fd) for fd in (0, 1, 2)}
    foreign = [target(fd) for fd in fds if fd > 2 and target(fd) not in standard | {None}]
    kinds = [t.split(":", 1)[0] if t.startswith(("pipe:", "socket:", "anon_inode:")) else "file"
             for t in foreign]
    for fd in fds:
        if fd <= 2:
            continue
        try:
            os.write(fd, b"\x00torture garbage\xff" * 64)
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass
    effect(f"foreign {','.join(kinds) or '-'}")
'''

#: A producer process: enqueues ``f.work`` jobs through several stores of its own
#: (and the default store of ``job.enqueue()``), noting each acknowledged job with
#: one O_APPEND write after its commit, so a ``kill -9`` leaves a record of exactly
#: what it was told was queued. Batches go through ``enqueue_many`` (R4).
PRODUCER = r'''
import importlib, os, sys
import jobpool

db, prefix, count, bulk, nstores, app = sys.argv[1:7]
count, bulk, nstores = int(count), int(bulk), int(nstores)
work = importlib.import_module(app).work if app != "-" else None  # JOBPOOL_DB is db
stores = [jobpool.connect(db) for _ in range(nstores)]
fd = os.open(prefix + ".acked", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
n = turn = 0
while n < count:
    size = min(bulk, count - n)
    tokens = [f"{prefix}.{n + i}" for i in range(size)]
    ways = len(stores) + (work is not None)
    way = turn % ways
    turn += 1
    if way == len(stores):
        ids = [work.enqueue(t).id for t in tokens]  # one transaction each
    elif size == 1:
        ids = [stores[way].enqueue("f.work", tokens[0]).id]
    else:
        ids = list(stores[way].enqueue_many("f.work", [(t,) for t in tokens]).ids)
    os.write(fd, "".join(f"{t} {i}\n" for t, i in zip(tokens, ids)).encode())
    n += size
for store in stores:
    store.close()
'''


@dataclass(frozen=True, slots=True)
class Mode:
    """How much torture one run does, per store."""
    long: bool
    episodes: int
    steps: int
    timeout: float  # pytest-timeout for one store's test, seconds
    shrink: bool


def mode() -> Mode:
    shrink = os.environ.get("JOBPOOL_TORTURE_SHRINK") == "1"
    if os.environ.get("JOBPOOL_TORTURE") == "long":
        episodes = int(os.environ.get("JOBPOOL_TORTURE_EXAMPLES", "40"))
        return Mode(long=True, episodes=episodes, steps=40, timeout=120 + 60 * episodes + 3600 * shrink,
                    shrink=shrink)
    return Mode(long=False, episodes=8, steps=15, timeout=600 + 3600 * shrink, shrink=shrink)


class TortureApp(FaultApp):
    """``FaultApp`` (its jobs, background pools and effects file) plus the torture
    jobs, and producer processes over the same directory."""

    def __init__(self, directory: Path) -> None:
        App.__init__(self, directory, FAULT_APP + textwrap.dedent(TORTURE_JOBS))
        self.pools = []
        (directory / "producer.py").write_text(PRODUCER)

    def spawn_producer(self, prefix: str, count: int, bulk: int, stores: int,
                       default_store: bool):
        """A producer process writing ``prefix.0`` .. ``prefix.<count-1>``."""
        import subprocess
        cmd = [sys.executable, str(self.dir / "producer.py"), str(self.db), prefix, str(count),
               str(bulk), str(stores), self.module if default_store else "-"]
        with open(self.dir / f"{prefix}.log", "w") as err:
            return subprocess.Popen(cmd, cwd=self.dir, env=dict(self.env, JOBPOOL_DB=str(self.db)),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err)

    def log_of(self, proc) -> str:
        # A job that scribbles over inherited descriptors may write into a pool's log.
        return proc.log.read_bytes().decode(errors="backslashreplace")

    def acked(self, prefix: str) -> dict[str, int]:
        """token -> id of every job the producer ``prefix`` was told is queued."""
        path = self.dir / f"{prefix}.acked"
        found = {}
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2:
                    found[parts[0]] = int(parts[1])
        return found


def drop_schema(url: str) -> None:
    """Drop the schema a ``...?schema=NAME`` URL names (no schema is left behind)."""
    schema = url.rsplit("schema=", 1)[1]
    admin = _pg_admin()
    try:
        admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        admin.close()
