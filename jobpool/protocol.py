"""Messages between the supervisor and its children, over one pair of one-way pipes
per slot (``channel.py``).

Both ends are this package's own code in processes forked from one parent, so
messages are ``marshal``-encoded tuples: fast, compact, and no pickling of what
is already bytes. The store payload travels as the bytes it was stored as.

supervisor -> child:  ``(job_id, attempt, name, payload, serializer, queue, batch, meta)``:
                      run this; ``batch`` its batch's id and ``meta`` its metadata as
                      JSON text, each or None (R58: ``jobpool.current_job()`` and the
                      tracing read them with no request)
                      ``(REPLY, job_id, attempt, seq, answer, error_kind, error)``: the
                      answer to the running job's request ``seq``
                      ``(INTERRUPT, job_id, attempt, reason)``: stop at the next save point
                      (R37; ``reason`` is ``stop`` or ``cancel``)
child -> supervisor:  ``(OUTCOME, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s,
                        retiring, strays)`` — ``retiring``: the child exits after this reply
                        (recycled), so nothing more may be sent to it; ``strays``: processes
                        the job left running that the child killed (R40)
                      ``(PROGRESS, job_id, attempt, percent, stage)``
                      a request, answered by one REPLY the job waits for:
                      ``(BATCH_ADD, job_id, attempt, seq, first_position, rows)``: add
                      ``rows`` (``rows.NewJob`` tuples, on a clock of 0) to the job's batch (R34)
                      ``(SAVE_STATE, job_id, attempt, seq, state)``: store its state (R37)
                      ``(READ_STATE, job_id, attempt, seq)``: the state it resumes from
                      ``(BATCH_RESULTS, job_id, attempt, seq, batch_id, after, limit)``: a
                      page of a batch's members' stored results (R60), as
                      ``(id, name, serializer, result)`` tuples

R68: on the compiled road a child sends a plain success (kind DONE, no error, no delay,
no stored result, no strays) as a fixed binary frame instead, ``SUCCESS``: a zero tag
byte, the job id, the attempt, the peak RSS, the CPU seconds and the retiring flag, in
the host's byte order (both ends run on one host). No marshal text starts with a zero
byte, so the frame and the messages share the pipe; ``decode`` turns either into the
message tuple, and the pump takes a frame's fields without building it.

The supervisor's messages to a child start with a string (REPLY, INTERRUPT) or a job
id (a job), so a child tells them apart; one waiting for a job drops the others (an
interrupt for a job that finished first).
"""
from __future__ import annotations

import marshal
import struct
from typing import Any

from jobpool.lifecycle import DONE, KIND_NAMES

OUTCOME = 0
PROGRESS = 1
BATCH_ADD = 2
SAVE_STATE = 4
READ_STATE = 5
BATCH_RESULTS = 6
#: The tags of a child's requests.
REQUESTS = (BATCH_ADD, SAVE_STATE, READ_STATE, BATCH_RESULTS)

REPLY = "reply"
INTERRUPT = "interrupt"

#: A REPLY's error kinds: the exception the job's request raises.
REFUSED = "refused"       # EnqueueError: the request is wrong (no batch, batch finished)
LEASE_LOST = "lease"      # LeaseLostError: this attempt is no longer the job's
STORE_FAILED = "store"    # StoreError: the store could not take it now

dumps = marshal.dumps
loads = marshal.loads

#: R68: a plain success's frame: tag (0), job id, attempt, peak RSS, CPU seconds, retiring.
SUCCESS = struct.Struct("=BqiqdB")
SUCCESS_TAG = 0


def success_frame(job_id: int, attempt: int, peak_rss: int, cpu_s: float,
                  retiring: bool) -> bytes:
    return SUCCESS.pack(SUCCESS_TAG, job_id, attempt, peak_rss, cpu_s, retiring)


def success_fields(data: bytes) -> tuple[int, int, int, float, bool] | None:
    """A success frame's ``(job_id, attempt, peak_rss, cpu_s, retiring)``, or None for
    any other message. A zero tag of the wrong length, or fields out of range, is no
    message: ValueError, which a reader takes for a lost pipe, as bad marshal data."""
    if not data or data[0] != SUCCESS_TAG:
        return None
    if len(data) != SUCCESS.size or data[-1] > 1:
        raise ValueError(f"a success frame of {len(data)} bytes, not {SUCCESS.size}, "
                         f"or its retiring flag not 0 or 1")
    _tag, job_id, attempt, peak_rss, cpu_s, retiring = SUCCESS.unpack(data)
    return job_id, attempt, peak_rss, cpu_s, retiring == 1


def success_message(fields: tuple[int, int, int, float, bool]) -> tuple:
    """The OUTCOME tuple a success frame stands for (the general road's message)."""
    job_id, attempt, peak_rss, cpu_s, retiring = fields
    return (OUTCOME, job_id, attempt, DONE, None, None, None, peak_rss, cpu_s, retiring, 0)


def decode(data: bytes) -> tuple:
    """A child's message as its tuple, a success frame's included (R68); ValueError for
    bytes that are no message (``message_of``)."""
    fields = success_fields(data)
    return message_of(data) if fields is None else success_message(fields)


def message_of(data: bytes) -> tuple:
    """A message's bytes (other than a success frame's) as its tuple; ValueError for
    bytes that are none (R65): marshal's refusal (its EOFError included, which a
    reader would take for the pipe's end), or anything but a tuple that starts with
    its tag (a job that wrote onto its pipe: ``5`` is marshal data too)."""
    try:
        message = marshal.loads(data)
    except (EOFError, ValueError, TypeError) as exc:
        raise ValueError(f"bad marshal data ({exc})") from None
    if type(message) is not tuple or not message or type(message[0]) is not int:
        raise ValueError(f"a {type(message).__name__} where a message's tuple belongs")
    shape = _SHAPES.get(message[0])
    if shape is not None:
        wrong = _wrong_field(message, shape)
        if wrong is not None:
            raise ValueError(wrong)
    return message


_INT = (int,)
_REAL = (int, float)
_TEXT = (str, type(None))
_MAYBE_INT = (int, type(None))
_MAYBE_REAL = (int, float, type(None))
#: R65: what each field of an outcome and a progress report may be (a job can write
#: onto its pipe): a string where the kind belongs stopped the pool in ``decide``, a
#: list as the peak RSS made every turn fail to bind it (the outcome waiting first in
#: line for ever). Requests are checked by what answers them.
_SHAPES: dict[int, tuple[tuple[str, tuple[type, ...]], ...]] = {
    OUTCOME: (("job id", _INT), ("attempt", _INT), ("kind", _INT), ("error", _TEXT),
              ("delay", _MAYBE_REAL), ("result", (bytes, str, type(None))),
              ("peak RSS", _MAYBE_INT), ("CPU seconds", _MAYBE_REAL), ("retiring", _INT),
              ("strays", _MAYBE_INT)),
    PROGRESS: (("job id", _INT), ("attempt", _INT), ("percent", _REAL), ("stage", _TEXT)),
}


def _wrong_field(message: tuple, shape: tuple[tuple[str, tuple[type, ...]], ...]) -> str | None:
    """What is wrong with a message of a known tag, or None."""
    what = "an outcome" if message[0] == OUTCOME else "a progress report"
    if len(message) != len(shape) + 1:
        return f"{what} of {len(message) - 1} fields, not {len(shape)}"
    for (name, types), value in zip(shape, message[1:]):
        if not isinstance(value, types):
            return f"{what} whose {name} is a {type(value).__name__}"
    if message[0] == OUTCOME and not 0 <= message[3] < len(KIND_NAMES):
        return f"{what} of no kind ({message[3]})"
    return None


def job_message(job_id: int, attempt: int, name: str, payload: bytes, serializer: str,
                queue: str, batch: int | None = None, meta: str | None = None) -> bytes:
    return marshal.dumps((job_id, attempt, name, payload, serializer, queue, batch, meta))


def outcome_message(job_id: int, attempt: int, kind: int, error: str | None, delay: float | None,
                    result: bytes | str | None, peak_rss: int | None, cpu_s: float | None,
                    retiring: bool = False, strays: int = 0) -> bytes:
    return marshal.dumps((OUTCOME, job_id, attempt, kind, error, delay, result, peak_rss, cpu_s,
                          retiring, strays))


def progress_message(job_id: int, attempt: int, percent: float, stage: str | None) -> bytes:
    return marshal.dumps((PROGRESS, job_id, attempt, percent, stage))


def request_message(tag: int, job_id: int, attempt: int, seq: int, *fields: Any) -> bytes:
    return marshal.dumps((tag, job_id, attempt, seq, *fields))


def reply_message(job_id: int, attempt: int, seq: int, answer: Any,
                  error_kind: str | None = None, error: str | None = None) -> bytes:
    return marshal.dumps((REPLY, job_id, attempt, seq, answer, error_kind, error))


def interrupt_message(job_id: int, attempt: int, reason: str) -> bytes:
    return marshal.dumps((INTERRUPT, job_id, attempt, reason))
