"""Scenario 6: payloads that cannot be decoded, results that cannot be encoded or are
too big: each has a clear reason, and nothing stalls on a pipe (the run finishes)."""
from __future__ import annotations

import time

from tests.conftest import insert_job

from .conftest import record_figure


def test_bad_payloads_and_results_have_clear_reasons_and_no_pipe_stalls(fault_app):
    app = fault_app
    store = app.store()
    store.close()
    now = time.time()
    bad = {
        "not json": insert_job(app.db, "f.one_arg", payload="not json", run_at=now),
        "wrong shape": insert_job(app.db, "f.one_arg", payload='{"a": 1}', run_at=now),
        "wrong arity": insert_job(app.db, "f.one_arg", payload="[[1, 2, 3], {}]", run_at=now,
                                  max_attempts=2),
    }
    store = app.store()
    unencodable = store.enqueue("f.unencodable").id
    huge = store.enqueue("f.huge_result").id
    big = store.enqueue("f.big_result").id
    fine = [store.enqueue("f.work", i).id for i in range(5)]
    started = time.monotonic()
    app.start("--procs", "2", timeout=60)
    elapsed = time.monotonic() - started

    reasons = {}
    for what, job_id in bad.items():
        job = store.get(job_id)
        reasons[what] = job["last_error"].splitlines()[0]
    assert store.get(bad["not json"])["status"] == "dead"
    assert store.get(bad["not json"])["attempts"] == 1
    assert reasons["not json"].startswith("payload cannot be decoded: JSONDecodeError")
    assert store.get(bad["wrong shape"])["attempts"] == 1
    assert reasons["wrong shape"].startswith(
        "payload cannot be decoded: ValueError: payload is not a JSON [args, kwargs] pair")
    # R1 (issue 23): arguments that do not bind to the function are dead at once.
    assert reasons["wrong arity"].startswith("job f.one_arg: the arguments do not fit")
    assert reasons["wrong arity"].endswith("too many positional arguments")
    assert [a["outcome"] for a in store.attempts(bad["wrong arity"])] == ["fatal"]

    # The body ran and did its work: a result that cannot be stored is dead at once,
    # never a retry that runs the body again.
    job = store.get(unencodable)
    assert (job["status"], job["attempts"]) == ("dead", 1)
    assert job["last_error"].startswith("result cannot be stored: result cannot be serialized as JSON")
    assert job["result"] is None
    reasons["object() result"] = job["last_error"].splitlines()[0]
    job = store.get(huge)
    assert (job["status"], job["attempts"]) == ("dead", 1)
    assert job["last_error"].startswith(
        f"result cannot be stored: it is {5 * 2**20 + 2} bytes, over the 1048576-byte limit")
    assert job["result"] is None
    reasons["5 MiB result"] = job["last_error"].splitlines()[0]
    # Just under the limit goes through the pipe and into the row.
    assert store.get(big, raw_result=True)["result"] == '"' + "y" * 1_000_000 + '"'
    assert [store.get(i)["status"] for i in fine] == ["done"] * 5
    assert elapsed < 30
    record_figure("6. Undecodable payloads, unencodable / huge results",
                  jobs=len(bad) + 3 + len(fine), run_finished_s=round(elapsed, 2),
                  pipe_deadlocks=0, big_result_stored_bytes=1_000_002, **reasons)
