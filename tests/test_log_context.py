"""R48: the running job on every log record it writes (``JobLogContext``), in
``jobpool start --log-format json`` output, and ``jobpool.current_job()``."""
from __future__ import annotations

import json
import logging

import jobpool
from jobpool import log_context, running
from jobpool.handles import Signature
from jobpool.testing import drain

APP = """
import json
import logging
from pathlib import Path
import jobpool
from jobpool import job

HERE = Path(__file__).parent
log = logging.getLogger("app.work")

@job(name="lc.work", queue="reports", max_attempts=2, backoff_base=0)
def work(tag):
    log.info("working on %s", tag)
    me = jobpool.current_job()
    with open(HERE / "seen.jsonl", "a") as fh:
        fh.write(json.dumps(me._asdict()) + "\\n")
    if tag == "flaky" and me.attempt == 1:
        raise RuntimeError("first attempt fails")

@job(name="lc.member")
def member():
    logging.getLogger("app.member").warning("member of %s", jobpool.current_job().batch)

@job(name="lc.done")
def done(batch):
    pass
"""


def _records(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_a_jobs_log_lines_carry_its_id_name_and_attempt_in_json_output(make_app):
    """R48, R30: records from job code reach ``--log-format json`` with the job's
    fields; jobpool's own events are unchanged."""
    app = make_app(APP)
    store = app.store()
    plain = store.enqueue("lc.work", "plain").id
    flaky = store.enqueue_with("lc.work", args=("flaky",), queue="reports").id
    result = app.start("--procs", "1", "--log-format", "json")
    lines = [r for r in _records(result.stderr) if r.get("logger") == "app.work"]
    assert sorted((r["job_id"], r["job_name"], r["attempt"], r["message"]) for r in lines) == [
        (plain, "lc.work", 1, "working on plain"),
        (flaky, "lc.work", 1, "working on flaky"),
        (flaky, "lc.work", 2, "working on flaky")]
    assert all(r["event"] == "info" for r in lines)
    claimed = [r for r in _records(result.stderr) if r["event"] == "job_claimed"]
    assert len(claimed) == 3 and all("logger" not in r for r in claimed)
    seen = [json.loads(line) for line in (app.dir / "seen.jsonl").read_text().splitlines()]
    assert sorted((s["id"], s["attempt"]) for s in seen) == [(plain, 1), (flaky, 1), (flaky, 2)]
    assert {(s["id"], s["name"], s["queue"], s["batch"]) for s in seen} == {
        (plain, "lc.work", "default", None), (flaky, "lc.work", "reports", None)}


def test_the_plain_format_names_the_job_too(make_app):
    """R48: without ``--log-format json``, a job's line ends with its fields."""
    app = make_app(APP)
    job_id = app.store().enqueue("lc.work", "plain").id
    result = app.start("--procs", "1")
    [line] = [line for line in result.stderr.splitlines() if "working on plain" in line]
    assert line.split(" ", 1)[1] == (f"info working on plain job_id={job_id} job_name=lc.work "
                                     f"attempt=1")


def test_current_job_names_the_batch_of_a_member_in_a_pool(make_any_app):
    """R48, R34: ``current_job().batch`` is the member's batch id (asked of the pool,
    fenced by the lease), on both stores."""
    app = make_any_app(APP)
    store = app.store()
    batch = store.batch(on_complete=Signature("lc.done"))
    with batch:
        batch.add(Signature("lc.member"))
    result = app.start("--procs", "1", "--log-format", "json", "--quiet")
    [line] = [r for r in _records(result.stderr) if r.get("logger") == "app.member"]
    assert line["message"] == f"member of {batch.id}"
    assert line["job_name"] == "lc.member" and line["attempt"] == 1


def test_an_app_that_configured_root_logging_keeps_its_handlers(make_app):
    """R48: ``start`` leaves a root logger the app configured alone; the filter is
    on its handlers while a job runs, so its own format can name the fields, and
    the app's own instance of it makes them None outside a job."""
    app = make_app(APP.replace(
        'log = logging.getLogger("app.work")',
        'import sys\n'
        'logging.basicConfig(stream=sys.stderr, level=logging.INFO,\n'
        '                    format="app: %(job_id)s %(job_name)s %(attempt)s %(message)s")\n'
        'logging.getLogger().handlers[0].addFilter(jobpool.JobLogContext())\n'
        'log = logging.getLogger("app.work")\n'
        'log.info("imported")'))
    job_id = app.store().enqueue("lc.work", "plain").id
    result = app.start("--procs", "1", "--log-format", "json")
    assert not [r for r in _records(result.stderr) if r.get("logger") == "app.work"]
    lines = [line for line in result.stderr.splitlines() if line.startswith("app: ")]
    # The supervisor imported the app outside any job: None there, not a KeyError.
    assert lines == ["app: None None None imported", f"app: {job_id} lc.work 1 working on plain"]
    assert "Logging error" not in result.stderr


def test_the_filter_is_none_safe_outside_a_job_and_keeps_given_fields():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    assert log_context.JobLogContext().filter(record) is True
    assert (record.job_id, record.job_name, record.attempt) == (None, None, None)
    given = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    given.job_id = "mine"
    log_context.JobLogContext().filter(given)
    assert given.job_id == "mine" and given.attempt is None
    assert jobpool.current_job() is None
    assert jobpool.JobLogContext is log_context.JobLogContext


def test_drain_installs_the_filter_for_the_job_and_removes_it_after(tmp_path):
    """R48: ``testing.drain`` runs jobs as a child does, the log context included;
    after the job the handler is as it was."""
    seen: list[tuple] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.job_id, record.job_name, record.attempt, record.getMessage()))

    @jobpool.job(name="lc.drained")
    def drained():
        logging.getLogger("lc.test").warning("inside")
        seen.append(jobpool.current_job())

    handler = Keep()
    root = logging.getLogger()
    root.addHandler(handler)
    store = jobpool.connect(tmp_path / "s.db")
    try:
        job_id = drained.enqueue_with(store=store).id
        drain(store)
        assert handler.filters == []
        assert seen[0] == (job_id, "lc.drained", 1, "inside")
        assert seen[1] == running.CurrentJob(job_id, "lc.drained", 1, "default", None, {})
    finally:
        root.removeHandler(handler)
        store.close()
        from jobpool import jobs
        jobs.unregister("lc.drained")
