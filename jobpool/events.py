"""Structured events for every job transition (R30).

Events go through the ``jobpool.events`` logger with the event name and its
fields attached to the record; the library adds no handlers, the CLI picks plain
or JSON-lines output. Event names are stable strings other tools may match.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

from jobpool.display import shown, shown_line

logger = logging.getLogger("jobpool.events")

JOB_CLAIMED = "job_claimed"
JOB_COMPLETED = "job_completed"
JOB_RETRIED = "job_retried"
JOB_DEFERRED = "job_deferred"
JOB_RESCHEDULED = "job_rescheduled"
JOB_RELEASED = "job_released"
JOB_RECLAIMED = "job_reclaimed"
JOB_DEAD = "job_dead"
JOB_LEASE_LOST = "job_lease_lost"
CHILD_DIED = "child_died"
CHILD_RECYCLED = "child_recycled"
STORE_ERROR = "store_error"
STORE_RECOVERED = "store_recovered"
LEASES_RECLAIMED = "leases_reclaimed"
POOL_STARTED = "pool_started"
POOL_STOPPING = "pool_stopping"
POOL_STOPPED = "pool_stopped"
POOL_STATUS = "pool_status"
POOL_SCALED = "pool_scaled"
SCALE_REFUSED = "scale_refused"
POOL_DEAD = "pool_dead"
STORE_GAVE_UP = "store_gave_up"
STORE_REPLACED = "store_replaced"
TERMINAL_CLOSED = "terminal_closed"
STRAYS_KILLED = "strays_killed"
UNSERVED_LEFT = "unserved_left"
JOB_SCHEDULED = "job_scheduled"
POOL_JUDGED_DEAD = "pool_judged_dead"
QUEUE_PAUSED = "queue_paused"
QUEUE_RESUMED = "queue_resumed"
#: R47: an action taken from the web dashboard or its API (who, what, which job or queue).
WEB_ACTION = "web_action"

#: R30: the event of each way a settled attempt ended (``lifecycle.settled_as``); a
#: settle back to ``ready`` means different things by the outcome that caused it.
SETTLED = {"done": JOB_COMPLETED, "retried": JOB_RETRIED, "deferred": JOB_DEFERRED,
           "rescheduled": JOB_RESCHEDULED, "released": JOB_RELEASED, "dead": JOB_DEAD,
           "lease_lost": JOB_LEASE_LOST}

_WARNINGS = {JOB_DEAD, JOB_LEASE_LOST, CHILD_DIED, STORE_ERROR, SCALE_REFUSED, POOL_DEAD,
             STORE_GAVE_UP, STORE_REPLACED, STRAYS_KILLED, UNSERVED_LEFT, POOL_JUDGED_DEAD}


def emit(event: str, **fields: Any) -> None:
    """Log one event; cheap when nobody listens at its level."""
    level = logging.WARNING if event in _WARNINGS else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(level, "%s", event, extra={"event": event, "fields": fields})


class PlainFormatter(logging.Formatter):
    """``HH:MM:SS event key=value ...`` for people reading a terminal or a journal."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        event = getattr(record, "event", None)
        if event is None:
            return f"{stamp} {record.levelname.lower()} {shown(record.getMessage())}{_job_of(record)}"
        fields = getattr(record, "fields", {})
        parts = []
        for key, value in fields.items():
            if value is None or key == "duration":
                continue
            # R46: a job's error, name or stage reaches a terminal or a journal as text.
            text = shown_line(value) if isinstance(value, str) else value
            parts.append(f"{key}={text}")
        return f"{stamp} {event} " + " ".join(parts)


def _job_of(record: logging.LogRecord) -> str:
    """`` job_id=… job_name=… attempt=…`` for a record a job wrote (R48), else ``""``."""
    job_id = getattr(record, "job_id", None)
    if job_id is None:
        return ""
    name = getattr(record, "job_name", None)
    return f" job_id={job_id} job_name={shown_line(str(name))} attempt={getattr(record, 'attempt', None)}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``{"ts", "event", ...fields}`` (``--log-format json``)."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "event", None)
        body: dict[str, Any] = {"ts": round(record.created, 6),
                                "event": event or record.levelname.lower()}
        if event is None:
            body["logger"] = record.name
            body["message"] = record.getMessage()
            # R48: a record a job wrote names the job (``log_context.JobLogContext``).
            job_id = getattr(record, "job_id", None)
            if job_id is not None:
                body.update(job_id=job_id, job_name=getattr(record, "job_name", None),
                            attempt=getattr(record, "attempt", None))
            if record.exc_info:
                body["exception"] = self.formatException(record.exc_info)
        else:
            body.update(getattr(record, "fields", {}))
        return json.dumps(body, default=str)
