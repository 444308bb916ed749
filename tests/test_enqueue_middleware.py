"""R55 (issue 28): ``Middleware.before_enqueue`` in the producer. Every road that
enqueues a job runs each hook exactly once for it, before anything is written; what
the hooks leave in ``meta`` is the job's metadata; a hook that raises refuses the
enqueue with an ``EnqueueError`` and nothing is written. On both stores, through the
public API, the CLI and a real pool."""
from __future__ import annotations

import asyncio
import json

import pytest

import jobpool
from jobpool import extensions, jobs, testing
from jobpool.errors import EnqueueError
from jobpool.handles import Signature


class Stamp(jobpool.Middleware):
    """Stamps each job with a serial number and its name, and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def before_enqueue(self, job, meta):
        self.calls.append((job.name, job.args, job.kwargs))
        meta["serial"] = len(self.calls)
        meta["stamped_name"] = job.name


@pytest.fixture
def stamp():
    middleware = jobpool.add_middleware(Stamp())
    yield middleware
    jobpool.remove_middleware(middleware)


@pytest.fixture
def registered():
    """Two throwaway jobs this process registers (so ``drain`` runs their chains)."""
    @jobs.job(name="mw.first")
    def first(x=None):
        return x

    @jobs.job(name="mw.next")
    def next_step(x=None):
        return x
    yield first, next_step
    jobs.unregister("mw.first")
    jobs.unregister("mw.next")


def _metas(store) -> dict[int, dict | None]:
    return {job["id"]: job["meta"] for job in store.list_jobs(limit=1000)}


def test_a_middleware_without_before_enqueue_adds_nothing_to_an_enqueue():
    class OnlyAttempts(jobpool.Middleware):
        def before(self, job):
            pass
    middleware = jobpool.add_middleware(OnlyAttempts())
    try:
        assert extensions.enqueue_hooks == []
    finally:
        jobpool.remove_middleware(middleware)
    stamping = jobpool.add_middleware(Stamp())
    assert extensions.enqueue_hooks == [stamping.before_enqueue]
    jobpool.add_middleware(stamping)  # registered once
    assert len(extensions.enqueue_hooks) == 1
    jobpool.remove_middleware(stamping)
    assert extensions.enqueue_hooks == []


def test_every_enqueue_road_runs_the_hooks_once_per_job(any_store, stamp, registered):
    first, next_step = registered
    store = any_store
    one = first.enqueue_with(args=(1,), store=store, meta={"given": True}).id
    by_name = store.enqueue("mw.first", 2).id
    many = [h.id for h in store.enqueue_many("mw.first", [(3,), Signature("mw.first", (4,))],
                                             meta={"shared": 1})]
    keyed = [h.id for h in store.enqueue_many("mw.first", [(5,)], keys=["k5"])]
    awaited = asyncio.run(store.aenqueue("mw.first", 6)).id
    with store.batch() as batch:
        member = batch.add(first.s(7)).id
        members = [h.id for h in batch.add_many("mw.first", [(8,), (9,)])]
    chained = store.enqueue_with("mw.first", args=(10,), meta={"root": 1},
                                 then=[next_step.s(11), next_step.s(12).with_meta({"own": 1})]).id

    # The chain's steps were stamped at the enqueue (the producer's hooks, in its
    # context), each once; the pool writes them as their predecessors finish.
    names = [call[0] for call in stamp.calls]
    assert names == ["mw.first"] * 10 + ["mw.next", "mw.next"]
    assert [call[1] for call in stamp.calls] == [(n,) for n in range(1, 13)]
    assert testing.drain(store).done == 12
    assert len(stamp.calls) == 12  # running the chain stamps nothing again

    metas = _metas(store)
    assert metas[one] == {"given": True, "serial": 1, "stamped_name": "mw.first"}
    assert metas[by_name] == {"serial": 2, "stamped_name": "mw.first"}
    assert [metas[i] for i in many] == [{"shared": 1, "serial": 3, "stamped_name": "mw.first"},
                                        {"shared": 1, "serial": 4, "stamped_name": "mw.first"}]
    assert metas[keyed[0]]["serial"] == 5 and metas[awaited]["serial"] == 6
    assert [metas[member]["serial"]] + [metas[i]["serial"] for i in members] == [7, 8, 9]
    assert metas[chained] == {"root": 1, "serial": 10, "stamped_name": "mw.first"}
    steps = sorted(i for i in metas if i > chained)
    # Each step starts from its own metadata when it names one, else the call's.
    assert [metas[i] for i in steps] == [
        {"root": 1, "serial": 11, "stamped_name": "mw.next"},
        {"own": 1, "serial": 12, "stamped_name": "mw.next"}]


def test_a_hook_that_raises_refuses_the_enqueue_and_writes_nothing(any_store, registered):
    class Refuse(jobpool.Middleware):
        def before_enqueue(self, job, meta):
            if job.args == ("no",):
                raise PermissionError("tenant is suspended")
            meta["when"] = float("nan") if job.args == ("nan",) else 1

    middleware = jobpool.add_middleware(Refuse())
    try:
        store = any_store
        with pytest.raises(EnqueueError) as refused:
            store.enqueue("mw.first", "no")
        assert str(refused.value) == ("the before_enqueue of test_a_hook_that_raises_refuses_the_"
                                      "enqueue_and_writes_nothing.<locals>.Refuse refused the "
                                      "enqueue of mw.first: PermissionError: tenant is suspended")
        assert isinstance(refused.value.__cause__, PermissionError)
        with pytest.raises(EnqueueError, match=r"^item 1: the before_enqueue of .*Refuse refused"
                           ) as refused_item:
            store.enqueue_many("mw.first", [("yes",), ("no",)])
        assert isinstance(refused_item.value.__cause__, PermissionError)
        with pytest.raises(EnqueueError, match=r"^then\[0\]: the before_enqueue of .*Refuse"):
            store.enqueue_with("mw.first", args=("yes",), then=registered[1].s("no"))
        # What a hook leaves must still be metadata (R54), checked before the write
        with pytest.raises(EnqueueError, match="^meta is not JSON"):
            store.enqueue("mw.first", "nan")
        with pytest.raises(EnqueueError, match="^item 0: meta is not JSON"):
            store.enqueue_many("mw.first", [("nan",)])
        with store.batch() as batch:
            with pytest.raises(EnqueueError, match="PermissionError"):
                batch.add(registered[0].s("no"))
        assert store.list_jobs() == []
        # A job the hooks let through is written with what they stamped
        assert store.get(store.enqueue("mw.first", "yes").id)["meta"] == {"when": 1}
    finally:
        jobpool.remove_middleware(middleware)


def test_a_step_batch_member_or_item_may_name_its_own_meta_without_hooks(any_store, registered):
    """R54/R55 without hooks: a chain step's own metadata replaces its
    predecessor's; an enqueue_many item's replaces the call's ``meta``; a batch add
    takes ``meta=`` or its signature's."""
    first, next_step = registered
    store = any_store
    root = store.enqueue_with("mw.first", meta={"root": 1},
                              then=[next_step.s(), next_step.s().with_meta({"own": 2}),
                                    next_step.s()]).id
    items = [h.id for h in store.enqueue_many("mw.first", [(1,), first.s(2).with_meta({"b": 2})],
                                              meta={"a": 1})]
    plain = [h.id for h in store.enqueue_many("mw.first", [(3,)])]
    with store.batch() as batch:
        added = [batch.add(first.s(4), meta={"c": 3}).id,
                 batch.add(first.s(5).with_meta({"d": 4})).id]
    with pytest.raises(EnqueueError, match=r"^then\[0\]: meta must be a dict"):
        store.enqueue_with("mw.first", then=next_step.s().with_meta(["x"]))
    with pytest.raises(EnqueueError, match=r"^item 0: meta must be a dict"):
        store.enqueue_many("mw.first", [first.s().with_meta("x")])
    testing.drain(store)
    metas = _metas(store)
    # The steps are written as their predecessors finish: after every other row.
    steps = sorted(i for i in metas if i > added[-1])
    assert metas[root] == {"root": 1}
    assert [metas[i] for i in steps] == [{"root": 1}, {"own": 2}, {"own": 2}]
    assert [metas[i] for i in items] == [{"a": 1}, {"b": 2}]
    assert metas[plain[0]] is None
    assert [metas[i] for i in added] == [{"c": 3}, {"d": 4}]


APP = """
import jobpool
from jobpool import job

class Tenant(jobpool.Middleware):
    def before_enqueue(self, job, meta):
        meta.setdefault("tenant", "acme")
        meta["stamps"] = meta.get("stamps", 0) + 1

jobpool.add_middleware(Tenant())

@job(name="mw.app.parent")
def parent():
    # A job that enqueues is a producer too: its child runs the hooks.
    follow.enqueue_with(meta={"tenant": "child"}, then=follow.s())

@job(name="mw.app.follow")
def follow():
    pass
"""


def test_the_cli_and_a_pools_child_run_the_apps_hooks(make_any_app):
    app = make_any_app(APP)
    app.env["JOBPOOL_DB"] = str(app.db)  # where the job's own enqueue writes
    queued = app.cli("enqueue", "mw.app.parent", "--app", app.module, "--db", str(app.db),
                     "--json", check=True)
    parent = json.loads(queued.stdout)["id"]
    app.start("--procs", "1")
    found = {job["id"]: (job["name"], job["status"], job["meta"])
             for job in app.store().list_jobs(limit=10)}
    assert found[parent] == ("mw.app.parent", "done", {"tenant": "acme", "stamps": 1})
    assert sorted(v for k, v in found.items() if k != parent) == [
        ("mw.app.follow", "done", {"tenant": "child", "stamps": 1})] * 2
