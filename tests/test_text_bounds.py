"""R41's bounds on text (issue 23 item 8): names and keys refused at enqueue naming
the bound; a stage and an error text cut with a marker by the supervisor."""
from __future__ import annotations

import pytest

from jobpool import bounds
from jobpool.errors import EnqueueError

BIG_TEXT_APP = """
import jobpool
from jobpool import job

@job(name="t.chatty", max_attempts=1)
def chatty():
    jobpool.progress(10, "s" * 10_000_000)     # a 10 MB stage
    raise RuntimeError("e" * 5_000_000)         # a 5 MB error
"""


def test_long_names_and_keys_are_refused_naming_the_bound(any_store):
    with pytest.raises(EnqueueError, match="over the 200 allowed"):
        any_store.enqueue_with("n" * 201)
    with pytest.raises(EnqueueError, match="queue name .* over the 200 allowed"):
        any_store.enqueue_with("t.x", queue="q" * 10_000)
    with pytest.raises(EnqueueError, match="key is 100000 bytes, over the 1024 allowed"):
        any_store.enqueue_with("t.x", key="k" * 100_000)
    with pytest.raises(EnqueueError, match=r"keys\[1\] is 2000 bytes"):
        any_store.enqueue_many("t.x", [(1,), (2,)], keys=["a", "é" * 1000])
    assert any_store.stats()["ready"] == 0  # nothing written
    any_store.enqueue_with("n" * 200, key="k" * 1024)  # at the bounds: fine


def test_clip_cuts_utf8_text_to_its_bound_with_a_marker():
    assert bounds.clip("short", 1024) == "short"
    cut = bounds.clip("é" * 5000, 1024)
    assert len(cut.encode()) <= 1024 and cut.endswith("more bytes cut]") and cut.startswith("é")


def test_a_huge_stage_and_error_are_cut_by_the_supervisor(make_app):
    app = make_app(BIG_TEXT_APP)
    job_id = app.store().enqueue("t.chatty").id
    app.start("-q")
    job = app.store().get(job_id)
    assert job["status"] == "dead"
    # The attempt's text is cut to the bound; the job's adds why it is dead.
    assert len(job["last_error"].encode()) <= bounds.MAX_ERROR_BYTES + 100
    assert "more bytes cut]" in app.store().attempts(job_id)[0]["error"]
    stage = job.get("stage")
    assert stage is None or len(stage.encode()) <= bounds.MAX_STAGE_BYTES
