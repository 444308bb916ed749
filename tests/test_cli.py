"""The CLI as an operator uses it: real subprocesses, exit codes, one-line errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


APP = """
from jobpool import job

@job(name="t.hello", max_attempts=2)
def hello(who, punctuation="!"):
    return f"hello {who}{punctuation}"
"""


def one_line_error(result, code=1):
    assert result.returncode == code, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_enqueue_start_status_and_jobs_round_trip(make_app):
    app = make_app(APP)
    db = str(app.db)
    out = app.cli("enqueue", "t.hello", "--args", '["world"]', "--kwargs", '{"punctuation": "?"}',
                  "--db", db, "--app", app.module, "--json", check=True)
    assert json.loads(out.stdout) == {"id": 1, "duplicate": False}
    out = app.cli("enqueue", "t.hello", "--args", '["again"]', "--key", "k1", "--priority", "5",
                  "--db", db, "--json", check=True)
    assert json.loads(out.stdout) == {"id": 2, "duplicate": False}
    out = app.cli("enqueue", "t.hello", "--key", "k1", "--db", db, "--json", check=True)
    assert json.loads(out.stdout) == {"id": 2, "duplicate": True}
    app.cli("enqueue", "t.hello", "--args", '["later"]', "--delay", "3600", "--db", db, check=True)

    status = json.loads(app.cli("status", "--json", "--db", db, check=True).stdout)
    assert status == {"ready": 2, "scheduled": 1, "running": 0, "done": 0, "dead": 0,
                      "supervisors": [], "unserved": [], "paused": []}

    app.start("--procs", "2")
    status = json.loads(app.cli("status", "--json", "--db", db, check=True).stdout)
    assert status == {"ready": 0, "scheduled": 1, "running": 0, "done": 2, "dead": 0,
                      "supervisors": [], "unserved": [], "paused": []}
    # Done, its key is free, unless a period keeps it.
    out = app.cli("enqueue", "t.hello", "--key", "k1", "--key-period", "1d", "--db", db,
                  check=True)
    assert out.stdout.strip() == ("job 2 with key 'k1' is done since less than --key-period "
                                  "ago: nothing queued")

    listed = json.loads(app.cli("jobs", "list", "--status", "done", "--json", "--db", db,
                                check=True).stdout)
    assert [j["id"] for j in listed] == [2, 1]  # newest first
    for field in ("id", "name", "queue", "status", "attempts", "max_attempts", "key", "priority",
                  "last_error"):
        assert field in listed[0]
    assert (listed[0]["key"], listed[0]["priority"], listed[0]["max_attempts"]) == ("k1", 5, 2)

    shown = json.loads(app.cli("jobs", "show", "1", "--json", "--db", db, check=True).stdout)
    assert shown["status"] == "done" and shown["attempt_log"][0]["outcome"] == "done"

    human = app.cli("jobs", "show", "1", "--db", db, check=True).stdout
    assert "t.hello" in human and "attempts" in human
    assert "core:" in app.cli("status", "--db", db, check=True).stdout


def test_jobs_list_filters_by_name(make_app):
    app = make_app(APP)
    store = app.store()
    store.enqueue("t.hello", "a")
    store.enqueue("other.job")
    listed = json.loads(app.cli("jobs", "list", "--name", "other.job", "--json", "--db",
                                str(app.db), check=True).stdout)
    assert [j["name"] for j in listed] == ["other.job"]


def test_jobs_list_shows_the_newest_first_and_says_how_many_it_left_out(make_any_app):
    # R28: the newest jobs, and a last line counting the rest (none when none is left)
    app = make_any_app(APP)
    store = app.store()
    first = store.enqueue_many("t.hello", [(n,) for n in range(1240)]).ids[0]
    reports = list(store.enqueue_many("t.report", [(n,) for n in range(5)], queue="reports").ids)
    db = str(app.db)
    listed = app.cli("jobs", "list", "--limit", "3", "--db", db, check=True).stdout.splitlines()
    assert [line.split()[0] for line in listed[1:4]] == [str(i) for i in reports[:-4:-1]]
    assert listed[4:] == [f"… 1 242 more (--limit 1245 lists them all; --after {reports[2]} lists "
                          "the next page)"]
    page_two = app.cli("jobs", "list", "--limit", "3", "--after", str(reports[2]), "--db", db,
                       check=True).stdout.splitlines()
    assert [line.split()[0] for line in page_two[1:4]] == [str(reports[1]), str(reports[0]),
                                                           str(first + 1239)]
    by_queue = app.cli("jobs", "list", "--queue", "reports", "--limit", "2", "--json", "--db", db,
                       check=True).stdout
    assert [j["id"] for j in json.loads(by_queue)] == reports[:-3:-1]  # JSON: the rows only
    by_name = app.cli("jobs", "list", "--name", "t.hello", "--limit", "1240", "--db", db,
                      check=True).stdout.splitlines()
    assert by_name[1].split()[0] == str(first + 1239) and by_name[-1].split()[0] == str(first)
    assert "more" not in by_name[-1]  # every job of the name is listed
    assert "--limit N" in app.cli("jobs", "list", "--help", check=True).stdout


@pytest.mark.parametrize("args, needle", [
    (["status", "--db", "missing.db"], "no jobpool store at missing.db"),
    (["jobs", "list", "--db", "missing.db"], "no jobpool store"),
    (["jobs", "show", "99", "--db", "{db}"], "no job with id 99"),
    (["enqueue", "t.nope", "--app", "{app}", "--db", "{db}"], "no job named 't.nope'"),
    (["enqueue", "t.hello", "--app", "no_such_module_xyz", "--db", "{db}"], "cannot import --app"),
    (["start", "--app", "no_such_module_xyz", "--db", "{db}", "--burst"], "cannot import --app"),
    (["enqueue", "t.hello", "--max-attempts", "3", "--db", "{db}",
      "--queue", "bad queue"], "queue name"),
    (["status", "--db", "{notastore}"], "not a jobpool store"),
    (["enqueue", "t.hello", "--db", "{db}", "--queue", "high:3"], "must not contain ':'"),
    (["start", "--app", "{app}", "--db", "{db}", "--burst", "--queues", "high:x,default"],
     "the weight of 'high' must be a whole number from 1 to 1000, not 'x'"),
    (["start", "--app", "{app}", "--db", "{db}", "--burst", "--queues", "high,high:2"],
     "queue 'high' is listed twice"),
    (["pause", "bad queue", "--db", "{db}"], "queue name 'bad queue' must be printable"),
    (["doctor", "--db", "{db}", "--salvage", "\udcff.db"],
     "--salvage \\xff.db: a store's name must be UTF-8 text"),
    (["jobs", "run-now", "--all-scheduled", "--name", "\udcff", "--db", "{db}"],
     "the name filter must be valid Unicode text"),
])
def test_user_mistakes_are_one_line_and_a_nonzero_exit(make_app, args, needle):
    app = make_app(APP)
    app.store().enqueue("t.hello", "x")
    (app.dir / "notes.txt").write_text("just some text\n")
    args = [a.format(db=app.db, app=app.module, notastore=app.dir / "notes.txt") for a in args]
    line = one_line_error(app.cli(*args))
    assert line.startswith("jobpool: error:") and needle in line


THREADED_APP = """
import threading, time
from jobpool import job

def report_forever():
    while True:
        time.sleep(1)

# What a tracing exporter or an error reporter does when set up at import.
threading.Thread(target=report_forever, daemon=True, name="apm-agent").start()

@job(name="t.hello")
def hello(who):
    return who
"""


def test_an_app_that_starts_a_thread_at_import_is_told_where_it_belongs(make_app):
    """A supervisor forks from one thread (R43's amendment): an app whose import started
    one made ``jobpool start`` end in an AssertionError's traceback ("forking with 2
    threads running"). Now one line names the thread and the hook it belongs in, before
    anything is forked; the job is untouched."""
    app = make_app(THREADED_APP)
    job_id = app.store().enqueue("t.hello", "x").id
    result = app.cli("start", "--app", app.module, "--db", str(app.db), "--burst")
    line = one_line_error(result)
    assert "runs 1 more ('apm-agent')" in line and "on_child_start hook" in line, line
    assert "pool_started" not in result.stderr
    assert app.store().get(job_id)["status"] == "ready"

@pytest.mark.parametrize("args, needle", [
    (["enqueue", "t.hello", "--args", "{not json"], "--args is not valid JSON"),
    (["enqueue", "t.hello", "--args", '{"a": 1}'], "--args must be a JSON array"),
    (["enqueue", "t.hello", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
    (["enqueue", "t.hello", "--delay", "-5"],
     "argument --delay: expected a number of seconds from 0 to 10 years (like 30 or 0.5), "
     "not '-5'"),
    (["start", "--procs", "0"], "argument --procs: expected a whole number of 1 or more, not '0'"),
    # Job ids past a store's 64 bits (the driver's overflow was a traceback).
    *((cmd, f"argument {what}: expected a whole number up to 9223372036854775807, "
            f"not '99999999999999999999'")
      for cmd, what in ((["jobs", "show", "99999999999999999999"], "id"),
                        (["jobs", "cancel", "99999999999999999999"], "ID"),
                        (["dead", "retry", "99999999999999999999"], "ID"),
                        (["dead", "delete", "99999999999999999999"], "ID"),
                        (["jobs", "list", "--after", "99999999999999999999"], "--after"))),
    (["enqueue", "t.hello", "--args", "[" * 5000 + "]" * 5000],
     "argument --args: --args is nested too deeply"),
    (["frobnicate"], "invalid choice"),
    # No option takes an empty string: each read one as not given (`--name "$NAME"`
    # with NAME unset retried every dead job; `--pool ''` said no pool was running).
    *((args, f"argument {flag}: expected a value, not an empty string")
      for flag, args in (("--name", ["dead", "retry", "--all", "--name", ""]),
                         ("--pool", ["stop", "--pool", ""]),
                         ("--host", ["scale", "--procs", "2", "--host", ""]),
                         ("--queues", ["start", "--burst", "--queues", ""]),
                         ("--from", ["enqueue", "t.hello", "--from", ""]),
                         ("--on-success", ["enqueue", "t.hello", "--from", "f",
                                           "--on-success", ""]),
                         ("--salvage", ["doctor", "--salvage", ""]),
                         ("--app", ["status", "--app", ""]))),
    # Options that do nothing without another were ignored (the pool waited for no
    # retry), a repeated --args kept its last, --key-period with --from keyed nothing.
    (["enqueue", "t.hello", "--args", "[1]", "--args", "[2]"], "argument --args: given twice"),
    (["enqueue", "t.hello", "--kwargs", "{}", "--kwargs", '{"a": 1}'],
     "argument --kwargs: given twice"),
    (["enqueue", "t.hello", "--key-period", "1d"], "argument --key-period: only works with --key"),
    (["enqueue", "t.hello", "--allow-world-writable"],
     "argument --allow-world-writable: only works with --mode"),
    (["metrics", "--every", "30"], "argument --every: only works with --serve"),
    (["web", "--token-label", "alice"],
     "argument --token-label: only works with --token (or $JOBPOOL_WEB_TOKEN)"),
    (["top", "--once", "--refresh", "1"], "argument --refresh: does not work with --once"),
    # Bytes that are not UTF-8 (a file name the shell passed): SQLite's encoder said
    # "'utf-8' codec can't encode character", naming no flag.
    (["status", "--db", "\udcff.db"], "--db \\xff.db: a store's name must be UTF-8 text"),

])
def test_usage_mistakes_are_one_line_and_exit_2(make_app, args, needle):
    app = make_app(APP)
    line = one_line_error(app.cli(*args), code=2)
    assert needle in line


#: R41: each kind of number a flag takes, what it allows, in the words of its refusal.
SECONDS_ABOVE_0 = "a number of seconds above 0, at most 10 years (like 30 or 0.5)"
SECONDS = "a number of seconds from 0 to 10 years (like 30 or 0.5)"
DURATION = "a duration from 0 to 10 years, like 90, 45s, 30m, 12h, 7d or 2w"
WHOLE = "a whole number of 1 or more"


@pytest.mark.parametrize("command, flag, allowed, values", [
    (["start", "--burst"], "--poll-interval", SECONDS_ABOVE_0, ["0", "-1", "-0.5", "x"]),
    (["start", "--burst"], "--dead-after", SECONDS_ABOVE_0, ["0", "-3"]),
    (["start", "--burst"], "--store-timeout", SECONDS_ABOVE_0, ["0", "-1e3"]),
    (["start", "--burst"], "--drain", SECONDS, ["-1", "1e300"]),
    (["start", "--burst"], "--wait-retries", SECONDS, ["-.5", "nan"]),
    (["start", "--burst"], "--result-ttl", DURATION, ["-1h", "-1", "1h30", "600w"]),
    (["dead", "purge"], "--older-than", DURATION, ["-7d"]),
    (["enqueue", "t.hello", "--key", "k"], "--key-period", DURATION, ["-1d"]),
    (["start", "--burst"], "--memory-limit", WHOLE, ["0", "-1", "1.5"]),
    (["start", "--burst"], "--procs", WHOLE, ["-2"]),
    (["stop"], "--wait", SECONDS, ["-1"]),
])
def test_a_number_a_flag_refuses_is_named_with_the_flag_and_what_it_allows(
        make_app, command, flag, allowed, values):
    # R28/R41: every out-of-range value of a flag gets the same words (zero and
    # negative alike, `-1h` too, which argparse took for an option), naming the flag,
    # what it allows and what was typed.
    app = make_app(APP)
    for value in values:
        line = one_line_error(app.cli(*command, flag, value, "--db", str(app.db)), code=2)
        assert line.endswith(f"error: argument {flag}: expected {allowed}, not '{value}' "
                             f"(see --help)"), line
    assert not app.db.exists()


def test_a_read_only_command_refuses_another_applications_file_and_leaves_it_alone(make_app):
    # R26a: only start, enqueue and connect() add jobpool's tables to such a file
    # (tests/test_migrations.py); a mistyped --db of a reading command writes nothing.
    import sqlite3
    app = make_app(APP)
    path = app.dir / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    for command in (["status"], ["jobs", "list"], ["pools"], ["top", "--once"]):
        line = one_line_error(app.cli(*command, "--db", str(path)))
        assert "not a jobpool store" in line
    assert path.read_bytes() == before


def test_log_format_json_writes_one_event_per_line_with_stable_names(make_app):
    app = make_app(APP + """
@job(name="t.fails", max_attempts=2, backoff_base=0)
def fails():
    raise RuntimeError("nope")
""")
    store = app.store()
    ok = store.enqueue("t.hello", "x").id
    bad = store.enqueue("t.fails").id
    result = app.start("--procs", "1", "--log-format", "json")
    events = [json.loads(line) for line in result.stderr.splitlines()]
    names = [e["event"] for e in events]
    assert names[0] == "pool_started" and names[-1] == "pool_stopped"
    completed = [e for e in events if e["event"] == "job_completed"]
    assert [(e["job_id"], e["name"], e["attempt"]) for e in completed] == [(ok, "t.hello", 1)]
    retried = [e for e in events if e["event"] == "job_retried"]
    dead = [e for e in events if e["event"] == "job_dead"]
    assert [e["job_id"] for e in retried] == [bad] and [e["job_id"] for e in dead] == [bad]
    assert dead[0]["reason"].startswith("RuntimeError: nope; no attempts left after 2")
    assert all(isinstance(e["ts"], float) for e in events)
    assert all("duration" in e for e in completed + retried + dead)


def test_a_pool_says_which_options_it_ignores_and_starts(make_app):
    """A pool is a service: options it ignores (until now in silence) are said, one line
    each, and it starts all the same (a unit file that carried one must not stop
    starting after an upgrade); the one-shot commands refuse them (above)."""
    app = make_app(APP)
    job_id = app.store().enqueue("t.hello", "x").id
    ran = app.cli("start", "--app", app.module, "--db", str(app.db), "--max-jobs", "1",
                  "--wait-retries", "60", "--store-timeout", "5", "--chunk", "t.hello=2",
                  "--chunk", "t.hello=3", "-q", "--no-dashboard", check=True)
    warnings = [line for line in ran.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "jobpool start: warning: argument --wait-retries: only works with --burst; add "
        "--burst or drop --wait-retries; ignored",
        "jobpool start: warning: argument --store-timeout: only works with --burst; add "
        "--burst or drop --store-timeout; ignored",
        "jobpool start: warning: argument --chunk: does not work with --max-jobs; ignored",
        "jobpool start: warning: argument --chunk: 't.hello' given twice; the last one is used"]
    assert app.store().get(job_id)["status"] == "done"


def test_ids_acted_on_are_each_answered_even_beside_an_unknown_one(make_app):
    """R31, R37: an unknown id among several ended `jobs cancel` and `jobs reset-state`
    with one error line, the ids before it changed and unsaid, the ones after it not
    looked at; an id given twice was answered "already dead" by its own cancel."""
    app = make_app(APP)
    store = app.store()
    first, second = store.enqueue("t.hello", "a").id, store.enqueue("t.hello", "b").id
    db = str(app.db)
    out = app.cli("jobs", "cancel", str(first), "999", str(second), str(first), "--db", db)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [f"job {first}: cancelled", f"job {second}: cancelled"]
    assert out.stderr.strip() == "job 999: not cancelled: no such job"
    assert {store.get(i)["status"] for i in (first, second)} == {"dead"}
    out = app.cli("jobs", "reset-state", str(first), "999", str(second), "--db", db)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == [f"job {first}: not reset: no saved state",
                                       "job 999: not reset: no such job",
                                       f"job {second}: not reset: no saved state"]
    line = one_line_error(app.cli("dead", "show", "999", "--db", db))
    assert "no job with id 999" in line
    ready = store.enqueue("t.hello", "c").id
    line = one_line_error(app.cli("dead", "show", str(ready), "--db", db))
    assert line == (f"jobpool: error: job {ready} is ready, not dead: `jobpool jobs show "
                    f"{ready}` shows it")
    assert app.cli("dead", "show", str(first), "--db", db, check=True).stdout


def test_every_command_imports_the_app_it_is_given(make_app):
    # `status --app no_such_module` exited 0 without importing anything.
    app = make_app(APP)
    app.store().close()
    for command in (["status"], ["jobs", "list"], ["dead", "retry", "--all"], ["top", "--once"]):
        line = one_line_error(app.cli(*command, "--app", "no_such_module_xyz", "--db",
                                      str(app.db)))
        assert line.startswith("jobpool: error: cannot import --app no_such_module_xyz"), line
    assert app.cli("status", "--app", app.module, "--db", str(app.db), check=True).stdout


def test_a_refused_enqueue_makes_no_store(make_app):
    """A refused command made a new store file (mode 600), and the corrected command
    then kept that file's mode whatever its --mode said."""
    app = make_app(APP)
    source = app.dir / "two.jsonl"
    source.write_text('["a"]\n["b"]\n')
    for refused in (["t.hello", "--from", str(app.dir / "missing.jsonl")],
                    ["bad name"], ["t.hello", "--priority", str(2**40)],
                    ["t.hello", "--queue", "a b"],
                    ["t.hello", "--from", str(source), "--on-success", "t.none", "--app",
                     app.module],
                    ["t.none", "--app", app.module]):
        db = app.dir / "new.db"
        line = one_line_error(app.cli("enqueue", *refused, "--db", str(db)))
        assert not db.exists(), (refused, line)
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", str(source), "--on-success",
                                  "t.none", "--app", app.module, "--db", str(app.db)))
    assert line.endswith(f"--on-success no job named 't.none' is registered by --app "
                         f"{app.module}")
    queued = app.cli("enqueue", "t.hello", "--from", str(source), "--mode", "660",
                     "--db", str(app.dir / "new.db"), check=True)
    assert queued.stdout.startswith("queued 2 jobs")
    assert (app.dir / "new.db").stat().st_mode & 0o777 == 0o660


def test_a_count_of_one_job_reads_in_the_singular(make_app):
    """What the commands print of one job says "1 job", not "1 jobs"."""
    app = make_app(APP)
    source = app.dir / "one.jsonl"
    source.write_text('["a"]\n')
    queued = app.cli("enqueue", "t.hello", "--from", str(source), "--on-complete", "t.hello",
                     "--db", str(app.db), check=True)
    assert queued.stdout.startswith("queued 1 job (")
    batch_id = app.store().batches.list()[0].id
    shown = app.cli("batches", "show", str(batch_id), "--db", str(app.db), check=True)
    assert f"batch {batch_id} closed: 1 job, 0 done" in shown.stdout
    limited = app.cli("limits", "set", "--queue", "q", "--running", "1", "--db", str(app.db),
                      check=True)
    assert limited.stdout.startswith("queue q: at most 1 job running at once")


def test_a_refused_line_of_from_is_named_by_its_line_and_app_paths_are_refused(make_app):
    # The store names the item by its place among the jobs (from 0, blank lines not
    # counted); the file's reader by its line.
    app = make_app(APP)
    source = app.dir / "some.jsonl"
    source.write_text('["a"]\n\n["b"]\n{"args": ["c"], "kwargs": {"zzz": 1}}\n')
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", str(source), "--app",
                                  app.module, "--db", str(app.db)))
    assert line.startswith(f"jobpool: error: --from {source} line 4: "), line
    assert "zzz" in line and app.store().stats()["ready"] == 0
    for path in (f"./{app.module}", f"{app.module}.py"):
        line = one_line_error(app.cli("enqueue", "t.hello", "--app", path, "--db", str(app.db)))
        assert line == (f"jobpool: error: --app takes a module's import name (like myjobs "
                        f"or pkg.jobs), not a path: {path!r}"), line


def test_enqueue_from_a_json_lines_file_is_one_transaction(make_app):
    app = make_app(APP)
    batch = app.dir / "batch.jsonl"
    batch.write_text('["a"]\n{"args": ["b"], "kwargs": {"punctuation": "?"}}\n\n["c"]\n')
    out = app.cli("enqueue", "t.hello", "--from", str(batch), "--db", str(app.db), "--json", check=True)
    assert json.loads(out.stdout) == {"ids": [1, 2, 3]}
    assert app.store().get(2)["payload"] == '[["b"],{"punctuation":"?"}]'
    bad = app.dir / "bad.jsonl"
    bad.write_text('["ok"]\n{"args": [1], "oops": 2}\n')
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", str(bad), "--db", str(app.db)))
    assert "bad.jsonl line 2" in line
    # What --from does not use is refused, not ignored: --key-period keyed nothing.
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", str(batch), "--key-period",
                                  "1d", "--db", str(app.db)))
    assert "drop --args, --kwargs, --key, --key-period and --group" in line
    assert app.store().stats()["ready"] == 3
    deep = app.dir / "deep.jsonl"
    deep.write_text('["ok"]\n' + "[" * 5000 + "]" * 5000 + "\n")  # past json.loads's depth
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", str(deep), "--db", str(app.db)))
    assert "deep.jsonl line 2: nested too deeply" in line
    assert app.store().stats()["ready"] == 3  # nothing of the bad files was written


def test_scale_and_stop_aimed_at_no_live_pool_say_what_there_is(make_app):
    # R25, R27: --pool / --host that match nothing are one line naming the live pools
    import time as _time

    from jobpool.store.records import Heartbeat
    app = make_app(APP)
    store = app.store()
    owner = "web-1:4242:1"  # a pool on another host, alive by its heartbeat
    store.heartbeat(Heartbeat(owner=owner, host="web-1", pid=1, procs=2, queues=("default",),
                              names=("t.hello",), core="test", counters_json="{}",
                              slots_json="[]"), [], _time.time())
    line = one_line_error(app.cli("scale", "--procs", "3", "--host", "web-2", "--db", str(app.db)))
    assert "no live pool matches --host web-2" in line and f"{owner} on web-1" in line
    asked = app.cli("stop", "--host", "web-1", "--db", str(app.db), check=True)
    assert "asked 1 pool(s) to stop" in asked.stdout


def test_pause_and_resume_a_queue_shown_by_status_pools_and_top(make_app):
    # R38 from the CLI: a paused queue is named by status (and --json), pools and top
    import time as _time

    from jobpool.store.records import Heartbeat
    app = make_app(APP)
    db = str(app.db)
    store = app.store()
    store.enqueue("t.hello", "x")
    out = app.cli("pause", "default", "--db", db, check=True).stdout
    assert out.startswith("paused queue default")
    assert app.cli("pause", "default", "--db", db, check=True).stdout.strip() == (
        "queue default was already paused")
    assert json.loads(app.cli("status", "--json", "--db", db, check=True).stdout)["paused"] == [
        "default"]
    assert "paused queues: default" in app.cli("status", "--db", db, check=True).stdout
    store.heartbeat(Heartbeat(owner="web-1:4242:1", host="web-1", pid=1, procs=2,
                              queues=("default",), names=("t.hello",), core="test",
                              counters_json="{}", slots_json="[]"), [], _time.time())
    assert "paused queues: default" in app.cli("pools", "--db", db, check=True).stdout
    assert "default (paused)" in app.cli("top", "--once", "--db", db, check=True).stdout
    # a pool started now claims nothing from it, and its --burst ends
    app.start("--procs", "1")
    assert store.stats()["ready"] == 1
    assert app.cli("resume", "default", "--db", db, check=True).stdout.strip() == (
        "resumed queue default")
    assert app.cli("resume", "default", "--db", db, check=True).stdout.strip() == (
        "queue default was not paused")
    app.start("--procs", "1")
    assert store.stats()["done"] == 1


@pytest.mark.parametrize("db, words", [
    ("sqlite:jobs.db", "--db sqlite:…: name an SQLite store by its path"),
    ("postgresq://u:s3cret@db/app", "--db postgresq://…: no store jobpool knows has the scheme"),
    ("mysql://u:s3cret@db/app", "--db mysql://…: no store jobpool knows has the scheme"),
])
@pytest.mark.parametrize("command", [["enqueue", "t.hello"], ["status"], ["start", "--burst"]])
def test_a_db_url_of_an_unknown_scheme_is_a_usage_mistake_naming_the_known_ones(
        make_app, db, words, command):
    app = make_app(APP)
    before = sorted(app.dir.iterdir())
    line = one_line_error(app.cli(*command, "--app", app.module, "--db", db), code=2)
    assert line.startswith("jobpool: error: ") and words in line
    assert "postgresql://… and postgres://…" in line and "s3cret" not in line
    assert sorted(app.dir.iterdir()) == before


def test_jobpool_db_of_an_unknown_scheme_is_refused_too(make_app):
    app = make_app(APP)
    app.env["JOBPOOL_DB"] = "sqlite:jobs.db"
    line = one_line_error(app.cli("enqueue", "t.hello", "--app", app.module))
    assert "$JOBPOOL_DB sqlite:…: name an SQLite store by its path" in line
    assert not (app.dir / "sqlite:jobs.db").exists()


def test_a_db_path_with_a_colon_after_a_slash_is_a_path(make_app):
    app = make_app(APP)
    app.cli("enqueue", "t.hello", "--app", app.module, "--db", "./a:b.db", "--args", "[\"x\"]", check=True)
    app.cli("start", "--burst", "--app", app.module, "--db", str(app.dir / "x:y.db"), check=True)
    assert (app.dir / "a:b.db").exists() and (app.dir / "x:y.db").exists()


def _beat(store, host: str, pid: int, **counters) -> None:
    """A live pool's row, as a supervisor on ``host`` heartbeats it."""
    import time as _time

    from jobpool.store.records import Heartbeat
    store.heartbeat(Heartbeat(owner=f"{host}:{pid}:1", host=host, pid=pid, procs=8,
                              queues=("high", "default"), names=("t.hello",), core="compiled",
                              counters_json=json.dumps(counters), slots_json="[]"),
                    [], _time.time())


def test_status_off_a_terminal_keeps_each_pool_on_one_line(make_app):
    # R29a: piped, each statement is one line whatever the width: none is broken
    # inside a phrase ("0 settle" / "failures")
    app = make_app(APP)
    _beat(app.store(), "worker-0042.example.internal", 123456, completed=1234567, retried=12,
          dead=3, crashes=1, settle_failures=0)
    app.env["COLUMNS"] = "80"
    lines = app.cli("status", "--db", str(app.db), check=True).stdout.splitlines()
    assert ("pool worker-0042.example.internal:123456:1: 8 processes, 1234567 completed, "
            "12 retried, 3 dead, 1 crash, 0 settle failures") in lines


@pytest.mark.parametrize("columns, left_out", [(80, ["core"]), (120, [])])
def test_pools_keeps_every_value_whole_at_80_and_120_columns(make_app, columns, left_out):
    # R29: at 80 columns the core gives way (and it says so), not every
    # column down to a letter
    app = make_app(APP)
    for pid in (4242, 4243):
        _beat(app.store(), "web-01.prod", pid, completed=123456, dead=7)
    app.env["COLUMNS"] = str(columns)
    lines = app.cli("pools", "--db", str(app.db), check=True).stdout.splitlines()
    assert max(map(len, lines)) <= columns
    headers = ["host", "pid", "state", "procs", "queues", "core", "up", "heartbeat", "done", "dead"]
    assert lines[0].split() == [h for h in headers if h not in left_out]
    for line, pid in zip(lines[1:3], ("4242", "4243")):
        cells = line.split()
        assert cells[:5] == ["web-01.prod", pid, "running", "8", "high,default"]
        assert cells[-2:] == ["123456", "7"]
        assert ("compiled" in cells) == (columns == 120)
    assert lines[3:] == ([f"(core: left out at {columns} columns; --json has every field)"]
                         if left_out else [])


def test_cancel_of_a_running_job_says_what_a_pool_does_and_what_if_it_ends_first(make_any_app):
    # R31: the pool acts at its next heartbeat; an attempt that ends before that keeps
    # its end, and a retry it earned is cancelled when it runs
    import random
    import time as _time

    from jobpool.lifecycle import DONE, ERROR, Outcome, Policy
    from jobpool.store.records import Heartbeat
    app = make_any_app(APP)
    store = app.store()
    finishes, fails = (store.enqueue("t.hello", who).id for who in ("a", "b"))
    claimer = store.claimer("pool-a", ["t.hello"], ["default"],
                            {"t.hello": Policy(backoff_base=0.0)})  # a retry is due at once
    try:
        assert [j.job_id for j in claimer.turn([], 2, _time.time(), None)[1]] == [finishes, fails]
        out = app.cli("jobs", "cancel", str(finishes), str(fails), "--db", str(app.db),
                      check=True).stdout.splitlines()
        assert out == [f"job {job}: running: its pool stops it within about a second and "
                       f"settles it dead (cancelled); if the job ends first, that end stands "
                       f"(done stays done), and a retry it earns is cancelled when it starts"
                       for job in (finishes, fails)]
        # Both end before the pool's heartbeat: one done, one failed with attempts left.
        claimer.turn([Outcome(finishes, 1, DONE, result="null"), Outcome(fails, 1, ERROR, "boom")],
                     0, _time.time(), random.Random(1))
        assert (store.get(finishes)["status"], store.get(finishes)["last_error"]) == ("done", None)
        assert store.get(fails)["status"] == "ready"
        # The failed one's retry runs, and the pool's next heartbeat cancels that attempt.
        assert [j.attempt for j in claimer.turn([], 1, _time.time(), None)[1]] == [2]
        beat = Heartbeat(owner="pool-a", host="h", pid=1, procs=1, queues=("default",),
                         names=("t.hello",), core="test", counters_json="{}", slots_json="[]")
        assert store.heartbeat(beat, [], _time.time()).cancels == ((fails, 2),)
    finally:
        claimer.close()


def _parsed(parser, argv, capsys):
    """What a parser makes of ``argv``: its namespace, or its exit code and output."""
    try:
        return vars(parser.parse_args(argv))
    except SystemExit as exc:
        out = capsys.readouterr()
        return exc.code, out.out, out.err


def test_a_run_builds_only_the_parser_of_its_command_and_parses_as_the_whole_one(capsys):
    """The CLI builds the parser of the command it was given (about 10 ms of a pool's
    start went to building all of them): each command's help, a usage mistake and
    a parse read as the whole parser reads them, and the names it chooses by are
    the whole parser's."""
    from jobpool import cli
    whole = cli.build_parser()
    commands = whole._subparsers._group_actions[0].choices
    assert tuple(commands) == cli.COMMAND_NAMES
    for group, inner in cli.GROUP_COMMANDS.items():
        assert tuple(commands[group]._subparsers._group_actions[0].choices) == inner
    argvs = [["--help"], ["bogus"], [], ["jobs"], ["jobs", "bogus"], ["jobs", "--help"],
             ["start", "--procs", "3", "--burst", "--result-ttl", "2h"], ["start", "--procs", "0"],
             ["jobs", "list", "--status", "dead", "--meta", "a=1"], ["dead", "retry", "--all"],
             ["limits", "set", "--queue", "q", "--running", "2"], ["stop", "--host", "h"]]
    argvs += [[name, "--help"] for name in cli.COMMAND_NAMES]
    argvs += [[group, name, "--help"] for group, names in cli.GROUP_COMMANDS.items()
              for name in names]
    for argv in argvs:
        assert _parsed(cli.build_parser(argv), argv, capsys) == _parsed(
            cli.build_parser(), argv, capsys), argv
    # Built for one command, the parser knows no other.
    code, _out, err = _parsed(cli.build_parser(["status"]), ["start"], capsys)
    assert code == 2 and "invalid choice: 'start'" in err
    code, _out, err = _parsed(cli.build_parser(["jobs", "show"]), ["jobs", "list"], capsys)
    assert code == 2 and "invalid choice: 'list'" in err


def _ran_with_its_reader_gone(app, *args):
    """``jobpool ARGS`` with its standard output a pipe whose reader closed at once
    (``... | head -c0``): its exit code and standard error."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "jobpool", *args], cwd=app.dir,
                              env=app.env, stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60)
    finally:
        os.close(write)
    return done.returncode, done.stderr


def test_a_reader_that_goes_away_ends_the_output_not_the_command(make_app):
    # `jobpool dead retry --all | head -1`: the retry is carried out and said by the exit
    # code; before, the first write past the pipe's buffer raised out of the command as
    # a traceback (exit 1) after the retry had committed, and a user would run it again.
    app = make_app(APP)
    store = app.store()
    ids = [h.id for h in store.enqueue_many("t.hello", [("x",)] * 1500)]
    for job_id in ids:
        store.cancel(job_id)
    code, err = _ran_with_its_reader_gone(app, "dead", "retry", "--all", "--db", str(app.db))
    assert (code, err) == (0, "")
    assert store.stats()["ready"] == 1500 and store.dead.ids() == []
    code, err = _ran_with_its_reader_gone(app, "jobs", "list", "--limit", "1500", "--json",
                                          "--db", str(app.db))
    assert (code, err) == (0, "")


def test_output_that_cannot_be_written_is_one_line_and_exit_1(make_app):
    app = make_app(APP)
    app.store().enqueue_many("t.hello", [("x",)] * 1500)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "jobpool", "jobs", "list", "--limit",
                               "1500", "--db", str(app.db)], cwd=app.dir, env=app.env,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "jobpool: error: cannot write to standard output: No space left on device"]
    # With standard output closed, a command prints nothing and does its work.
    done = subprocess.run([sys.executable, "-m", "jobpool", "metrics", "--db", str(app.db)],
                          cwd=app.dir, env=app.env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=60,
                          preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("content, needle", [
    # `tuple()` of any value made it the arguments: "ab" queued ("a", "b"), 5 a traceback.
    *((line, "line 2: expected a JSON array of arguments or an object with args (an array) "
             "and kwargs (an object)")
      for line in (b'{"args": 5}', b'{"args": null}', b'{"args": "ab"}', b'{"args": {"x": 1}}',
                   b'{"kwargs": [1]}')),
    (b"\xff\xfe[1]", "line 2: not UTF-8 text"),
    (b"[" + b" " * (7 * 1024 * 1024) + b"]", "line 2: longer than 6295552 bytes"),
])
def test_a_from_file_line_that_is_not_a_job_is_named_and_nothing_is_queued(
        make_app, content, needle):
    app = make_app(APP)
    (app.dir / "jobs.jsonl").write_bytes(b'["first"]\n' + content + b"\n")
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", "jobs.jsonl", "--db",
                                  str(app.db)))
    assert line == f"jobpool: error: --from jobs.jsonl {needle}" or needle in line, line
    assert app.store().list_jobs() == []


def test_a_from_source_that_never_ends_a_line_or_is_closed_is_refused(make_app):
    app = make_app(APP)
    line = one_line_error(app.cli("enqueue", "t.hello", "--from", "/dev/zero", "--db",
                                  str(app.db)))
    assert "--from /dev/zero line 1: longer than" in line
    done = subprocess.run([sys.executable, "-m", "jobpool", "enqueue", "t.hello", "--from", "-",
                           "--db", str(app.db)], cwd=app.dir, env=app.env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL,
                          preexec_fn=lambda: os.close(0))
    assert one_line_error(done) == "jobpool: error: cannot read --from -: standard input is closed"
    assert app.store().list_jobs() == []


@pytest.mark.parametrize("setting, value", [
    ("JOBPOOL_POLL_INTERVAL", "abc"), ("JOBPOOL_HEARTBEAT", "0"), ("JOBPOOL_DEAD_AFTER", "nan"),
    ("JOBPOOL_MESSAGE_STALL", "-1"), ("JOBPOOL_WAL_WARN_AFTER", "x")])
def test_a_setting_of_the_environment_that_is_not_seconds_is_named_in_one_line(
        make_app, setting, value):
    # Read at import, each was a traceback of every command (`--help` too) that did not
    # name the variable, or was taken (a heartbeat of 0 s).
    app = make_app(APP)
    for args in (["status", "--db", str(app.db)],
                 ["start", "--burst", "--app", app.module, "--db", str(app.db)]):
        done = subprocess.run([sys.executable, "-m", "jobpool", *args], cwd=app.dir,
                              env=dict(app.env, **{setting: value}), capture_output=True,
                              text=True, timeout=60)
        line = one_line_error(done, code=done.returncode)
        assert done.returncode in (1, 2)
        assert (f"{setting} must be a number of seconds above 0, at most 10 years, "
                f"not {value!r}") in line
    # The library says it too, before any store is opened with the default instead (in a
    # process that imported the module reading it: here a pool's, as one run in-process).
    code = ("import jobpool, jobpool.supervisor, sys\ntry:\n    jobpool.connect(sys.argv[1])\n"
            "except jobpool.JobpoolError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(app.dir / "lib.db")], cwd=app.dir,
                          env=dict(app.env, **{setting: value}), capture_output=True,
                          text=True, timeout=60)
    assert f"{setting} must be a number of seconds above 0" in done.stdout, done
    assert not (app.dir / "lib.db").exists()


def test_an_empty_string_an_option_reads_as_data_is_taken(make_app):
    # `--args '[""]'` is one argument, the empty string: the check for options given an
    # empty value looks at what the shell passed, not at what a flag's type made of it.
    app = make_app(APP)
    done = app.cli("enqueue", "t.hello", "--args", '[""]', "--kwargs", '{"punctuation": ""}',
                   "--db", str(app.db), check=True)
    assert done.stderr == ""
    (job,) = app.store().list_jobs()
    assert job["payload"] == '[[""],{"punctuation":""}]'


def test_top_with_its_reader_gone_stops(make_app):
    # `jobpool top | head`: the live view off a terminal, its output gone, ended when its
    # next frame failed; guarded as the short commands are, it would have run for ever.
    app = make_app(APP)
    app.store().enqueue("t.hello", "x")
    code, err = _ran_with_its_reader_gone(app, "top", "--refresh", "0.2", "--db", str(app.db))
    assert code in (0, 1) and "Traceback" not in err, err
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "jobpool", "top", "--db", str(app.db)],
                              cwd=app.dir, env=app.env, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (
        1, "jobpool: error: cannot write to standard output: No space left on device")


def test_a_terminal_size_past_any_screen_is_taken_as_the_largest_one(make_app):
    # rich took COLUMNS=10**21 as given, and `top --once` overflowed in its padding.
    app = make_app(APP)
    app.store().enqueue("t.hello", "x")
    for args in (["top", "--once"], ["jobs", "list"], ["status"]):
        done = subprocess.run([sys.executable, "-m", "jobpool", *args, "--db", str(app.db)],
                              cwd=app.dir, capture_output=True, text=True, timeout=60,
                              env=dict(app.env, COLUMNS="1" + "0" * 21, LINES="9" * 20,
                                       TTY_COMPATIBLE="1"))
        assert (done.returncode, done.stderr) == (0, ""), done.stderr[-2000:]


def test_a_from_file_with_lone_carriage_returns_is_one_job_a_line(make_app):
    app = make_app(APP)
    (app.dir / "old-mac.jsonl").write_bytes(b'["a"]\r["b"]\r\n["c"]\n')
    app.cli("enqueue", "t.hello", "--from", "old-mac.jsonl", "--db", str(app.db), check=True)
    assert sorted(j["payload"] for j in app.store().list_jobs()) == [
        '[["a"],{}]', '[["b"],{}]', '[["c"],{}]']



def test_from_standard_input_a_text_stream_put_in_its_place_is_read(make_app, monkeypatch):
    # An application calling the CLI in its own process with sys.stdin replaced by a
    # text stream (no .buffer): its lines are the jobs, as a pipe's would be.
    import io

    from jobpool import cli
    app = make_app(APP)
    monkeypatch.chdir(app.dir)
    monkeypatch.setattr(sys, "stdin", io.StringIO('["a"]\n["b"]\n'))
    assert cli.main(["enqueue", "t.hello", "--from", "-", "--db", str(app.db)]) == 0
    assert sorted(j["payload"] for j in app.store().list_jobs()) == ['[["a"],{}]', '[["b"],{}]']


@pytest.mark.parametrize("raises", ["class Stop(BaseException):\n    pass\nraise Stop('no')\n",
                                    "raise GeneratorExit()\n"], ids=["own", "GeneratorExit"])
def test_an_app_raising_what_is_no_exception_on_import_is_one_line(make_app, raises):
    # A module's own BaseException (or a GeneratorExit) at import printed a traceback.
    app = make_app(APP)
    (app.dir / "raising_app.py").write_text(raises)
    line = one_line_error(app.cli("status", "--app", "raising_app", "--db", str(app.db)))
    assert line.startswith("jobpool: error: cannot import --app raising_app"), line


def test_a_terminal_of_no_columns_still_prints_what_a_command_says(make_app):
    # COLUMNS=0 printed nothing at all, exit 0: an enqueue's new id was lost.
    app = make_app(APP)
    app.env["COLUMNS"] = "0"
    enqueued = app.cli("enqueue", "t.hello", "--args", '["x"]', "--db", str(app.db), check=True)
    job_id = app.store().list_jobs()[0]["id"]
    assert str(job_id) in enqueued.stdout, enqueued
    listed = app.cli("jobs", "list", "--db", str(app.db), check=True)
    assert str(job_id) in listed.stdout and "t.hello" in listed.stdout, listed


def test_a_time_filter_takes_a_negative_number_and_refuses_no_time(make_app):
    # --created-from and its siblings (a group's options) missed the dashed-number
    # handling ("expected one argument"), and "nan" passed as a time, to be refused by the
    # store naming no flag.
    app = make_app(APP)
    app.store().enqueue("t.hello", "x")
    listed = app.cli("jobs", "list", "--created-from", "-1e9", "--db", str(app.db), check=True)
    assert "t.hello" in listed.stdout
    for bad in ("nan", "inf"):
        line = one_line_error(app.cli("jobs", "list", "--created-from", bad, "--db", str(app.db)))
        assert f"--created-from must be Unix seconds or an ISO 8601 time, not '{bad}'" in line
