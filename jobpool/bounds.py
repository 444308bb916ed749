"""R41: every size a user supplies is bounded before anything is allocated or written.

One place for the numbers, so the API, the CLI and the supervisor refuse the same
thing with the same words. Payload and result sizes live beside their encoder
(``jobpool.serialize.MAX_PAYLOAD_BYTES``).
"""
from __future__ import annotations

import math
import os
import resource
import time
from typing import Any

#: Priorities are stored and compared as SQLite integers; a signed 32-bit range is
#: more than any ordering needs and the same on every store.
INT32_MAX = 2**31 - 1
#: The largest row id either store holds (SQLite's INTEGER, PostgreSQL's bigint).
INT64_MAX = 2**63 - 1
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = INT32_MAX
#: R35: the most jobs a queue limit lets run at once (PostgreSQL stores it as integer).
MAX_QUEUE_RUNNING = INT32_MAX


def whole_within(value: Any, low: int, high: int) -> bool:
    """Whether ``value`` is a whole number from ``low`` to ``high``: an ``int`` that is
    not a ``bool`` (``True`` is an int, and was taken for 1). The test every count, id,
    size and limit an API takes must pass; each caller says in its own words what it
    takes when one does not."""
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def row_id(value: Any, what: str = "a job id") -> int:
    """A job's or batch's id as a store binds it: a whole number (or its digits as
    text), one outside 1 to 2**63 - 1 naming no row (0, which no row has: not the
    driver's OverflowError). Anything else is a ``ValueError`` naming it: ``True`` was
    job 1 on SQLite (``cancel(True)`` cancelled it) and a refused comparison on
    PostgreSQL, text a "no such job" on one and a store error on the other."""
    if isinstance(value, str) and value.isascii() and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is a whole number, not {value!r}"[:200])
    return value if 0 < value <= INT64_MAX else 0


def queue_running(value: object) -> int:
    """R35: a queue limit's ``running``, checked: a whole number from 1 to
    ``MAX_QUEUE_RUNNING`` (digits, or an int that is not a bool); ``ValueError``
    naming what was sent."""
    number = int(value) if isinstance(value, str) and value.isascii() and value.strip().isdigit() \
        else value
    if not whole_within(number, 1, MAX_QUEUE_RUNNING):
        raise ValueError(f"running must be a whole number from 1 to {MAX_QUEUE_RUNNING}, "
                         f"not {value!r}")
    return number

#: The longest delay (enqueue ``delay``, ``Retry(after)``, ``Defer``, ``Reschedule``),
#: in seconds: ten years. Past it a number is a mistake (``1e300``), not a plan.
MAX_DELAY = 10 * 365.25 * 86400


#: What ``env_seconds`` found wrong with the environment's settings: the CLI refuses to
#: run with any (one line, exit 2), and ``jobpool.connect`` raises it.
SETTING_PROBLEMS: list[str] = []


def env_seconds(name: str, default: float) -> float:
    """The environment's setting ``name``, a number of seconds above 0 (at most 10 years),
    else ``default``. A value that is not one is noted in ``SETTING_PROBLEMS`` (the
    default stands in until it is reported): read at import, a ``ValueError`` there ended
    every command, ``--help`` too, in a traceback that did not name the variable."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_DELAY:
        problem = (f"{name} must be a number of seconds above 0, at most 10 years, not "
                   f"{text!r}")
        SETTING_PROBLEMS.append(problem)
        return default
    return value


#: R65: the longest a pipe's reader waits for the rest of a message it has begun, in
#: seconds (``JOBPOOL_MESSAGE_STALL``: the tests' knob). A child writes each message in
#: one call, so its bytes follow at once; one that stops part-way (a job that wrote onto
#: its pipe, a frozen child) is no message, and the supervisor, whose ends do not block,
#: takes the pipe for lost instead of waiting with the whole pool. Read when a message
#: stalls, by the pure reader (``channel``) and the compiled one alike.
MESSAGE_STALL = env_seconds("JOBPOOL_MESSAGE_STALL", 5.0)
#: R26a: after the WAL could not start over for this long, seconds, the checkpointer
#: warns (``JOBPOOL_WAL_WARN_AFTER``: the tests' knob). Read here, with the other
#: settings, so the CLI names a bad one before any command runs.
WAL_WARN_AFTER = env_seconds("JOBPOOL_WAL_WARN_AFTER", 30.0)
#: R65: the longest message either side of a pipe sends, in bytes: a child's request to
#: add 500 members to its batch (``running.ADDS_PER_REQUEST``), each with a payload and
#: metadata at their bounds, is about half of it. A longer length is no message (and is
#: never allocated).
MAX_MESSAGE_BYTES = 1 << 30


#: R41: the longest job, queue or group name, in characters.
MAX_NAME_CHARS = 200
#: R41: the longest key (R3), in UTF-8 bytes.
MAX_KEY_BYTES = 1024
#: R41: a progress stage (R22) is cut past this many UTF-8 bytes...
MAX_STAGE_BYTES = 1024
#: ... and an error text (an attempt's message and traceback) past this many.
MAX_ERROR_BYTES = 64 * 1024
#: R54: a job's metadata (a JSON object) is refused at enqueue past this many UTF-8
#: bytes of its JSON text: it travels with every chain step and batch member.
MAX_META_BYTES = 64 * 1024
#: R63: the most rows of one name a slot may be given as one chunk (``@job(chunk=N)``):
#: past a thousand, a chunk's last lease outlives anything a pool should promise.
MAX_CHUNK = 1000
#: R60: the most members' results one page of a batch's results holds, and the bytes
#: at which a page stops early (never before its first result, itself at most
#: ``MAX_PAYLOAD_BYTES``), so a page is one bounded message to a child.
MAX_RESULTS_PAGE = 1000
RESULTS_PAGE_BYTES = 8 * 1024 * 1024


def utf8_size(text: str) -> int:
    """``len(text.encode())`` without encoding short text (at most 4 bytes a character)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def clip(text: str | None, limit: int) -> str | None:
    """``text`` from a job (an attempt's error, a progress stage), as every store can
    hold it (``storable``), cut to ``limit`` UTF-8 bytes with a marker saying how much
    went."""
    if text is None:
        return None
    text = storable(text)
    if len(text) * 4 <= limit:
        return text
    data = text.encode("utf-8")  # storable: UTF-8 now
    if len(data) <= limit:
        return text
    marker = f" [... {len(data) - limit} more bytes cut]"
    return data[:max(0, limit - len(marker))].decode("utf-8", "ignore") + marker


def not_unicode(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (a str decoded from bytes with
    ``surrogateescape``): not UTF-8, so neither store's driver can write it."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


#: What the refusals of such text say (``not_unicode``).
NOT_UNICODE = "holds text that is not valid Unicode (a lone surrogate)"


def storable(text: str) -> str:
    """``text`` as both stores can hold it, still saying what it said: a NUL (which
    PostgreSQL's text refuses) written ``\\x00``, and a lone surrogate (a str that is
    not UTF-8, from bytes decoded with ``surrogateescape``, which neither store's
    driver can encode) written as its ``\\udcff`` escape. A job's text is never
    trusted to be writable: refused at the settle, it would fail every turn after."""
    if not_unicode(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00") if "\x00" in text else text


def attempt_error(error: object) -> str | None:
    """R41: whatever a child sent as an attempt's error, as bounded, storable text."""
    if error is None:
        return None
    return clip(error if isinstance(error, str) else repr(error), MAX_ERROR_BYTES)


def stage_text(stage: object) -> str | None:
    """R41, R22: a progress stage a job reported, as bounded, storable text (None: not
    text)."""
    return clip(stage, MAX_STAGE_BYTES) if isinstance(stage, str) else None


def check_priority(value: int) -> str | None:
    """What is wrong with an integer priority, or None."""
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        return f"must be from {PRIORITY_MIN} to {PRIORITY_MAX} (a signed 32-bit integer), not {value}"
    return None


def check_delay(value: float) -> str | None:
    """What is wrong with a non-negative delay in seconds, or None."""
    if value > MAX_DELAY:
        return f"must be at most 10 years ({MAX_DELAY:.0f} s), not {number_text(value)}"
    return None


def finite_number(value: Any) -> bool:
    """Whether ``value`` is a number a float holds finitely (not a bool, NaN, an
    infinity, or an int past any float such as 10**400): a Unix time a row can keep."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and -1e300 <= value <= 1e300)


def now_or(value: Any) -> float:
    """A call's ``now=``: this host's clock when None, else a Unix time (a finite number),
    else a ``ValueError`` naming it. Written into rows unchecked, ``now="y"`` made a dead
    job's retry due at ``'y'`` for ever and ``now=inf`` rows the row checks refuse (R44)."""
    if value is None:
        return time.time()
    if not finite_number(value):
        raise ValueError(f"now must be a Unix time (a finite number of seconds), "
                         f"not {value!r}"[:200])
    return float(value)


def number_text(value: float) -> str:
    """A number as an error message shows it: ``%g``, and an integer too large for a
    float (``10**400``) by its size, where ``%g`` raises OverflowError."""
    try:
        return f"{value:g}"
    except OverflowError:
        return f"a {int(value).bit_length()}-bit integer"


#: The smallest default bound on a pool's ``--procs`` (``default_max_procs``).
LEAST_MAX_PROCS = 64


def default_max_procs() -> int:
    """The most children one pool forks unless ``--max-procs`` says more:
    max(64, 32 x CPU count). Each slot is a whole process, so a typo such as
    ``--procs 1000000000`` must be refused, not allocated."""
    return max(LEAST_MAX_PROCS, 32 * (os.cpu_count() or 1))


def process_limit() -> int | None:
    """How many processes this user may run (``RLIMIT_NPROC``), or None when unlimited."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    except (AttributeError, ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def procs_bound(max_procs: int | None = None) -> tuple[int, str]:
    """The largest ``--procs`` this pool accepts, and what sets it (for the error)."""
    if max_procs:
        bound, why = max_procs, "--max-procs"
    else:
        bound, why = default_max_procs(), "max(64, 32 x CPU count); --max-procs raises it"
    limit = process_limit()
    if limit is not None and limit - 1 < bound:
        # The supervisor itself is one of the user's processes.
        bound, why = max(1, limit - 1), f"the process limit (ulimit -u {limit})"
    return bound, why
