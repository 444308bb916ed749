"""R57 (issue 28): OpenTelemetry, on by itself where ``opentelemetry-api`` is
installed. The producer's trace context rides in the job's metadata; the job runs in
a span that is a child of it, with that context current. Producer, pool and job are
real processes here: the producer and the pool's child each record their spans with
the SDK's in-memory exporter, and write them out for the test to compare."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

#: The pool's app: the SDK with an in-memory exporter in every child (unless the
#: environment says API only), a job that notes the trace it sees, one that fails,
#: and one that writes the spans the child finished so far.
APP = """
import json, os, sys
from pathlib import Path
from opentelemetry import trace
from jobpool import job

HERE = Path(__file__).parent
if os.environ.get("TRACE_SDK") == "1":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    EXPORTER = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)

@job(name="otel.seen")
def seen(tag):
    ctx = trace.get_current_span().get_span_context()
    with open(HERE / "seen.jsonl", "a") as fh:
        fh.write(json.dumps([tag, format(ctx.trace_id, "032x"), ctx.is_valid]) + "\\n")

@job(name="otel.fails", max_attempts=1)
def fails():
    raise ValueError("no such thing")

@job(name="otel.dump", max_attempts=1)
def dump():
    spans = [{"name": s.name, "trace": format(s.context.trace_id, "032x"),
              "span": format(s.context.span_id, "016x"),
              "start": s.start_time, "end": s.end_time,
              "parent": format(s.parent.span_id, "016x") if s.parent else None,
              "kind": s.kind.name, "status": s.status.status_code.name,
              "attributes": dict(s.attributes),
              "events": [e.name for e in s.events]} for s in EXPORTER.get_finished_spans()]
    (HERE / "spans.json").write_text(json.dumps(spans))
"""

#: The producer: the SDK with an in-memory exporter, the enqueues inside a span of
#: its own (the request that enqueues), one outside any span; prints what it recorded.
PRODUCER = """
import json, sys
import jobpool
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
store = jobpool.connect(sys.argv[1])
outside = store.enqueue("otel.seen", "outside").id
with trace.get_tracer("producer").start_as_current_span("request") as span:
    ctx = span.get_span_context()
    ids = [store.enqueue("otel.seen", "inside").id, store.enqueue("otel.fails").id,
           store.enqueue_many("otel.seen", [("many",)])[0].id]
store.enqueue_with("otel.dump", priority=-1)
store.close()
finished = exporter.get_finished_spans()
print(json.dumps({"trace": format(ctx.trace_id, "032x"), "span": format(ctx.span_id, "016x"),
                  "outside": outside, "ids": ids,
                  "recorded": [s.name for s in finished],
                  "enqueues": [[format(s.context.span_id, "016x"), format(s.parent.span_id, "016x"),
                                s.kind.name] for s in finished if s.name.startswith("enqueue ")]}))
"""


def _produce(app) -> dict:
    done = subprocess.run([sys.executable, "-c", PRODUCER, str(app.db)], cwd=app.dir,
                          env=app.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _seen(app) -> dict:
    return {tag: (trace_id, valid) for tag, trace_id, valid in
            (json.loads(line) for line in (app.dir / "seen.jsonl").read_text().splitlines())}


def test_the_run_span_is_a_child_of_the_enqueuing_span_across_processes(make_any_app):
    """R57 on both stores: each enqueue under the request's span is a PRODUCER span of
    its own, its child; the job's span (named after the job) is in the producer's
    trace, a child of its enqueue span, with the job's id, attempt, queue and
    outcome, after a wait span from the enqueue; the context is current in the job's
    body; a failure records its exception and an error status; an enqueue outside any
    span carries nothing."""
    app = make_any_app(APP)
    app.env["TRACE_SDK"] = "1"
    produced = _produce(app)
    assert produced["recorded"] == ["enqueue otel.seen", "enqueue otel.fails",
                                    "enqueue otel.seen", "request"]
    assert all(parent == produced["span"] and kind == "PRODUCER"
               for _span, parent, kind in produced["enqueues"])
    enqueue_spans = [span for span, _parent, _kind in produced["enqueues"]]
    app.start("--procs", "1")
    seen = _seen(app)
    assert seen["inside"] == (produced["trace"], True)
    assert seen["many"] == (produced["trace"], True)
    assert seen["outside"][0] != produced["trace"]   # a trace of its own, root at the run
    spans = json.loads((app.dir / "spans.json").read_text())
    by_id = {s["attributes"]["jobpool.job.id"]: s for s in spans if s["kind"] == "CONSUMER"}
    waits = {s["parent"]: s for s in spans if s["name"].startswith("wait ")}
    inside, failed, many = (by_id[i] for i in produced["ids"])
    for span, enqueued in zip((inside, failed, many), enqueue_spans):
        assert span["trace"] == produced["trace"]
        assert span["parent"] == enqueued
        wait = waits[enqueued]
        assert wait["name"] == "wait " + span["name"] and wait["trace"] == produced["trace"]
        assert wait["start"] <= wait["end"] <= span["start"]
        assert span["attributes"]["jobpool.job.attempt"] == 1
        assert span["attributes"]["jobpool.job.queue"] == "default"
    assert inside["name"] == "otel.seen"
    assert inside["attributes"]["jobpool.job.outcome"] == "done"
    assert inside["status"] == "UNSET" and inside["events"] == []
    assert failed["name"] == "otel.fails"
    assert failed["attributes"]["jobpool.job.outcome"] == "error"
    assert failed["status"] == "ERROR" and failed["events"] == ["exception"]
    outside = by_id[produced["outside"]]
    assert outside["parent"] is None and outside["trace"] == seen["outside"][0]
    assert len(waits) == 3   # none for the job enqueued outside any span
    store = app.store()
    assert store.get(produced["outside"])["meta"] is None
    assert set(store.get(produced["ids"][0])["meta"]) == {"jobpool.otel"}


def test_with_only_the_api_in_the_pool_the_job_still_sees_the_producers_trace(make_app):
    """R57: a pool with the API but no SDK records nothing, yet the job runs with the
    producer's context current (its trace id), and a job enqueued outside any span
    runs with none."""
    app = make_app(APP.replace("otel.dump", "otel.unused"))
    produced = _produce(app)
    app.start("--procs", "1")
    seen = _seen(app)
    assert seen["inside"] == (produced["trace"], True)
    assert seen["outside"] == ("0" * 32, False)


#: Makes ``opentelemetry`` unimportable in the processes that read it: the extra absent.
BLOCKER = """
import sys

class _NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoOpenTelemetry())
"""

PLAIN_APP = """
import json, sys
from pathlib import Path
from jobpool import job

@job(name="plain.look")
def look():
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    (Path(__file__).parent / "loaded.json").write_text(json.dumps(loaded))
"""


def test_nothing_of_opentelemetry_is_imported_without_the_extra(make_app):
    """R57: where the API cannot be imported, neither the producer (an enqueue, the
    hooks it runs) nor the pool (its supervisor, its child running a job) imports
    any of it, and the job runs as ever."""
    app = make_app(PLAIN_APP)
    (app.dir / "sitecustomize.py").write_text(textwrap.dedent(BLOCKER))
    producer = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys, jobpool
        store = jobpool.connect({str(app.db)!r})
        store.enqueue("plain.look"); store.enqueue_many("plain.look", [()])
        store.close()
        loaded = [m for m in sys.modules if m.startswith("opentelemetry")]
        assert not loaded, loaded
        import importlib.util
        assert importlib.util.find_spec("jobpool") is not None
        try:
            import opentelemetry  # the blocker is in place
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("the blocker let opentelemetry in")
    """)], cwd=app.dir, env=app.env, capture_output=True, text=True, timeout=60)
    assert producer.returncode == 0, producer.stderr
    assert [r["meta"] for r in app.rows("SELECT meta FROM jobs")] == [None, None]
    app.start("--procs", "1")
    assert json.loads((app.dir / "loaded.json").read_text()) == []


def test_with_the_api_installed_an_enqueue_outside_a_span_writes_nothing_and_loads_no_more(
        make_app):
    """R57's check, with the API importable: a producer that has not loaded the API's
    context (so no span can be current) writes no metadata and imports none of it; one
    that has (as an application using OpenTelemetry does), with no span current, asks
    (the API is loaded) and writes nothing either. A pool whose app does not use the
    API and whose jobs carry no context loads none of it, in its supervisor or its
    child (it was a tenth of a pool's start)."""
    app = make_app(PLAIN_APP)
    producer = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys, jobpool
        store = jobpool.connect({str(app.db)!r})
        store.enqueue("plain.look")
        loaded = [m for m in sys.modules if m.startswith("opentelemetry")]
        assert not loaded, loaded
        import opentelemetry.context  # the application's own use of the API
        store.enqueue("plain.look")
        store.close()
        assert "opentelemetry.trace" in sys.modules
    """)], cwd=app.dir, env=app.env, capture_output=True, text=True, timeout=60)
    assert producer.returncode == 0, producer.stderr
    assert [r["meta"] for r in app.rows("SELECT meta FROM jobs")] == [None, None]
    app.start("--procs", "1")
    assert json.loads((app.dir / "loaded.json").read_text()) == []


#: An app that never imports OpenTelemetry itself: the traced job asks the API for its
#: context only inside its body; the other notes what its child had loaded at its start.
LAZY_APP = """
import json, sys
from pathlib import Path
from jobpool import job

HERE = Path(__file__).parent

@job(name="lazy.traced", max_attempts=1)
def traced():
    loaded = "opentelemetry.trace" in sys.modules
    from opentelemetry import trace
    ctx = trace.get_current_span().get_span_context()
    (HERE / "traced.json").write_text(json.dumps([loaded, format(ctx.trace_id, "032x")]))

@job(name="lazy.look", max_attempts=1)
def look():
    (HERE / "loaded.json").write_text(json.dumps("opentelemetry.trace" in sys.modules))
"""


def test_a_pool_loads_the_api_at_the_first_job_that_carries_a_context(make_app):
    """R57: in a pool whose application never imports OpenTelemetry, a job enqueued
    under a span still runs with its producer's context current (its child loads the
    API for it, before the body runs), and the supervisor loads it then too: a child
    forked after that (each child here runs one job) inherits it."""
    app = make_app(LAZY_APP)
    producer = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import json, jobpool
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        trace.set_tracer_provider(TracerProvider())
        store = jobpool.connect({str(app.db)!r})
        with trace.get_tracer("producer").start_as_current_span("request") as span:
            store.enqueue_with("lazy.traced", priority=5)
            print(format(span.get_span_context().trace_id, "032x"))
        store.enqueue("lazy.look")
        store.close()
    """)], cwd=app.dir, env=app.env, capture_output=True, text=True, timeout=60)
    assert producer.returncode == 0, producer.stderr
    app.start("--procs", "1", "--max-tasks-per-child", "1")
    loaded_before_body, trace_id = json.loads((app.dir / "traced.json").read_text())
    assert loaded_before_body and trace_id == producer.stdout.strip()
    assert json.loads((app.dir / "loaded.json").read_text()) is True


#: An ``opentelemetry`` package whose import fails (a broken or half-upgraded install),
#: ahead of the real one on the path.
BROKEN_API = 'raise RuntimeError("half-upgraded: no module named _version")\n'


def test_a_broken_opentelemetry_install_turns_tracing_off_and_stops_nothing(make_app):
    """R57: a job whose metadata carries a context makes the pool load the API, in the
    supervisor and in the child; where its import fails for any reason, both say so
    and go on untraced: the pool keeps running and the job runs (a row never stops a
    pool)."""
    app = make_app(PLAIN_APP)
    (app.dir / "opentelemetry").mkdir()
    (app.dir / "opentelemetry" / "__init__.py").write_text(BROKEN_API)
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    app.store().enqueue_with("plain.look", meta={"jobpool.otel": carrier})
    app.store().enqueue("plain.look")
    done = app.start("--procs", "1")
    assert "OpenTelemetry could not be imported" in done.stderr
    assert [r["status"] for r in app.rows()] == ["done", "done"]


def test_the_environments_provider_is_asked_at_a_childs_start_not_at_each_job():
    """R57: ``for_job`` (asked before every job a child runs) loads the API for a job
    that carries a context or where the application loaded the API's context module;
    the environment's provider is read by ``preload`` (before the fork, and in each
    child after its start hooks), not again at every job, where the look cost a
    no-op job more than the rest of the question."""
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, os, sys
        from jobpool import tracing
        os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
        seen = [tracing.for_job(None), tracing.for_job('{"other": 1}'),
                "opentelemetry.trace" in sys.modules]
        tracing.preload()
        seen.append("opentelemetry.trace" in sys.modules)
        seen.append(tracing.for_job(None))
        print(json.dumps(seen))
    """)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == [False, False, False, True, True]


@pytest.mark.parametrize("enqueued", ["\u00b2", "9" * 5000, "12x", ""],
                         ids=["other digits", "past int()'s digits", "not digits", "empty"])
def test_an_enqueue_time_the_metadata_holds_wrong_draws_no_wait_and_fails_no_job(enqueued):
    """R44, R57: the wait span's start is read from the job's metadata (a row): text
    that ``isdigit`` takes and ``int`` refuses made the attempt fail in its child."""
    from jobpool import tracing

    class Tracer:
        started: list = []

        def start_span(self, *args, **kwargs):
            self.started.append(kwargs)
            raise AssertionError("no wait span is drawn")
    tracing._waited(Tracer(), "n", {tracing.ENQUEUED_AT: enqueued}, None)
    assert Tracer.started == []
