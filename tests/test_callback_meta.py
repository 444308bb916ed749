"""R54, R55 (issue 28): a batch's callbacks are enqueued by the store with the
metadata their signatures carry (``with_meta``), as the producer's ``before_enqueue``
hooks stamp it when the batch is made, on both stores."""
from __future__ import annotations

import pytest

import jobpool
from jobpool import job
from jobpool.errors import EnqueueError
from jobpool.testing import drain

_seen: list = []


@job(name="cbm.member")
def member():
    pass


@job(name="cbm.callback")
def callback(tag, batch):
    _seen.append((tag, jobpool.current_job().meta))


class Tenant(jobpool.Middleware):
    def before_enqueue(self, job, meta):
        meta.setdefault("tenant", "t-9")


def _callback_rows(store, batch_id):
    status = store.batches.status(batch_id)
    return [store.get(i) for i in (status.success_job, status.complete_job) if i is not None]


def test_a_callback_carries_its_own_metadata(any_store):
    _seen.clear()
    with any_store.batch(on_success=callback.s("ok").with_meta({"run": "r1", "n": [1]}),
                         on_complete=callback.s("all")) as batch:
        batch.add(member.s(), meta={"member": True})
    drain(any_store)
    assert sorted(_seen) == [("all", {}), ("ok", {"run": "r1", "n": [1]})]
    metas = [row["meta"] for row in _callback_rows(any_store, batch.id)]
    assert metas == [{"run": "r1", "n": [1]}, None]  # on_success's row, on_complete's


def test_the_producers_hooks_stamp_a_callback_when_the_batch_is_made(any_store):
    _seen.clear()
    hook = jobpool.add_middleware(Tenant())
    try:
        with any_store.batch(on_complete=callback.s("all").with_meta({"run": "r2"})) as batch:
            batch.add(member.s())
    finally:
        jobpool.remove_middleware(hook)
    drain(any_store)
    assert _seen == [("all", {"run": "r2", "tenant": "t-9"})]


def test_a_callbacks_metadata_json_cannot_carry_is_refused(any_store):
    with pytest.raises(EnqueueError, match="on_complete: meta"):
        any_store.batch(on_complete=callback.s("x").with_meta({"bad": float("nan")}))
    assert any_store.batches.list() == []
