"""R50: ``await handle.aresult(timeout=...)``, the async twin of ``Handle.result()``:
the same value and errors (R39 for pickled results), and the loop runs on while
it waits; on both stores, the job run by a drain or by a real pool."""
from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import jobpool
from jobpool import jobs
from jobpool.errors import EnqueueError, JobFailed, UnsafeResultError
from jobpool.testing import drain

from .conftest import LoopTicks


@pytest.fixture
def registered():
    @jobpool.job(name="ar.double", store_result=True)
    def double(x):
        return {"twice": x * 2}

    @jobpool.job(name="ar.fail", max_attempts=1)
    def fail():
        raise RuntimeError("nope")

    @jobpool.job(name="ar.pickled", store_result=True, serializer="pickle")
    def pickled():
        return {1, 2}
    yield
    for name in ("ar.double", "ar.fail", "ar.pickled"):
        jobs.unregister(name)


def _outcome(call):
    try:
        return "value", call()
    except Exception as exc:  # noqa: BLE001 - compared below
        return type(exc), str(exc)


async def _async_outcome(call):
    try:
        return "value", await call()
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)


def test_aresult_waits_while_the_loop_runs_and_returns_the_result(any_store, registered):
    handle = any_store.enqueue("ar.double", 21)

    async def scenario():
        async with LoopTicks() as ticks:
            waiting = asyncio.create_task(handle.aresult(timeout=30))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            assert ticks.count >= 10, ticks.count  # the loop ran while aresult waited
            await asyncio.to_thread(drain, any_store)
            return await waiting
    assert asyncio.run(scenario()) == {"twice": 42}
    assert handle.result(timeout=1) == {"twice": 42}


def test_aresult_fails_and_times_out_as_result_does(any_store, registered):
    unfinished = any_store.enqueue("ar.double", 1)
    timed_out = _outcome(lambda: unfinished.result(timeout=0.1))
    assert timed_out[0] is TimeoutError
    assert asyncio.run(_async_outcome(lambda: unfinished.aresult(timeout=0.1))) == timed_out
    dead = any_store.enqueue("ar.fail")
    drain(any_store)
    failed = _outcome(lambda: dead.result(timeout=5))
    assert failed[0] is JobFailed and "nope" in failed[1]
    assert asyncio.run(_async_outcome(lambda: dead.aresult(timeout=5))) == failed
    with pytest.raises(JobFailed) as info:
        asyncio.run(dead.aresult())
    assert info.value.job_id == dead.id and "RuntimeError: nope" in info.value.reason


@pytest.mark.parametrize("options, words", [
    (dict(timeout=float("nan")), "timeout must be a finite number"),  # waited for ever
    (dict(timeout="5"), "timeout must be a number of seconds or a timedelta, not str"),
    (dict(timeout=-1), "timeout must not be negative"),
    (dict(timeout=1, poll=0), "poll must be above 0 seconds"),
    (dict(timeout=1, poll="x"), "poll must be a number of seconds"),
])
def test_a_wait_for_a_result_refuses_a_timeout_or_poll_it_cannot_keep(any_store, options, words):
    unfinished = any_store.enqueue("ar.double", 1)
    with pytest.raises(EnqueueError, match=words):
        unfinished.result(**options)
    with pytest.raises(EnqueueError, match=words):
        asyncio.run(unfinished.aresult(**options))
    # A timedelta is a timeout too.
    with pytest.raises(TimeoutError):
        unfinished.result(timeout=timedelta(milliseconds=50))


def test_aresult_unpickles_only_what_result_would(any_store, registered):
    """R39: a pickled result of a job this process no longer registers with pickle
    is refused by both, and taken by both with allow_pickle=True."""
    handle = any_store.enqueue("ar.pickled")
    drain(any_store)
    assert asyncio.run(handle.aresult(timeout=5)) == {1, 2}
    jobs.unregister("ar.pickled")
    refused = _outcome(lambda: handle.result(timeout=5))
    assert refused[0] is UnsafeResultError
    assert asyncio.run(_async_outcome(lambda: handle.aresult(timeout=5))) == refused
    assert asyncio.run(handle.aresult(timeout=5, allow_pickle=True)) == {1, 2}


APP = """
from jobpool import job

@job(name="ar.square", store_result=True)
def square(x):
    return x * x
"""


def test_aresult_of_a_job_a_real_pool_runs(make_any_app):
    app = make_any_app(APP)
    handle = app.store().enqueue("ar.square", 12)

    async def scenario():
        waiting = asyncio.create_task(handle.aresult(timeout=60))
        await asyncio.to_thread(app.start, "--procs", "1")
        return await waiting
    assert asyncio.run(scenario()) == 144
