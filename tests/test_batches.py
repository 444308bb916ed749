"""R34 through real pools and the CLI, on every store: a batch's callback runs once,
after the last member's last attempt, however many pools share the store; a running
member adds to its own batch, once however often it is retried."""
from __future__ import annotations

import json
import time

import pytest

from jobpool import Signature
from jobpool.errors import EnqueueError

APP = """
import json, os
from pathlib import Path
import jobpool
from jobpool import job, Retry

HERE = Path(__file__).parent

@job(name="b.load", backoff_base=0)
def load(name):
    if name == "fan":
        # Adds two members, then fails its first attempt: the retry adds them again,
        # which must not make two more.
        jobpool.current_batch().add_many("b.load", [("fan-1",), ("fan-2",)])
        marker = HERE / "fan-failed"
        if not marker.exists():
            marker.write_text("once")
            raise Retry("the first attempt fails after its adds")
    with open(HERE / "loaded.txt", "a") as fh:
        fh.write(name + "\\n")

@job(name="b.crash", max_attempts=5, max_crashes=2, backoff_base=0)
def crash():
    os.kill(os.getpid(), 9)

@job(name="b.report")
def report(run, batch):
    with open(HERE / "reports.txt", "a") as fh:
        fh.write(json.dumps({"run": run, "batch": batch}) + "\\n")

@job(name="b.rebuild")
def rebuild(batch):
    with open(HERE / "rebuilt.txt", "a") as fh:
        fh.write(json.dumps(batch) + "\\n")

@job(name="b.plain")
def plain():
    pass
"""


def _lines(app, name):
    path = app.dir / name
    return path.read_text().splitlines() if path.exists() else []


def test_two_pools_run_a_batch_and_its_callback_fires_once(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    with store.batch(on_success=Signature("b.rebuild"),
                     on_complete=Signature("b.report", (), {"run": "r1"})) as batch:
        batch.add_many("b.load", [(f"f{i}",) for i in range(10)] + [("fan",)])
        crashed = batch.add(Signature("b.crash")).id
    pools = [app.spawn("--burst", "--procs", "2", "--no-dashboard") for _ in range(2)]
    for pool in pools:
        assert pool.wait(timeout=120) == 0, pool.stderr.read() if pool.stderr else ""
    (report,) = [json.loads(line) for line in _lines(app, "reports.txt")]
    assert report["run"] == "r1"
    assert report["batch"] == {"id": batch.id, "total": 14, "done": 13, "dead": 1,
                               "dead_ids": [crashed], "dead_ids_truncated": False}
    assert _lines(app, "rebuilt.txt") == []  # a member went dead: no on_success
    assert store.get(crashed)["last_error"].startswith("quarantined: killed its child 2 times")
    loaded = _lines(app, "loaded.txt")
    assert sorted(loaded) == sorted([f"f{i}" for i in range(10)] + ["fan", "fan-1", "fan-2"])
    status = store.batch_status(batch.id)
    assert (status.finished, status.total, status.complete_job is not None) == (True, 14, True)
    assert store.get(status.complete_job)["status"] == "done"


def test_many_members_ended_by_two_pools_fire_the_callback_once(make_any_app):
    # R34 under contention: on PostgreSQL the last members end in different shards at
    # once, and only the last emptying transaction may fire.
    app = make_any_app(APP)
    store = app.store()
    with store.batch(on_complete=Signature("b.report", (), {"run": "many"})) as batch:
        batch.add_many("b.plain", [()] * 300)
    pools = [app.spawn("--burst", "--procs", "2", "--no-dashboard") for _ in range(2)]
    for pool in pools:
        assert pool.wait(timeout=120) == 0, pool.stderr.read() if pool.stderr else ""
    (report,) = [json.loads(line) for line in _lines(app, "reports.txt")]
    assert (report["batch"]["total"], report["batch"]["done"], report["batch"]["dead"]) == (
        300, 300, 0)
    status = store.batch_status(batch.id)
    assert (status.done, status.pending, status.finished) == (300, 0, True)


def test_on_success_fires_when_every_member_succeeds(make_any_app):
    app = make_any_app(APP)
    store = app.store()
    batch = store.batch(on_success=Signature("b.rebuild"))
    batch.add_many("b.load", [("a",), ("b",)])
    app.start("--procs", "2")
    assert _lines(app, "rebuilt.txt") == []  # not closed yet: nothing fires
    assert store.batch_status(batch.id).done == 2
    batch.close()
    app.start("--procs", "1")
    (rebuilt,) = [json.loads(line) for line in _lines(app, "rebuilt.txt")]
    assert (rebuilt["total"], rebuilt["done"], rebuilt["dead"]) == (2, 2, 0)


def test_a_callback_that_cannot_take_batch_is_refused(make_any_app):
    app = make_any_app(APP)
    source = app.dir / "files.jsonl"
    source.write_text('["a"]\n')
    result = app.cli("enqueue", "b.load", "--from", str(source), "--on-complete", "b.plain",
                     "--app", app.module, "--db", str(app.db))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "jobpool: error: on_complete: b.plain cannot take the keyword argument batch= that a "
        "callback receives; add it to its parameters"]
    assert app.store().stats()["ready"] == 0  # nothing was written


@pytest.mark.parametrize("extra, needle", [
    (["--priority", "99999999999"], "priority must be from"),
    (["--queue", "a\x01b"], "queue"),
    (["--app", "{module}"], "line 2"),  # ["a", "b", "c"] does not bind to b.load(path)
])
def test_a_refused_batch_from_the_cli_leaves_no_batch(make_any_app, extra, needle):
    """R34: the batch is opened before its members are written; when the members are
    refused, nothing of the batch is kept (it was listed as an empty cancelled one)."""
    app = make_any_app(APP)
    source = app.dir / "files.jsonl"
    source.write_text('["a"]\n["a", "b", "c"]\n')
    result = app.cli("enqueue", "b.load", "--from", str(source), "--on-complete", "b.rebuild",
                     "--db", str(app.db), *(e.format(module=app.module) for e in extra))
    assert result.returncode == 1, result.stderr
    assert needle in result.stderr.strip().splitlines()[-1]
    store = app.store()
    assert store.batches.list() == [] and store.stats()["ready"] == 0
    # A batch a member joined, or one that was closed, is never discarded.
    kept = store.batch()
    kept.add_many("b.load", [("a",)])
    closed = store.batch()
    closed.close()
    assert not store.batches.discard_unused(kept.id)
    assert not store.batches.discard_unused(closed.id)
    assert sorted(b.id for b in store.batches.list()) == [kept.id, closed.id]


def test_a_batch_from_the_cli_runs_and_is_shown(make_any_app):
    app = make_any_app(APP)
    source = app.dir / "files.jsonl"
    source.write_text('["a"]\n["b"]\n["c"]\n')
    queued = app.cli("enqueue", "b.load", "--from", str(source), "--on-complete", "b.rebuild",
                     "--db", str(app.db), "--json", check=True)
    answer = json.loads(queued.stdout)
    batch_id = answer["batch"]
    listed = json.loads(app.cli("batches", "list", "--open", "--json", "--db", str(app.db),
                                check=True).stdout)
    assert [(b["id"], b["total"], b["closed"]) for b in listed] == [(batch_id, 3, True)]
    app.start()
    # A callback enqueued by name gets no arguments of its own, only batch=.
    (rebuilt,) = [json.loads(line) for line in _lines(app, "rebuilt.txt")]
    assert (rebuilt["id"], rebuilt["total"], rebuilt["done"]) == (batch_id, 3, 3)
    shown = json.loads(app.cli("batches", "show", str(batch_id), "--json", "--db", str(app.db),
                               check=True).stdout)
    assert (shown["done"], shown["dead"], shown["finished"]) == (3, 0, True)
    assert shown["members"] == {"done": 3}
    assert shown["callbacks"]["on_complete"]["name"] == "b.rebuild"
    assert shown["callbacks"]["on_complete"]["status"] == "done"
    assert json.loads(app.cli("batches", "list", "--open", "--json", "--db", str(app.db),
                              check=True).stdout) == []
    text = app.cli("batches", "show", str(batch_id), "--db", str(app.db), check=True).stdout
    assert f"batch {batch_id} finished: 3 jobs, 3 done, 0 dead, 0 pending" in text
    again = app.cli("batches", "cancel", str(batch_id), "--db", str(app.db))
    assert again.returncode == 1
    assert again.stderr.strip() == (f"jobpool: error: batch {batch_id} is finished already: "
                                    f"nothing to cancel")


def test_cancelling_a_batch_from_the_cli_fires_nothing(make_any_app):
    app = make_any_app(APP)
    source = app.dir / "files.jsonl"
    source.write_text('["a"]\n["b"]\n')
    answer = json.loads(app.cli("enqueue", "b.load", "--from", str(source), "--on-complete",
                                "b.rebuild", "--db", str(app.db), "--json", check=True).stdout)
    cancelled = app.cli("batches", "cancel", str(answer["batch"]), "--db", str(app.db),
                        check=True)
    assert cancelled.stdout.strip() == (f"batch {answer['batch']} cancelled: 2 jobs dead now; "
                                        f"no callback will fire")
    app.start()
    assert _lines(app, "rebuilt.txt") == [] and _lines(app, "loaded.txt") == []
    assert app.store().batch_status(answer["batch"]).finished


def test_batch_options_are_refused_one_line(make_any_app):
    app = make_any_app(APP)
    result = app.cli("enqueue", "b.load", "--on-complete", "b.report", "--db", str(app.db))
    assert result.returncode == 2 or result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].endswith("add --from")
    with pytest.raises(EnqueueError, match="cannot have its own"):
        app.store().batch(on_complete=Signature("b.report", (), {"batch": 1}))


def test_dead_retry_says_which_members_run_alone(make_any_app):
    """R34: a dead member retried before its batch's callbacks fire reopens its count, and
    nothing more is said; retried after, it runs alone, and ``dead retry`` says so (an
    operator retrying a batch's dead members would otherwise wait for a callback). The
    retry's own transaction decides, not a read after it that a woken pool could race."""
    app = make_any_app(APP)
    store = app.store()
    with store.batch(on_complete=Signature("b.report", (), {"run": "first"})) as batch:
        batch.add(Signature("b.load", ("x",)))
        first = batch.add(Signature("b.crash")).id
        second = batch.add(Signature("b.crash")).id
    loose = store.enqueue("b.crash").id  # dead too, in no batch
    app.start("--procs", "2")
    assert store.batch_status(batch.id).finished
    retried = app.cli("dead", "retry", str(first), str(loose), "--db", str(app.db), check=True)
    assert retried.stdout.splitlines() == [
        f"job {first}: retried", f"job {loose}: retried",
        f"batch {batch.id} is finished: job {first} runs outside it, and no callback of the "
        f"batch follows its end"]
    report = store.dead.retry_report([second, first, 999_999])
    assert report.answers == {second: "retried", first: "not dead (ready)",
                              999_999: "no such job"}
    assert report.alone == {batch.id: [second]}
    # Before its batch finished, a retried member is counted again: nothing more to say.
    open_batch = store.batch(on_complete=Signature("b.report", (), {"run": "second"}))
    member = open_batch.add(Signature("b.crash")).id
    app.start("--procs", "1")
    assert store.get(member)["status"] == "dead" and not store.batch_status(open_batch.id).finished
    again = app.cli("dead", "retry", str(member), "--db", str(app.db), check=True)
    assert again.stdout.splitlines() == [f"job {member}: retried"]
    assert store.batch_status(open_batch.id).pending == 1  # counted again


def test_dead_retry_says_a_member_of_a_cancelled_batch_has_no_callback(make_any_app):
    """R34: a member of a batch cancelled while another member ran counts in it again when
    retried, and no callback follows its end either: ``dead retry`` says so, as it does
    for one that runs alone."""
    app = make_any_app(APP)
    store = app.store()
    batch = store.batch(on_complete=Signature("b.report", (), {"run": "cancelled"}))
    running, waiting = batch.add_many("b.load", [("a",), ("b",)]).ids
    with store.batch() as finished:  # and a member of a batch finished already
        ended = finished.add(Signature("b.load", ("c",))).id
    assert store.cancel(ended) == "cancelled" and store.batch_status(finished.id).finished
    claimer = store.claimer("pool-x", ("b.load",), ("default",), {})
    try:
        claimed = claimer.turn([], 1, time.time(), None)[1]
        assert [job.job_id for job in claimed] == [running]
        cancelled = app.cli("batches", "cancel", str(batch.id), "--db", str(app.db), check=True)
        retried = app.cli("dead", "retry", str(waiting), str(ended), "--db", str(app.db),
                          check=True)
    finally:
        claimer.close()
    assert cancelled.stdout.strip() == (f"batch {batch.id} cancelled: 1 job dead now, 1 running "
                                        f"one asked to stop; no callback will fire")
    assert retried.stdout.splitlines() == [
        f"job {waiting}: retried", f"job {ended}: retried",
        f"batch {finished.id} is finished: job {ended} runs outside it, and no callback of the "
        f"batch follows its end",
        f"batch {batch.id} was cancelled: job {waiting} counts in it again, and no callback of "
        f"the batch follows its end"]


HOLDING_APP = APP + '''

import sqlite3, threading

class HoldsTheStore(jobpool.Middleware):
    """Refuses the job "hold", having let another connection take the store's write lock
    (a bulk enqueue of another process, say) and keep it past the command's busy wait."""

    def before_enqueue(self, job, meta):
        if job.args != ("hold",):
            return
        taken = threading.Event()

        def hold():
            other = sqlite3.connect(os.environ["HOLD_DB"], isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            taken.set()
            threading.Event().wait(30)
        threading.Thread(target=hold, daemon=True).start()
        taken.wait(10)
        raise PermissionError("tenant is suspended")

jobpool.add_middleware(HoldsTheStore())
'''


def test_a_refused_batch_whose_store_is_locked_is_left_and_said(make_app):
    """R34: an ``enqueue --from`` whose member is refused gives its batch up (deleted, or
    cancelled once a member joined); when the store cannot take that either (another
    connection holds its write lock), the batch is left as it is, and a warning line
    says so before the refusal's own, which it hides nothing of."""
    app = make_app(HOLDING_APP)
    app.store().close()
    app.env = {**app.env, "HOLD_DB": str(app.db)}
    source = app.dir / "files.jsonl"
    source.write_text('["a"]\n["hold"]\n')
    result = app.cli("enqueue", "b.load", "--from", str(source), "--on-complete", "b.rebuild",
                     "--app", app.module, "--db", str(app.db), timeout=120)
    assert result.returncode == 1, result.stderr
    warning, error = result.stderr.strip().splitlines()
    (batch,) = app.store().batches.list()
    assert warning.startswith(f"jobpool: warning: batch {batch.id} of the failed enqueue is left "
                              f"as it is: "), warning
    assert "locked" in warning, warning
    assert error.startswith(f"jobpool: error: --from {source} line 2: the before_enqueue of "), error
    assert error.endswith("refused the enqueue of b.load: PermissionError: tenant is suspended")
    assert app.store().stats()["ready"] == 0  # no member was written
