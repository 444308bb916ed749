"""R1 (issue 23 item 1): a registered job's arguments are bound to its function's
signature at enqueue, by every way of enqueueing it; a mismatch is an
``EnqueueError`` naming the job and what did not fit, and nothing is written. A row
whose arguments do not fit when it runs is dead at its first attempt."""
from __future__ import annotations

import json

import pytest

import jobpool
from jobpool import jobs
from jobpool.errors import EnqueueError, RegistryError
from jobpool.handles import Signature

from .conftest import insert_job


def add(x, y):
    return x + y


def flexible(*args, **kwargs):
    return None


def with_defaults(path, sep=",", *, header=True):
    return None


def callback(run, batch):
    return None


@pytest.fixture
def store(any_store):
    return any_store


@pytest.fixture
def define():
    names = []

    def register(name, fn, **options):
        names.append(name)
        return jobpool.job(name=name, **options)(fn)
    yield register
    for name in names:
        jobs.unregister(name)


def count(store) -> int:
    stats = store.stats()
    return sum(stats[status] for status in ("ready", "scheduled", "running", "done", "dead"))


#: (args, kwargs) that cannot call add(x, y), and the words that say why.
MISFITS = [
    ((1, 2, 3), {}, "too many positional arguments"),
    ((1,), {}, "missing a required argument: 'y'"),
    ((1, 2), {"nope": True}, "got an unexpected keyword argument 'nope'"),
    ((1,), {"x": 2}, "multiple values for argument 'x'"),
]


@pytest.mark.parametrize("args, kwargs, words", MISFITS)
def test_each_way_of_enqueueing_refuses_arguments_that_do_not_fit(store, define, args, kwargs,
                                                                  words):
    fn = define("bind.add", add)
    attempts = [
        lambda: fn.enqueue_with(args=args, kwargs=kwargs, store=store),
        lambda: store.enqueue("bind.add", *args, **kwargs),
        lambda: store.enqueue_with("bind.add", args=args, kwargs=kwargs),
        lambda: store.enqueue_many("bind.add", [(1, 2), Signature("bind.add", args, kwargs)]),
        lambda: store.enqueue_many("bind.add", [(1, 2), Signature("bind.add", args, kwargs)],
                                   keys=["a", "b"]),
    ]
    for attempt in attempts:
        with pytest.raises(EnqueueError) as caught:
            attempt()
        assert "job bind.add" in str(caught.value) and words in str(caught.value)
    assert count(store) == 0


def test_enqueue_many_of_positional_tuples_is_refused_whole_naming_the_item(store, define):
    define("bind.add", add)
    with pytest.raises(EnqueueError, match=r"item 2: job bind.add: .*too many positional"):
        store.enqueue_many("bind.add", [(1, 2), [3, 4], (5, 6, 7), (8, 9)])
    with pytest.raises(EnqueueError, match=r"item 0: .*missing a required argument: 'y'"):
        store.enqueue_many("bind.add", [(1,)])
    assert count(store) == 0


def test_the_default_store_path_refuses_too(tmp_path, monkeypatch, define):
    monkeypatch.setenv("JOBPOOL_DB", str(tmp_path / "default.db"))
    fn = define("bind.add", add)
    with pytest.raises(EnqueueError, match="job bind.add: .*too many positional arguments"):
        fn.enqueue(1, 2, 3)  # type: ignore[call-arg]
    store = jobpool.connect(tmp_path / "default.db")
    try:
        assert count(store) == 0
    finally:
        store.close()


def test_a_signature_that_can_never_fit_is_refused_when_made(define):
    fn = define("bind.add", add)
    with pytest.raises(EnqueueError, match="job bind.add: .*too many positional arguments"):
        fn.s(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(EnqueueError, match="unexpected keyword argument 'nope'"):
        fn.s(1, nope=True)  # type: ignore[call-arg]
    assert fn.s(1) == Signature("bind.add", (1,), {})  # the rest may come later


def test_a_chain_step_that_does_not_fit_writes_nothing(store, define):
    first = define("bind.first", flexible)
    define("bind.add", add)
    with pytest.raises(EnqueueError, match=r"then\[1\]: job bind.add: .*'y'"):
        first.enqueue_with(store=store, then=[Signature("bind.add", (1, 2)),
                                              Signature("bind.add", (1,))])
    assert count(store) == 0
    first.enqueue_with(store=store, then=[Signature("bind.add", (1, 2))])
    assert count(store) == 1


def test_a_batch_member_or_callback_that_does_not_fit_writes_nothing_of_the_batch(store, define):
    define("bind.add", add)
    report = define("bind.report", callback)
    with pytest.raises(EnqueueError, match="on_complete: job bind.report: .*'run'"):
        store.batch(on_complete=report.s())  # type: ignore[call-arg]
    with pytest.raises(EnqueueError, match="item 1: job bind.add: .*too many"):
        with store.batch(on_complete=report.s("r1")) as batch:  # type: ignore[call-arg]
            batch.add_many("bind.add", [(1, 2), (1, 2, 3)])
    with pytest.raises(EnqueueError, match="job bind.add: .*unexpected keyword argument 'z'"):
        with store.batch(on_complete=report.s("r1")) as batch:  # type: ignore[call-arg]
            batch.add(Signature("bind.add", (1, 2), {"z": 0}))
    assert count(store) == 0
    # A callback gets batch= from the store: it is not missing.
    with store.batch(on_complete=report.s(run="r2")) as batch:  # type: ignore[call-arg]
        batch.add(Signature("bind.add", (1, 2)))
    assert count(store) == 1


def test_calls_that_fit_are_written(store, define):
    define("bind.defaults", with_defaults)
    define("bind.flexible", flexible)
    store.enqueue("bind.defaults", "a.csv")
    store.enqueue("bind.defaults", "a.csv", ";", header=False)
    store.enqueue_with("bind.defaults", kwargs={"path": "b.csv", "sep": ";"})
    store.enqueue_many("bind.defaults", [("c.csv",), ("d.csv", "|")])
    for args, kwargs in (((), {}), ((1, 2, 3), {}), ((), {"nope": True}), ((1,), {"x": 2})):
        store.enqueue_with("bind.flexible", args=args, kwargs=kwargs)
    with pytest.raises(EnqueueError, match="unexpected keyword argument 'headers'"):
        store.enqueue("bind.defaults", "a.csv", headers=False)
    with pytest.raises(EnqueueError, match="too many positional arguments"):
        store.enqueue("bind.defaults", "a.csv", ";", True)  # header is keyword-only
    assert count(store) == 9


def test_a_name_this_process_has_not_registered_is_not_checked(store):
    # It cannot be: the function is in the pool's process (its row fails there).
    store.enqueue_with("bind.elsewhere", args=(1, 2, 3), kwargs={"nope": True})
    assert count(store) == 1


def test_a_periodic_job_that_needs_arguments_is_refused_at_registration(define):
    with pytest.raises(RegistryError, match="bind.tick: .*missing a required argument: 'x'"):
        define("bind.tick", add, every=60)


CLI_APP = """
from jobpool import job

@job(name="t.add")
def add(x, y):
    return x + y
"""


def test_cli_enqueue_with_app_refuses_arguments_that_do_not_fit(make_any_app):
    app = make_any_app(CLI_APP)
    db = str(app.db)
    for extra, words in ((["--args", "[1, 2, 3]"], "too many positional arguments"),
                         (["--args", "[1]"], "missing a required argument: 'y'"),
                         (["--args", "[1, 2]", "--kwargs", '{"nope": true}'],
                          "got an unexpected keyword argument 'nope'")):
        out = app.cli("enqueue", "t.add", "--app", app.module, "--db", db, *extra)
        assert out.returncode != 0, out.stdout
        assert "job t.add" in out.stderr and words in out.stderr
        assert "Traceback" not in out.stderr
    assert count(app.store()) == 0
    app.cli("enqueue", "t.add", "--app", app.module, "--db", db, "--args", "[1, 2]", check=True)
    assert count(app.store()) == 1


POOL_APP = """
from jobpool import job

@job(name="t.add", backoff_base=0)
def add(x, y):
    return x + y

@job(name="t.inner", max_attempts=3, backoff_base=0)
def inner(x):
    return len(x)   # a TypeError from the body, for an int
"""


def test_a_row_that_does_not_fit_is_dead_after_one_attempt(make_any_app):
    app = make_any_app(POOL_APP)
    store = app.store()   # this process has not imported the app: written by name
    bad = [store.enqueue_with("t.add", args=(1, 2, 3)).id,
           store.enqueue_with("t.add", args=(1,)).id,
           store.enqueue_with("t.add", args=(1, 2), kwargs={"nope": True}).id]
    good = store.enqueue("t.add", 1, 2).id
    app.start("--procs", "1")
    for job_id, words in zip(bad, ("too many positional arguments",
                                   "missing a required argument: 'y'",
                                   "got an unexpected keyword argument 'nope'")):
        job = store.get(job_id)
        assert (job["status"], job["attempts"]) == ("dead", 1), job
        assert job["last_error"].startswith("job t.add: the arguments do not fit")
        assert words in job["last_error"]
        assert [a["outcome"] for a in store.attempts(job_id)] == ["fatal"]
    assert store.get(good)["status"] == "done"


def test_a_type_error_inside_the_body_is_still_retried(make_any_app):
    app = make_any_app(POOL_APP)
    job_id = app.store().enqueue("t.inner", 5).id
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert (job["status"], job["attempts"]) == ("dead", 3)
    assert job["last_error"].startswith("TypeError: object of type 'int' has no len()")
    assert [a["outcome"] for a in app.store().attempts(job_id)] == ["error"] * 3


def test_a_hand_written_row_that_does_not_fit_is_dead_after_one_attempt(make_app):
    app = make_app(POOL_APP)
    app.store()  # creates the store's file; the row is written beside the API
    job_id = insert_job(app.db, "t.add", payload=json.dumps([[1], {"z": 2}]), max_attempts=5)
    app.start("--procs", "1")
    job = app.store().get(job_id)
    assert (job["status"], job["attempts"]) == ("dead", 1)
    assert "missing a required argument: 'y'" in job["last_error"]


def test_a_bulk_enqueue_names_its_first_misfit_whatever_counts_come_before(store, define):
    """R1: a bulk of argument lists is judged by count, once a count; the refusal still
    names the first item in the list that does not fit, and nothing is written."""
    define("bind.add", add)
    with pytest.raises(EnqueueError, match=r"^item 1: job bind.add: .*too many positional"):
        store.enqueue_many("bind.add", [(1, 2), (1, 2, 3, 4), (1,), [1, 2, 3]])
    with pytest.raises(EnqueueError, match=r"^item 2: job bind.add: .*missing a required argument"):
        store.enqueue_many("bind.add", [[1, 2], (3, 4), (5,), (1, 2, 3)])
    with pytest.raises(EnqueueError, match=r"^item 3: job bind.add: .*too many positional"):
        store.enqueue_many("bind.add", [(1, 2)] * 3 + [(1, 2, 3)] + [(1, 2)] * 3)
    assert count(store) == 0
    fn = define("bind.flexible", flexible)
    handles = store.enqueue_many("bind.flexible", [(), (1,), (1, 2, 3, 4, 5)])
    assert len(handles) == 3 and fn.name == "bind.flexible"
