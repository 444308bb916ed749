"""R44: a row is data, never a crash. Every store's rows pass through here before
anything uses them: the claim's rows and the rows a reclaim takes back (the engine
and the compiled core), the rows ``get``, ``list_jobs`` and the dead letters show,
the dashboard's running rows, and ``doctor``'s walk of the table.

A store is written by anyone who can write its file or schema (a group-writable
SQLite file, a PostgreSQL role), by hand or by an older release, and SQLite keeps
whatever it is given: text in a ``REAL`` column, a float in an ``INTEGER`` one, a
``chain`` that is not JSON. PostgreSQL's columns are typed, so what it can hold
wrong is narrower (a ``NaN`` time, a count below zero, a ``chain`` of the wrong
shape), and the same checks cover it. One place decides what each column may
hold, so the claims, the read paths and ``doctor`` agree on what is malformed
and say it in the same words: ``malformed row: column deadline: text 'tomorrow',
not a Unix time (a number)``.

A claimed row that fails is settled dead at once by the claimer, in a statement
of its own that reads none of the row's columns (``settle_malformed``), so the rest
of the turn commits and the job never reaches a child. A read path shows the row
with the bad columns set to None and listed in ``malformed`` (column: what it
holds). This module imports no store, so a child may use it too.
"""
from __future__ import annotations

import json
import math
import sys
from keyword import iskeyword
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from jobpool import bounds, serialize
from jobpool import options as job_options
from jobpool.lifecycle import Claimed, Lease, Settled

#: The words every malformed reason starts with.
MALFORMED = "malformed row"
#: The attempt log's word for a row settled dead by the codec (it never ran).
MALFORMED_OUTCOME = "malformed"
#: A done row whose next step could not be enqueued: its ``chain`` changed after the
#: claim checked it. The job's own end stands (its body ran); the chain stops there.
CHAIN_STOPPED = f"{MALFORMED}: column chain: the next step could not be enqueued; the chain stops here"

#: What is wrong with a value (None: nothing).
Check = Callable[[Any], "str | None"]


class Rule:
    """What one column may hold. Called with a value, it says what is wrong with it
    (None: nothing). ``sound(column, dialect)`` is an SQL condition that holds only
    for values the rule accepts (it may be stricter, never looser), so ``doctor``
    reads through the rule just the rows where it does not hold."""

    def __init__(self, check: Check, sqlite: str = "1", postgres: str = "TRUE") -> None:
        self._check = check
        self._sql = {"sqlite": sqlite, "postgres": postgres}

    def __call__(self, value: Any) -> str | None:
        return self._check(value)

    def sound(self, column: str, dialect: str) -> str:
        return self._sql[dialect].format(c=column)


def shown(value: Any) -> str:
    """A stored value as a reason quotes it: what kind it is and, cut short, itself."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return f"the JSON {str(value).lower()}"
    if isinstance(value, int):
        try:
            digits = str(value)
        except ValueError:  # past Python's own bound on an integer's digits
            return f"a {value.bit_length()}-bit integer"
        return f"the integer {digits if len(digits) <= 40 else digits[:40] + '…'}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"text {value if len(value) <= 40 else value[:40] + '…'!r}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{len(value)} bytes"
    if isinstance(value, list):
        return "a JSON list" if value else "an empty JSON list"
    if isinstance(value, dict):
        return "a JSON object"
    return f"a {type(value).__name__}"


def _not(value: Any, what: str) -> str:
    return f"{shown(value)}, not {what}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(what: str, least: int | None = None, most: int | None = None) -> Rule:
    """An integer, within ``least``/``most`` when given."""
    def check(value: Any) -> str | None:
        if (not _is_int(value) or (least is not None and value < least)
                or (most is not None and value > most)):
            return _not(value, what)
        return None
    bounds_sql = "".join(f" AND {{c}} {op} {limit}" for op, limit in ((">=", least), ("<=", most))
                         if limit is not None)
    return Rule(check, "typeof({c}) = 'integer'" + bounds_sql,
                bounds_sql[len(" AND "):] or "TRUE")


def _past_floats(value: Any) -> bool:
    """An integer no float holds (JSON's integers have no bound: ``10**400`` in a chain's
    step), which every check that makes it a float would raise on."""
    return isinstance(value, int) and not -sys.float_info.max <= value <= sys.float_info.max


def number(what: str, *, finite: bool = True, above: float | None = None) -> Rule:
    """A number a float holds: never NaN, finite unless ``finite`` is False, more than
    ``above``."""
    def check(value: Any) -> str | None:
        if (not _is_number(value) or value != value or _past_floats(value)
                or (finite and not math.isfinite(value))
                or (above is not None and not value > above)):
            return _not(value, what)
        return None
    more = f" AND {{c}} > {above!r}" if above is not None else ""
    return Rule(check,
                "typeof({c}) IN ('integer', 'real')"
                + (" AND abs({c}) <= 1.7976931348623157e308" if finite else "") + more,
                "{c} <> 'NaN'::float8"
                + (" AND abs({c}) < 'Infinity'::float8" if finite else "") + more)


def _utf8(text: str) -> bool:
    """Whether text read from a store is UTF-8 (``lenient_text`` keeps bytes that are
    not as lone surrogates, so they show here)."""
    return not bounds.not_unicode(text)


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return _not(value, "text")
    if not _utf8(value):
        return "text that is not UTF-8"
    return None


def _payload(value: Any) -> str | None:
    if isinstance(value, (str, bytes, memoryview)):
        return None
    return _not(value, "text or bytes")


#: Text. (``typeof`` says 'text' of text that is not UTF-8: ``doctor`` names such a
#: column only in a row it reads for another, and a pool or a reader when it meets it.)
text = Rule(_text, "typeof({c}) = 'text'")
#: Arguments (or a result) as stored: JSON text or bytes; decoding them is the
#: child's (``payload cannot be decoded``), by the job's own serializer (R39).
payload = Rule(_payload, "typeof({c}) IN ('text', 'blob')")


def optional(rule: Rule) -> Rule:
    """``rule``, or NULL."""
    def nullable(value: Any) -> str | None:
        return None if value is None else rule(value)
    return Rule(nullable, f"({{c}} IS NULL OR ({rule.sound('{c}', 'sqlite')}))",
                f"({{c}} IS NULL OR ({rule.sound('{c}', 'postgres')}))")


ID = integer("an id (an integer)")
FLAG = integer("an integer")
COUNT = integer("a count (an integer, 0 or more)", 0)
#: Below the top of a 32-bit integer: the pipes to a child carry an attempt in four
#: bytes, and a claim leaves a count at the top where it is (``effects_sql``).
ATTEMPT = integer(f"an attempt number (an integer from 1 to {bounds.INT32_MAX - 1})", 1,
                  bounds.INT32_MAX - 1)
#: A child's deaths: below the top of 32 bits too, since one more is written as is.
CRASHES = integer(f"a count (an integer from 0 to {bounds.INT32_MAX - 1})", 0,
                  bounds.INT32_MAX - 1)
BUDGET = integer("a number of attempts (an integer, 1 or more)", 1)
PRIORITY = integer(f"a priority (an integer from {bounds.PRIORITY_MIN} to {bounds.PRIORITY_MAX})",
                   bounds.PRIORITY_MIN, bounds.PRIORITY_MAX)
TIME = number("a Unix time (a finite number)")
DEADLINE = number("a Unix time (a number)", finite=False)
SECONDS = number("seconds (a finite number above 0)", above=0.0)
PERCENT = number("a percentage (a finite number)")


# -- the chain (R12) ------------------------------------------------------------------------

def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object without a repeated key: SQLite reads the first of two, Python
    the last, so a chain step with one would be read two ways."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} appears twice")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: The strict reader, made once: ``json.loads`` given options builds a decoder (and its
#: scanner) at every call, which was a tenth of a chain step's check at each claim.
_STRICT = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def strict_json(data: str) -> Any:
    """JSON as every store's JSON functions read it: no NaN, no repeated keys, nested
    no deeper than ``serialize.check_depth`` allows, and (as ``json.loads``) no
    byte-order mark."""
    serialize.check_depth(data)
    if data.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
    return _STRICT.decode(data)


def _json_text(value: Any) -> tuple[Any, str | None]:
    """Stored JSON text read strictly: ``(data, None)``, or ``(None, what is wrong)``."""
    if not isinstance(value, str):
        return None, _not(value, "JSON text")
    try:
        return strict_json(value), None
    except (ValueError, RecursionError) as exc:
        return None, f"not JSON ({str(exc).splitlines()[0][:80]})"


def _json_problem(data: Any) -> str | None:
    return _json_text(data)[1]


def _name_problem(value: Any, field: str) -> str | None:
    try:
        (job_options.validate_queue if field == "queue" else job_options.validate_name)(value)
    except ValueError as exc:
        return str(exc)
    return None


def _keyword_problem(value: Any) -> str | None:
    if isinstance(value, str) and value.isidentifier() and not iskeyword(value):
        return None
    return _not(value, "a keyword argument's name")


#: A chain step's keys, as ``rows.step_dict`` writes them, and what each may hold:
#: what the store's own statement (``ENQUEUE_SUCCESSOR``) needs to enqueue it, and
#: what an enqueue of the step would have accepted (R1, R41). PostgreSQL casts
#: ``priority`` and ``max_attempts`` to ``integer``: hence 32 bits for both.
STEP_KEYS: dict[str, tuple[bool, Rule]] = {
    "name": (True, Rule(lambda value: _name_problem(value, "name"))),
    "queue": (True, Rule(lambda value: _name_problem(value, "queue"))),
    "payload": (True, Rule(_json_problem)),
    "priority": (True, PRIORITY),
    "max_attempts": (False, optional(integer("a number of attempts (an integer from 1 to "
                                             f"{bounds.INT32_MAX})", 1, bounds.INT32_MAX))),
    "timeout": (False, optional(SECONDS)),
    # R55: the step's own metadata (the producer's hooks stamped it, or the step
    # named its own); without it the step carries its predecessor's (R54).
    "meta": (False, optional(Rule(lambda value: None if isinstance(value, dict)
                                  else _not(value, "a JSON object")))),
    # R59: the keyword the step takes its predecessor's result under; the store
    # writes a JSON path from it, so it is an identifier or nothing.
    "previous": (False, optional(Rule(_keyword_problem))),
}


def _step_problem(step: Any) -> str | None:
    if not isinstance(step, dict):
        return _not(step, "a step (a JSON object)")
    for key, (required, check) in STEP_KEYS.items():
        if key not in step:
            if required:
                return f"no {key}"
            continue
        why = check(step[key])
        if why is not None:
            return f"{key}: {why}"
    return None


def _chain(value: Any) -> str | None:
    steps, why = _json_text(value)
    if why is not None:
        return why
    if not isinstance(steps, list) or not steps:
        return _not(steps, "a list of steps")
    for index, step in enumerate(steps):
        why = _step_problem(step)
        if why is not None:
            return f"step {index}: {why}"
    return None


#: R12: the steps still to enqueue, a JSON list of step objects, as text (PostgreSQL's
#: ``jsonb`` is read as ``chain::text``). Every step is checked, not only the next: the
#: rest travel with it. Only Python reads JSON here, so ``doctor`` reads every chain.
chain = Rule(_chain, "0", "FALSE")


def _meta(value: Any) -> str | None:
    data, why = _json_text(value)
    if why is not None:
        return why
    if not isinstance(data, dict):
        return _not(data, "a JSON object")
    return None


#: R54: a job's metadata, a JSON object as text (PostgreSQL's ``jsonb`` is read as
#: ``meta::text``).
#: ``json_type`` fails on text that is not JSON: the CASE keeps it from such text.
meta = Rule(_meta, "CASE WHEN json_valid({c}) THEN json_type({c}) = 'object' ELSE 0 END",
            "jsonb_typeof({c}) = 'object'")


#: Every column of ``jobs`` (and PostgreSQL's ``finished_jobs``) a read path or the
#: engine uses, and what it may hold. NOT NULL columns are refused NULL by the schema.
COLUMNS: dict[str, Rule] = {
    "id": ID, "queue": text, "name": text, "key": optional(text), "payload": payload,
    "serializer": text, "priority": PRIORITY, "status": text, "run_at": TIME, "line_at": TIME,
    "attempts": COUNT, "max_attempts": optional(BUDGET), "crashes": COUNT, "deferrals": COUNT,
    "deadline": optional(DEADLINE), "timeout": optional(SECONDS), "lease_owner": optional(text),
    "lease_expires_at": optional(TIME), "last_error": optional(text),
    "progress": optional(PERCENT), "stage": optional(text), "result": optional(payload),
    "created_at": TIME, "started_at": optional(TIME), "finished_at": optional(TIME),
    "chain": optional(chain), "chain_root": optional(ID), "cancel_requested": FLAG,
    "hook_done": FLAG, "batch_id": optional(ID), "state": optional(text),
    "state_at": optional(TIME), "grp": optional(text), "meta": optional(meta),
}


def problems(row: Mapping[str, Any]) -> dict[str, str]:
    """What is wrong with each column of ``row`` (a dict of some of ``COLUMNS``)."""
    found = {}
    for column, value in row.items():
        check = COLUMNS.get(column)
        if check is not None:
            why = check(value)
            if why is not None:
                found[column] = why
    return found


def flagged(job: dict[str, Any]) -> dict[str, Any]:
    """A row as a read path returns it: each malformed column set to None (nothing
    downstream does sums with text) and named in ``malformed`` with what it holds.
    A sound row comes back as it was, without the key."""
    found = problems(job)
    if found:
        for column in found:
            job[column] = None
        job["malformed"] = found
    return job


def reason(found: Mapping[str, str]) -> str:
    """``malformed row: column a: why; column b: why``."""
    return f"{MALFORMED}: " + "; ".join(f"column {c}: {why}" for c, why in found.items())


def readable(text: str) -> str:
    """Stored text as a reader shows it: bytes that are not UTF-8 (kept by
    ``lenient_text``) replaced, as a JSON payload stored as bytes is shown."""
    if _utf8(text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def is_time(value: Any) -> bool:
    """Whether ``value`` is a time the engine can compare (a due time, say)."""
    return TIME(value) is None


def lenient_text(data: bytes) -> str:
    """Text as SQLite stored it, bytes that are not UTF-8 kept as lone surrogates, so a
    row with them reaches the codec (which names the column) instead of failing the
    statement that read it."""
    return data.decode("utf-8", "surrogateescape")


# -- claimed and leased rows: the claim's one decoder ----------------------------------------

#: The claim's RETURNING columns on every store, in order, and what each may hold.
#: ``attempts`` has just been spent by the claim, so it is 1 or more; the claim
#: filled in ``max_attempts`` and ``timeout`` where they were NULL.
CLAIM_COLUMNS: tuple[tuple[str, Rule], ...] = (
    ("id", ID), ("name", text), ("payload", payload), ("serializer", text),
    ("attempts", ATTEMPT), ("max_attempts", BUDGET), ("crashes", CRASHES), ("timeout", SECONDS),
    ("deadline", optional(DEADLINE)), ("priority", PRIORITY), ("line_at", TIME),
    ("follow_ups", FLAG), ("run_at", TIME), ("chain", optional(chain)),
    # R58: carried to the child, which reads metadata that is not a JSON object as
    # none (``running.current_job``): the claim checks only that it is text.
    ("batch_id", optional(ID)), ("meta", optional(text)))

#: A reclaim's columns (``RECLAIMABLE_EXPIRED``, ``RECLAIMABLE_OWNER``), in order.
LEASE_COLUMNS: tuple[tuple[str, Rule], ...] = (
    ("id", ID), ("name", text), ("attempts", COUNT), ("max_attempts", optional(BUDGET)),
    ("crashes", COUNT), ("deadline", optional(DEADLINE)), ("started_at", TIME),
    ("lease_owner", text))


class Decoded(NamedTuple):
    """A claimed row that passed: what settling it needs, what the pool runs, and its
    place in claim order (R7: priority first, then line, then id)."""

    lease: Lease
    job: Claimed
    priority: int
    line_at: float


class Malformed(NamedTuple):
    """A row the codec refused: the fence to settle it by, and the reason."""

    job_id: Any
    name: Any
    attempt: Any
    reason: str


def _refused(row: tuple, columns: tuple[tuple[str, Rule], ...]) -> str | None:
    found = {}
    for (column, check), value in zip(columns, row):
        why = check(value)
        if why is not None:
            found[column] = why
    return reason(found) if found else None


def decode_claim(row: tuple, queue: str, now: float,
                 to_pool_clock: float = 0.0) -> Decoded | Malformed:
    """One row of the claim (``CLAIM_COLUMNS``), checked whole before anything uses it.
    ``to_pool_clock``: what turns the row's ``run_at`` into the pool's clock (R7a)."""
    why = _refused(row, CLAIM_COLUMNS)
    if why is not None:
        return Malformed(row[0], row[1], row[4], why)
    (job_id, name, data, serializer, attempt, max_attempts, crashes, timeout, deadline,
     priority, line_at, follow_ups, run_at, _chain, batch, meta) = row
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    elif not isinstance(data, bytes):
        data = bytes(data)
    # ``deadline`` as the claim returned it: SQLite's RETURNING gives an integer for a
    # REAL column's whole value, and both cores hand it on as they read it.
    return Decoded(Lease(job_id, name, attempt, max_attempts, crashes, deadline, now, follow_ups),
                   Claimed(job_id, name, data, serializer, attempt, float(timeout), deadline, queue,
                           float(run_at) + to_pool_clock, batch, meta),
                   priority, float(line_at))


def decode_claims(rows: Iterable[tuple], queue: str, now: float,
                  to_pool_clock: float = 0.0) -> tuple[list[Decoded], list[Malformed]]:
    """A claim's rows: those that passed, in claim order (RETURNING has none), and
    those that did not."""
    decoded: list[Decoded] = []
    refused: list[Malformed] = []
    for row in rows:
        item = decode_claim(row, queue, now, to_pool_clock)
        if isinstance(item, Malformed):
            refused.append(item)
        else:
            decoded.append(item)
    decoded.sort(key=lambda d: (-d.priority, d.line_at, d.job.job_id))
    return decoded, refused


def decode_lease(row: tuple, follow_ups: int) -> Lease | Malformed:
    """One row a reclaim takes back (``LEASE_COLUMNS``), as the lease ``decide`` reads."""
    why = _refused(row, LEASE_COLUMNS)
    if why is not None:
        return Malformed(row[0], row[1], row[2], why)
    job_id, name, attempt, max_attempts, crashes, deadline, started_at, _owner = row
    return Lease(job_id, name, attempt, max_attempts, crashes, deadline, started_at, follow_ups)


# -- settling a refused row -----------------------------------------------------------------

def malformed_params(bad: Malformed, owner: Any, now: float) -> dict[str, Any]:
    """The parameters of ``SETTLE_MALFORMED`` and of its attempt's line in the log
    (outcome ``malformed``, the reason as its error): every store binds these. An
    owner read from a row as text that is not UTF-8 goes back as the bytes it was."""
    if isinstance(owner, str) and not _utf8(owner):
        owner = owner.encode("utf-8", "surrogateescape")
    return {"id": bad.job_id, "owner": owner, "attempt": bad.attempt, "now": now,
            "error": bad.reason, "log_error": bad.reason, "outcome": MALFORMED_OUTCOME,
            "pid": None, "started_at": now, "exit_status": None, "peak_rss": None,
            "cpu_s": None, "strays": None}


def malformed_settled(bad: Malformed, held: bool) -> Settled:
    """What became of a refused row: dead with its reason, or lost when the fence held
    no row. Its name and attempt as the log can print them, whatever the row held."""
    name = bad.name if isinstance(bad.name, str) else repr(bad.name)
    if not held:
        return Settled(bad.job_id, name, bad.attempt, "lost", "lease lost")
    return Settled(bad.job_id, name, bad.attempt, "dead", bad.reason)


def settle_malformed(query: Callable[[str, dict], list], statements: Any, bad: Malformed,
                     owner: Any, now: float) -> Settled:
    """Settle a refused row dead in the turn's transaction (SQLite's cores):
    ``statements.SETTLE_MALFORMED``, fenced by id, owner and status, names none of
    the row's other columns, so it cannot fail on the one that is wrong; then its
    batch's count and the attempt's line (``MALFORMED_FOLLOW_UPS``)."""
    params = malformed_params(bad, owner, now)
    held = bool(query(statements.SETTLE_MALFORMED, params))
    if held:
        for follow_up in statements.MALFORMED_FOLLOW_UPS:
            query(follow_up, params)
    return malformed_settled(bad, held)


# -- doctor: every row, whatever its status -------------------------------------------------

#: How many malformed rows ``doctor`` names one by one (it counts the rest).
DOCTOR_NAMES = 100
#: What ``doctor`` says such rows mean, after how many there are.
DOCTOR_NOTE = ("a pool settles such a row dead when it claims it; one whose run_at is not "
               "a number is never claimed")


def suspects(columns: Iterable[str], dialect: str) -> str:
    """The condition ``doctor`` reads rows by: one of ``columns`` (of ``COLUMNS``) is
    not plainly sound, as its rule's ``sound`` says; the codec then says why."""
    return " OR ".join(f"NOT COALESCE(({COLUMNS[c].sound(c, dialect)}), "
                       f"{'0' if dialect == 'sqlite' else 'FALSE'})"
                       for c in columns if c in COLUMNS)


def described(job: Mapping[str, Any]) -> str | None:
    """A malformed row as ``doctor`` names it (by id, status and each column), or None
    when nothing is wrong with it."""
    found = problems(job)
    if not found:
        return None
    return f"job {job.get('id')} ({job.get('status')}): " + "; ".join(
        f"column {c}: {why}" for c, why in found.items())
