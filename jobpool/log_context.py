"""The running job on every log record it writes (R48): ``job_id``, ``job_name`` and
``attempt``, as Celery's task logger and structlog's bound loggers give them.

``JobLogContext`` is a ``logging.Filter``. A pool's child (and ``jobpool.testing.drain``)
puts one on every handler of the root logger and of the ``jobpool`` logger for the
duration of each job, so whatever a job's code logs, through any logger that reaches
those handlers, carries the three fields (``--log-format json`` writes them out). It
is public for handlers of one's own (a ``dictConfig``'s ``filters``, a handler the job
adds itself): outside a job it sets the fields to None, so a format string that names
``%(job_id)s`` works for every record. A field the record already has (given with
``extra=``) is kept. It never drops a record.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from jobpool import running

__all__ = ["JobLogContext", "FIELDS", "installed"]

#: The attributes the filter sets on a record.
FIELDS = ("job_id", "job_name", "attempt")


class JobLogContext(logging.Filter):
    """Adds ``job_id``, ``job_name`` and ``attempt`` of the running job (None
    outside one) to each record it sees; lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        attempt = running.current
        if attempt is None:
            values: tuple = (None, None, None)
        else:
            values = (attempt.job_id, attempt.name, attempt.attempt)
        fields = record.__dict__
        for name, value in zip(FIELDS, values):
            if name not in fields:
                fields[name] = value
        return True


#: The one filter a child installs around its jobs.
_FILTER = JobLogContext()


def _handlers() -> list[logging.Handler]:
    """The handlers a job's records reach when nobody routed them elsewhere: the
    root logger's, and the ``jobpool`` logger's (which does not propagate when the
    CLI configured it)."""
    found = list(logging.getLogger().handlers)
    for handler in logging.getLogger("jobpool").handlers:
        if handler not in found:
            found.append(handler)
    return found


@contextmanager
def installed() -> Iterator[None]:
    """``JobLogContext`` on the root's and ``jobpool``'s handlers while the block
    runs (a job's attempt); removed after, from those it was added to."""
    added = [handler for handler in _handlers() if _FILTER not in handler.filters]
    for handler in added:
        handler.addFilter(_FILTER)
    try:
        yield
    finally:
        for handler in added:
            handler.removeFilter(_FILTER)
