"""R49: async producers. ``await fn.aenqueue(...)``, ``await store.aenqueue(...)`` and
``await store.aenqueue_many(...)`` never block the event loop, on both stores, and
check and fail exactly as the sync calls do (R1, R3, R4, R34)."""
from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from urllib.parse import parse_qs, urlsplit

import pytest

import jobpool
from jobpool import jobs
from jobpool.errors import EnqueueError
from jobpool.handles import Handle, Signature

from .conftest import LoopTicks


@pytest.fixture
def registered():
    @jobpool.job(name="ae.add")
    def add(x: int, y: int = 0) -> int:
        return x + y
    yield add
    jobs.unregister("ae.add")


@contextlib.contextmanager
def write_lock(store_url: str):
    """Another connection holding the jobs table's write lock until the block ends
    (or ``release()``): SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's ``LOCK TABLE``."""
    if "://" not in store_url:
        conn = sqlite3.connect(store_url, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        import psycopg
        schema = parse_qs(urlsplit(store_url).query)["schema"][0]
        conn = psycopg.connect(store_url.split("?")[0])  # a transaction is open from here
        conn.execute(f"LOCK TABLE {schema}.jobs IN EXCLUSIVE MODE")
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            conn.close()  # the open transaction rolls back, its lock goes
    try:
        yield release
    finally:
        release()


def _keeps_running(any_store, store_url, make_call):
    """Start ``make_call()`` while another connection holds the write lock: the loop
    ticks on meanwhile; once the lock goes, the call completes. Its result."""
    async def scenario():
        async with LoopTicks() as ticks:
            with write_lock(store_url) as release:
                call = asyncio.create_task(make_call())
                await asyncio.sleep(0.6)
                assert not call.done(), "the enqueue waits for the lock"
                during = ticks.count
                release()
                result = await asyncio.wait_for(call, 20)
        # 0.6 s of 10 ms sleeps: a blocked loop would have ticked once at most.
        assert during >= 20, during
        return result
    return asyncio.run(scenario())


def test_aenqueue_waits_on_a_locked_store_without_blocking_the_loop(any_store, store_url):
    any_store.enqueue("ae.warm")  # the schema exists before the lock is taken
    handle = _keeps_running(any_store, store_url, lambda: any_store.aenqueue("ae.job", 1, y=2))
    assert isinstance(handle, Handle) and not handle.duplicate
    job = any_store.get(handle.id)
    assert (job["name"], job["status"]) == ("ae.job", "ready")


def test_aenqueue_many_waits_on_a_locked_store_without_blocking_the_loop(any_store, store_url):
    any_store.enqueue("ae.warm")
    handles = _keeps_running(any_store, store_url,
                             lambda: any_store.aenqueue_many("ae.job", [(1,), (2,), (3,)]))
    assert len(handles) == 3
    assert [any_store.get(h.id)["status"] for h in handles] == ["ready"] * 3


def test_job_aenqueue_waits_on_a_locked_store_without_blocking_the_loop(any_store, store_url,
                                                                         registered):
    any_store.enqueue("ae.warm")
    handle = _keeps_running(any_store, store_url,
                            lambda: registered.aenqueue_with(args=(1,), store=any_store,
                                                             key="k1"))
    again = asyncio.run(registered.aenqueue_with(args=(1,), store=any_store, key="k1"))
    assert again == Handle(handle.id, duplicate=True)  # R3, as the sync call answers


def _refusal(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - compared below
        return type(exc), str(exc)
    raise AssertionError("not refused")


async def _async_refusal(call):
    try:
        await call()
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)
    raise AssertionError("not refused")


BAD_CALLS = [
    ("enqueue_with", ("ae.add",), {"delay": -1}),
    ("enqueue_with", ("ae.add",), {"max_attempts": 0}),
    ("enqueue_with", ("ae.add",), {"args": (1,), "kwargs": {"nope": 1}}),
    ("enqueue_with", ("ae.add",), {"args": ("x" * (2 << 20),)}),
    ("enqueue_with", ("ae.add",), {"args": (object(),)}),
    ("enqueue_with", ("ae.add",), {"args": (1,), "batch": 10**9}),
    ("enqueue_with", ("bad name",), {}),
    ("enqueue_many", ("ae.add", [(1,), (1, 2, 3)]), {}),
    ("enqueue_many", ("ae.add", [(1,), (2,)]), {"keys": ["a"]}),
]


@pytest.mark.parametrize("method, args, options", BAD_CALLS,
                         ids=[f"{m}-{i}" for i, (m, _a, _o) in enumerate(BAD_CALLS)])
def test_async_calls_refuse_what_the_sync_calls_refuse_with_the_same_error(
        any_store, registered, method, args, options):
    sync = _refusal(lambda: getattr(any_store, method)(*args, **options))
    asynchronous = asyncio.run(_async_refusal(
        lambda: getattr(any_store, "a" + method)(*args, **options)))
    assert asynchronous == sync
    assert any_store.stats()["ready"] == 0  # R1, R4: nothing written either way


def test_job_aenqueue_refuses_as_enqueue_does(any_store, registered):
    sync = _refusal(lambda: registered.enqueue_with(args=("a", "b", "c"), store=any_store))
    asynchronous = asyncio.run(_async_refusal(
        lambda: registered.aenqueue_with(args=("a", "b", "c"), store=any_store)))
    assert asynchronous == sync and sync[0] is EnqueueError
    assert any_store.stats()["ready"] == 0


def test_an_async_enqueue_takes_no_connection(any_store):
    with pytest.raises(EnqueueError, match="connection= is not taken by an async enqueue"):
        asyncio.run(any_store.aenqueue_with("ae.job", connection=object()))


def test_aenqueue_on_the_default_store_and_with_signatures(tmp_path, monkeypatch, registered):
    """``fn.aenqueue`` writes where ``fn.enqueue`` does (the default store), and
    ``aenqueue_many`` takes signatures for keyword arguments as the sync call does."""
    from jobpool.store.factory import close_default_store
    monkeypatch.setenv("JOBPOOL_DB", str(tmp_path / "default.db"))
    store = jobpool.connect(tmp_path / "default.db")

    async def produce():
        one = await registered.aenqueue(1, y=2)
        many = await store.aenqueue_many("ae.add", [Signature("ae.add", (1,), {"y": 3})])
        return one, many
    try:
        one, many = asyncio.run(produce())
        assert store.get(one.id)["name"] == "ae.add"
        assert store.get(many[0].id)["status"] == "ready"
    finally:
        store.close()
        close_default_store()
