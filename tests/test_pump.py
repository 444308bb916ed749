"""R68: the pump (``supervisor/pump.py``, and its compiled twin ``_core.Pump``) against
the general loop, its reference.

One scripted workload runs through in-process ``--burst`` pools over stores made alike:
successes with results, a failure retried, a ``Fatal``, a ``Defer``, plain successes
(R68's success frames on the compiled road), progress reports, a row past its deadline
at claim (R10), a job killed at its hard timeout (R20), a chain step (R12). The compiled
pump and the Python pump over the compiled driver, the Python pump over the pure one,
and the general loop must leave the same rows (every column but times, pids and
owners), attempt log, counters and event stream, and add the same to the rollups (R56)
and, with ``--metrics``, to the series; each pump must have served turns (else the
comparison proves nothing).
"""
from __future__ import annotations

import json
import logging
import os
import random
import selectors
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import jobpool
from jobpool import _core_py

try:
    from jobpool import _core
except ImportError:  # the pure install: the compiled roads' tests are skipped
    _core = None
from jobpool.config import PoolConfig
from jobpool.supervisor import Supervisor
from jobpool.supervisor import pump as pump_module

from .conftest import ATTEMPT_LINES, ROOT, process_state, wait_for, waits_of

#: Where the jobs leave their markers: each run's own directory (its children are
#: forked after ``_run`` sets it), so the two stores' payloads are the same text.
MARKERS = Path(".")

NAMES = ("pump.ok", "pump.plain", "pump.flaky", "pump.fatal", "pump.defers", "pump.reports", "pump.slow",
         "pump.ended")


@jobpool.job(name="pump.ok", store_result=True)
def ok(i):
    return {"i": i}


@jobpool.job(name="pump.plain")
def plain(i):
    """A success with no stored result: on the compiled road its child sends it as
    R68's success frame, on the pure road as the outcome message."""
    return None


@jobpool.job(name="pump.ended", store_result=True)
def ended(batch):
    """A batch's callback: what the store told it of its batch."""
    return {"done": batch["done"], "dead": batch["dead"]}


@jobpool.job(name="pump.flaky", max_attempts=3, backoff_base=0.0)
def flaky(marker):
    path = MARKERS / marker
    if not path.exists():
        path.write_text("x")
        raise RuntimeError("the first attempt fails")
    return None


@jobpool.job(name="pump.fatal")
def fatal():
    raise jobpool.Fatal("never")


@jobpool.job(name="pump.defers")
def defers(marker):
    path = MARKERS / marker
    if not path.exists():
        path.write_text("x")
        raise jobpool.Defer(0)


@jobpool.job(name="pump.reports", store_result=True)
def reports(i):
    jobpool.progress(50.0, f"half of {i}")
    return i


@jobpool.job(name="pump.slow", timeout=0.3, max_attempts=1)
def slow(marker=None):
    time.sleep(5)
    if marker:
        (MARKERS / marker).write_text("ran past its hard timeout")


#: R44/R68: success frames a job forges on its own pipe before it ends, by what is wrong.
FORGED = {
    "short": b"\0" + b"\1" * 9,
    "long": b"\0" * 31,
    "flag": b"\0" * 29 + b"\2",
}


@jobpool.job(name="pump.forges", max_attempts=1)
def forges(what):
    from jobpool import protocol, running
    attempt = running.current
    if what == "stranger":  # well formed, for a job this slot does not run: refused
        frame = protocol.success_frame(attempt.job_id + 1000, attempt.attempt, 1, 0.0, False)
    else:
        frame = FORGED[what]
    attempt.conn.send_bytes(frame)
    return None


def _enqueue_workload(store) -> None:
    for i in range(6):
        store.enqueue("pump.ok", i)
    store.enqueue("pump.flaky", "flaky")
    store.enqueue("pump.ok", 6)
    store.enqueue("pump.fatal")
    store.enqueue("pump.defers", "defers")
    store.enqueue_with("pump.ok", args=(7,), deadline=time.time() - 60)  # R10
    store.enqueue("pump.reports", 8)
    store.enqueue_with("pump.ok", args=(9,), then=jobpool.Signature("pump.ok", (10,), {}))  # R12
    store.enqueue("pump.slow")  # R20
    for i in range(11, 31):
        store.enqueue("pump.ok", i)
        store.enqueue("pump.plain", i)


class _Events(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: list[tuple] = []

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        fields = getattr(record, "fields", {})
        if event is not None and "job_id" in fields:
            self.seen.append((event, fields.get("job_id"), fields.get("name"),
                              fields.get("attempt"), fields.get("reason")))


_TIMELY = ("_at", "owner", "pid", "cpu", "rss", "lease", "deadline")


def _rows(path: Path) -> tuple[list, list, list]:
    db = sqlite3.connect(path)
    columns = [row[1] for row in db.execute("PRAGMA table_info(jobs)")
               if not any(part in row[1] for part in _TIMELY)]
    jobs = db.execute(f"SELECT {', '.join(columns)} FROM jobs ORDER BY id").fetchall()
    lines = db.execute(f"SELECT job_id, attempt, outcome, substr(error, 1, 40) "
                       f"FROM {ATTEMPT_LINES} ORDER BY job_id, attempt").fetchall()
    # R56: what the pool added to the per-minute rollups, by name (counts, not times).
    rollups = db.execute("SELECT name, sum(done), sum(retried), sum(dead), sum(wait_n), "
                         "sum(run_n) FROM jobpool_rollups GROUP BY name ORDER BY name").fetchall()
    db.close()
    return jobs, lines, rollups


def _series(pool: Supervisor) -> list[str]:
    """R28: what the pool's Prometheus series counted (counts, not times), or []."""
    if pool.state.metrics is None:
        return []
    return sorted(line for line in pool.state.metrics.exposition().decode().splitlines()
                  if line.startswith(("jobpool_jobs_total", "jobpool_job_wait_seconds_count",
                                      "jobpool_job_run_seconds_count")))


def _run(where: Path, pump: bool, options: dict, driver: str = "compiled",
         python_pump: bool = False) -> tuple:
    """One run of the workload; ``driver``: the SQLite driver its claimer uses (the
    compiled one steps a plain turn in C, R68; the pure one is the reference), and with
    it the pump (compiled over the compiled driver, ``_pump.pxi``, unless
    ``python_pump``: ``supervisor/pump.py``'s, its specification)."""
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, driver)
        if python_pump:
            patch.setattr(pump_module, "make", pump_module.Pump)
        return _run_with(where, pump, options)


def _drive(patch: pytest.MonkeyPatch, driver: str) -> None:
    """Make ``driver`` (compiled or pure) this process's: its claimers' SQLite driver,
    the pipes' reader and writer (R68's success frames) and the children's checks."""
    patch.setattr("jobpool.core.NAME", driver)
    # (The compiled road's too: under JOBPOOL_PURE=1 this process loaded the twins.)
    twins = _core_py if driver == "pure" else _core
    for name in ("read_message", "write_message", "OpenFiles", "Limits", "has_children", "JobEnd",
                 "SlotTable"):
        patch.setattr(f"jobpool.core.{name}", getattr(twins, name))


def _run_with(where: Path, pump: bool, options: dict) -> tuple:
    global MARKERS
    where.mkdir()
    MARKERS = where
    path = where / "jobpool.db"
    store = jobpool.connect(path)
    _enqueue_workload(store)
    store.close()
    handler = _Events()
    logger = logging.getLogger("jobpool.events")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True, names=NAMES,
                                     poll_interval=0.05, kill_grace=0.5, pump=pump,
                                     **options),
                          rng=random.Random(7))
        assert pool.run() == 0
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    return pool, (*_rows(path), _series(pool)), handler.seen


@pytest.mark.c_extension
@pytest.mark.parametrize("options", [{}, {"metrics": "127.0.0.1:0"},
                                     {"max_tasks_per_child": 3}],
                         ids=["plain", "metrics", "recycled"])
def test_the_pump_and_the_general_loop_leave_the_same_rows_counters_and_events(
        compiled_core, tmp_path, options):
    # Four roads (R68): the compiled pump over the compiled driver (its plain turns
    # stepped in C), the Python pump over the compiled driver, the Python pump over the
    # pure driver, and the general loop over the pure driver, the reference, where
    # every turn is the engine's Python. With --metrics the series are compared too;
    # with --max-tasks-per-child every third job's success comes retiring (the pump
    # hands it to the general road) and its child is replaced.
    compiled, compiled_rows, compiled_events = _run(tmp_path / "compiled", True, options)
    python, python_rows, python_events = _run(tmp_path / "python", True, options,
                                              python_pump=True)
    pumped, pumped_rows, pumped_events = _run(tmp_path / "pump", True, options, "pure")
    general, general_rows, general_events = _run(tmp_path / "general", False, options, "pure")
    assert bool(pumped_rows[-1]) == bool(options.get("metrics"))
    assert general.pump is None and general.pump_off == "turned off"
    assert pumped.pump_off is None and compiled.pump_off is None and python.pump_off is None
    assert type(compiled.pump) is _core.Pump
    assert type(python.pump) is type(pumped.pump) is pump_module.Pump
    # The pump served the plain jobs' turns (most of the 33 claims), and on the
    # compiled driver most of them were stepped in C; never on the pure one.
    for pool in (compiled, python, pumped):
        assert pool.pump.turns >= 15, pool.pump.turns
    assert compiled.core.plain_turns >= 15, compiled.core.plain_turns
    assert python.core.plain_turns >= 15, python.core.plain_turns
    assert pumped.core.plain_turns == 0 and general.core.plain_turns == 0
    for road, rows, counters, seen in (
            ("Python pump, pure driver", pumped_rows, pumped.counters, pumped_events),
            ("Python pump, compiled driver", python_rows, python.counters, python_events),
            ("compiled pump, compiled driver", compiled_rows, compiled.counters,
             compiled_events)):
        assert rows == general_rows, road
        assert counters == general.counters, road
        assert seen == general_events, road
    # And the workload did what it says: a sanity check of the reference itself.
    # R68: the compiled road's children sent their plain successes as frames.
    assert compiled.slots.frames and python.slots.frames
    assert not pumped.slots.frames and not general.slots.frames
    assert general.counters["completed"] == 52 and general.counters["dead"] == 3
    assert general.counters["retried"] == 1 and general.counters["deferred"] == 1
    if options.get("max_tasks_per_child"):
        for road in ("compiled", "python", "pump", "general"):  # children were replaced
            db = sqlite3.connect(tmp_path / road / "jobpool.db")
            pids = db.execute("SELECT count(DISTINCT done_pid) FROM jobs").fetchone()[0]
            db.close()
            assert pids >= 15, (road, pids)


@pytest.mark.parametrize("driver", ["pure", pytest.param("compiled",
                                                          marks=pytest.mark.c_extension)])
def test_a_malformed_success_frame_is_a_lost_pipe_and_a_strangers_is_refused(
        tmp_path, driver, request):
    # R44, R65, R68: a frame of the wrong size or with a flag out of range is no
    # message: the supervisor closes the pipe as for bad marshal data and kills the
    # child, whose exit settles the job as a crash saying why; a frame for a job the
    # slot does not run is dropped as a stray outcome is, and the job's own end
    # follows. The pool goes on serving the jobs after each, in the pump on the
    # compiled road.
    if driver == "compiled":
        request.getfixturevalue("compiled_core")
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    forged = {what: store.enqueue("pump.forges", what).id for what in (*FORGED, "stranger")}
    after = [store.enqueue("pump.plain", i).id for i in range(5)]
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, driver)
        pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True,
                                     names=("pump.forges", "pump.plain"), poll_interval=0.05))
        assert pool.run() == 0
    for what in FORGED:
        row = store.get(forged[what])
        assert row["status"] == "dead" and row["attempts"] == 1, (what, dict(row))
        assert row["last_error"].startswith(
            "its pipe to the pool carried no message: a success frame of"), (what, row["last_error"])
    assert store.get(forged["stranger"])["status"] == "done"
    assert [store.get(i)["status"] for i in after] == ["done"] * 5
    assert pool.slots.frames == (driver == "compiled")
    store.close()


@pytest.mark.c_extension
@pytest.mark.parametrize("off", ["max_jobs", "pump"])
def test_children_send_success_frames_only_where_the_pump_reads_them(
        compiled_core, tmp_path, off):
    # R68: a frame is read in C by the pump; in a pool the pump never serves (turned
    # off, --max-jobs, or any other reason it is off) the children send the outcome
    # message the general loop reads, and the jobs end as they would.
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    ids = [store.enqueue("pump.plain", i).id for i in range(4)]
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, "compiled")
        options = dict(max_jobs=4) if off == "max_jobs" else dict(pump=False)
        pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True,
                                     names=("pump.plain",), poll_interval=0.05, **options))
        assert pool.run() == 0
    assert pool.pump is None and pool.pump_off
    assert not pool.slots.frames
    assert [store.get(i)["status"] for i in ids] == ["done"] * 4
    store.close()


@pytest.mark.c_extension
def test_a_failed_turn_the_compiled_pump_took_itself_pauses_the_pool_as_any_turn(
        compiled_core, tmp_path, monkeypatch, caplog):
    # R26, R68: a plain turn after one that went through is taken by the compiled pump
    # itself (``_plain_turn``, without the supervisor's road to the store). Its failure
    # must still go that road: the outcomes wait, the pool pauses (a store error) and
    # settles them at the pause's end (the store recovered), and every row, attempt line,
    # counter and job event ends as on the general loop.
    from jobpool import events
    from jobpool.errors import StoreError
    from jobpool.store.sqlite.compiled import CompiledSqliteDriver
    step = CompiledSqliteDriver.plain_turn
    calls: list[str] = []
    failed_from: list[str] = []

    def failing(self, *args):
        # Called by the engine's ``_turn_plain``, or by the pump's own turn (in C: the
        # caller seen is the Python that runs the pump). Two of the pump's own fail.
        calls.append(sys._getframe(1).f_code.co_name)
        if len(calls) > 5 and calls[-1] != "_turn_plain" and len(failed_from) < 2:
            failed_from.append(calls[-1])
            raise StoreError("turn failed: disk I/O error (a test's)")
        return step(self, *args)
    monkeypatch.setattr(CompiledSqliteDriver, "plain_turn", failing)
    caplog.set_level(logging.INFO, logger="jobpool.events")
    compiled, compiled_rows, compiled_events = _run(tmp_path / "compiled", True, {})
    monkeypatch.setattr(CompiledSqliteDriver, "plain_turn", step)
    general, general_rows, general_events = _run(tmp_path / "general", False, {}, "pure")
    # Most plain turns were the pump's own, and two of them failed.
    assert len(failed_from) == 2 and calls.count("_turn_plain") < len(calls) / 2, calls
    store_events = [record.event for record in caplog.records
                    if getattr(record, "event", None) in (events.STORE_ERROR,
                                                          events.STORE_RECOVERED)]
    assert store_events == [events.STORE_ERROR, events.STORE_RECOVERED] * 2
    assert (compiled.counters["settle_failures"], general.counters["settle_failures"]) == (2, 0)
    assert compiled_rows == general_rows
    assert ({**compiled.counters, "settle_failures": 0} == general.counters)
    assert compiled_events == general_events


def _watch_steps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str, bool]]:
    """Each call of the compiled driver's plain step, as ``(the turn's now, its caller,
    declined)``: the caller is the engine's ``_turn_plain``, or (the pump's own turn,
    made in C) the Python that runs the pump."""
    from jobpool.store.sqlite.compiled import CompiledSqliteDriver
    step = CompiledSqliteDriver.plain_turn
    steps: list[tuple[float, str, bool]] = []

    def watched(self, now, *args):
        caller = sys._getframe(1).f_code.co_name
        answer = step(self, now, *args)
        steps.append((now, caller, answer is None))
        return answer
    monkeypatch.setattr(CompiledSqliteDriver, "plain_turn", watched)
    _drive(monkeypatch, "compiled")
    return steps


@pytest.fixture
def stepped(compiled_core, tmp_path, monkeypatch):
    """``(steps, path, store)``: the compiled driver's steps watched (``_watch_steps``),
    and a store at ``path`` for the test to fill and ``_burst`` to drain."""
    steps = _watch_steps(monkeypatch)
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    yield steps, path, store
    store.close()


def _burst(path: Path, store=None, **options) -> Supervisor:
    """A one-slot ``--burst`` pool over ``path`` (or ``store``), run to its end."""
    pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True, names=NAMES,
                                 poll_interval=0.05, kill_grace=0.5, **options),
                      store=store, rng=random.Random(7))
    assert pool.run() == 0
    return pool


@pytest.mark.c_extension
def test_a_turn_the_compiled_step_declines_is_the_engines_without_a_second_step(stepped):
    # R68: the compiled step declines a turn whose claim meets a row only the engine's
    # own turn reads (here one past its deadline, R10): it rolls back, and the engine
    # takes the turn. When the pump's own turn was declined, the engine's must not ask
    # the step again: that was a second transaction rolled back for nothing.
    steps, path, store = stepped
    for i in range(24):
        store.enqueue("pump.plain", i)
        if i % 3 == 2:
            store.enqueue_with("pump.plain", args=(100 + i,), deadline=time.time() - 60)
    pool = _burst(path)
    declined = [caller for _now, caller, no in steps if no]
    assert len(declined) == 8 and [c for c in declined if c != "_turn_plain"], steps
    turns = [now for now, _caller, _no in steps]
    assert len(turns) == len(set(turns)), steps  # the step once a turn at most
    assert store.stats()["done"] == 24 and store.stats()["dead"] == 8
    assert pool.counters["completed"] == 24


@pytest.mark.c_extension
def test_a_batchs_members_take_the_compiled_step_and_its_callback_runs_once(stepped):
    # R34, R68: a success of a batch's member (no chain, no limit) is as plain as any
    # other: the compiled step settles it with its batch's count (every member's turn
    # was the engine's own Python), the last member's end enqueues the callback in the
    # same transaction, and the pool runs it.
    steps, path, store = stepped
    with store.batch(on_complete=ended.s()) as batch:
        batch.add_many("pump.plain", [(i,) for i in range(20)])
    pool = _burst(path)
    status = store.batch_status(batch.id)
    assert (status.done, status.dead, status.finished) == (20, 0, True)
    assert store.get(status.complete_job)["status"] == "done"
    assert store.stats()["done"] == 21
    assert len(steps) >= 20 and not [step for step in steps if step[2]], steps
    assert pool.core.plain_turns == len(steps)


@pytest.mark.c_extension
def test_a_chains_steps_take_the_compiled_step_each_enqueuing_the_next(stepped):
    # R12, R68: a chain's step is claimed by the compiled step (its chain read by the
    # Python codec there, R44; before, the step declined the turn and the engine took
    # it again), and its success enqueues the next step in the same transaction, as the
    # engine's settle does (before, every such settle was the engine's Python).
    steps, path, store = stepped
    firsts = [store.enqueue_with("pump.plain", args=(i,),
                                 then=[plain.s(100 + i), plain.s(200 + i)]).id for i in range(8)]
    pool = _burst(path)
    assert store.stats()["done"] == 24
    assert len(steps) >= 24 and not [step for step in steps if step[2]], steps
    assert pool.core.plain_turns == len(steps)
    for first in firsts:
        chain = [job["payload"] for job in store.list_jobs(chain=first, limit=10)]
        assert len(chain) == 3, chain


@pytest.mark.c_extension
def test_text_that_is_not_ascii_takes_the_compiled_step(stepped):
    # R68, R44: arguments and metadata written in any language are as plain as
    # ASCII ones: the compiled step claims them (it declined every such row,
    # then the engine's own turn ran after the rolled-back one), and the child gets
    # the arguments as they were written.
    steps, path, store = stepped
    words = ["Zoë", "東京", "Ærøskøbing", "😀 \u2028", "plain"]
    handles = [store.enqueue_with("pump.ok", args=(f"{word} {i}",), meta={"city": word})
               for i, word in enumerate(words * 4)]
    _burst(path)
    assert [h.result(timeout=0) for h in handles] == [{"i": f"{word} {i}"}
                                                      for i, word in enumerate(words * 4)]
    assert steps and not [step for step in steps if step[2]], steps


@pytest.mark.c_extension
def test_a_pool_of_several_queues_in_strict_order_takes_the_compiled_step(stepped):
    # R68, R38: ``--queues high,low`` claims from high first, then from low what high
    # left: a turn the compiled step claims as the engine does (it took only one queue,
    # so every turn of such a pool was the engine's own Python).
    steps, path, store = stepped
    for i in range(12):
        store.enqueue_with("pump.plain", args=(i,), queue="low")
        store.enqueue_with("pump.plain", args=(100 + i,), queue="high")
    pool = _burst(path, queues=("high", "low"))
    assert len(steps) >= 20 and not [step for step in steps if step[2]], steps
    assert pool.core.plain_turns == len(steps)
    db = sqlite3.connect(path)
    order = [queue for (queue,) in db.execute("SELECT queue FROM jobs ORDER BY started_at, id")]
    db.close()
    assert order == ["high"] * 12 + ["low"] * 12
    assert store.stats()["done"] == 24


@pytest.mark.c_extension
def test_a_claimer_that_is_not_the_engines_is_asked_every_turn(stepped):
    # R68: the compiled pump takes a plain turn itself only of the engine's claimer,
    # whose leases it keeps; a claimer that wraps it is asked every turn, plain or not.
    _steps, path, store = stepped
    for i in range(20):
        store.enqueue("pump.plain", i)
    asked: list[int] = []

    class Wrapped:
        def __init__(self, claimer):
            self.claimer = claimer

        def __getattr__(self, name):
            return getattr(self.claimer, name)

        def turn(self, outcomes, n, *rest, **options):
            asked.append(n)
            return self.claimer.turn(outcomes, n, *rest, **options)

    class Store:
        def __getattr__(self, name):
            return getattr(store, name)

        def claimer(self, *args, **kwargs):
            return Wrapped(store.claimer(*args, **kwargs))

    pool = _burst(path, store=Store())
    assert type(pool.pump) is _core.Pump and pool.pump.turns >= 15
    assert len(asked) >= pool.pump.turns and store.stats()["done"] == 20


def test_a_job_the_pump_dispatched_is_killed_at_its_hard_timeout(tmp_path, monkeypatch):
    # R20 inside the pump: with the poll and the heartbeat 30 s away, the only time due
    # soon is the slow job's hard timeout, and the pump dispatched that job itself
    # (the first job went out from the general loop's claim at start).
    global MARKERS
    MARKERS = tmp_path
    monkeypatch.setattr("jobpool.supervisor.operations.HEARTBEAT_EVERY", 30.0)
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    store.enqueue("pump.ok", 1)
    slow_id = store.enqueue("pump.slow", "late").id
    pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True, names=NAMES,
                                 poll_interval=30.0, status_every=0, kill_grace=0.5))
    assert pool.run() == 0
    assert pool.pump.turns >= 1
    row = store.get(slow_id)
    assert row["status"] == "dead" and row["last_error"].startswith("timed out after 0.3 s")
    assert not (tmp_path / "late").exists()  # killed long before its sleep ended
    store.close()


@pytest.mark.parametrize("road", ["compiled", "pure"])
def test_a_job_the_pump_sends_to_a_child_already_gone_is_given_back(tmp_path, road, request):
    """R63, R19 on the pump's road: the child is killed (for real) after the pump's turn
    claimed its next job and before the pump wrote the job to it. The write finds no
    reader: the job never started, so it goes back in line with its attempt, not
    settled as the crash of a child that never ran it."""
    if road == "compiled":
        request.getfixturevalue("compiled_core")
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    for i in range(4):
        store.enqueue("pump.plain", i)
    killed: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, road)
        pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True, names=NAMES,
                                     poll_interval=30.0, status_every=0))
        turn = pool.core.turn

        def turn_then_kill(outcomes, n, *rest, **options):
            got = turn(outcomes, n, *rest, **options)
            # Called by the supervisor's _store_call, from the pump: the compiled one
            # shows no frame of its own (its caller's is the loop's), the pure one does.
            caller = sys._getframe(2).f_code
            from_pump = caller.co_name == "_loop" or caller.co_filename.endswith("pump.py")
            if from_pump and got[1] and not killed:
                child = pool.slots.all[0].pid
                os.kill(child, signal.SIGKILL)
                wait_for(lambda: process_state(child) == "Z", timeout=30)  # gone, not reaped
                killed.append(got[1][0].job_id)
            return got
        patch.setattr(pool.core, "turn", turn_then_kill)
        assert pool.run() == 0
    assert killed, "no turn of the pump claimed a job"
    row = store.get(killed[0])
    assert (row["status"], row["attempts"], row["crashes"]) == ("done", 1, 0), row
    assert [a["outcome"] for a in store.attempts(killed[0])] == ["unstarted", "done"]
    assert pool.counters["crashes"] == 0
    store.close()


@pytest.mark.parametrize("road", ["compiled", "pure", "poll"])
def test_a_pool_runs_the_compiled_pump_where_the_core_is_built(tmp_path, road, request):
    # R68: the compiled pump waits on the selector's own epoll set; a pure core
    # (JOBPOOL_PURE=1) or a selector of another kind gets the Python pump.
    if road != "pure":
        request.getfixturevalue("compiled_core")
    path = tmp_path / "jobpool.db"
    jobpool.connect(path).close()
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, "pure" if road == "pure" else "compiled")
        if road == "poll":
            patch.setattr("selectors.DefaultSelector", selectors.PollSelector)
        pool = Supervisor(PoolConfig(db=str(path), procs=1, names=("pump.ok",)))
    try:
        assert pool.pump_off is None
        wanted = _core.Pump if road == "compiled" else pump_module.Pump
        assert type(pool.pump) is wanted
    finally:
        pool.core.close()
        pool.store.close()


def test_a_pool_says_what_keeps_its_pump_off(tmp_path):
    path = tmp_path / "jobpool.db"
    jobpool.connect(path).close()
    # (``--coalesce-us`` does not: the pump holds a turn as the general loop does, R6a.)
    for options, why in (({"max_jobs": 5}, "--max-jobs"), ({"coalesce": 0.001}, None),
                         ({"memory_limit": 100}, "memory limits"), ({}, None)):
        pool = Supervisor(PoolConfig(db=str(path), procs=1, names=("pump.ok",), **options))
        try:
            assert pool.pump_off == why
            assert (pool.pump is None) == (why is not None)
        finally:
            pool.core.close()
            pool.store.close()


@pytest.mark.parametrize("switch", ["--no-pump", "JOBPOOL_PUMP=0", None])
def test_the_pump_is_turned_off_by_the_flag_or_the_environment(tmp_path, switch):
    (tmp_path / "pump_app.py").write_text(
        "import jobpool\n\n@jobpool.job(name='pump.ok')\ndef ok(i):\n    return None\n")
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    store.enqueue("pump.ok", 1)
    store.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
               JOBPOOL_POLL_INTERVAL="0.2")
    env.pop("JOBPOOL_PUMP", None)
    args = ["--no-pump"] if switch == "--no-pump" else []
    if switch == "JOBPOOL_PUMP=0":
        env["JOBPOOL_PUMP"] = "0"
    done = subprocess.run(
        [sys.executable, "-m", "jobpool", "start", "--app", "pump_app", "--db", str(path),
         "--burst", "--procs", "1", "--log-format", "json", "--no-dashboard", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    started = [json.loads(line) for line in done.stderr.splitlines() + done.stdout.splitlines()
               if '"pool_started"' in line]
    assert [event["pump"] for event in started] == ["turned off" if switch else "on"]
    assert jobpool.connect(path).stats()["done"] == 1


def test_the_pump_stays_off_on_postgresql(pg_url):
    # R66: a PostgreSQL turn goes out in flight; the pump is SQLite's for now.
    jobpool.connect(pg_url).close()
    pool = Supervisor(PoolConfig(db=pg_url, procs=1, names=("pump.ok",)))
    try:
        assert pool.pump is None
        assert pool.pump_off == "its store's turns go out in flight (R66)"
    finally:
        pool.core.close()
        pool.store.close()


@jobpool.job(name="pump.naps")
def naps(seconds):
    time.sleep(seconds)


def _pool_of(tmp_path: Path, road: str, name: str, args: list, spin: float) -> Supervisor:
    """A burst pool of one slot over ``args`` of ``name``, its pump ``road``'s (the
    compiled one or its Python specification), run to its end."""
    path = tmp_path / f"{road}-{spin}.db"
    store = jobpool.connect(path)
    store.enqueue_many(name, [(arg,) for arg in args])
    store.close()
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, "compiled")
        if road == "python":
            patch.setattr(pump_module, "make", pump_module.Pump)
        pool = Supervisor(PoolConfig(db=str(path), procs=1, burst=True, names=(name,),
                                     spin=spin))
        assert pool.run() == 0
    assert type(pool.pump) is (pump_module.Pump if road == "python" else _core.Pump)
    assert jobpool.connect(path).stats()["done"] == len(args)
    return pool


@pytest.mark.c_extension
@pytest.mark.parametrize("road", ["compiled", "python"])
def test_the_pump_looks_for_an_outcome_before_it_sleeps_while_they_come_that_soon(
        tmp_path, road):
    """R68's amendment (``--spin-us``): while children answer within the window, the
    pump's waits find their outcomes by looking, without sleeping."""
    pool = _pool_of(tmp_path, road, "pump.plain", list(range(200)), spin=1e-3)
    assert pool.pump.looks_answered >= 1, (pool.pump.looks_answered, pool.pump.looks_missed)


@pytest.mark.c_extension
@pytest.mark.parametrize("road", ["compiled", "python"])
def test_a_pump_whose_jobs_take_longer_than_the_window_sleeps_at_once(tmp_path, road):
    """A look that finds nothing stops the looks until a wait is answered within the
    window again: jobs longer than it cost the supervisor one look, not one each."""
    pool = _pool_of(tmp_path, road, "pump.naps", [0.02] * 15, spin=1e-3)
    assert pool.pump.looks_answered == 0
    assert 1 <= pool.pump.looks_missed <= 3, pool.pump.looks_missed


@pytest.mark.c_extension
@pytest.mark.parametrize("road", ["compiled", "python"])
def test_a_window_of_zero_never_looks(tmp_path, road):
    pool = _pool_of(tmp_path, road, "pump.plain", list(range(50)), spin=0.0)
    assert (pool.pump.looks_answered, pool.pump.looks_missed) == (0, 0)


class _Scripted:
    """A selector and a monotonic clock for ``Pump._wait`` (the specification): something
    becomes ready ``next_in(seconds)`` from now; a look (``select(0)``) takes ``look``
    seconds and finds it once it is due; a sleep ends when it is due, or times out."""

    def __init__(self, look: float) -> None:
        self.now, self.look, self.due = 100.0, look, float("inf")
        self.slept: list[float] = []

    def next_in(self, seconds: float) -> None:
        self.due = self.now + seconds

    def monotonic(self) -> float:
        return self.now

    def select(self, timeout: float) -> list:
        if timeout == 0:
            self.now += self.look
        else:
            self.slept.append(timeout)
            self.now = min(self.due, self.now + timeout)
        return [("key", 1)] if self.now >= self.due else []


def _scripted_pump(monkeypatch: pytest.MonkeyPatch, script: _Scripted, spin: float) -> Any:
    monkeypatch.setattr(pump_module.time, "monotonic", script.monotonic)
    monkeypatch.setattr(pump_module.os, "sched_yield", lambda: None)
    return pump_module.Pump(None, None, None, None, script, clock=script.monotonic, rng=None,
                            store_call=None, report=None, may_run=None, spin=spin)


def test_a_wait_answered_after_the_window_stops_the_looks_counted_from_its_start(monkeypatch):
    """The window is counted from the wait's own start: outcomes that come 80 us into
    each wait, after 50 us of looks gave up (30 us into the sleep), are not "that soon",
    so the waits after the first sleep at once instead of paying for the looks and the
    wake-up both; outcomes that come within the window bring the looks back, and the
    looks then find them."""
    script = _Scripted(look=5e-6)
    pump = _scripted_pump(monkeypatch, script, spin=50e-6)
    for _ in range(4):
        script.next_in(80e-6)
        assert pump._wait(1.0) == [("key", 1)]
    assert (pump.looks_answered, pump.looks_missed, pump.look_first) == (0, 1, False)
    assert script.slept[0] == pytest.approx(1.0 - 50e-6)  # the looks' time off the sleep
    assert script.slept[1:] == [1.0, 1.0, 1.0]
    script.next_in(20e-6)  # within the window of the wait's start: the looks come back
    pump._wait(1.0)
    assert pump.look_first
    for _ in range(3):
        script.next_in(20e-6)
        pump._wait(1.0)
    assert (pump.looks_answered, pump.looks_missed) == (3, 1)
    assert len(script.slept) == 5


def test_a_wait_shorter_than_the_window_looks_for_the_wait_alone(monkeypatch):
    script = _Scripted(look=10e-6)
    pump = _scripted_pump(monkeypatch, script, spin=1e-3)
    assert pump._wait(30e-6) == []
    # Three looks fill the wait; what is left of it (nothing) is one more look, not the
    # millisecond's window nor a sleep.
    assert script.now <= 100.0 + 40e-6 + 1e-9
    assert all(t < 1e-9 for t in script.slept)
    assert pump.looks_missed == 1


def test_the_window_is_refused_outside_its_bounds_in_one_line(tmp_path):
    (tmp_path / "pump_app.py").write_text("import jobpool\n")
    for value, words in (("-1", "expected a whole number of 0 or more"),
                         ("1001", "--spin-us must be from 0 to 1000")):
        done = subprocess.run(
            [sys.executable, "-m", "jobpool", "start", "--app", "pump_app", "--db",
             str(tmp_path / "j.db"), "--burst", "--spin-us", value],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(tmp_path), str(ROOT)])), capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@jobpool.job(name="pump.flag")
def flag(path):
    Path(path).write_text("go")


@jobpool.job(name="pump.until_flag")
def until_flag(path):
    deadline = time.time() + 60
    while not Path(path).exists() and time.time() < deadline:
        time.sleep(0.002)


@jobpool.job(name="pump.until_done")
def until_done(db, job_id):
    store = jobpool.connect(db)
    try:
        deadline = time.time() + 60
        while store.get(job_id)["status"] != "done" and time.time() < deadline:
            time.sleep(0.005)
    finally:
        store.close()


def _held_pool(path: Path, road: str, window: float) -> Supervisor:
    """A burst pool of four slots over what ``path``'s store holds, with ``window`` of
    ``--coalesce-us``, run to its end by ``road``: the compiled pump, the Python pump,
    or the general loop alone (``general``). No heartbeat comes due while it runs (the
    first is written at its start), so whichever loop holds a turn runs it too; each
    wait of the pool's selector is counted (``pool.waits``: the timeouts asked)."""
    with pytest.MonkeyPatch.context() as patch:
        _drive(patch, "compiled")
        patch.setattr("jobpool.supervisor.operations.HEARTBEAT_EVERY", 60.0)
        if road == "python":
            patch.setattr(pump_module, "make", pump_module.Pump)
        pool = Supervisor(PoolConfig(db=str(path), procs=4, burst=True, poll_interval=5.0,
                                     names=("pump.flag", "pump.until_flag", "pump.until_done"),
                                     coalesce=window, pump=road != "general"))
        pool.waits = waits_of(pool)
        assert pool.run() == 0
    if road == "general":
        assert pool.pump is None
    else:
        assert pool.pump_off is None
        assert type(pool.pump) is (pump_module.Pump if road == "python" else _core.Pump)
    return pool


@pytest.mark.c_extension
@pytest.mark.parametrize("road", ["compiled", "python"])
def test_the_pump_holds_a_settle_for_the_children_still_running(tmp_path, road):
    """R6a in the pump (R68): an outcome that comes while other children run waits for
    theirs, within the window, and they settle in one transaction (one clock reading);
    the pump, not the general loop, ran that turn."""
    path, flag_file = tmp_path / "jobpool.db", str(tmp_path / "flag")
    store = jobpool.connect(path)
    after = store.enqueue("pump.until_flag", flag_file).id
    first = store.enqueue("pump.flag", flag_file).id
    store.close()
    pool = _held_pool(path, road, window=1.0)
    assert pool.pump.turns >= 1
    store = jobpool.connect(path)
    try:
        ends = {store.attempts(job_id)[-1]["ended_at"] for job_id in (after, first)}
        assert len(ends) == 1, ends
        assert store.stats()["done"] == 2
    finally:
        store.close()


@pytest.mark.c_extension
@pytest.mark.parametrize("road", ["compiled", "python"])
def test_the_pump_settles_a_held_outcome_when_its_window_ends(tmp_path, road):
    """Another child runs on until the quick job is settled: the pump holds the quick
    job's settle for the window, then runs that turn itself when the window ends,
    without handing the pool back to the general loop first."""
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    quick = store.enqueue("pump.flag", str(tmp_path / "unrelated")).id
    waiting = store.enqueue("pump.until_done", str(path), quick).id
    store.close()
    pool = _held_pool(path, road, window=0.05)
    store = jobpool.connect(path)
    try:
        log = store.attempts(quick)[-1]
        assert log["ended_at"] - log["started_at"] >= 0.05
        assert store.get(waiting)["status"] == "done"
    finally:
        store.close()
    # Two turns of the pump's own: the quick job's settle once its window ended, and
    # the waiting job's settle with the claim that found nothing.
    assert pool.pump.turns >= 2, pool.pump.turns


def test_the_general_loop_sleeps_through_a_held_turn(tmp_path):
    """R6a in the general loop (no pump): while a turn is held its outcomes wait for the
    window, so the loop sleeps until the window ends or a child answers; it does not
    look at its descriptors without waiting (once tens of thousands of times a window)."""
    path = tmp_path / "jobpool.db"
    store = jobpool.connect(path)
    quick = store.enqueue("pump.flag", str(tmp_path / "unrelated")).id
    store.enqueue("pump.until_done", str(path), quick)
    store.close()
    pool = _held_pool(path, "general", window=0.3)
    store = jobpool.connect(path)
    try:
        log = store.attempts(quick)[-1]
        assert log["ended_at"] - log["started_at"] >= 0.3
    finally:
        store.close()
    looks = sum(1 for timeout in pool.waits if timeout == 0)
    assert looks < 100, (looks, len(pool.waits))
