"""Where W3's pickup latency goes on an idle pool (issue 26): each job enqueued alone, 20 ms
after the one before, timed from before the enqueue call to the start of its body, and
split at the points the pool passes on the way.

    .venv/bin/python benchmarks/w3_split.py [--jobs 200] [--gap-ms 20] [--runs 2]

A ``jobpool start --procs 2`` runs in a process of its own, with four of its calls
wrapped before it forks (through a ``sitecustomize`` on its ``PYTHONPATH``) to note the
time: the wake-up read (``Listener.drain``), the turn (``Supervisor._turn``: the claim's
transaction, then the job handed to its child), the claim's end (``Claimer.turn``
returned) and the hand-over (``Slots.dispatch``).
The body notes when it starts. The steps, p50 / p90 / p99 in ms:

* ``enqueue``: the producer's durable enqueue (its commit's fsync included);
* ``return -> wake``: the datagram that wakes the pool, until the pool reads it;
* ``wake -> turn``: what the loop does before its turn;
* ``turn -> claimed``: the turn until the claim's transaction has committed and
  its rows are decoded (``Claimer.turn`` returned);
* ``claimed -> dispatch``: from there until the job goes to its child;
* ``dispatch -> body``: the child woken, its job read and started;

and two floors beside them, in the same rhythm: a bare one-row ``synchronous=FULL``
commit on the same disk, and a bare chain of two wake-ups (a datagram to one process,
which writes to a pipe another reads), the least any pool's hand-over costs here.
"""
from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)

APP = '''
import os, time
from jobpool import job

@job(name="w3.stamp")
def stamp(t):
    began = time.time()  # first: the body has started
    with open(os.environ["W3_BODIES"], "a") as fh:
        fh.write(f"{t!r} {began!r}\\n")
'''

# Wraps four of the supervisor's calls to note when they run (one line each, appended).
SITECUSTOMIZE = '''
import os, time
notes = open(os.environ["W3_NOTES"], "a", buffering=1)
from jobpool import engine
from jobpool.store.sqlite import wakeup
from jobpool.supervisor import loop, slots

def _wrap(owner, name, label, with_job=False, at_end=False):
    original = getattr(owner, name)
    def wrapped(self, *args, **kwargs):
        began = time.time()
        if with_job:
            notes.write(f"{label} {began!r}\\n")
        answer = original(self, *args, **kwargs)
        if not with_job:
            notes.write(f"{label} {time.time() if at_end else began!r}\\n")
        return answer
    setattr(owner, name, wrapped)

_wrap(wakeup.Listener, "drain", "wake", with_job=True)
_wrap(loop.Supervisor, "_turn", "turn")
_wrap(engine.Claimer, "turn", "claimed", at_end=True)
_wrap(slots.Slots, "dispatch", "dispatch", with_job=True)
'''


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "n/a"
    pick = [ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000
            for p in (50, 90, 99)]
    return " / ".join(f"{v:.3f}" for v in pick)


def first_after(times: list[float], moment: float, within: float = 0.01) -> float | None:
    for t in times:
        if moment <= t <= moment + within:
            return t
    return None


def pool_run(jobs: int, gap: float) -> dict[str, list[float]]:
    import jobpool
    with tempfile.TemporaryDirectory() as where:
        with open(os.path.join(where, "w3_app.py"), "w") as fh:
            fh.write(APP)
        with open(os.path.join(where, "sitecustomize.py"), "w") as fh:
            fh.write(SITECUSTOMIZE)
        db = os.path.join(where, "jobpool.db")
        bodies, notes = os.path.join(where, "bodies"), os.path.join(where, "notes")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([where, TREE]),
                   W3_BODIES=bodies, W3_NOTES=notes)
        jobpool.connect(db).close()
        pool = subprocess.Popen([sys.executable, "-m", "jobpool", "start", "--app", "w3_app",
                                 "--db", db, "--procs", "2", "-q", "--no-dashboard"],
                                cwd=where, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            sys.path.insert(0, where)
            import w3_app  # noqa: F401  (registers the job for the enqueues)
            store = jobpool.connect(db)
            store.enqueue("w3.stamp", time.time())  # the warm-up, then a second of rest
            deadline = time.monotonic() + 30
            while not os.path.exists(bodies) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            calls = []
            for _ in range(jobs):
                before = time.time()
                store.enqueue("w3.stamp", before)
                calls.append((before, time.time()))
                time.sleep(gap)
            time.sleep(0.5)
            store.close()
        finally:
            pool.terminate()
            pool.wait(30)
            sys.path.remove(where)
        started = {}
        with open(bodies) as fh:
            for line in fh:
                sent, began = map(float, line.split())
                started[sent] = began
        marks: dict[str, list[float]] = {"wake": [], "turn": [], "claimed": [], "dispatch": []}
        with open(notes) as fh:
            for line in fh:
                label, at = line.split()
                marks[label].append(float(at))
    steps: dict[str, list[float]] = {k: [] for k in (
        "enqueue", "return -> wake", "wake -> turn", "turn -> claimed", "claimed -> dispatch",
        "dispatch -> body",
        "return -> body", "before the call -> body")}
    for before, returned in calls:
        body = started.get(before)
        wake = first_after(marks["wake"], returned - 0.002)
        turn = wake and first_after(marks["turn"], wake)
        claimed = turn and first_after(marks["claimed"], turn)
        dispatch = claimed and first_after(marks["dispatch"], claimed)
        if body is None or not (wake and turn and claimed and dispatch) or not dispatch <= body:
            continue
        steps["enqueue"].append(returned - before)
        steps["return -> wake"].append(wake - returned)
        steps["wake -> turn"].append(turn - wake)
        steps["turn -> claimed"].append(claimed - turn)
        steps["claimed -> dispatch"].append(dispatch - claimed)
        steps["dispatch -> body"].append(body - dispatch)
        steps["return -> body"].append(body - returned)
        steps["before the call -> body"].append(body - before)
    return steps


def bare_commit(jobs: int, gap: float) -> list[float]:
    with tempfile.TemporaryDirectory(dir=HERE) as where:
        db = sqlite3.connect(os.path.join(where, "bare.db"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (v)")
        took = []
        for i in range(jobs):
            before = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO t VALUES (?)", (i,))
            db.execute("COMMIT")
            took.append(time.perf_counter() - before)
            time.sleep(gap)
        db.close()
        return took


def bare_chain(jobs: int, gap: float) -> list[float]:
    """A datagram to a process that writes it to a pipe that a third process reads."""
    address = b"\0jobpool-w3-split-%d" % os.getpid()
    pipe_r, pipe_w = os.pipe()
    ready_r, ready_w = os.pipe()
    relay = os.fork()
    if relay == 0:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(address)
        os.write(ready_w, b"r")
        while True:
            data = sock.recv(64)
            os.write(pipe_w, data)
            if data == b"stop":
                os._exit(0)
    answers_r, answers_w = os.pipe()
    reader = os.fork()
    if reader == 0:
        took = []
        while True:
            data = os.read(pipe_r, 64)
            if data == b"stop":
                break
            took.append(time.time() - float(data))
        os.write(answers_w, " ".join(map(repr, took)).encode())
        os._exit(0)
    os.read(ready_r, 1)
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    time.sleep(0.5)
    for _ in range(jobs):
        sender.sendto(repr(time.time()).encode(), address)
        time.sleep(gap)
    sender.sendto(b"stop", address)
    os.close(answers_w)
    answer = b""
    while chunk := os.read(answers_r, 65536):
        answer += chunk
    os.waitpid(reader, 0)
    os.waitpid(relay, 0)
    return [float(v) for v in answer.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    gap = args.gap_ms / 1000
    print(f"{args.jobs} jobs {args.gap_ms:g} ms apart, --procs 2; p50 / p90 / p99 in ms")
    for run in range(1, args.runs + 1):
        steps = pool_run(args.jobs, gap)
        print(f"run {run} ({len(steps['enqueue'])} jobs matched)")
        for name, values in steps.items():
            print(f"  {name:26s} {percentiles(values)}")
        print(f"  {'bare durable commit':26s} {percentiles(bare_commit(args.jobs, gap))}")
        print(f"  {'bare chain of two wake-ups':26s} {percentiles(bare_chain(args.jobs, gap))}")


if __name__ == "__main__":
    main()
