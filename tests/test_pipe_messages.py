"""R65: what a job writes onto its child's pipe cannot stop or stall the pool.

A job runs in the child that holds the pipe to the supervisor, so its code can write
onto it: bytes that stop mid-way through a message, a length no message has, marshal
data that is no message's tuple. Each job here does one of those and then sleeps far
past the test's patience, beside plain jobs, in a real ``jobpool start --burst``: on
the compiled pump, the Python pump (the pure core) and the general loop. The pool must
take the pipe for lost, kill that child at once and settle its job as a crash that
says why, serve the other jobs, and exit. Before: a stalled message blocked the
supervisor in its read for ever (SIGTERM included), a huge length raised MemoryError
and an integer TypeError out of the loop; an outcome of the job's own attempt with a
string for its kind stopped the pool in ``decide``, and one with a list for its peak RSS
made every turn fail to bind it, the pool retrying for ever.
"""
from __future__ import annotations

import marshal
import os
import subprocess
import sys
import time

import pytest

import jobpool
from jobpool import running
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor

from .conftest import ROOT

APP = """
import marshal, os, time
from jobpool import job, running

BAD = {
    "stalled": (1000).to_bytes(4, "big") + b"x" * 10,      # 10 of the 1 000 bytes it says
    "huge": b"\\xff\\xff\\xff\\xff" + (2 ** 62).to_bytes(8, "big"),
    "not_a_tuple": len(marshal.dumps(5)).to_bytes(4, "big") + marshal.dumps(5),
}

def forged(fields):
    data = marshal.dumps(fields)
    return len(data).to_bytes(4, "big") + data

@job(name="pipe.bad", max_attempts=1, timeout=600)
def bad(what):
    me = running.current
    own = {  # outcomes of this very attempt, with a field no outcome has
        "kind_text": (0, me.job_id, me.attempt, "done", None, None, None, None, None, False, 0),
        "rss_list": (0, me.job_id, me.attempt, 0, None, None, None, [1], None, False, 0),
    }
    os.write(me.conn.write_fileno(), forged(own[what]) if what in own else BAD[what])
    time.sleep(300)  # killed long before: the test gives up after a minute

@job(name="pipe.ok")
def ok(i):
    return None
"""


@pytest.mark.parametrize("what", ["stalled", "huge", "not_a_tuple", "kind_text", "rss_list"])
@pytest.mark.parametrize("road", ["compiled pump", "python pump", "general loop"])
def test_what_a_job_writes_onto_its_pipe_kills_its_child_and_stops_nothing(
        tmp_path, road, what, request):
    if road == "compiled pump":
        request.getfixturevalue("compiled_core")
    (tmp_path / "pipe_app.py").write_text(APP)
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    bad_id = store.enqueue("pipe.bad", what).id
    ok_ids = [store.enqueue("pipe.ok", i).id for i in range(10)]
    store.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
               JOBPOOL_MESSAGE_STALL="0.5")
    env.pop("JOBPOOL_PURE", None)
    if road == "python pump":
        env["JOBPOOL_PURE"] = "1"
    flags = ["--no-pump"] if road == "general loop" else []
    done = subprocess.run(
        [sys.executable, "-m", "jobpool", "start", "--app", "pipe_app", "--db", str(path),
         "--burst", "--procs", "2", "--no-dashboard", *flags],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "its pipe carried no message" in done.stderr + done.stdout
    store = jobpool.connect(path)
    row = store.get(bad_id)
    assert row["status"] == "dead", dict(row)
    assert row["last_error"].startswith("its pipe to the pool carried no message: "), row["last_error"]
    assert [store.get(i)["status"] for i in ok_ids] == ["done"] * 10
    store.close()


@jobpool.job(name="pipe.garbage", max_attempts=1, timeout=600)
def garbage():
    data = marshal.dumps(5)
    os.write(running.current.conn.write_fileno(), len(data).to_bytes(4, "big") + data)
    time.sleep(300)


def test_a_child_killed_for_no_message_is_a_crash_in_the_counters_and_the_metrics(tmp_path):
    # R65: the pool's own kill, counted as a crash (not as the memory limit's, the
    # other kill settled as a crash).
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    job_id = store.enqueue("pipe.garbage").id
    store.close()
    pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True, names=("pipe.garbage",),
                                 poll_interval=0.05, metrics="127.0.0.1:0"))
    assert pool.run() == 0
    deaths = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
              for line in pool.state.metrics.exposition().decode().splitlines()
              if line.startswith("jobpool_child_deaths_total{")}
    assert deaths['cause="crash"'] == 1 and deaths['cause="memory"'] == 0, deaths
    assert pool.counters["crashes"] == 1 and pool.counters["dead"] == 1
    store = jobpool.connect(path)
    assert store.get(job_id)["last_error"].startswith(
        "its pipe to the pool carried no message: a int where a message's tuple belongs")
    store.close()
