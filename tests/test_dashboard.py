"""The dashboard (R29): frames rendered from hand-built snapshots, and the snapshot
read from a real store."""
from __future__ import annotations

import io
import threading
import json
import re
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from rich.console import Console

import jobpool
from jobpool import dashboard
from jobpool.dashboard import plain_lines, render, run_top
from jobpool.errors import StoreError
from jobpool.snapshot import (BatchView, DrainView, FailureView, PoolView, QueueView,
                              SlotView, Snapshot, read_snapshot)
from jobpool.store.sqlite import statements as sql
NOW = 1_700_000_000.0


def pool(index: int = 0, procs: int = 4) -> PoolView:
    return PoolView(owner=f"worker-{index}:{900 + index}:abc", host=f"worker-{index}",
                    pid=900 + index, procs=procs, queues=("default",), core="compiled",
                    started_at=NOW - 600, heartbeat_at=NOW - 0.4, counters={"busy": 1})


def busy(slot: int, job_id: int, *, pool: int = 0, elapsed: float = 12.0, timeout: float = 300.0,
         progress: float | None = 45.0, stage: str | None = "parsing",
         name: str = "imports.load") -> SlotView:
    return SlotView(pool=pool, slot=slot, pid=4000 + slot, job_id=job_id, name=name, attempt=1,
                    started=NOW - elapsed, elapsed=elapsed, timeout=timeout, progress=progress,
                    stage=stage, rss=48 << 20)


def idle(slot: int, *, pool: int = 0) -> SlotView:
    return SlotView(pool=pool, slot=slot, pid=4000 + slot, rss=20 << 20)


def snapshot(**fields) -> Snapshot:
    base = Snapshot(
        taken_at=NOW, store="/srv/app/jobpool.db", core="compiled", pools=(pool(),),
        slots=(busy(0, 101), busy(1, 102, name="mail.send", elapsed=250, progress=80,
                                  stage="sending"), idle(2), idle(3)),
        queues=(QueueView("default", ready=1234, scheduled=7, running=1, dead=0, done_per_min=60),
                QueueView("mail", ready=3, scheduled=0, running=1, dead=2, done_per_min=5)),
        failures=(FailureView(job_id=77, name="imports.load", attempt=5, outcome="error",
                              ended_at=NOW - 42, reason="RuntimeError: boom; no attempts left after 5"),),
        totals={"ready": 1237, "scheduled": 7, "running": 2, "done": 98765, "dead": 2},
        done_per_min=65)
    return replace(base, **fields)


def frame(snap: Snapshot, width: int = 80, height: int = 24, styles: bool = False) -> list[str]:
    console = Console(record=True, width=width, height=height, file=io.StringIO(),
                      force_terminal=styles, color_system="standard" if styles else None)
    console.print(render(snap, console.width, console.height))
    return console.export_text(styles=styles).splitlines()


def line_with(lines: list[str], *needles: str) -> str:
    matches = [line for line in lines if all(n in line for n in needles)]
    assert matches, f"no line with {needles} in:\n" + "\n".join(lines)
    return matches[0]


_TERMINAL_OUTPUT = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]|(.)",
                              re.S)


def screen_after(output: str, width: int = 80) -> list[str]:
    """The rows a terminal ``width`` columns wide holds, scrollback included, after
    ``output``: enough of a VT100 for what rich's Live writes (text with auto-wrap,
    CR, LF as a tty's ONLCR sends it, cursor up, erase line); colours are ignored."""
    rows: list[list[str]] = [[]]
    row = col = 0
    wrap = False  # the cursor is past the last column: the next character starts a row
    for match in _TERMINAL_OUTPUT.finditer(output):
        args, command, char = match.groups()
        if command == "A":
            row, wrap = max(0, row - int(args or 1)), False
        elif command == "K":
            rows[row] = [] if args == "2" else rows[row][:col]
        elif char == "\r":
            col, wrap = 0, False
        elif char == "\n":
            row, col, wrap = row + 1, 0, False
        elif char is not None and char >= " ":
            if wrap:
                row, col, wrap = row + 1, 0, False
            rows.extend([] for _ in range(row + 1 - len(rows)))
            line = rows[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = char
            col += 1
            if col == width:
                col, wrap = width - 1, True
        rows.extend([] for _ in range(row + 1 - len(rows)))
    return ["".join(line).rstrip() for line in rows]


def header_lines(screen: list[str]) -> list[str]:
    return [line for line in screen if line.startswith("jobpool ")]


# -- what a person looks for -----------------------------------------------------------------

@pytest.mark.parametrize("width", [80, 160])
def test_each_busy_slot_shows_its_pid_job_name_elapsed_of_timeout_and_progress(width):
    lines = frame(snapshot(), width)
    first = line_with(lines, "4000", "101", "imports.load")
    assert "12s/300s" in first and "45%" in first and "parsing" in first
    second = line_with(lines, "4001", "102", "mail.send")
    assert "250s/300s" in second and "80%" in second and "sending" in second


def test_an_idle_slot_shows_its_pid_and_says_idle():
    assert "idle" in line_with(frame(snapshot()), "4002")


def test_elapsed_turns_red_past_80_percent_of_the_timeout():
    lines = frame(snapshot(slots=(busy(0, 1, elapsed=100), busy(1, 2, elapsed=250))), styles=True)
    red = "\x1b[1;31m"
    assert red + "250s/300s" in "\n".join(lines)
    assert red + "100s/300s" not in "\n".join(lines)


def test_a_slot_without_progress_shows_its_stage_and_one_without_timeout_its_elapsed():
    lines = frame(snapshot(slots=(busy(0, 5, progress=None, stage="waiting on lock", timeout=0),)))
    row = line_with(lines, "4000", "waiting on lock")
    assert " 12s " in row and "12s/" not in row and "%" not in row
    assert "1 pool · 1 slot · 1 busy" in "\n".join(lines)  # one of each, in the singular


def test_queue_rows_show_ready_scheduled_running_dead_and_done_per_minute():
    lines = frame(snapshot())
    header = line_with(lines, "queue", "ready", "sched", "running", "dead", "done/min")
    assert header.split() == ["queue", "ready", "sched", "running", "dead", "done/min"]
    assert line_with(lines, "default", "1,234").split() == ["default", "1,234", "7", "1", "0", "60"]
    assert line_with(lines, "mail ").split() == ["mail", "3", "0", "1", "2", "5"]


@pytest.mark.parametrize("width", [80, 160])
def test_a_failure_line_names_the_job_and_its_reason(width):
    row = line_with(frame(snapshot(), width), "77", "imports.load", "RuntimeError: boom")
    assert "42s" in row


def test_the_header_names_store_core_pools_totals_and_throughput():
    header = " ".join(frame(snapshot())[:2])
    for text in ("/srv/app/jobpool.db", "compiled", "1 pool", "4 slots", "2 busy", "ready 1,237",
                 "sched 7", "running 2", "done 98,765", "dead 2", "65 done/min"):
        assert text in header


def with_batches(snap: Snapshot, count: int) -> Snapshot:
    return replace(snap, batches=tuple(
        BatchView(id=12 + i, total=200, done=137, dead=3 * i, closed=i > 0,
                  callbacks="imports.rebuild_index, imports.report") for i in range(count)))


def test_open_batches_show_a_bar_of_their_ended_members_and_a_more_line():
    # R34: in the order the store gives (newest first); at 80 columns two, then how many more.
    screen = frame(with_batches(snapshot(), 4))
    assert line_with(screen, "batch 12 ", "137/200", "open", "imports.rebuild_index")
    assert line_with(screen, "batch 13 ", "140/200", "3 dead")
    assert not any("batch 14 " in line for line in screen)
    assert line_with(screen, "+2 more open batches")
    assert line_with(frame(with_batches(snapshot(), 3)), "+1 more open batch")


def test_a_cancelled_batch_names_no_callback():
    """R34: a batch cancelled while a member still runs stays open until it ends, and its
    callbacks never fire: the line says cancelled and names none."""
    snap = snapshot(batches=(BatchView(id=7, total=2, done=0, dead=1, closed=True,
                                       callbacks="imports.report", cancelled=True),))
    row = line_with(frame(snap), "batch 7 ")
    assert "cancelled" in row and "imports.report" not in row


def test_a_long_store_path_keeps_its_file_name():
    path = "/very/long/" + "nested/" * 20 + "jobs.db"
    first = frame(snapshot(store=path))[0]
    assert "…" in first and "jobs.db" in first and len(first) <= 80


def test_without_live_pools_the_frame_says_so():
    lines = frame(snapshot(pools=(), slots=(), stale_pools=1))
    assert "no live pool" in lines[0] and "1 stale" in lines[0]
    assert any("no live pool on this store" in line for line in lines)


@pytest.mark.parametrize("phase, header, slots", [
    ("starting", "pool starting", "the pool is starting"),
    ("stopped", "pool stopped", "the pool has stopped")])
def test_beside_its_own_pool_the_frame_says_starting_or_stopped_not_no_pool(phase, header, slots):
    lines = frame_with(snapshot(pools=(), slots=()), phase=phase)
    assert header in lines[0]
    line_with(lines, slots)
    assert not any("no live pool" in line for line in lines)


def frame_with(snap: Snapshot, width: int = 80, height: int = 24, **options) -> list[str]:
    console = Console(record=True, width=width, height=height, file=io.StringIO())
    console.print(render(snap, console.width, console.height, **options))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100, 120, 132, 160, 200])
def test_the_header_is_never_cut_and_failure_reasons_keep_their_room(width):
    reason = "FileNotFoundError: no input under /var/data/in/2026-12-01/sales-0007.csv"
    snap = snapshot(failures=(FailureView(job_id=77, name="imports.load", attempt=5,
                                          outcome="error", ended_at=NOW - 42, reason=reason),))
    lines = frame(snap, width)
    header = " ".join(lines[:2])
    for text in ("/srv/app/jobpool.db", "65 done/min", "dead 2"):
        assert text in header, (width, lines[:2])
    assert not any("…" in line for line in lines[:2]), lines[:2]
    row = line_with(lines, "77", "imports.load")
    # The reason is cut, if at all, by the frame's edge, never half-way across it; wide,
    # it keeps at least FAILURE_REASON_MIN columns (else the sections are stacked).
    assert reason in row or len(row.rstrip()) >= width - 1, row
    if width >= dashboard.WIDE:
        shown_reason = row[row.index("FileNotFoundError"):].rstrip()
        assert len(shown_reason) >= min(len(reason), dashboard.FAILURE_REASON_MIN - 1), row


def stopping(snap: Snapshot, running: int = 2, ends_in: float | None = 25.0) -> Snapshot:
    drain = DrainView(running=running, drain_ends_at=None if ends_in is None else NOW + ends_in)
    return replace(snap, pools=tuple(replace(p, stopping=drain) for p in snap.pools))


@pytest.mark.parametrize("width", [80, 160])
def test_a_stopping_pool_says_how_many_jobs_still_run_and_when_its_drain_ends(width):
    lines = frame(stopping(snapshot()), width)
    header = lines[:lines.index(line_with(lines, "slot", "pid"))]
    assert "stopping: 2 running, drain ends in 25s" in header
    assert max(map(len, lines)) <= width and len(lines) <= 23


def test_a_pool_that_is_not_stopping_shows_no_stopping_line():
    assert not any("stopping" in line for line in frame(snapshot()))


def test_the_drain_counts_down_rounded_up_then_says_it_is_over():
    assert "drain ends in 1s" in frame(stopping(snapshot(), ends_in=0.2))[2]
    assert frame(stopping(snapshot(), ends_in=-3))[2] == "stopping: 2 running, drain over"
    assert frame(stopping(snapshot(), ends_in=None))[2] == "stopping: 2 running"


def test_with_several_pools_each_stopping_one_is_named_on_one_line():
    snap = crowded(4, n_pools=3)
    snap = replace(snap, pools=(snap.pools[0], stopping(snap).pools[1], snap.pools[2]))
    lines = frame(snap)
    assert [line for line in lines if "stopping" in line] == \
        ["worker-1:901 stopping: 2 running, drain ends in 25s"]


def test_plain_mode_says_a_pool_is_stopping():
    line = plain_lines(stopping(snapshot(), ends_in=4.5))[0]
    assert line.endswith(" stopping=2 drain_ends_in=5s")
    assert "stopping" not in plain_lines(snapshot())[0]


def test_the_frame_left_on_exit_shows_its_header_once_after_a_ctrl_c_echo(monkeypatch):
    # Given top on an 80-column terminal, where the frame's last row fills the width
    monkeypatch.setattr(dashboard, "read_snapshot", lambda store: snapshot())
    out = io.StringIO()
    console = Console(file=out, width=80, height=24, force_terminal=True, color_system=None)

    class CtrlC(threading.Event):
        def wait(self, timeout=None):
            out.write("^C")  # what the terminal echoes when Ctrl-C is typed
            raise KeyboardInterrupt
    # When Ctrl-C stops it
    run_top(None, console, stop=CtrlC())
    # Then the screen holds the last frame once, without the echo, and a fresh line under it
    screen = screen_after(out.getvalue())
    assert len(header_lines(screen)) == 1
    assert not any("^C" in line for line in screen)
    last = line_with(screen, "77", "RuntimeError: boom")
    assert screen[screen.index(last) + 1:] == [""]


# -- fitting the terminal --------------------------------------------------------------------------

def crowded(n_slots: int, n_pools: int = 1) -> Snapshot:
    slots = tuple(busy(i, 1000 + i, pool=p, name="reports.build_quarterly_customer_statement",
                       stage="rendering page 12 of 480 for customer 00042")
                  if i % 3 else idle(i, pool=p)
                  for p in range(n_pools) for i in range(n_slots))
    failures = tuple(FailureView(job_id=i, name="imports.load_a_very_long_job_name", attempt=2,
                                 outcome="crash", ended_at=NOW - i,
                                 reason="child killed by signal SIGKILL (out of memory?) " * 3)
                     for i in range(5))
    queues = tuple(QueueView(f"queue-{i}-with-a-long-name", ready=10**9, scheduled=10**6)
                   for i in range(6))
    return snapshot(pools=tuple(pool(p, n_slots) for p in range(n_pools)), slots=slots,
                    failures=failures, queues=queues, store="/" + "deep/" * 40 + "jobpool.db")


@pytest.mark.parametrize("width,height", [(80, 24), (160, 24), (160, 50), (100, 30)])
@pytest.mark.parametrize("snap", [snapshot(), crowded(30), crowded(8, n_pools=3),
                                  stopping(crowded(8, n_pools=3), running=8, ends_in=10**6),
                                  with_batches(crowded(30), 5)],
                         ids=["few", "30 slots", "3 pools", "3 pools stopping", "batches"])
def test_no_line_is_wider_than_the_terminal_and_the_frame_never_scrolls(snap, width, height):
    lines = frame(snap, width, height)
    assert max(len(line) for line in lines) <= width
    assert len(lines) <= height - 1


def test_thirty_slots_at_80x24_show_as_many_as_fit_and_a_more_line():
    lines = frame(crowded(30))
    more = [line for line in lines if re.match(r"\+\d+ more slots", line)]
    assert len(more) == 1
    hidden = int(more[0].split()[0][1:])
    shown = [line for line in lines if re.match(r"\d+ +40\d\d ", line)]
    assert len(shown) + hidden == 30 and len(shown) >= 10
    assert all("idle" not in line for line in shown), "busy slots come first when some are hidden"


def test_a_wide_terminal_adds_pool_and_attempt_columns_and_puts_failures_beside_queues():
    # Beside the queues when the failure reasons keep FAILURE_REASON_MIN columns there.
    lines = frame(crowded(4, n_pools=2), 200, 40)
    header = line_with(lines, "slot", "pool", "pid", "try")
    assert header.index("pool") < header.index("pid")
    assert line_with(lines, "2/1", "worker-1:901", "1001")
    assert line_with(lines, "queue", "failed", "outcome")
    assert line_with(lines, "queue-0-with-a-long-name", "crash", "SIGKILL")


def test_plain_mode_is_one_status_line_with_the_totals():
    lines = plain_lines(snapshot())
    assert len(lines) == 1
    for text in ("ready=1237", "scheduled=7", "running=2", "done=98765", "dead=2",
                 "done_per_min=65", "pools=1", "slots=4", "busy=2"):
        assert text in lines[0]
    assert "batches_open" not in lines[0]
    (line,) = plain_lines(with_batches(snapshot(), 2))
    assert line.endswith(" batches_open=2 batch_12=137/200")


# -- reading a real store -----------------------------------------------------------------------------

OWNER = "host-a:4242:abcd"


def insert_pool(store, owner: str, heartbeat: float, slots: list[dict], **counters) -> None:
    params = {"owner": owner, "host": owner.split(":")[0], "pid": 4242, "procs": len(slots),
              "queues": "default,mail,idle", "core": "pure", "now": heartbeat,
              "counters": json.dumps({"claimed": 9, "completed": 4, "busy": 1, **counters}),
              "slots": json.dumps(slots), "names": ""}
    store.conn.execute(sql.UPSERT_POOL, params).fetchall()


def attempt(store, job_id: int, number: int, outcome: str, error: str | None, at: float) -> None:
    store.conn.execute(sql.INSERT_ATTEMPT, {
        "id": job_id, "attempt": number, "owner": OWNER, "pid": 77, "started_at": at - 1,
        "now": at, "outcome": outcome, "error": error, "exit_status": "0", "peak_rss": None,
        "cpu_s": None, "strays": None})


@pytest.fixture
def world(tmp_path):
    # Given a store with jobs in every status, an attempt log and two pools rows, as of
    # now: run_top reads the clock, and a pool row is live only if its heartbeat is recent
    s = jobpool.connect(tmp_path / "s.db")
    now = time.time()
    ids = {}
    for key, queue, delay in [("a1", None, None), ("a2", None, None), ("s1", None, 3600),
                              ("m1", "mail", None), ("r1", None, None), ("d1", None, None),
                              ("d2", None, None), ("d3", None, None), ("d4", "mail", None),
                              ("x1", "mail", None)]:
        ids[key] = s.enqueue_with("t.job", args=(key,), queue=queue, delay=delay, now=now - 700).id
    run = s.conn.execute
    run("UPDATE jobs SET status = 'running', lease_owner = ?, attempts = 1, started_at = ?, "
        "timeout = 300, progress = 40, stage = 'step 2' WHERE id = ?", (OWNER, now - 12, ids["r1"]))
    for key, ago in [("d1", 30), ("d2", 5), ("d3", 600), ("d4", 10)]:
        run("UPDATE jobs SET status = 'done', finished_at = ? WHERE id = ?", (now - ago, ids[key]))
    run("UPDATE jobs SET status = 'dead', finished_at = ?, last_error = ? WHERE id = ?",
        (now - 20, "ValueError: bad row 7\nTraceback (most recent call last): ...", ids["x1"]))
    trace = "\nTraceback (most recent call last): ..."
    attempt(s, ids["x1"], 1, "error", "RuntimeError: boom" + trace, now - 40)
    attempt(s, ids["d1"], 1, "done", None, now - 30)
    attempt(s, ids["x1"], 2, "fatal", "ValueError: bad row 7" + trace, now - 20)
    attempt(s, ids["a1"], 1, "deferred", None, now - 10)
    insert_pool(s, OWNER, now - 0.5, [
        {"slot": 0, "pid": 5001, "job_id": ids["r1"], "name": "t.job", "attempt": 1,
         "started": now - 12, "timeout": 300.0, "progress": 40.0, "stage": "step 2", "rss": 31 << 20},
        {"slot": 1, "pid": 5002, "job_id": None, "name": None, "attempt": None, "started": None,
         "timeout": None, "progress": None, "stage": None, "rss": 20 << 20}])
    insert_pool(s, "host-b:1:dead", now - 60, [
        {"slot": 0, "pid": 6001, "job_id": ids["a2"], "name": "t.job", "attempt": 1,
         "started": now - 70, "timeout": 300.0, "progress": None, "stage": None, "rss": None}])
    yield SimpleNamespace(store=s, ids=ids, now=now)
    s.close()


def test_read_snapshot_counts_each_queue_and_the_totals(world):
    snap = read_snapshot(world.store, world.now)
    assert snap.totals == {"ready": 3, "scheduled": 1, "running": 1, "done": 4, "dead": 1}
    assert snap.queues == (QueueView("default", ready=2, scheduled=1, running=1, dead=0, done_per_min=2),
                           QueueView("idle"),
                           QueueView("mail", ready=1, scheduled=0, running=0, dead=1, done_per_min=1))
    assert snap.done_per_min == 3
    assert snap.taken_at == world.now and snap.store == world.store.path


def test_read_snapshot_lists_newest_failures_first_with_the_first_line_of_the_reason(world):
    failures = read_snapshot(world.store, world.now).failures
    x1 = world.ids["x1"]
    assert [(f.job_id, f.name, f.attempt, f.outcome, f.reason) for f in failures] == [
        (x1, "t.job", 2, "fatal", "ValueError: bad row 7"),
        (x1, "t.job", 1, "error", "RuntimeError: boom")]
    assert len(read_snapshot(world.store, world.now, failures=1).failures) == 1


def test_read_snapshot_shows_slots_of_live_pools_only(world):
    snap = read_snapshot(world.store, world.now)
    assert [p.owner for p in snap.pools] == [OWNER] and snap.stale_pools == 1
    assert snap.core == "pure" and snap.pools[0].busy == 1
    assert snap.pools[0].queues == ("default", "mail", "idle")
    running, free = snap.slots
    assert (running.pool, running.slot, running.pid, running.job_id, running.name) == \
        (0, 0, 5001, world.ids["r1"], "t.job")
    assert running.elapsed == pytest.approx(12.0)
    assert (running.timeout, running.progress, running.stage, running.rss) == \
        (300.0, 40.0, "step 2", 31 << 20)
    assert not free.busy and free.pid == 5002


def idle_slot(slot: int, pid: int) -> dict:
    return {"slot": slot, "pid": pid, "job_id": None, "name": None, "attempt": None,
            "started": None, "timeout": None, "progress": None, "stage": None, "rss": 20 << 20}


def run_job(store, job_id: int, started: float, attempt: int = 1, progress=None) -> None:
    store.conn.execute("UPDATE jobs SET status = 'running', lease_owner = ?, attempts = ?, "
                       "started_at = ?, timeout = 60, progress = ? WHERE id = ?",
                       (OWNER, attempt, started, progress, job_id))


def test_a_job_dispatched_since_the_last_heartbeat_shows_in_its_slot(tmp_path):
    # Given a heartbeat that saw both slots idle, and a job the pool claimed since
    s = jobpool.connect(tmp_path / "s.db")
    now = time.time()
    job = s.enqueue("t.job", "a").id
    insert_pool(s, OWNER, now - 0.9, [idle_slot(0, 5001), idle_slot(1, 5002)])
    run_job(s, job, now - 0.3)
    # When the dashboard reads the store
    snap = read_snapshot(s, now)
    # Then the job is in a slot, with the pid the heartbeat gave that slot
    first, second = snap.slots
    assert (first.job_id, first.name, first.attempt, first.timeout, first.pid) == \
        (job, "t.job", 1, 60.0, 5001)
    assert first.elapsed == pytest.approx(0.3) and not second.busy
    assert snap.totals["running"] == sum(slot.busy for slot in snap.slots)
    console = Console(record=True, width=80, height=24, file=io.StringIO())
    console.print(render(snap, 80, 24))
    assert line_with(console.export_text().splitlines(), "5001", str(job), "t.job", "0s/60s")
    s.close()


def test_slot_rows_follow_the_running_rows_not_the_heartbeat(tmp_path):
    # Given a heartbeat that saw slot 0 run a job still running, slot 1 one finished
    # since, slot 2 idle; and two jobs claimed since the heartbeat
    s = jobpool.connect(tmp_path / "s.db")
    now = time.time()
    still, finished, new1, new2 = (s.enqueue("t.job", k).id for k in "abcd")
    beat = [dict(idle_slot(0, 5001), job_id=still, name="t.job", attempt=1, started=now - 9,
                 timeout=60.0, progress=30.0, stage="s"),
            dict(idle_slot(1, 5002), job_id=finished, name="t.job", attempt=1, started=now - 5,
                 timeout=60.0),
            idle_slot(2, 5003)]
    insert_pool(s, OWNER, now - 0.8, beat)
    run_job(s, still, now - 9, progress=30.0)
    run_job(s, new1, now - 0.5)
    run_job(s, new2, now - 0.2, attempt=2, progress=70.0)  # 70: the report of attempt 1
    s.conn.execute("UPDATE jobs SET status = 'done', finished_at = ? WHERE id = ?",
                   (now - 0.6, finished))
    # When the dashboard reads the store
    slots = read_snapshot(s, now).slots
    # Then each running row is in one slot, the new ones in claim order, and a new
    # attempt shows none of the progress its earlier attempt reported
    assert [(v.slot, v.pid, v.job_id) for v in slots] == \
        [(0, 5001, still), (1, 5002, new1), (2, 5003, new2)]
    assert slots[0].progress == 30.0 and slots[0].elapsed == pytest.approx(9.0)
    assert (slots[2].attempt, slots[2].progress) == (2, None)
    s.close()


def test_a_slot_whose_job_finished_since_the_heartbeat_is_idle(world):
    world.store.conn.execute("UPDATE jobs SET status = 'done', lease_owner = NULL, "
                             "finished_at = ? WHERE id = ?", (world.now - 0.2, world.ids["r1"]))
    first, second = read_snapshot(world.store, world.now).slots
    assert (first.busy, first.pid, first.rss) == (False, 5001, 31 << 20)
    assert not second.busy


@pytest.mark.parametrize("ends", [10**400, "soon", float("nan"), True],
                         ids=["past floats", "text", "nan", "true"])
def test_a_drains_end_no_float_holds_reads_as_no_end(world, ends):
    # R44: the heartbeat's JSON is a row's; an integer past any float (JSON's integers
    # have no bound) raised in the check and stopped the dashboard's read.
    insert_pool(world.store, OWNER, world.now - 0.2, [], busy=1,
                stopping={"running": 1, "drain_ends_at": ends})
    (live,) = read_snapshot(world.store, world.now).pools
    assert live.stopping == DrainView(running=1, drain_ends_at=None)


def test_read_snapshot_carries_a_stopping_pools_drain(world):
    # Given the heartbeat of a pool in a graceful stop
    insert_pool(world.store, OWNER, world.now - 0.2, [], busy=1, scale_refused="asked for 9",
                stopping={"running": 1, "drain_ends_at": world.now + 4.5})
    # When the dashboard reads it
    snap = read_snapshot(world.store, world.now)
    # Then the pool says how many jobs still run and when its drain ends
    (live,) = snap.pools
    assert live.stopping == DrainView(running=1, drain_ends_at=world.now + 4.5)
    assert live.busy == 1 and "stopping" not in live.counters
    assert "scale_refused" not in live.counters
    console = Console(record=True, width=80, height=24, file=io.StringIO())
    console.print(render(snap, 80, 24))
    assert "stopping: 1 running, drain ends in 5s" in console.export_text().splitlines()


def test_a_pool_that_is_not_stopping_reads_as_such(world):
    assert [p.stopping for p in read_snapshot(world.store, world.now).pools] == [None]


def test_read_snapshot_shows_open_batches_oldest_first(world):
    first = world.store.batch(on_complete=jobpool.Signature("t.report"))
    first.add_many("t.job", [(1,), (2,)])
    world.store.batch().close()  # finished at once: not shown
    shown = read_snapshot(world.store, world.now).batches
    assert shown == (BatchView(id=first.id, total=2, done=0, dead=0, closed=False,
                               callbacks="t.report"),)


def test_read_snapshot_leaves_no_transaction_open(world):
    read_snapshot(world.store, world.now)
    assert not world.store.conn.in_transaction


def test_snapshot_queries_walk_indexes_never_a_whole_table(world):
    for query in sql.DASHBOARD_QUERIES:
        plan = [row[3] for row in world.store.conn.execute(
            "EXPLAIN QUERY PLAN " + query,
            {"now": 0.0, "since": 0.0, "window": 10, "limit": 5, "most": 10})]
        # A table, not a subquery's rows or the recursive list of queues (R47).
        scans = [step for step in plan if re.match(r"SCAN (jobs|attempts|pools)\b", step)
                 and "USING" not in step]
        assert not scans, f"{query}\nscans a table: {plan}"


def test_top_once_prints_one_frame_of_the_store(world):
    console = Console(record=True, width=80, height=24, file=io.StringIO())
    run_top(world.store, console, once=True)
    lines = console.export_text().splitlines()
    assert "1 pool" in lines[0] and "1 stale" in lines[0]
    assert line_with(lines, "5001", str(world.ids["r1"]), "t.job", "step 2")
    assert line_with(lines, "ValueError: bad row 7")
    assert len(lines) <= 23 and max(map(len, lines)) <= 80


def test_top_redraws_until_ctrl_c_and_keeps_the_last_frame_when_a_read_fails(monkeypatch):
    # Given a store that answers once and then fails
    answers = iter([snapshot()])

    def read(store):
        for snap in answers:
            return snap
        raise StoreError("reading the dashboard snapshot failed: disk I/O error")
    naps = []

    class Clock(threading.Event):
        def wait(self, timeout=None):
            naps.append(timeout)
            if len(naps) == 2:
                raise KeyboardInterrupt
            return False
    monkeypatch.setattr(dashboard, "read_snapshot", read)
    console = Console(record=True, width=80, height=24, file=io.StringIO(), force_terminal=True)
    # When top runs until Ctrl-C
    run_top(None, console, refresh=0.25, stop=Clock())
    # Then it drew the frame twice, the second with the error, and returned quietly
    text = console.export_text()
    assert text.count("imports.load") >= 2 and "disk I/O error" in text
    assert naps[0] == 0.25


@pytest.mark.parametrize("asked, waits", [(None, dashboard.PLAIN_EVERY), (0.25, 0.25)])
def test_top_off_a_terminal_keeps_the_refresh_asked_for(monkeypatch, asked, waits):
    # `jobpool top --refresh 0.5 > log` wrote a line every 5 s, the flag unsaid; left
    # out, a log still gets a line every PLAIN_EVERY seconds, not two a second.
    monkeypatch.setattr(dashboard, "read_snapshot", lambda store: snapshot())
    naps = []

    class Clock(threading.Event):
        def wait(self, timeout=None):
            naps.append(timeout)
            return True  # stop after the first line
    console = Console(width=80, height=24, file=io.StringIO(), force_terminal=False)
    run_top(None, console, refresh=asked, stop=Clock())
    assert naps == [waits]
