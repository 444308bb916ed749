"""What a misbehaving job or a careless operator must not break (R19, R41, R28).

Each test here pins a bug that was reproduced: a job that broke its child for
every later job, a body re-run because its result could not be stored, sizes
that allocated or overflowed instead of being refused in one line.
"""
from __future__ import annotations

import json
import os
import re
import signal
import textwrap

import pytest

import jobpool
from jobpool import bounds
from jobpool.errors import EnqueueError

from .conftest import rows, wait_for
from .test_cli import one_line_error

APP = """
import os, sys
from pathlib import Path
from jobpool import job, Retry

HERE = Path(__file__).parent

def mark(tag):
    with open(HERE / "marks.txt", "a") as fh:
        fh.write(tag + "\\n")

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ itself fails")
    def __repr__(self):
        raise RuntimeError("__repr__ too")

@job(name="t.unprintable", max_attempts=2, backoff_base=0)
def unprintable():
    mark("unprintable")
    raise Unprintable()

@job(name="t.closes_std")
def closes_std():
    for fd in (0, 1, 2):
        os.close(fd)
    sys.stdout.close()

@job(name="t.uses_std")
def uses_std(tag):
    print("to stdout", tag)
    sys.stdout.flush()
    os.write(2, b"to stderr\\n")
    mark(tag)

@job(name="t.bad_result", store_result=True, max_attempts=3)
def bad_result():
    mark("bad_result")
    return {1, 2}

@job(name="t.clashing_result", store_result=True, max_attempts=3)
def clashing_result():
    mark("clashing_result")
    return {"counts": {1: "one", "1": "the text one"}}

@job(name="t.huge_result", store_result=True, max_attempts=3)
def huge_result():
    mark("huge_result")
    return "x" * (1024 * 1024 + 1)

@job(name="t.far_retry", max_attempts=2, backoff_base=0)
def far_retry():
    raise Retry("later", after=1e300)
"""


def _marks(app) -> list[str]:
    path = app.dir / "marks.txt"
    return path.read_text().split() if path.exists() else []


def test_an_exception_whose_str_raises_is_a_retry_naming_its_type_not_a_crash(make_app):
    app = make_app(APP)
    job = app.store().enqueue("t.unprintable")
    app.start("--procs", "1")
    [row] = app.rows("SELECT * FROM jobs WHERE id = ?", (job.id,))
    assert row["status"] == "dead" and row["attempts"] == 2  # both attempts ran: retried
    assert row["last_error"].startswith("Unprintable")
    assert "no attempts left after 2" in row["last_error"]
    log = app.rows("SELECT outcome, exit_status FROM attempts WHERE job_id = ?", (job.id,))
    assert [a["outcome"] for a in log] == ["error", "error"]  # never "crash"
    assert _marks(app) == ["unprintable", "unprintable"]


def test_a_job_that_closes_its_standard_streams_does_not_break_the_next_jobs(make_app):
    app = make_app(APP)
    store = app.store()
    first = store.enqueue("t.closes_std")
    later = [store.enqueue("t.uses_std", f"after{i}") for i in range(3)]
    # One child runs all four, in order.
    app.start("--procs", "1")
    assert app.rows("SELECT status FROM jobs WHERE id = ?", (first.id,)) == [{"status": "done"}]
    for handle in later:
        [row] = app.rows("SELECT status, last_error FROM jobs WHERE id = ?", (handle.id,))
        assert row == {"status": "done", "last_error": None}
    assert _marks(app) == ["after0", "after1", "after2"]


STREAMS_APP = """
import contextlib, io, sys
import jobpool
from jobpool import job

@job(name="t.takes_std")
def takes_std(how):
    if how == "assigned":
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    else:  # a redirect entered and never left
        contextlib.redirect_stdout(io.StringIO()).__enter__()
        contextlib.redirect_stderr(io.StringIO()).__enter__()

@job(name="t.says")
def says(i):
    print(f"out {i} {type(sys.stdout).__name__}", flush=True)
    print(f"err {i}", file=sys.stderr, flush=True)

class Tagged(io.TextIOWrapper):
    pass

@jobpool.on_child_start
def tag_stdout():  # what a start hook sets up is what every job finds
    sys.stdout = Tagged(sys.stdout.buffer, line_buffering=True)
    print("tagged", flush=True)
"""


def test_a_job_that_replaces_its_sys_streams_does_not_take_the_next_jobs_output(make_app):
    """R43: ``sys.stdout`` and ``sys.stderr`` objects a job put in place (and left) are
    put back after it, as the child had them after its start hooks; before, every
    later job of the child printed into the job's StringIO."""
    app = make_app(STREAMS_APP)
    store = app.store()
    for i, how in enumerate(("assigned", "redirected")):
        store.enqueue("t.takes_std", how)
        store.enqueue("t.says", i)
    result = app.start("--procs", "1", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["tagged", "out 0 Tagged", "out 1 Tagged"]
    assert [line for line in result.stderr.splitlines() if line.startswith("err")] == \
        ["err 0", "err 1"]

PIPES_APP = """
import fcntl, os, stat
from pathlib import Path
import jobpool
from jobpool import job

HERE = Path(__file__).parent
KEPT = []  # files a job leaves open, as a logger kept at module level

def pipe_ends():
    ends = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
                ends["read" if mode == os.O_RDONLY else "write"] = fd
        except OSError:
            pass
    return ends

def take(fd, path):
    # The job's own file on the number the pool's pipe had.
    os.close(fd)
    new = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    if new != fd:
        os.dup2(new, fd)
        os.close(new)
    KEPT.append(fd)

@job(name="t.takes_pipe")
def takes_pipe(which):
    take(pipe_ends()[which], HERE / f"mine-{which}.txt")
    if which == "read":
        jobpool.progress(50, "after the swap")  # the job's own call, on the mended end
    os.write(KEPT[-1], b"the job's line\\n")

@job(name="t.closes_all", max_attempts=1)
def closes_all():
    os.closerange(3, 65536)
    KEPT.extend(os.open(HERE / f"mine-{i}.txt", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
                for i in range(40))
    for fd in KEPT:
        os.write(fd, b"the job's line\\n")

@job(name="t.takes_copies")
def takes_copies():
    # The child's copies of stdout and stderr (kept to put them back): descriptors
    # past 2 on the same files, and no pipe. The job closes them, opens files of its
    # own on the numbers, and points its stdout at one of them.
    def identity(fd):
        try:
            st = os.fstat(fd)
        except OSError:  # listdir's own descriptor, closed by now
            return None
        return st.st_dev, st.st_ino
    streams = {identity(1), identity(2)}
    copies = [fd for fd in map(int, os.listdir("/proc/self/fd"))
              if fd > 2 and identity(fd) in streams]
    for fd in copies:
        take(fd, HERE / f"mine-{fd}.txt")
    os.dup2(KEPT[-1], 1)
    os.write(1, b"the job's line\\n")

@job(name="t.says")
def says(tag):
    print(tag, flush=True)

@job(name="t.next")
def next_job(tag):
    with open(HERE / "marks.txt", "a") as fh:
        fh.write(f"{tag} {os.getpid()}\\n")
"""


def _job_files(app) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(app.dir.glob("mine-*.txt"))}


def test_a_job_that_reuses_its_pipes_reading_number_keeps_its_file_and_its_outcome(make_app):
    """R43: a job that closes the end its child reads jobs from and opens a file of its
    own on the number: the pool reads nothing from that file and writes nothing into
    it; the child's end is opened again onto the same pipe, a progress report made
    after the swap and the job's outcome reach the pool, and a fresh child runs the
    next job. Before, the child read the job's file as its next job. (A job that
    closes the end the child writes with is the next test's: the pool sees that pipe
    end at once.)"""
    which = "read"
    app = make_app(PIPES_APP)
    store = app.store()
    taken = store.enqueue("t.takes_pipe", which)
    after = [store.enqueue("t.next", f"after{i}") for i in range(2)]
    result = app.start("--procs", "1")
    assert result.returncode == 0, result.stderr
    [row] = app.rows("SELECT status, attempts, last_error FROM jobs WHERE id = ?", (taken.id,))
    assert row == {"status": "done", "attempts": 1, "last_error": None}
    if which == "read":
        assert app.rows("SELECT stage FROM jobs WHERE id = ?", (taken.id,)) == [
            {"stage": "after the swap"}]
    for handle in after:
        assert app.rows("SELECT status FROM jobs WHERE id = ?", (handle.id,)) == [{"status": "done"}]
    assert _job_files(app) == {f"mine-{which}.txt": "the job's line\n"}
    tags = (app.dir / "marks.txt").read_text().split()
    assert tags[0::2] == ["after0", "after1"]
    claimed = [line for line in result.stderr.splitlines() if "job_claimed" in line]
    assert len({re.search(r"pid=(\d+)", line).group(1) for line in claimed}) == 2, claimed


def test_a_job_that_closes_every_descriptor_has_nothing_written_into_its_files(make_app):
    """R43: a job that closes every descriptor past 2 (its child's pipes with them)
    and opens files of its own on the numbers: nothing the child would send lands in
    those files. The pool sees the pipe it reads end with the job still running, so
    the outcome is lost: the child says so in the pool's log and exits, the attempt
    is settled as the child's end, and a fresh child runs the next job. Before, the
    reply went into whichever of the job's files had the pipe's number."""
    app = make_app(PIPES_APP)
    store = app.store()
    closing = store.enqueue("t.closes_all")
    after = store.enqueue("t.next", "after")
    result = app.start("--procs", "1")
    assert result.returncode == 0, result.stderr
    assert set(_job_files(app).values()) == {"the job's line\n"}
    [row] = app.rows("SELECT status, last_error FROM jobs WHERE id = ?", (closing.id,))
    assert row["status"] in ("dead", "done"), row
    if row["status"] == "dead":  # the pool saw the pipe's end before the outcome
        assert "left no pipe to the pool" in result.stderr
    else:  # the child mended its pipe and the outcome went out: nothing was lost
        assert "left no pipe to the pool" not in result.stderr, result.stderr
    assert app.rows("SELECT status FROM jobs WHERE id = ?", (after.id,)) == [{"status": "done"}]


def test_a_job_that_takes_the_numbers_of_the_childs_stream_copies_keeps_its_files(make_app):
    """R43: the child keeps copies of its standard streams to put them back after a
    job. A job that closes those copies, opens files of its own on their numbers and
    points its stdout elsewhere: the child does not put the job's file back as stdout
    (it looks that each copy is still its stream's file, and retires when not), so the
    next job prints to the pool's own stdout. Before, every later job of the child
    printed into the job's file."""
    app = make_app(PIPES_APP)
    store = app.store()
    taking = store.enqueue("t.takes_copies")
    says = store.enqueue("t.says", "said-after")
    result = app.start("--procs", "1", "-q")
    assert result.returncode == 0, result.stderr
    for handle in (taking, says):
        assert app.rows("SELECT status FROM jobs WHERE id = ?", (handle.id,)) == [{"status": "done"}]
    files = _job_files(app)
    assert files and set(files.values()) <= {"", "the job's line\n"}, files
    assert "said-after" in result.stdout.split()


@pytest.mark.parametrize("name, reason", [
    ("t.bad_result", "result cannot be stored"),
    ("t.clashing_result", "the keys 1 and '1' of one dict are both written as the JSON key '1'"),
    ("t.huge_result", "over the 1048576-byte limit"),
])
def test_a_result_that_cannot_be_stored_is_dead_at_once_without_running_the_body_again(
        make_app, name, reason):
    app = make_app(APP)
    job = app.store().enqueue(name)
    app.start("--procs", "1")
    [row] = app.rows("SELECT status, attempts, last_error FROM jobs WHERE id = ?", (job.id,))
    assert (row["status"], row["attempts"]) == ("dead", 1)
    assert reason in row["last_error"]
    assert _marks(app) == [name.split(".")[1]]  # the body ran once


def test_a_delay_a_job_raises_past_ten_years_is_its_error_naming_the_bound(make_app):
    app = make_app(APP)
    job = app.store().enqueue("t.far_retry")
    app.start("--procs", "1")
    [row] = app.rows("SELECT status, attempts, last_error FROM jobs WHERE id = ?", (job.id,))
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert "at most 10 years" in row["last_error"]


def test_priorities_and_delays_past_their_bounds_are_refused_naming_the_field(tmp_path):
    store = jobpool.connect(tmp_path / "jobpool.db")
    try:
        for priority in (2**70, bounds.PRIORITY_MAX + 1, bounds.PRIORITY_MIN - 1):
            with pytest.raises(EnqueueError, match="priority must be from"):
                store.enqueue_with("t.any", priority=priority)
        with pytest.raises(EnqueueError, match="delay must be at most 10 years"):
            store.enqueue_with("t.any", delay=1e300)
        with pytest.raises(EnqueueError, match="procs must be at most"):
            store.request_scale(10**12)
        store.enqueue_with("t.any", priority=bounds.PRIORITY_MAX, delay=bounds.MAX_DELAY)
        assert store.stats()["scheduled"] == 1
    finally:
        store.close()


def test_the_cli_refuses_sizes_past_their_bounds_in_one_line(make_app):
    app = make_app(APP)
    db = str(app.db)
    line = one_line_error(app.cli("enqueue", "t.uses_std", "--priority", "9" * 23, "--db", db))
    assert "priority" in line
    line = one_line_error(app.cli("enqueue", "t.uses_std", "--delay", "1e300", "--db", db), code=2)
    assert "--delay" in line
    line = one_line_error(app.cli("start", "--app", app.module, "--db", db, "--procs", "1000000000"))
    assert "--procs 1000000000" in line and "--max-procs" in line
    line = one_line_error(app.cli("start", "--app", app.module, "--db", db, "--poll-interval", "0"),
                          code=2)
    assert "--poll-interval" in line
    assert not os.path.exists(db)  # nothing written: not even a store


def test_a_scale_request_past_a_pools_bound_grows_it_to_the_bound_and_says_so(make_app):
    app = make_app(APP)
    db = str(app.db)
    app.store().close()
    pool = app.spawn("--procs", "1", "--max-procs", "3")
    wait_for(lambda: app.rows("SELECT count(*) AS n FROM pools")[0]["n"] == 1)
    asked = app.cli("scale", "--procs", "1000000000", "--db", db, check=True).stdout
    assert asked.strip() == ("asked 1 pool to run 1000000000 processes; a pool stops at its "
                             "own bound (--max-procs; at least 64 by default) and says so in "
                             "`jobpool pools`")
    wait_for(lambda: app.rows("SELECT procs FROM pools") == [{"procs": 3}])
    pools = app.cli("pools", "--db", db, check=True).stdout
    assert "refused a scale" in pools and "asked for 1000000000 procs; ran 3" in pools
    one = app.cli("scale", "--procs", "1", "--db", db, check=True).stdout
    assert one.strip() == "asked 1 pool to run 1 process"
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=30) == 0
    assert "scale_refused" in pool.stderr.read()


def test_an_app_that_fails_to_import_is_one_line_naming_its_file_and_line(make_app):
    app = make_app(APP)
    (app.dir / "broken_app.py").write_text(textwrap.dedent("""
        import os

        raise RuntimeError("the app's own bug")
    """))
    (app.dir / "syntax_app.py").write_text("def f(:\n    pass\n")
    line = one_line_error(app.cli("start", "--app", "broken_app", "--burst", "--db", str(app.db)))
    assert "broken_app" in line and "broken_app.py, line 4" in line and "the app's own bug" in line
    line = one_line_error(app.cli("enqueue", "t.x", "--app", "syntax_app", "--db", str(app.db)))
    assert "syntax_app.py, line 1" in line and "SyntaxError" in line
    verbose = app.cli("start", "--app", "broken_app", "--burst", "--db", str(app.db), "-v")
    assert verbose.returncode != 0 and "Traceback" in verbose.stderr
    app.env["JOBPOOL_DEBUG"] = "1"
    debug = app.cli("start", "--app", "broken_app", "--burst", "--db", str(app.db))
    assert "Traceback" in debug.stderr


def test_an_app_that_exits_or_moves_at_import_is_told_and_moves_no_store(make_app):
    """An ``--app`` that calls ``sys.exit(0)`` as it is imported ended the command with
    0, having done nothing; one that changes directory moved a relative ``--db`` (the
    enqueue went to a new empty file beside the app's new directory)."""
    app = make_app(APP)
    app.store().close()
    (app.dir / "exiting_app.py").write_text("import sys\nsys.exit(0)\n")
    line = one_line_error(app.cli("enqueue", "t.x", "--app", "exiting_app", "--db", "rel.db"))
    assert line == "jobpool: error: cannot import --app exiting_app: it called sys.exit(0) " \
                   "while being imported"
    (app.dir / "elsewhere").mkdir()
    (app.dir / "moving_app.py").write_text(
        f"import os\nos.chdir('elsewhere')\nfrom {app.module} import *\n")
    for db_flag in (["--db", "rel.db"], []):  # a relative --db, and ./jobpool.db by default
        queued = app.cli("enqueue", "t.unprintable", "--app", "moving_app", *db_flag, check=True)
        assert queued.stdout.startswith("queued job")
    assert rows(app.dir / "rel.db", "SELECT name FROM jobs") == [{"name": "t.unprintable"}]
    assert rows(app.db, "SELECT name FROM jobs") == [{"name": "t.unprintable"}]
    # The files a command reads or writes are named from where it ran too.
    (app.dir / "items.jsonl").write_text("[]\n[]\n")
    app.cli("enqueue", "t.unprintable", "--app", "moving_app", "--from", "items.jsonl",
            "--db", "rel.db", check=True)
    app.cli("doctor", "--app", "moving_app", "--db", "rel.db", "--salvage", "copy.db",
            check=True)
    assert rows(app.dir / "copy.db", "SELECT count(*) AS n FROM jobs") == [{"n": 3}]
    assert list((app.dir / "elsewhere").iterdir()) == []
    # An app that names its store as it is imported ($JOBPOOL_DB) is still obeyed.
    (app.dir / "naming_app.py").write_text(
        f"import os\nos.environ.setdefault('JOBPOOL_DB', 'named.db')\nfrom {app.module} import *\n")
    env = {k: v for k, v in app.env.items() if k != "JOBPOOL_DB"}
    app.env = env
    app.cli("enqueue", "t.unprintable", "--app", "naming_app", check=True)
    assert rows(app.dir / "named.db", "SELECT count(*) AS n FROM jobs") == [{"n": 1}]


def test_dead_retry_without_ids_or_all_says_what_is_missing(make_app):
    app = make_app(APP)
    app.store().close()
    line = one_line_error(app.cli("dead", "retry", "--db", str(app.db)))
    assert "not both" not in line and "--all" in line
    line = one_line_error(app.cli("dead", "retry", "3", "--all", "--db", str(app.db)))
    assert "not both" in line


def test_the_json_of_a_refused_scale_is_in_pools_json(make_app):
    app = make_app(APP)
    app.store().close()
    pool = app.spawn("--procs", "1", "--max-procs", "2")
    wait_for(lambda: app.rows("SELECT count(*) AS n FROM pools")[0]["n"] == 1)
    app.cli("scale", "--procs", "5", "--db", str(app.db), check=True)
    wait_for(lambda: app.rows("SELECT procs FROM pools") == [{"procs": 2}])
    wait_for(lambda: "scale_refused" in app.cli("pools", "--json", "--db", str(app.db)).stdout)
    [listed] = json.loads(app.cli("pools", "--json", "--db", str(app.db), check=True).stdout)
    assert listed["counters"]["scale_refused"].startswith("asked for 5 procs; ran 2")
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=30) == 0
    assert os.path.exists(app.db)


def test_ready_jobs_no_running_pool_serves_are_named_everywhere(make_app):
    app = make_app(APP)
    db = str(app.db)
    store = app.store()
    store.enqueue("t.nobody_registers", 1)
    store.enqueue("t.nobody_registers", 2)
    store.enqueue_with("t.uses_std", args=("q",), queue="unread")
    # With no pool running nothing is served, and nothing is singled out.
    assert json.loads(app.cli("status", "--json", "--db", db, check=True).stdout)["unserved"] == []
    # A --burst pool says what it leaves behind as it exits.
    burst = app.start("--procs", "1")
    assert "unserved_left" in burst.stderr
    assert "2 x t.nobody_registers (queue default)" in burst.stderr
    assert "1 x t.uses_std (queue unread)" in burst.stderr
    # While a pool runs, status, pools and top name them.
    pool = app.spawn("--procs", "1")
    wait_for(lambda: json.loads(app.cli("status", "--json", "--db", db).stdout)["supervisors"])
    status = json.loads(app.cli("status", "--json", "--db", db, check=True).stdout)
    assert status["unserved"] == [
        {"queue": "default", "name": "t.nobody_registers", "count": 2, "capped": False},
        {"queue": "unread", "name": "t.uses_std", "count": 1, "capped": False}]
    for command in (["status"], ["pools"]):
        out = app.cli(*command, "--db", db, check=True).stdout
        assert "no running pool serves it: 2 x t.nobody_registers (queue default)" in out
    top = app.cli("top", "--once", "--db", db, check=True).stdout
    assert "ready, no pool serves: 2 t.nobody_registers, 1 t.uses_std (unread)" in top
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(timeout=30) == 0


FLAKY = """
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="t.flaky", max_attempts=3, backoff_base=4, backoff_max=4)
def flaky():
    marker = HERE / "flaky.failed"
    if not marker.exists():
        marker.write_text("x")
        raise RuntimeError("first try fails")
"""


def test_burst_leaves_retries_in_backoff_unless_told_to_wait_for_them(make_app):
    app = make_app(FLAKY)
    job = app.store().enqueue("t.flaky")
    app.start("--procs", "1")
    # Its retry is 3-4 s away, past the poll interval: --burst left it queued.
    assert app.rows("SELECT status, attempts FROM jobs WHERE id = ?", (job.id,)) == [
        {"status": "ready", "attempts": 1}]
    app.start("--procs", "1", "--wait-retries", "10")
    assert app.rows("SELECT status, attempts FROM jobs WHERE id = ?", (job.id,)) == [
        {"status": "done", "attempts": 2}]


def test_jobs_list_shows_scheduled_jobs_unknown_budgets_and_keeps_ids_readable(make_app):
    app = make_app(APP)
    db = str(app.db)
    store = app.store()
    long_name = "t." + "n" * 30
    ready = store.enqueue(long_name)
    later = store.enqueue_with("t.later", delay=3600)
    conn = __import__("sqlite3").connect(app.db)
    conn.execute("UPDATE jobs SET last_error = ? WHERE id = ?", ("E" * 300, ready.id))
    conn.commit()
    conn.close()
    listed = json.loads(app.cli("jobs", "list", "--status", "scheduled", "--json", "--db", db,
                                check=True).stdout)
    assert [(j["id"], j["status"]) for j in listed] == [(later.id, "scheduled")]
    listed = json.loads(app.cli("jobs", "list", "--status", "ready", "--json", "--db", db,
                                check=True).stdout)
    assert [j["id"] for j in listed] == [ready.id]
    app.env["COLUMNS"] = "80"
    table = app.cli("jobs", "list", "--db", db, check=True).stdout.splitlines()
    assert all(len(line) <= 80 for line in table)
    [first] = [line for line in table if line.split()[:1] == [str(ready.id)]]
    # The error column gives way; the id, the name and the budget stay whole.
    assert long_name in first and " 0/? " in first and "…" not in first.split("EEE")[0]
    [second] = [line for line in table if line.split()[:1] == [str(later.id)]]
    assert "scheduled" in second
    shown = app.cli("jobs", "show", str(later.id), "--db", db, check=True).stdout
    run_at = next(line for line in shown.splitlines() if line.strip().startswith("run_at"))
    assert "(in 60m)" in run_at and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", run_at)


def test_an_app_that_stays_where_it_was_leaves_the_paths_as_typed(make_app):
    """``--app`` made every relative path absolute (for a module that changes directory
    as it is imported), so ``status --app m --db jobs.db`` titled its table with a path
    its user never typed, unlike the same command without ``--app``."""
    app = make_app(APP)
    app.store().close()
    jobpool.connect(app.dir / "rel.db").close()
    (app.dir / "staying_app.py").write_text(f"from {app.module} import *\n")
    shown = [app.cli("status", *extra, "--db", "rel.db", check=True).stdout.splitlines()[0].strip()
             for extra in ((), ("--app", "staying_app"))]
    assert shown == ["jobpool store rel.db"] * 2
    # A module that moves still has them taken from where the command ran.
    (app.dir / "elsewhere").mkdir(exist_ok=True)
    (app.dir / "moving_app.py").write_text(
        f"import os\nos.chdir('elsewhere')\nfrom {app.module} import *\n")
    moved = app.cli("status", "--app", "moving_app", "--db", "rel.db", check=True)
    # On a line of its own, not folded over the narrow table's title as it was.
    assert moved.stdout.splitlines()[0] == f"jobpool store {app.dir / 'rel.db'}"
