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

from jobpool import running

__all__ = ["JobLogContext", "FIELDS", "installed"]

#: The attributes the filter sets on a record.
FIELDS = ("job_id", "job_name", "attempt")


class JobLogContext(logging.Filter):
    """Adds ``job_id``, ``job_name`` and ``attempt`` of the running job (None
    outside one) to each record it sees; lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        attempt = running.attempt_now()
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


#: The ``jobpool`` logger: loggers live as long as the process, so it is looked up
#: once, not (under logging's lock) once per job.
_OURS = logging.getLogger("jobpool")


class installed:
    """``JobLogContext`` on the root's and ``jobpool``'s handlers while the block
    runs (a job's attempt); removed after, from those it was added to.

    The handlers a job's records reach when nobody routed them elsewhere: the root
    logger's, and the ``jobpool`` logger's (which does not propagate when the CLI
    configured it). They are looked at again for every job, since a job or a hook
    may add one; a class, not a generator, because it wraps every job a child runs."""

    __slots__ = ("_added",)

    def __enter__(self) -> None:
        added = [handler for handler in logging.root.handlers if _FILTER not in handler.filters]
        for handler in _OURS.handlers:
            if _FILTER not in handler.filters and handler not in added:
                added.append(handler)
        for handler in added:
            handler.addFilter(_FILTER)
        self._added = added

    def __exit__(self, *exc_info: object) -> None:
        for handler in self._added:
            handler.removeFilter(_FILTER)
