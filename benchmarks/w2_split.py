"""Where W2's core-seconds go (issue 26): 400 x 20 ms CPU jobs on 2 procs, a jobpool
pool (``jobpool start --burst --procs 2``) against two bare forked processes running the
same bodies, each body recording its pid, start, end and CPU.

    .venv/bin/python benchmarks/w2_split.py [TREE] [RUNS]

TREE: the jobpool checkout whose ``.venv`` runs the pool (default: this one); RUNS:
alternating bare/jobpool pairs (default 3). Each line splits 2 x wall, the cores' time,
into the bodies' CPU (the efficiency), the time a body was off its core while running
(the pool's own processes or other work took it), the gaps between a child's jobs, the
time before each child's first job and after its last, with the CPU the pool spent
beyond the bodies and the CPU the rest of the machine used meanwhile (``/proc/stat``).
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

TREE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
sys.path.insert(0, os.path.join(TREE, "benchmarks"))
from bench_jobs import common  # noqa: E402

N, MS = 400, 20.0
REC = struct.Struct("<dddd")  # pid, start, end, cpu
APP = '''
import os, struct, time
from jobpool import job
from bench_jobs import common
REC = struct.Struct("<dddd")
FD = None

@job(name="w2.cpu", timeout=120)
def cpu(ms):
    global FD
    t0, c0 = time.time(), time.process_time()
    common.burn(int(common.loops_per_ms() * ms))
    c1, t1 = time.process_time(), time.time()
    if FD is None:
        FD = os.open(os.environ["W2_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(FD, REC.pack(os.getpid(), t0, t1, c1 - c0))
'''


def cpu_busy() -> float:
    """Seconds of CPU all processes on the machine used so far (all cores)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def read(path):
    with open(path, "rb") as fh:
        data = fh.read()
    return [REC.unpack_from(data, i) for i in range(0, len(data), REC.size)]


def split(recs, began, ended, own_cpu, busy):
    wall = ended - began
    cores = 2 * wall
    body_cpu = sum(r[3] for r in recs)
    body_wall = sum(r[2] - r[1] for r in recs)
    by_pid = {}
    for r in sorted(recs, key=lambda r: r[1]):
        by_pid.setdefault(r[0], []).append(r)
    gaps = sum(b[1] - a[2] for rs in by_pid.values() for a, b in zip(rs, rs[1:]))
    before = sum(rs[0][1] - began for rs in by_pid.values())
    after = sum(ended - rs[-1][2] for rs in by_pid.values())
    others = busy - own_cpu
    per_gap = 1000 * gaps / max(1, len(recs) - len(by_pid))
    return (f"wall {wall:.2f} s  eff {body_cpu / cores:.3f}  | share of 2 x wall: "
            f"body CPU {body_cpu / cores:.3f}, body descheduled {(body_wall - body_cpu) / cores:.3f}, "
            f"between jobs {gaps / cores:.3f} (per job {per_gap:.2f} ms), "
            f"before first {before / cores:.3f}, after last {after / cores:.3f} | "
            f"our CPU beyond bodies {own_cpu - body_cpu:.2f} s, others' CPU {others:.2f} s "
            f"({others / cores:.3f} of 2 x wall), jobs/child {[len(v) for v in by_pid.values()]}")


def bare(out, loops):
    began = time.time()
    busy0 = cpu_busy()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            for _ in range(N // 2):
                t0, c0 = time.time(), time.process_time()
                common.burn(int(loops * MS))
                c1, t1 = time.process_time(), time.time()
                os.write(fd, REC.pack(os.getpid(), t0, t1, c1 - c0))
            os._exit(0)
        pids.append(pid)
    own = 0.0
    for pid in pids:
        _, _, ru = os.wait4(pid, 0)
        own += ru.ru_utime + ru.ru_stime
    ended = time.time()
    return split(read(out), began, ended, own, cpu_busy() - busy0)


def pool(work, out, loops):
    import jobpool
    db = os.path.join(work, "jobpool.db")
    for f in (db, db + "-wal", db + "-shm", out):
        if os.path.exists(f):
            os.remove(f)
    store = jobpool.connect(db)
    store.enqueue_many("w2.cpu", [(MS,)] * N)
    store.close()
    env = dict(os.environ, W2_OUT=out, BENCH_LOOPS_PER_MS=str(loops),
               PYTHONPATH=f"{work}:{os.path.join(TREE, 'benchmarks')}:{TREE}")
    busy0 = cpu_busy()
    began = time.time()
    proc = subprocess.Popen([os.path.join(TREE, ".venv/bin/python"), "-m", "jobpool", "start",
                             "--app", "w2app", "--db", db, "--burst", "-q", "--procs", "2",
                             "--no-dashboard"], env=env, cwd=work)
    _, status, ru = os.wait4(proc.pid, 0)
    ended = time.time()
    assert status == 0, status
    recs = read(out)
    assert len(recs) == N, len(recs)
    return split(recs, began, ended, ru.ru_utime + ru.ru_stime, cpu_busy() - busy0)


def main():
    # The bytecode an ordinary install has: under PYTHONDONTWRITEBYTECODE a tree never
    # compiled would compile its modules again at the pool's start, in "before first".
    import compileall
    compileall.compile_dir(os.path.join(TREE, "jobpool"), quiet=1)
    loops = common.calibrate()
    work = tempfile.mkdtemp(prefix="w2-split-")
    try:
        with open(os.path.join(work, "w2app.py"), "w") as fh:
            fh.write(APP)
        with open("/proc/loadavg") as fh:
            load = fh.read().split()[:3]
        print(f"tree {TREE}; {loops} loops/ms; load {load}")
        for _ in range(RUNS):
            out = os.path.join(work, "bare.bin")
            if os.path.exists(out):
                os.remove(out)
            print(f"bare    {bare(out, loops)}", flush=True)
            print(f"jobpool {pool(work, os.path.join(work, 'pool.bin'), loops)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
