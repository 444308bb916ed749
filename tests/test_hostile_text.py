"""Text from jobs and rows reaches the operator as text (R46).

A job's error with square brackets crashed ``jobs list``, ``jobs show``, ``dead list``
and ``dead show`` (rich's ``MarkupError``); other brackets were obeyed as markup; and
escape sequences (a window title, a clipboard write, a cleared screen) reached the
terminal raw. Everything from a job is now printed as text with control characters
shown escaped; JSON output keeps the exact text.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys

import jobpool
from jobpool import display
from jobpool.dashboard import read_snapshot, render

# A path in brackets, markup that would be obeyed, an OSC title, an OSC 52 clipboard
# write, a screen clear, HTML.
HOSTILE = ("FileNotFoundError: no input under [/var/data/in] [bold red]x[/] [link=http://e.x]y[/link] "
           "\x1b]0;OWNED\x07 \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J <script>alert(1)</script>")

HOSTILE_APP = f"""
import jobpool
from jobpool import job, Fatal

HOSTILE = {HOSTILE!r}

@job(name="t.hostile")
def hostile():
    jobpool.progress(50, HOSTILE)
    raise Fatal(HOSTILE)
"""


def _cli(app, *args: str) -> subprocess.CompletedProcess:
    """The CLI's output as bytes: a raw escape byte must be seen if it is there."""
    return subprocess.run([sys.executable, "-m", "jobpool", *args, "--db", str(app.db)], cwd=app.dir,
                          env=app.env, capture_output=True, timeout=60)


def _assert_shown_as_text(out: bytes) -> None:
    assert b"\x1b" not in out and b"\x07" not in out, out
    text = out.decode()
    assert "\\x1b]0;OWNED\\x07" in text
    assert "[/var/data/in]" in text and "[bold red]x[/]" in text and "[link=http://e.x]" in text


def test_listings_and_details_print_a_hostile_error_as_text(make_app):
    app = make_app(HOSTILE_APP)
    job_id = app.store().enqueue("t.hostile").id
    pool = subprocess.run([sys.executable, "-m", "jobpool", "start", "--app", app.module, "--db",
                           str(app.db), "--burst", "-q"], cwd=app.dir, env=app.env,
                          capture_output=True, timeout=90)
    assert pool.returncode == 0, pool.stderr
    # The pool's own log (not a terminal: the plain formatter) shows the event as text.
    assert b"job_dead" in pool.stderr and b"\x1b" not in pool.stderr, pool.stderr
    for args in (("jobs", "list"), ("jobs", "show", str(job_id)), ("dead", "list"),
                 ("dead", "show", str(job_id))):
        result = _cli(app, *args)
        assert result.returncode == 0, (args, result.stderr)
        out = result.stdout
        assert b"\x1b" not in out and b"\x07" not in out, (args, out)
        if args[-1] == str(job_id):  # the details print the whole error
            _assert_shown_as_text(out)
        else:  # the lists cut it to their columns; what they show is text
            assert b"Traceback" not in result.stderr
    shown = _cli(app, "jobs", "show", str(job_id), "--json")
    assert json.loads(shown.stdout)["last_error"].endswith(HOSTILE)  # JSON keeps the exact text


def test_the_dashboard_shows_a_hostile_stage_name_and_failure_as_text(make_app):
    """The frame ``top`` and ``start`` draw, rendered to a plain console: the failure
    reason of a row written by hand, and a queue name, are text."""
    app = make_app(HOSTILE_APP)
    store = app.store()
    job_id = store.enqueue("t.hostile").id
    store.enqueue("t.hostile")
    # Rows as anyone who can write the store may leave them (enqueue refuses such names).
    store.conn.execute("UPDATE jobs SET queue = 'q\x1b[2J' WHERE id = ?", (job_id + 1,))
    store.conn.execute("UPDATE jobs SET status = 'dead', last_error = ?, attempts = 1, "
                       "finished_at = run_at WHERE id = ?", (HOSTILE, job_id))
    store.conn.execute("INSERT INTO attempts (job_id, attempt, owner, started_at, ended_at, outcome, "
                       "error) SELECT id, 1, 'x', run_at, run_at, 'error', ? FROM jobs WHERE id = ?",
                       (HOSTILE, job_id))
    snapshot = read_snapshot(jobpool.connect(app.db, readonly=True))
    buffer = io.StringIO()
    console = display.console(file=buffer, width=400, height=40, force_terminal=False,
                              color_system=None)
    console.print(render(snapshot, 400, 40))
    out = buffer.getvalue()
    assert "\x1b" not in out and "\x07" not in out, out
    assert "q\\x1b[2J" in out and "no input under [/var/data/in]" in out


def test_shown_escapes_controls_and_keeps_text():
    assert display.shown("a\x1b]0;T\x07b") == "a\\x1b]0;T\\x07b"
    assert display.shown("tab\tand\nnewline kept, [brackets] too") == "tab\tand\nnewline kept, [brackets] too"
    assert display.shown("\u202eevil") == "\\u202eevil"
    assert display.shown_line("first\nsecond") == "first"


UNSTORABLE_APP = r"""
import jobpool
from jobpool import job

@job(name="t.unstorable", max_attempts=1)
def unstorable():
    jobpool.progress(10, "stage \x00 \udcff")
    raise ValueError("a\x00b \udcff c")

@job(name="t.fine")
def fine(i):
    return i
"""


def test_a_job_whose_text_no_store_can_hold_fails_alone(make_any_app, store_url):
    """A job's error (and its stage) holding a NUL, which PostgreSQL's text refuses,
    and a lone surrogate, which neither store's driver can encode: the supervisor
    died at the settle (SQLite), or failed every turn after it (PostgreSQL). The text
    is stored with both written as escapes; the job is dead, the pool goes on."""
    app = make_any_app(UNSTORABLE_APP)
    store = app.store()
    bad = store.enqueue_with("t.unstorable").id
    for i in range(5):
        store.enqueue("t.fine", i)
    pool = app.spawn("--procs", "2", "--burst", "-q")
    _out, err = pool.communicate(timeout=120)
    assert pool.returncode == 0, err
    row = store.get(bad)
    assert row["status"] == "dead", row
    assert "a\\x00b \\udcff c" in row["last_error"]
    assert store.stats()["done"] == 5


STAGE_APP = r"""
import time
from pathlib import Path
import jobpool
from jobpool import job

@job(name="t.stage_waits")
def stage_waits():
    jobpool.progress(10, "stage \x00 \udcff")
    while not (Path(__file__).parent / "go").exists():
        time.sleep(0.02)
"""


def test_a_stage_no_store_can_hold_is_written_escaped_while_its_job_runs(make_any_app):
    """R22, R41: a running job's stage holding a NUL and a lone surrogate reaches the
    store as the pool writes progress, both written as escapes, and the job goes on."""
    from tests.conftest import wait_for
    app = make_any_app(STAGE_APP)
    store = app.store()
    job_id = store.enqueue_with("t.stage_waits").id
    pool = app.spawn("--procs", "1", "--burst", "-q")
    try:
        stage = wait_for(lambda: store.get(job_id)["stage"], timeout=60)
        assert stage == "stage \\x00 \\udcff"
        (app.dir / "go").touch()
        _out, err = pool.communicate(timeout=120)
        assert pool.returncode == 0, err
    finally:
        if pool.poll() is None:
            pool.kill()
    assert store.get(job_id)["status"] == "done"


def test_a_pools_row_of_hostile_text_prints_as_text_in_top_and_stop(make_app):
    """R46: a pools row's host, owner and core are the store's text (anyone who can
    write it may leave them so): `top --once` and `stop --wait` printed them raw."""
    import time

    from jobpool.store.records import Heartbeat
    app = make_app(HOSTILE_APP)
    store = app.store()
    for n in (1, 2):  # two live pools: the stopping line names each by host
        beat = Heartbeat(owner=f"ho\x1b]0;PWN\x07\x1b[31m\x9b2J:{n}", host="ho\x1b]0;PWN\x07",
                         pid=10**6 + n, procs=1, queues=("default",), names=("t.hostile",),
                         core="core\x1b]0;PWN\x07\x1b[31m\x9b2J",
                         counters_json='{"stopping": {"running": 1, "drain_ends_at": null}}',
                         slots_json="[]")
        store.heartbeat(beat, [], time.time())
    top = _cli(app, "top", "--once")
    stop = _cli(app, "stop", "--wait", "0.3")
    assert top.returncode == 0, top.stderr
    assert stop.returncode == 1 and b"still running" in stop.stderr, stop.stderr
    for out in (top.stdout, stop.stderr):
        assert b"\x1b" not in out and b"\x07" not in out and "\x9b".encode() not in out, out
        assert b"\\x1b]0;PWN\\x07" in out, out


def test_metrics_on_a_terminal_print_a_hostile_queue_name_as_text(make_app):
    """R46: `jobpool metrics` printed a queue's name (the store's text) raw on a
    terminal; into a file or a pipe the exposition stays exact."""
    from tests.test_dashboard_live import Terminal
    app = make_app(HOSTILE_APP)
    store = app.store()
    job_id = store.enqueue("t.hostile").id
    store.conn.execute("UPDATE jobs SET queue = 'q\x1b]0;PWN\x07' WHERE id = ?", (job_id,))
    term = Terminal(app, "metrics", "--db", str(app.db))
    assert term.wait() == 0
    raw_out = "".join(term.output)
    assert "\x1b]0;PWN" not in raw_out and "\x07" not in raw_out, raw_out
    assert 'queue="q\\x1b]0;PWN\\x07"' in raw_out, raw_out
    piped = _cli(app, "metrics")
    assert 'queue="q\x1b]0;PWN\x07"'.encode() in piped.stdout  # exact for a collector
