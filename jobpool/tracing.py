"""OpenTelemetry, on its own whenever ``opentelemetry-api`` is importable (R57):
``pip install jobpool[otel]``, nothing to configure.

- At enqueue, a PRODUCER span ``enqueue NAME`` under the current span, and its
  context (W3C ``traceparent``, and ``tracestate`` and baggage as the configured
  propagator writes them) and the time go into the job's metadata under
  ``META_KEY``, beside what the ``before_enqueue`` hooks stamp (R55). Only when a
  span is current: an enqueue outside any trace writes nothing.
- In the child, a ``wait NAME`` span from the enqueue to the run, and the job runs
  inside a span named after the job, both children of that context, the run's made
  current for the body and the middleware, so the job's own spans,
  logs and outgoing calls join the producer's trace. With only the API installed
  the span records nothing, but the context it carries is the producer's: the job
  still sees the producer's trace id. Its attributes say the job's id, attempt,
  queue and outcome; a failure records its exception and an error status.

Nothing of OpenTelemetry is imported where the API is not installed
(``importlib.util.find_spec`` answers that once per process), and a producer never
imports it: a span can only be current where the application itself has loaded the
API's context module, so until then an enqueue asks ``sys.modules`` and writes nothing
(loading the API would cost a producer tens of milliseconds at its first enqueue).
A pool whose jobs carry no context never imports it either (it was a tenth of a
pool's start here): the supervisor loads it before it forks its children only where
the application has loaded the API's context module already (it may have configured an
SDK) or names a tracer provider in the environment, and otherwise at the first job
whose metadata carries a context, so children forked after that inherit it (a
recycled child does not import it again). A child loads it at such a job where it has
not inherited it. A job with no context and a process with no SDK configured skip the
span altogether, so a pool with only the API installed pays a check per job.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from typing import Any, Callable, TypeGuard

from jobpool import lifecycle, serialize

log = logging.getLogger(__name__)

#: The metadata key the producer's trace context travels under (R54's metadata).
META_KEY = "jobpool.otel"
#: Beside the context in the carrier: when the job was enqueued (ns since the epoch), the
#: start of its wait span.
ENQUEUED_AT = "jobpool.enqueued_ns"
#: The instrumentation scope the spans are recorded under.
SCOPE = "jobpool"

_UNKNOWN, _OFF, _ON = 0, 1, 2
_state = _UNKNOWN
_trace: Any = None        # opentelemetry.trace, once loaded
_propagate: Any = None    # opentelemetry.propagate
_context: Any = None      # opentelemetry.context
_no_sdk: tuple = ()       # the API's own tracer providers: no span would be recorded


#: The API's module that holds the current span: a span can be current only where it
#: has been imported.
_CONTEXT_MODULE = "opentelemetry.context"
#: The environment variable the API reads to load a tracer provider by itself (an SDK
#: configured with no code that imports it).
_PROVIDER_VARIABLE = "OTEL_PYTHON_TRACER_PROVIDER"


def _load() -> bool:
    """Whether the API is here; loads it the first time it is asked, once."""
    global _state, _trace, _propagate, _context, _no_sdk
    if _state == _UNKNOWN:
        _state = _OFF
        try:
            if importlib.util.find_spec("opentelemetry") is None:
                return False
            from opentelemetry import context, propagate, trace
        except ImportError:  # a namespace without the API (another opentelemetry package)
            return False
        except Exception as exc:  # noqa: BLE001 - a broken install turns tracing off
            # Loaded where a job's context asks for it (in a running pool's supervisor
            # and child): a failing import must stop neither the pool nor the job.
            log.warning("OpenTelemetry could not be imported, so jobs run untraced: %s: %s",
                        type(exc).__name__, exc)
            return False
        _trace, _propagate, _context = trace, propagate, context
        _no_sdk = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        _state = _ON
    return _state == _ON


def _stamp(job: Any, meta: dict[str, Any]) -> None:
    """R57: the job's enqueue span (a child of the current span, ended at once: it
    marks the enqueue in the producer's trace), its context and the time into the
    job's metadata (a ``before_enqueue``)."""
    span = _trace.get_tracer(SCOPE).start_span(
        f"enqueue {job.name}", kind=_trace.SpanKind.PRODUCER,
        attributes={"jobpool.job.name": job.name})
    carrier: dict[str, str] = {}
    _propagate.inject(carrier, context=_trace.set_span_in_context(span))
    span.end()
    if carrier:
        carrier[ENQUEUED_AT] = str(time.time_ns())
        meta[META_KEY] = carrier


def active() -> bool:
    """Whether the API is installed (loaded on the first question)."""
    return _state == _ON or (_state == _UNKNOWN and _load())


def _configured() -> bool:
    """Whether this process may have a tracer provider configured: the application
    loaded the API's context module (any use of the API does), or the environment
    names a provider for the API to load."""
    return _CONTEXT_MODULE in sys.modules or _PROVIDER_VARIABLE in os.environ


def preload() -> None:
    """Before a pool forks its children, and in a child after its start hooks: load
    the API where it may be in use already (``_configured``), so children inherit it;
    elsewhere it waits for the first job that carries a context (``for_job``)."""
    if _state == _UNKNOWN and _configured():
        _load()


def carries_context(meta: str | None) -> TypeGuard[str]:
    """Whether a job's metadata (as its row holds it) may carry a producer's context: a
    look for the key, not a parse (R44's parse is ``_carrier``'s, in the child)."""
    return meta is not None and META_KEY in meta


def for_job(meta: str | None) -> bool:
    """Whether a job with this metadata runs under ``run_traced`` here: the API is
    loaded, or it is installed and the job carries a context or the application has
    loaded the API's context module (asked again at each job: a job may have loaded
    it). The environment's provider was asked at the child's start (``preload``), not
    at each job: a look in ``os.environ`` costs a job more than the rest of this.
    The API is loaded on the first such job."""
    if _state != _UNKNOWN:
        return _state == _ON
    return (carries_context(meta) or _CONTEXT_MODULE in sys.modules) and _load()


def enqueue_hook() -> Callable[[Any, dict], None] | None:
    """The stamp, when the API is installed and a valid span is current; else None
    (an enqueue outside a trace takes every fast path it took without OpenTelemetry).
    No span is current where nothing has loaded the API's context (see the module's
    docstring): the API is then neither loaded nor asked."""
    if _state == _OFF or (_state == _UNKNOWN and (_CONTEXT_MODULE not in sys.modules
                                                  or not _load())):
        return None
    if not _trace.get_current_span().get_span_context().is_valid:
        return None
    return _stamp


def run_traced(name: str, job_id: int, attempt: int, queue: str | None, meta: str | None,
               body: Callable[[], tuple]) -> tuple:
    """``body()`` (the attempt, as ``child.run_attempt`` runs it: ``(kind, error, delay,
    result, value, raised)``, where ``raised`` is what the body raised) inside the job's
    span, with the producer's context current. Called when ``active()``; with neither
    a context nor an SDK, it is ``body()``."""
    carrier = _carrier(meta)
    if carrier is None and isinstance(_trace.get_tracer_provider(), _no_sdk):
        return body()
    parent = _propagate.extract(carrier) if carrier is not None else None
    tracer = _trace.get_tracer(SCOPE)
    _waited(tracer, name, carrier, parent)
    span = tracer.start_span(name, context=parent, kind=_trace.SpanKind.CONSUMER,
                             attributes={"jobpool.job.id": job_id,
                                         "jobpool.job.attempt": attempt,
                                         "jobpool.job.queue": queue or ""})
    token = _context.attach(_trace.set_span_in_context(span, parent))
    try:
        outcome = body()
        kind, error, _delay, _result, _value, raised = outcome
        span.set_attribute("jobpool.job.outcome", lifecycle.KIND_NAMES[kind])
        if kind in (lifecycle.ERROR, lifecycle.FATAL):
            if isinstance(raised, BaseException):
                span.record_exception(raised)
            span.set_status(_trace.Status(_trace.StatusCode.ERROR,
                                          (error or "").partition("\n")[0]))
        return outcome
    finally:
        _context.detach(token)
        span.end()


def _waited(tracer: Any, name: str, carrier: dict[str, str] | None, parent: Any) -> None:
    """The job's wait, from its enqueue to its run here (a scheduled delay included), as
    a span beside the run's, when the metadata says when it was enqueued. The two
    hosts' clocks are read as they are: a skewed one shows a wait too short or long."""
    enqueued = carrier.get(ENQUEUED_AT) if carrier is not None else None
    # Nanoseconds in ASCII digits, as the producer writes them: ``isdigit`` alone takes
    # "²" and 5 000 digits, on which ``int`` raises (a row is data, R44).
    if enqueued is None or not (enqueued.isascii() and enqueued.isdigit()) or len(enqueued) > 19:
        return
    now = time.time_ns()
    tracer.start_span(f"wait {name}", context=parent, start_time=min(int(enqueued), now)
                      ).end(end_time=now)


def _carrier(meta: str | None) -> dict[str, str] | None:
    """The producer's context as the job's metadata carries it, or None (no metadata,
    none under ``META_KEY``, or not a map of text: a row is never trusted, R44)."""
    if not carries_context(meta):
        return None
    try:
        found = serialize.loads(meta)
    except (ValueError, RecursionError):
        return None
    carrier = found.get(META_KEY) if isinstance(found, dict) else None
    if not isinstance(carrier, dict):
        return None
    return {k: v for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)} or None
