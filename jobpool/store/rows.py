"""What every store does the same before it writes a job and after it reads one:
validate an enqueue's options and encode its payload (R1), encode a chain (R12),
and shape a row into the dict ``get`` and ``list_jobs`` return.

Kept out of any one store so SQLite and PostgreSQL validate alike and say the
same words when they refuse something; only the SQL differs.
"""
from __future__ import annotations

import json
import math
import re
from keyword import iskeyword
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

from jobpool import bounds, extensions, limits, liveness, serialize
from jobpool import options as job_options
from jobpool.errors import EnqueueError, seconds
from jobpool.handles import Signature
from jobpool.lifecycle import KIND_NAMES, Lease, Outcome
from jobpool.serialize import MAX_PAYLOAD_BYTES, encode_payload
from jobpool.store import row_codec
#: The statuses a row can have in any store.
STATUSES = ("ready", "running", "done", "dead")
#: What listings show and filter by: a ready row not yet due is "scheduled".
LISTED_STATUSES = ("ready", "scheduled", "running", "done", "dead")


class EnqueueOptions(NamedTuple):
    """The validated per-call options, shared by every row of an enqueue_many."""

    queue: str
    name: str
    serializer: str
    priority: int
    run_at: float
    max_attempts: int | None   # None: the claiming pool's registered value
    deadline: float | None
    timeout: float | None      # None: the claiming pool's registered value
    now: float
    batch_id: int | None = None  # R34: the batch every row joins
    group_by: str | None = None  # R35: the keyword argument naming each row's group
    arguments: Any = None        # R1: the registered job's argument check; None: by name


class NewJob(NamedTuple):
    """One row to insert, validated and encoded (the column order of INSERT_JOB)."""

    queue: str
    name: str
    key: str | None
    payload: bytes | str
    serializer: str
    priority: int
    run_at: float
    line_at: float
    max_attempts: int | None
    deadline: float | None
    timeout: float | None
    created_at: float
    chain: str | None
    batch_id: int | None = None  # R34: the batch this job is a member of
    grp: str | None = None       # R35/R36: the group its name's limits count it in
    meta: str | None = None      # R54: its metadata, a JSON object as text

    def at(self, now: float) -> "NewJob":
        """A row made on a clock of 0 (in a child, whose clock is not the store's),
        moved to ``now``."""
        return self._replace(run_at=self.run_at + now, line_at=self.line_at + now,
                             created_at=now)


def enqueue_options(name, delay, priority, deadline, max_attempts, queue, timeout,
                    now: float) -> EnqueueOptions:
    """Validate the options of one enqueue (R1); unset ones come from the job's
    registration in this process, when it has one."""
    try:
        job_options.validate_name(name)
    except ValueError as exc:
        raise EnqueueError(str(exc)) from None
    job = job_options.options_of(name)
    serializer = job.serializer if job else "json"
    wait = seconds(delay, "delay") or 0.0
    priority = job_options.validate_priority(
        priority if priority is not None else (job.priority if job else job_options.DEFAULT_PRIORITY))
    # Left unset, max_attempts and timeout stay NULL for a job this process has
    # not imported: the supervisor that claims it applies the job's own options.
    if max_attempts is not None:
        max_attempts = job_options.validate_max_attempts(max_attempts)
    elif job is not None:
        max_attempts = job.max_attempts
    queue = queue_name(queue if queue is not None
                       else job.queue if job else job_options.DEFAULT_QUEUE)
    if timeout is not None:
        timeout = job_options.validate_timeout(timeout)
    elif job is not None:
        timeout = job.timeout
    deadline_ts = job_options.to_timestamp(deadline)
    return EnqueueOptions(queue, name, serializer, priority, now + wait, max_attempts, deadline_ts,
                          timeout, now, None, job.group_by if job else None,
                          job.arguments if job else None)


def queue_name(queue: Any) -> str:
    """A queue named at enqueue, pause or resume, validated (R1a): an ``EnqueueError``
    naming what is wrong."""
    try:
        return job_options.validate_queue(queue)
    except ValueError as exc:
        raise EnqueueError(str(exc)) from None


def with_payload(options: EnqueueOptions, args, kwargs, key, chain,
                 max_payload: int = MAX_PAYLOAD_BYTES, group: Any = None) -> NewJob:
    grp = limits.group_of(options.name, options.group_by, kwargs, group)
    payload = encode_payload(args, kwargs, options.serializer, max_payload)
    if options.arguments is not None:
        check_arguments(options.arguments, options.name, args, kwargs)
    return NewJob(options.queue, options.name, key, payload, options.serializer, options.priority,
                  options.run_at, options.run_at, options.max_attempts, options.deadline,
                  options.timeout, options.now, chain, options.batch_id, grp)


def new_job(name, args, kwargs, key, delay, priority, deadline, max_attempts, queue, timeout,
            now: float, chain: str | None, max_payload: int = MAX_PAYLOAD_BYTES,
            group: Any = None, meta: Any = None) -> NewJob:
    """One job's row, everything validated before anything is written (R1).
    ``group``: the row's group for its name's limits (R35, R36), instead of the
    value of the job's ``group_by`` keyword argument. ``meta``: its metadata (R54)."""
    options = enqueue_options(name, delay, priority, deadline, max_attempts, queue, timeout, now)
    if key is not None:
        check_key(key, "key")
    row = with_payload(options, args, kwargs, key, chain, max_payload, group)
    if meta is not None:
        row = row._replace(meta=meta_json(meta))
    return row


def meta_json(meta: Any, what: str = "meta") -> str:
    """R54: a job's metadata as the ``meta`` column holds it: a dict with string keys
    whose values JSON can carry (no NaN or infinity, which no store's JSON reads), at
    most ``bounds.MAX_META_BYTES`` of JSON text; else an ``EnqueueError`` naming it."""
    if not isinstance(meta, dict):
        raise EnqueueError(f"{what} must be a dict (a JSON object), not {type(meta).__name__}")
    for name in meta:
        if not isinstance(name, str):
            raise EnqueueError(f"{what}: a key must be a string, not {name!r}")
    try:
        text = serialize.to_json(meta)
    except serialize.NotJSON as exc:
        raise EnqueueError(f"{what} {exc.reason}" if exc.not_unicode
                           else f"{what} is not JSON: {exc.reason}") from None
    size = bounds.utf8_size(text)
    if _JSON_NUL.search(text):
        # SQLite would keep it; PostgreSQL's jsonb refuses it: refused on both alike.
        raise EnqueueError(f"{what} holds a NUL character, which a store's JSON cannot hold")
    if size > bounds.MAX_META_BYTES:
        raise EnqueueError(f"{what} is {size} bytes of JSON, over the "
                           f"{bounds.MAX_META_BYTES}-byte limit")
    return text


#: A NUL in JSON text: ``\u0000`` after an even number of backslashes (an odd one
#: escapes a backslash written in the string itself).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def check_key(key: Any, what: str) -> str:
    """R3/R41: a key is a non-empty string of at most ``bounds.MAX_KEY_BYTES``, text
    both stores hold alike (no NUL, which PostgreSQL's text refuses; valid Unicode)."""
    if not isinstance(key, str) or not key:
        raise EnqueueError(f"{what} must be a non-empty string, not {key!r}")
    if "\x00" in key:
        raise EnqueueError(f"{what} must not hold a NUL character, not {key!r}")
    if bounds.not_unicode(key):
        raise EnqueueError(f"{what} {bounds.NOT_UNICODE}")
    size = bounds.utf8_size(key)
    if size > bounds.MAX_KEY_BYTES:
        raise EnqueueError(f"{what} is {size} bytes, over the {bounds.MAX_KEY_BYTES} allowed (R41)")
    return key


def check_arguments(arguments: Any, name: str, args: Any, kwargs: Any) -> None:
    """R1: a call of a job registered in this process binds to its function, or is
    an ``EnqueueError`` naming the job and what did not fit. (A job enqueued by a
    name this process never registered cannot be checked here; its pool refuses
    the row at its first attempt.)"""
    problem = arguments.problem(args, kwargs)
    if problem is not None:
        raise EnqueueError(arguments.refusal(name, problem))


def check_items(options: EnqueueOptions, items: list, args_only: bool = False) -> None:
    """R1 for an enqueue_many written as one JSON batch (``json_batch``): every item
    binds, or an ``EnqueueError`` names the first that does not, and nothing is
    written. Items of other shapes are refused by ``new_jobs``, which checks its own.

    ``args_only``: every item is a tuple or list of positional arguments (what
    ``json_batch`` says), so whether one binds depends on how many it holds alone:
    each count is judged once, and the items are walked only to name the first that
    does not fit (a bulk enqueue's rows are mostly of one count)."""
    arguments = options.arguments
    if arguments is None:
        return
    if args_only:
        unfit = {n for n in set(map(len, items)) if arguments.problem((None,) * n, None)}
        for index, item in enumerate(items if unfit else ()):
            problem = arguments.problem(item, None) if len(item) in unfit else None
            if problem is not None:
                raise EnqueueError(f"item {index}: {arguments.refusal(options.name, problem)}",
                                   item=index)
        return
    for index, item in enumerate(items):
        if isinstance(item, Signature):
            problem = arguments.problem(item.args, item.kwargs)
        elif isinstance(item, (tuple, list)):
            problem = arguments.problem(item, None)
        else:
            continue
        if problem is not None:
            raise EnqueueError(f"item {index}: {arguments.refusal(options.name, problem)}",
                               item=index)


def key_period(period: Any, key: Any) -> float | None:
    """Unique keys over a period: seconds during which a finished job with the key
    still makes an enqueue a duplicate; only with a key, more than 0."""
    if period is None:
        return None
    if key is None:
        raise EnqueueError("key_period needs a key: it says how long a finished job's key "
                           "keeps making duplicates")
    value = seconds(period, "key_period")
    if not value:
        raise EnqueueError("key_period must be more than 0 seconds")
    return value


def check_batch_options(batch: Any, *, key: Any = None, connection: Any = None) -> None:
    """R34: a batch id, and none of the options a batch member cannot have: a key
    (a duplicate would join nothing, yet count), or the caller's own transaction."""
    if batch is None:
        return
    if not bounds.whole_within(batch, 1, bounds.INT64_MAX):
        raise EnqueueError(f"batch must be a batch id (a whole number from 1 to "
                           f"{bounds.INT64_MAX}), not {batch!r}")
    if key is not None:
        raise EnqueueError("a batch member cannot have a key: batch= and key(s)= together")
    if connection is not None:
        raise EnqueueError("a batch member is written in the store's own transaction: "
                           "batch= and connection= together")


def _listed(value: Any) -> bool:
    """Whether ``value`` is a list a call may take: any iterable but text or bytes,
    whose characters are no items (``"12"`` was the ids 1 and 2)."""
    return not isinstance(value, (str, bytes)) and hasattr(value, "__iter__")


def item_list(items: Any) -> list:
    """An ``enqueue_many``'s items as a list: any iterable but text or bytes (whose
    characters are no argument lists), else an ``EnqueueError`` naming what came."""
    if isinstance(items, list):
        return items
    if not _listed(items):
        raise EnqueueError(f"enqueue_many takes a list of items (argument tuples or "
                           f"Signatures), not {type(items).__name__}")
    return list(items)


def check_connection(connection: Any) -> None:
    """R5: the caller's own connection, which the row is written in: one that can run a
    statement (a ``sqlite3`` or ``psycopg`` connection), else an ``EnqueueError``."""
    if connection is not None and not callable(getattr(connection, "execute", None)):
        raise EnqueueError(f"connection must be the application's open database connection "
                           f"(sqlite3 or psycopg), not {type(connection).__name__}")


def check_keys(keys: Any, count: int) -> list[str | None] | None:
    """R3 for a batch: one key (a non-empty string, or None) per item, or no keys."""
    if keys is None:
        return None
    if not _listed(keys):  # keys="ab" keyed two items "a" and "b"
        raise EnqueueError(f"keys must be a list of keys (one per item), not "
                           f"{type(keys).__name__}")
    keys = list(keys)
    if len(keys) != count:
        raise EnqueueError(f"keys: {len(keys)} keys for {count} items")
    for index, key in enumerate(keys):
        if key is not None and (not isinstance(key, str) or not key):
            raise EnqueueError(f"keys[{index}] must be a non-empty string or None, not {key!r}")
        if key is not None:
            check_key(key, f"keys[{index}]")
    return keys


def stamp(name: str, args: Any, kwargs: Any, meta: Any, label: str = "") -> Any:
    """R55: the metadata one job is written with: ``meta`` as the producer's
    ``before_enqueue`` hooks leave it (each changes a copy in place, in registration
    order); ``meta`` itself when none is registered, or when the call's hooks ran
    already. A hook that raises refuses the enqueue (an ``EnqueueError`` naming the
    middleware and the job) before anything is written."""
    hooks = extensions.hooks_now()
    if not hooks:
        return meta
    if meta is not None and not isinstance(meta, dict):
        meta_json(meta, f"{label}meta")  # refuses it, in R54's words
    stamped: dict[str, Any] = dict(meta) if meta is not None else {}
    info = extensions.EnqueueInfo(name, tuple(args) if isinstance(args, list) else args,
                                  dict(kwargs) if isinstance(kwargs, dict) else {})
    for hook in hooks:
        try:
            hook(info, stamped)
        except Exception as exc:  # noqa: BLE001 - the user's code: any refusal is one
            owner = getattr(hook, "__self__", hook)
            raise EnqueueError(f"{label}the before_enqueue of {type(owner).__qualname__} refused "
                               f"the enqueue of {name}: {type(exc).__name__}: {exc}") from exc
    return stamped if stamped or meta is not None else None


def stamp_call(name: str, args: Any, kwargs: Any, meta: Any, then: Any) -> tuple[Any, Any]:
    """R55: one enqueue's metadata and its chain's steps (``then``), each step
    stamped on its own: it starts from its own metadata (``Signature.meta``), else
    the call's. Unchanged when no hook is registered."""
    if not extensions.hooks_now():
        return meta, then
    stamped = stamp(name, args, kwargs, meta)
    if then is None:
        return stamped, then
    steps = list(then) if isinstance(then, (list, tuple)) else [then]
    for index, step in enumerate(steps):
        if isinstance(step, Signature):  # anything else: chain_json refuses it
            own = step.meta if step.meta is not None else meta
            steps[index] = step.with_meta(stamp(step.name, step.args, step.kwargs, own,
                                                f"then[{index}]: "))
    return stamped, steps


def carries_meta(meta: Any) -> bool:
    """Whether an enqueue_many's rows need a ``meta`` each (R54, R55): one given to
    the call, or a hook to stamp them. Without, they may take the fast path (which
    ``json_batch`` refuses to an item with metadata of its own)."""
    return meta is not None or bool(extensions.hooks_now())


def new_jobs(options: EnqueueOptions, items: list, max_payload: int = MAX_PAYLOAD_BYTES,
             keys: list[str | None] | None = None, meta: Any = None,
             hooks: bool = False) -> list[NewJob]:
    """The rows of an enqueue_many, in item order; a bad item is named by its index.
    Each row's metadata is its item's own (``Signature.meta``), else ``meta``; with
    ``hooks``, as the producer's ``before_enqueue`` hooks stamp it (R55)."""
    rows = []
    args: Any
    shared = meta_json(meta) if meta is not None else None
    stamping = hooks and bool(extensions.hooks_now())
    for index, item in enumerate(items):
        if isinstance(item, tuple):
            args, kwargs = item, None
        elif isinstance(item, Signature):
            try:
                item.refuse_previous(f"item {index}")
            except EnqueueError as exc:
                exc.item = index
                raise
            if item.name and item.name != options.name:
                # Its arguments ran as ``name``'s: ``enqueue_many("a", [b.s(1)])``.
                raise EnqueueError(f"item {index}: a signature of {item.name} in an "
                                   f"enqueue_many of {options.name}: every item is a call "
                                   f"of the one job named (enqueue each job's own items)",
                                   item=index)
            args, kwargs = item.args, item.kwargs
        elif isinstance(item, list):
            args, kwargs = item, None
        else:
            raise EnqueueError(f"item {index}: expected a tuple of arguments or a "
                               f"Signature, not {type(item).__name__}", item=index)
        try:
            row = with_payload(options, args, kwargs, keys[index] if keys else None, None,
                               max_payload)
            own = item.meta if isinstance(item, Signature) and item.meta is not None else None
            if stamping:
                stamped = stamp(options.name, args, kwargs, meta if own is None else own)
                text = meta_json(stamped) if stamped is not None else None
            else:
                text = shared if own is None else meta_json(own)
        except EnqueueError as exc:  # a hook's own exception stays its cause (R55)
            raise EnqueueError(f"item {index}: {exc}", item=index) from exc.__cause__
        rows.append(row if text is None else row._replace(meta=text))
    return rows


def json_batch(items: list, name: str) -> tuple[str, bool] | None:
    """The whole batch as one JSON array, encoded in one call, and whether it
    holds only argument lists (the common case, encoded straight from the items;
    SQL wraps each as ``[args,{}]``) or ``[args, kwargs]`` pairs. None when an
    item needs the per-item path, which then names the item that is wrong (R1).
    """
    if set(map(type, items)) <= {tuple, list}:
        try:
            return serialize.to_json(items), True
        except serialize.NotJSON:  # the per-item path names the item (R1)
            return None
    pairs = []
    for item in items:
        if isinstance(item, (tuple, list)):
            pairs.append([list(item), {}])
        elif isinstance(item, Signature) and item.meta is None and item.previous is None \
                and item.name in ("", name) and (
                item.kwargs is None or (isinstance(item.kwargs, dict)
                                        and all(isinstance(k, str) for k in item.kwargs))):
            pairs.append([list(item.args), item.kwargs or {}])
        else:
            return None
    try:
        return serialize.to_json(pairs), False
    except serialize.NotJSON:  # the per-item path names the item (R1)
        return None


def chain_json(then: Any, max_payload: int = MAX_PAYLOAD_BYTES,
               first: str | None = None) -> str | None:
    """The ``chain`` column for ``then=``: each step validated like an enqueue (R1).
    ``first``: the name of the job the chain follows (R59: a step asking for its
    predecessor's result is checked against what that job keeps)."""
    if then is None:
        return None
    steps = list(then) if isinstance(then, (list, tuple)) else [then]
    encoded = []
    for index, step in enumerate(steps):
        label = f"then[{index}]"
        before = first if index == 0 else getattr(steps[index - 1], "name", None)
        keyword = previous_keyword(step, label, before)
        encoded.append(step_dict(step, label, "chained steps", max_payload,
                                 given=None if keyword is None else {keyword: None},
                                 previous=keyword))
    if not encoded:
        return None
    for index, (step, found) in enumerate(zip(steps, encoded)):
        if step.meta is not None:  # R55: its own, else its predecessor's (R54)
            meta_json(step.meta, f"then[{index}]: meta")
            found["meta"] = step.meta
    return json.dumps(encoded, separators=(",", ":"))


def previous_keyword(step: Any, label: str, before: str | None) -> str | None:
    """R59: the keyword a chain step takes its predecessor's result under (None: it
    asks for none), refused when it could never work: not an identifier, one of the
    step's own keyword arguments, or a predecessor this process registers that keeps
    no JSON result (``before``: its name, when known)."""
    keyword = getattr(step, "previous", None)
    if keyword is None:
        return None
    if not isinstance(keyword, str) or not keyword.isidentifier() or iskeyword(keyword):
        raise EnqueueError(f"{label}: with_previous takes a keyword argument's name, "
                           f"not {keyword!r}")
    if step.kwargs and keyword in step.kwargs:
        raise EnqueueError(f"{label}: {step.name} is given {keyword}= by its predecessor; "
                           f"it cannot have its own")
    registered = job_options.options_of(before) if before is not None else None
    if registered is not None and not registered.store_result:
        raise EnqueueError(f"{label}: {step.name} asks for the result of {before}, which "
                           f"keeps none: register it with store_result=True")
    if registered is not None and registered.serializer != "json":
        raise EnqueueError(f"{label}: {step.name} asks for the result of {before}, which "
                           f"stores it with {registered.serializer}; only a JSON result "
                           f"is passed on")
    return keyword


def step_dict(step: Any, label: str, what: str, max_payload: int = MAX_PAYLOAD_BYTES,
              given: dict[str, Any] | None = None,
              previous: str | None = None) -> dict[str, Any]:
    """A job the store itself enqueues later (a chain's next step, a batch's
    callback): ``{name, payload, queue, priority, max_attempts, timeout}``, with
    the options of its registration in this process when it has one. Its
    arguments travel as JSON: the store writes them into the new row. When the
    job is registered here its arguments, with the keyword arguments ``given``
    that the store adds when it enqueues it, must bind to its function (R1).
    ``previous``: the keyword the store fills with the predecessor's result (R59)."""
    if not isinstance(step, Signature):
        raise EnqueueError(f"{label} must be a signature (job.s(...)), not {type(step).__name__}")
    if previous is None:
        step.refuse_previous(label)
    try:
        job_options.validate_name(step.name)
    except ValueError as exc:
        raise EnqueueError(f"{label}: {exc}") from None
    job = job_options.options_of(step.name)
    if job is not None and job.serializer != "json":
        raise EnqueueError(f"{label}: {what} carry JSON arguments; "
                           f"{step.name} uses {job.serializer}")
    try:
        payload = encode_payload(step.args, step.kwargs, "json", max_payload)
        if job is not None and job.arguments is not None:
            check_arguments(job.arguments, step.name, step.args,
                            {**(step.kwargs or {}), **given} if given else step.kwargs)
    except EnqueueError as exc:
        raise EnqueueError(f"{label}: {exc}") from None
    found = {
        "name": step.name,
        "payload": payload,
        "queue": job.queue if job else job_options.DEFAULT_QUEUE,
        "priority": job.priority if job else job_options.DEFAULT_PRIORITY,
        "max_attempts": job.max_attempts if job else None,
        "timeout": job.timeout if job else None,
    }
    if previous is not None:
        found["previous"] = previous
    return found


def waiting_steps(chain: Any) -> list[dict[str, Any]]:
    """R12: a row's ``chain`` column as ``Store.waiting_steps`` answers it: each step's
    name, queue and priority, never its arguments. R44: a column that is not a sound
    list of steps is one step named for what it holds (``row_codec.flagged``'s words),
    so no page fails on it."""
    if chain is None:
        return []
    why = row_codec.chain(chain)
    if why is not None:
        return [{"name": f"[{row_codec.MALFORMED}: {why}]", "queue": None, "priority": None}]
    return [{key: step.get(key) for key in ("name", "queue", "priority")}
            for step in serialize.loads(chain)]


def check_listed_status(status: str | None) -> None:
    if status is not None and status not in LISTED_STATUSES:
        raise EnqueueError(f"status must be one of {', '.join(LISTED_STATUSES)}, not {status!r}")


def listing_filters(name: str | None, queue: str | None, chain: int | None,
                    mark: Callable[[str], str], *, after: int | None = None,
                    newest_first: bool = False,
                    chain_of: Callable[[str], str] | None = None
                    ) -> tuple[list[str], dict[str, Any]]:
    """The conditions of a listing of jobs of ``name``, in ``queue`` and of the chain
    started by job ``chain`` (each None: any), with their parameters; ``mark`` makes
    a parameter's placeholder. A chain is its first job (by id) and the steps whose
    ``chain_root`` is that id, read through the chain index (R12, R47), never a walk
    of the ids written since the chain began; ``chain_of`` writes that condition of
    the chain's placeholder where a store has its own form. ``after``: the
    keyset of the next page (R28), the jobs past that id in the listing's order
    (below it newest first, above it oldest first)."""
    where: list[str] = []
    params: dict[str, Any] = {}
    for what, text in (("name", name), ("queue", queue)):
        filter_text(what, text)
    if after is not None:
        where.append(f"id {'<' if newest_first else '>'} {mark('after')}")
        params["after"] = listed_after(after)
    if chain is not None:
        chain = bounds.row_id(chain, "a chain (its first job's id)")
    if name is not None:
        where.append(f"name = {mark('name')}")
        params["name"] = name
    if queue is not None:
        where.append(f"queue = {mark('queue')}")
        params["queue"] = queue
    if chain is not None:
        where.append(chain_of(mark("chain")) if chain_of is not None
                     else f"(id = {mark('chain')} OR chain_root = {mark('chain')})")
        params["chain"] = chain
    return where, params


#: R47: the most ids a searched listing (group, error or argument text, a time range)
#: reads below its keyset when the caller names no ``scan``, and the most it may name.
SEARCH_ROWS = 10_000
SEARCH_MOST = 100_000


class ListingDialect(NamedTuple):
    """What the listing filters write differently per store: a placeholder, a
    case-sensitive "text contains" of a column and of the payload's bytes, the
    id just past the newest job, and (R54) the conditions that match metadata pairs
    (``meta_pairs``' answer and ``mark``: conditions and their parameters), which an
    index serves (``meta_indexed``) or a search does."""

    mark: Callable[[str], str]
    contains: Callable[[str, str], str]
    payload_contains: Callable[[str], str]
    past_newest: str
    meta_matches: Callable[[dict[str, Any], Callable[[str], str]],
                           tuple[list[str], dict[str, Any]]] | None = None
    meta_indexed: bool = False


def searched(group: str | None = None, error: str | None = None, args: str | None = None,
             created: tuple[float | None, float | None] | None = None,
             finished: tuple[float | None, float | None] | None = None,
             meta: Any = None, meta_indexed: bool = False) -> bool:
    """Whether a listing names a filter no index serves (R47; R54: metadata, unless
    the store indexes it)."""
    return any(v is not None for v in (group, error, args)) or any(
        bound is not None for span in (created, finished) if span for bound in span) or (
        bool(meta) and not meta_indexed)


#: R54: the values a listing's metadata filter compares (``jobs list --meta k=v``):
#: JSON's scalars. A key's value must equal it (numbers as numbers: 7 is 7.0).
META_FILTER_TYPES = (str, int, float, bool, type(None))


def meta_pairs(meta: Any) -> dict[str, Any]:
    """R54: a listing's metadata filter checked: a dict of non-empty string keys and
    scalar values; ``ValueError`` naming what is wrong."""
    if not isinstance(meta, Mapping) or not meta:
        raise ValueError(f"meta filters by key=value pairs (a non-empty dict), not {meta!r}")
    for key, value in meta.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"a meta filter's key is a non-empty string, not {key!r}")
        filter_text(f"meta {key!r}", key)
        if isinstance(value, str):
            filter_text(f"meta {key!r}", value)
        if not isinstance(value, META_FILTER_TYPES) or (
                isinstance(value, float) and not math.isfinite(value)) or (
                isinstance(value, int) and not -bounds.INT64_MAX - 1 <= value <= bounds.INT64_MAX):
            # An integer past 64 bits: SQLite cannot bind it (its driver's OverflowError).
            raise ValueError(f"meta filter {key}: a value is a string, a finite number (a whole "
                             f"one within 64 bits), true, false or null, not {value!r}"[:300])
    return dict(meta)


def listing_limit(limit: Any, what: str = "limit") -> int:
    """How many rows a listing returns: a whole number from 0 to 2**63 - 1, else a
    ``ValueError`` naming it (-1 listed every row on SQLite and was a store error on
    PostgreSQL; None the other way round)."""
    if not bounds.whole_within(limit, 0, bounds.INT64_MAX):
        raise ValueError(f"{what} must be a whole number from 0 to {bounds.INT64_MAX}, "
                         f"not {limit!r}"[:200])
    return limit


def sweep_settings(now: Any, result_ttl: Any, dead_letter_limit: Any) -> tuple[float, float, int]:
    """R32: a sweep's clock, age and count, checked alike on both stores (a
    ``dead_letter_limit`` of -1 kept every dead row on SQLite and was a store error on
    PostgreSQL). The age is any finite number of seconds: below 0 it sweeps rows that
    finished up to that far past the clock (the server's, on PostgreSQL)."""
    if not bounds.finite_number(result_ttl):
        raise ValueError(f"result_ttl must be a finite number of seconds, not {result_ttl!r}"[:200])
    return (bounds.now_or(now), float(result_ttl),
            listing_limit(dead_letter_limit, "dead_letter_limit"))


def time_span(what: str, span: Any) -> tuple[float | None, float | None] | None:
    """A listing's ``created`` or ``finished`` filter: ``(from, to)``, each a Unix time (a
    finite number) or None for an open end; else a ``ValueError`` naming it (a triple
    was "too many values to unpack", a datetime a TypeError, NaN matched nothing on
    SQLite and everything on PostgreSQL)."""
    if span is None:
        return None
    if not isinstance(span, (tuple, list)) or len(span) != 2 or not all(
            end is None or bounds.finite_number(end) for end in span):
        raise ValueError(f"the {what} filter must be (from, to), each a Unix time or None, "
                         f"not {span!r}"[:200])
    return (None if span[0] is None else float(span[0]),
            None if span[1] is None else float(span[1]))


def listed_after(after: Any) -> int:
    """A listing's keyset (``after``): a whole number, held within the ids a store can
    have (one past them lists as far as the ids go, in either direction), else a
    ``ValueError`` naming it."""
    if isinstance(after, bool) or not isinstance(after, int):
        raise ValueError(f"after must be a job id (a whole number), not {after!r}"[:200])
    return min(max(after, 0), bounds.INT64_MAX)


def filter_text(what: str, text: Any) -> None:
    """A listing's text filter is text a store can compare: no NUL (PostgreSQL's text
    holds none, so it matches nothing there) and valid Unicode; ``ValueError`` naming
    the filter (text that is not a ``str`` too: SQLite compared a number, PostgreSQL
    refused it as a store error)."""
    if text is not None and not isinstance(text, str):
        raise ValueError(f"the {what} filter must be text, not {text!r}"[:200])
    if isinstance(text, str) and ("\x00" in text or bounds.not_unicode(text)):
        raise ValueError(f"the {what} filter must be valid Unicode text without NUL, "
                         f"not {text!r}")


def more_filters(dialect: ListingDialect, status: str | None, name: str | None, *,
                 key: str | None = None, batch: int | None = None, group: str | None = None,
                 error: str | None = None, args: str | None = None,
                 created: tuple[float | None, float | None] | None = None,
                 finished: tuple[float | None, float | None] | None = None,
                 after: int | None = None, scan: int | None = None,
                 newest_first: bool = False, meta: Any = None) -> tuple[list[str], dict[str, Any]]:
    """R47: the conditions of a listing's key, batch and searched filters.

    ``key`` (with ``name``: a key is a name's, R3) and ``batch`` are read through
    their indexes. ``group``, ``error`` and ``args`` (text the last error or the
    payload contains, case-sensitive), ``created`` and ``finished`` (``(from, to)``,
    Unix seconds, either end open; finished: done or dead jobs) have no index: they
    are searched among the ``scan`` ids just below ``after`` (newest first; default
    ``SEARCH_ROWS``, at most ``SEARCH_MOST``), a range of the primary key, so a search
    reads at most ``scan`` rows however big the store; the next window starts at
    ``after - scan``. ``meta`` (R54: ``{key: value}``, each key's value equal to its
    value) is read through an index where the dialect has one, else searched so.
    ``ValueError`` for a filter that cannot be served so."""
    for what, text in (("name", name), ("key", key), ("group", group), ("error", error),
                       ("args", args)):
        filter_text(what, text)
    created, finished = time_span("created", created), time_span("finished", finished)
    mark = dialect.mark
    where: list[str] = []
    params: dict[str, Any] = {}
    if key is not None:
        if name is None:
            raise ValueError("a key is a name's (R3): filter by the name too")
        where.append(f"key = {mark('key')}")
        params["key"] = key
    if batch is not None:
        where.append(f"batch_id = {mark('batch')}")
        params["batch"] = bounds.row_id(batch, "a batch id")
    if finished is not None and any(b is not None for b in finished) \
            and status not in ("done", "dead"):
        raise ValueError("a finished time applies to done or dead jobs: filter by one")
    matches: list[str] = []
    if meta is not None:
        pairs = meta_pairs(meta)
        if dialect.meta_matches is not None:
            matches, found = dialect.meta_matches(pairs, mark)
            params.update(found)
    if not searched(group, error, args, created, finished, meta, dialect.meta_indexed):
        if scan is not None:
            raise ValueError("scan bounds a search: name a group, text, time range or "
                             "metadata")
        return where + matches, params
    if not newest_first:
        raise ValueError("a search reads newest first")
    scan = SEARCH_ROWS if scan is None else scan
    if not bounds.whole_within(scan, 1, SEARCH_MOST):
        raise ValueError(f"scan must be a number from 1 to {SEARCH_MOST}, not {scan!r}")
    params["scan"] = scan
    top = mark("after") if after is not None else dialect.past_newest
    where.append(f"id >= {top} - {mark('scan')}")
    for column, value in (("grp", group), ("last_error", error)):
        if value is not None:
            where.append(dialect.contains(column, mark(column)))
            params[column] = value
    if args is not None:
        where.append(dialect.payload_contains(mark("args")))
        params["args"] = args
    for column, span in (("created_at", created), ("finished_at", finished)):
        low, high = span or (None, None)
        if low is not None:
            where.append(f"{column} >= {mark(column + '_from')}")
            params[column + "_from"] = float(low)
        if high is not None:
            where.append(f"{column} < {mark(column + '_to')}")
            params[column + "_to"] = float(high)
    return where + matches, params


def job_dict(columns, row, *, raw_result: bool = False) -> dict[str, Any]:
    """A row as ``get`` returns it: a JSON payload as text, binary payloads and
    results as a size (unless ``raw_result``). R44: a column that holds what it
    should not is None, and named in ``malformed`` with what it holds
    (``row_codec.flagged``), so no reader fails on the row."""
    job = row_codec.flagged(dict(zip(columns, row)))
    if isinstance(job.get("meta"), str):
        job["meta"] = serialize.loads(job["meta"])  # R54: sound JSON object text (the codec checked)
    if raw_result:
        return job
    payload = job.get("payload")
    if isinstance(payload, str):
        job["payload"] = row_codec.readable(payload)
    elif isinstance(payload, (bytes, memoryview)) and job.get("serializer") == "json":
        job["payload"] = bytes(payload).decode("utf-8", "replace")
    elif isinstance(payload, (bytes, memoryview)):
        job["payload"] = f"<{len(payload)} bytes, {job.get('serializer')}>"
    result = job.get("result")
    if isinstance(result, str):
        job["result"] = row_codec.readable(result)
    elif isinstance(result, (bytes, memoryview)) and job.get("serializer") == "json":
        # A JSON job's result as text on both stores (PostgreSQL keeps every result as
        # bytes; it read as "<7 bytes>" there and as its JSON on SQLite).
        job["result"] = row_codec.readable(bytes(result).decode("utf-8", "replace"))
    elif isinstance(result, (bytes, memoryview)):
        job["result"] = f"<{len(result)} bytes>"
    return job


def _json_cell(text: Any, kind: type) -> Any:
    """A JSON column of a ``pools`` row (R44): the value it holds when it is text that
    reads as a ``kind``, else an empty ``kind``, as if nothing were written there."""
    if isinstance(text, (str, bytes)):
        try:
            value = serialize.loads(text)
        except (ValueError, RecursionError):
            return kind()
        if isinstance(value, kind):
            return value
    return kind()


def _slot_beat(slot: dict[str, Any]) -> dict[str, Any]:
    """A slot of a heartbeat, its job's id and attempt read as none where they are no
    whole numbers (readers look them up among the running rows)."""
    for key in ("job_id", "attempt"):
        if key in slot and not bounds.whole_within(slot[key], 0, 1 << 63):
            slot[key] = None
    return slot


def pool_dict(columns, row, now: float, dead_after: float) -> dict[str, Any]:
    """A ``pools`` row as ``Store.pools`` returns it: counters and slots decoded, and
    ``dead`` saying why its supervisor is gone at ``now`` (the store's clock), or None.

    Every pool reads every row at each heartbeat (R24b), so no row may fail the read
    (R44): counters that are not a JSON object read as none, slots that are not a list
    of objects with a whole slot number as none, and a heartbeat that is no time as
    no heartbeat to judge by (``liveness.pool_death``); any other column read as none
    (a time, a pid or a count that is no number; a name or list that is no text)."""
    pool = dict(zip(columns, row))
    for column in ("started_at", "heartbeat_at"):
        pool[column] = float(pool[column]) if bounds.finite_number(pool[column]) else None
    for column in ("pid", "procs"):
        pool[column] = pool[column] if bounds.whole_within(pool[column], 0, 1 << 62) else None
    for column in ("host", "queues", "core", "names"):
        if column in pool and not isinstance(pool[column], str):
            pool[column] = ""
    pool["counters"] = _json_cell(pool["counters"], dict)
    pool["slots"] = [_slot_beat(slot) for slot in _json_cell(pool["slots"], list)
                     if isinstance(slot, dict) and bounds.whole_within(slot.get("slot"), 0, 1 << 31)]
    pool["dead"] = liveness.pool_death(pool, now, dead_after)
    return pool


def attempt_params(lease: Lease, outcome: Outcome, owner: str, now: float,
                   log_as: str | None = None) -> dict[str, Any]:
    """R19a: the attempt log's row for one settled attempt, as every store's
    INSERT_ATTEMPT binds it (``log_as`` overrides the outcome's own word)."""
    return {"id": lease.job_id, "attempt": lease.attempt, "owner": owner, "pid": outcome.pid,
            "started_at": lease.started_at, "now": now,
            "outcome": log_as or KIND_NAMES[outcome.kind], "error": outcome.error,
            "exit_status": outcome.exit_status, "peak_rss": outcome.peak_rss,
            "cpu_s": outcome.cpu_s, "strays": outcome.strays}


#: R51: what ``run_now`` answers for an id: it was waiting and is due now, or it was
#: due already; any other answer is the status that refused it, or ``NO_SUCH_JOB``.
MADE_DUE, DUE_ALREADY = "due now", "due already"
#: What an operator's call on many ids (``cancel_many``, ``dead.retry``, ``run_now``)
#: answers for one that names no job.
NO_SUCH_JOB = "no such job"


def job_ids(ids: Any, what: str) -> list[int]:
    """The job ids an operator's call names, checked (whole numbers: not ``True``, not
    text), in the order given and without repeats. One outside the ids a store has (0,
    past 64 bits) names no job: the call answers it so (bound as ``bounds.row_id``
    binds it), as ``get`` does."""
    if not _listed(ids):
        raise EnqueueError(f"{what} takes a list of job ids, not {ids!r}")
    checked: dict[int, None] = {}
    for job_id in ids:
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise EnqueueError(f"{what}: a job id is a whole number, not {job_id!r}"[:200])
        checked[job_id] = None
    return list(checked)


def age(value: Any, what: str) -> float:
    """How long ago, in seconds (a number or a ``timedelta``, not negative: a purge of
    rows "older than -1 s" would take the ones that ended a moment ago too); one past
    any clock is simply long ago."""
    checked = seconds(value, what, allow_none=False, bounded=False)
    assert checked is not None
    return checked


def run_now_answers(ids: list[int], made_due: set[int], statuses: dict[int, str]) -> dict[int, str]:
    """R51: each id's answer, from the ids the statement moved and the statuses of the
    rest (read in the same transaction)."""
    answers = {}
    for job_id in ids:
        status = statuses.get(job_id)
        answers[job_id] = (MADE_DUE if job_id in made_due else NO_SUCH_JOB if status is None
                           else DUE_ALREADY if status == "ready" else status)
    return answers
