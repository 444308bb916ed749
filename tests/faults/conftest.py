"""Fault-suite helpers: measured figures, /proc probes, background pools, tmpfs mounts.

Every fault test really kills, fills or corrupts something, asserts what must
hold, and hands its measurements to ``record_figure``: printed always, and
appended as one JSON line to the file named by ``$JOBPOOL_FIGURES`` when set
(``scripts/reliability_table`` turns that file into RELIABILITY.md's table).
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ATTEMPT_LINES, App, wait_for  # noqa: F401 - re-exported for the fault tests

#: The job module every fault test runs. Side effects go to ``effects.txt`` with
#: O_APPEND, one short line per write, so a killed child never leaves half a line.
FAULT_APP = r'''
import ctypes, os, re, resource, signal, sys, time
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # crashing jobs leave no core files


def effect(tag):
    fd = os.open(HERE / "effects.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tag} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


# Ordinary work: generous budgets, so only the fault under test decides an outcome.
@job(name="f.work", backoff_base=0, max_attempts=20, max_crashes=20)
def work(i, seconds=0.0):
    effect(f"start {i}")
    if seconds:
        time.sleep(seconds)
    effect(f"end {i}")


# Work whose every settle needs new pages in the store (a stored 200 kB result), so
# a full disk stops it soon after, whatever room the WAL file already holds.
@job(name="f.bulky", backoff_base=0, max_attempts=20, store_result=True)
def bulky(i, seconds=0.0):
    work(i, seconds)
    return "r" * 200_000


# -- hard timeouts (R20) ------------------------------------------------------------
T = dict(timeout=1, max_attempts=2, backoff_base=0)

@job(name="f.sleep_forever", **T)
def sleep_forever():
    time.sleep(10**6)

@job(name="f.regex", **T)
def regex():
    # Catastrophic backtracking: 2**40 steps inside the C regex engine.
    re.match(r"(a+)+$", "a" * 40 + "b")

@job(name="f.stubborn", **T)
def stubborn():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(0.01)


# -- poison jobs (R19, R19a) ---------------------------------------------------------
P = dict(max_attempts=3, max_crashes=2, backoff_base=0)

@job(name="f.abort", **P)
def abort():
    os.abort()

@job(name="f.segfault", **P)
def segfault():
    ctypes.string_at(0)

@job(name="f.exit0", **P)
def exit0():
    os._exit(0)

@job(name="f.sys_exit", **P)
def sys_exit():
    sys.exit(0)

@job(name="f.keyboard_interrupt", **P)
def keyboard_interrupt():
    raise KeyboardInterrupt

@job(name="f.recursion", **P)
def recursion():
    def down(n):
        return down(n + 1) + 1
    down(0)


# -- memory (R19) ---------------------------------------------------------------------
@job(name="f.hog", memory_limit=100, max_attempts=1)
def hog():
    blocks = []
    for _ in range(100):  # 2 GiB at most, then it gives up (and the test fails)
        blocks.append(b"x" * (20 * 2**20))
        time.sleep(0.01)
    return "survived"


# -- payloads and results ---------------------------------------------------------------
R = dict(store_result=True, max_attempts=2, backoff_base=0)

@job(name="f.unencodable", **R)
def unencodable():
    return object()

@job(name="f.huge_result", **R)
def huge_result():
    return "x" * (5 * 2**20)

@job(name="f.big_result", **R)
def big_result():
    return "y" * 1_000_000

@job(name="f.one_arg", max_attempts=2, backoff_base=0)
def one_arg(x):
    return x


@job(name="f.die_on_go", max_attempts=1)
def die_on_go(tag):
    (HERE / f"{tag}.{os.getpid()}.started").write_text("")
    while not (HERE / "die.go").exists():
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGKILL)


# -- fencing (section 4) ------------------------------------------------------------------
@job(name="f.fence", timeout=120, store_result=True)
def fence(tag):
    (HERE / f"{tag}.{os.getpid()}.started").write_text("")
    while not (HERE / f"{tag}.go").exists():
        time.sleep(0.01)
    effect(f"fence-{tag}")
    return os.getpid()
'''


# -- figures ------------------------------------------------------------------------------

def record_figure(name: str, **figures) -> dict:
    """Print one scenario's measurements; append them to ``$JOBPOOL_FIGURES`` if set."""
    entry = {"scenario": name, **figures}
    line = json.dumps(entry, sort_keys=False, default=str)
    print(f"FIGURE {line}")
    target = os.environ.get("JOBPOOL_FIGURES")
    if target:
        with open(target, "a") as fh:
            fh.write(line + "\n")
    return entry


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    data = sorted(values)
    if not data:
        return None
    rank = max(1, min(len(data), int(-(-q * len(data) // 100))))
    return data[rank - 1]


# -- /proc probes --------------------------------------------------------------------------

def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # Field 2 (comm) may hold spaces; everything after its ')' splits safely.
    return data.rsplit(b")", 1)[1].decode().split()


def proc_state(pid: int) -> str | None:
    """The process state letter (R, S, Z, ...), or None when the pid is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def alive(pid: int) -> bool:
    """Running (not gone and not a zombie waiting to be reaped)."""
    return proc_state(pid) not in (None, "Z", "X")


def slot_children(pid: int) -> dict[int, str]:
    """{pid: state} of the pool's children that run jobs (not its checkpointer)."""
    found = {}
    for child, state in children(pid).items():
        try:
            with open(f"/proc/{child}/comm") as fh:
                if fh.read().strip() == "jobpool-child":
                    found[child] = state
        except OSError:
            continue
    return found


def children(pid: int) -> dict[int, str]:
    """{child pid: state} of every process whose parent is ``pid``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields and int(fields[1]) == pid:
            found[int(entry)] = fields[0]
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- the app and background pools ------------------------------------------------------------

class FaultApp(App):
    """``App`` over FAULT_APP, with pools whose log goes to a file (never a full pipe)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, FAULT_APP)
        self.pools: list[subprocess.Popen] = []

    def spawn_pool(self, *args: str, db: Path | None = None, log: str | None = None,
                   env: dict | None = None) -> subprocess.Popen:
        """``jobpool start`` in the background; stderr goes to ``<dir>/<log>``."""
        log = log or f"pool-{uuid.uuid4().hex[:6]}.log"
        cmd = [sys.executable, "-m", "jobpool", "start", "--app", self.module, "--db",
               str(db or self.db), *args]
        with open(self.dir / log, "w") as err:
            proc = subprocess.Popen(cmd, cwd=self.dir, env=dict(self.env, **(env or {})),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err)
        proc.log = self.dir / log  # type: ignore[attr-defined]
        self.pools.append(proc)
        return proc

    def log_of(self, proc: subprocess.Popen) -> str:
        return proc.log.read_text()  # type: ignore[attr-defined]

    def effects(self) -> list[tuple[str, str, int]]:
        """[(tag, arg, pid)] from the jobs' side-effect file."""
        path = self.dir / "effects.txt"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], parts[1], int(parts[2])))
            else:
                out.append((parts[0], "", int(parts[1])))
        return out

    def count(self, where: str = "1", db: Path | None = None) -> int:
        conn = sqlite3.connect(db or self.db, timeout=30)
        try:
            return conn.execute(f"SELECT count(*) FROM jobs WHERE {where}").fetchone()[0]
        finally:
            conn.close()

    def wait_idle_pool(self, proc: subprocess.Popen, procs: int, timeout: float = 20) -> dict:
        """Wait until ``proc`` has ``procs`` live children; returns them."""
        def ready():
            assert proc.poll() is None, self.log_of(proc)
            kids = {p: s for p, s in slot_children(proc.pid).items() if s not in ("Z", "X")}
            return kids if len(kids) == procs else None
        return wait_for(ready, timeout=timeout)


@pytest.fixture
def fault_app(tmp_path):
    """A FaultApp in a temp dir; its pools are killed and reaped at teardown."""
    app = FaultApp(tmp_path)
    yield app
    for proc in app.pools:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()


def stop_pool(proc: subprocess.Popen, timeout: float = 30) -> int:
    """SIGTERM a background pool and wait for it; returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)`` mounts a tmpfs of ``size`` (e.g. "3m") and returns its path;
    skips when this machine cannot mount (not root, no CAP_SYS_ADMIN)."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        target = tmp_path / f"tmpfs{len(mounted)}"
        target.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755",
                                 "tmpfs", str(target)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def remount(target: Path, options: str) -> None:
    result = subprocess.run(["mount", "-o", f"remount,{options}", str(target)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
