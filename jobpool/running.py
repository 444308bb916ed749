"""What a job can ask about its own attempt while it runs: which job it is (R48),
report progress (R22), add to its own batch (R34), save and resume its state (R37).

Light on purpose: ``import jobpool`` brings it in for ``jobpool.progress``, and a
producer that only enqueues should not load the child's machinery or the cores.
The child sets ``current`` around each job; outside a pool's child (a plain call of
the job function, a test) there is no attempt and reports go nowhere.

A request the job waits for (an add, a state) goes over the child's pipe and
its answer comes back on it; SIGALRM (the soft timeout) is held off for that
round trip, so the answer is never left unread on the pipe. Make them from the
job's own thread.
"""
from __future__ import annotations

from contextvars import ContextVar

import json
import signal
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from jobpool import protocol, serialize
from jobpool.bounds import INT64_MAX, MAX_RESULTS_PAGE, whole_within
from jobpool.errors import EnqueueError, Interrupted, LeaseLostError, StoreError

#: R22: a job reporting progress in a tight loop sends at most one report per interval.
PROGRESS_INTERVAL = 0.1
#: R37: a job saving its state in a tight loop writes it at most once per interval
#: (``force=True`` writes at once).
STATE_INTERVAL = 1.0
#: R37: what a saved state may weigh, as JSON text.
MAX_STATE_BYTES = 64 * 1024
#: A saved state's JSON: compact, and ASCII (what the states of earlier releases were).
_state_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
#: A running member's adds go in requests of at most this many jobs, so none keeps
#: its supervisor from its other work for long (R34).
ADDS_PER_REQUEST = 500


class Attempt:
    """The attempt running in this child: where its reports and requests go."""

    __slots__ = ("conn", "job_id", "attempt", "name", "queue", "last_report", "adds", "seq",
                 "interrupted", "told", "last_state", "batch", "meta")

    def __init__(self, conn: Any, job_id: int, attempt: int, name: str | None = None,
                 queue: str | None = None, batch: int | None = None,
                 meta: str | None = None) -> None:
        self.conn = conn            # the child's end of its pipe
        self.job_id = job_id
        self.attempt = attempt
        self.name = name            # the job's registered name (R48: log context)
        self.queue = queue          # the queue it was claimed from
        self.batch = batch          # its batch's id (R48), given with the job (R58)
        self.meta = meta            # its metadata as JSON text (R54), given with the job
        self.last_report = 0.0      # monotonic time of the last report sent
        self.adds = 0               # jobs this attempt added to its batch so far (R34)
        self.seq = 0                # requests made so far; a reply names the one it answers
        self.interrupted: str | None = None   # R37: why the pool asked it to stop
        self.told = False                     # Interrupted raised once already
        self.last_state = -STATE_INTERVAL     # monotonic time of the last state written

    def request(self, tag: int, *fields: Any) -> Any:
        """Send one request and wait for its answer; the answer's error is raised."""
        self.seq += 1
        seq = self.seq
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            self.conn.send_bytes(protocol.request_message(tag, self.job_id, self.attempt, seq,
                                                          *fields))
            while True:
                message = protocol.loads(self.conn.recv_bytes())
                if self._is_interrupt(message):
                    continue
                if message[0] == protocol.REPLY and message[3] == seq:
                    break
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        _tag, _job_id, _attempt, _seq, answer, error_kind, error = message
        if error_kind == protocol.REFUSED:
            raise EnqueueError(error)
        if error_kind == protocol.LEASE_LOST:
            raise LeaseLostError(error)
        if error_kind is not None:
            raise StoreError(error)
        return answer

    def check_interrupt(self) -> None:
        """Read, without waiting, whether the pool asked this attempt to stop (SIGALRM
        held off, so a message is never left half read)."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            while self.conn.poll():
                self._is_interrupt(protocol.loads(self.conn.recv_bytes()))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _is_interrupt(self, message: tuple) -> bool:
        if message[0] != protocol.INTERRUPT:
            return False
        if (message[1], message[2]) == (self.job_id, self.attempt):
            self.interrupted = message[3]
        return True


#: Set by the child while a job runs.
current: Attempt | None = None
#: ``jobpool.testing.drain``'s attempt, for the thread (or task) running it: drains in
#: several threads of one process each see their own job (R48). With one global, a job
#: saw another thread's job as its own, and its progress and state went to that one.
drained: ContextVar[Attempt | None] = ContextVar("jobpool_drained", default=None)


def attempt_now() -> Attempt | None:
    """The attempt this code runs in: a drain's in this thread or task, else the
    child's (one job at a time in a process: its threads see it too)."""
    attempt = drained.get()
    return current if attempt is None else attempt


class CurrentJob(NamedTuple):
    """The job running now, as ``jobpool.current_job()`` tells it (R48)."""

    id: int
    name: str
    attempt: int
    queue: str
    #: The id of the batch it is a member of (R34), or None.
    batch: int | None
    #: Its metadata (R54): a dict of its own, empty when it was enqueued without any.
    meta: dict[str, Any]


def current_job() -> CurrentJob | None:
    """The job this code runs in (its id, name, attempt, queue, batch and metadata),
    or None outside a job run by a pool or by ``jobpool.testing.drain`` (R48, R54).

    All of it came with the job (R58): no round trip to the pool. Each call returns
    a fresh copy of the metadata: a job that changes it changes its own copy."""
    attempt = attempt_now()
    if attempt is None:
        return None
    return CurrentJob(attempt.job_id, attempt.name or "", attempt.attempt, attempt.queue or "",
                      attempt.batch, meta_of(attempt.meta))


def meta_of(text: str | None) -> dict[str, Any]:
    """R44/R54: the stored metadata as a dict; text that is not a JSON object (a row
    written by hand: ``jobs show`` flags it) reads as none, never a crash in the job."""
    if text is None:
        return {}
    try:
        meta = serialize.loads(text)
    except (ValueError, RecursionError):
        return {}
    return meta if isinstance(meta, dict) else {}


def progress(percent: float, stage: str | None = None) -> None:
    """Report how far the running job is (0-100) and what it is doing (R22).

    Sent to the supervisor, which stores it throttled; outside a pool's child
    (a plain call of the job function) it does nothing.
    """
    if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 <= percent <= 100:
        raise ValueError(f"progress must be a number from 0 to 100, not {percent!r}")
    if stage is not None and not isinstance(stage, str):
        raise ValueError(f"progress stage must be a string, not {type(stage).__name__}")
    attempt = attempt_now()
    if attempt is None:
        return
    now = time.monotonic()
    if now - attempt.last_report < PROGRESS_INTERVAL and percent < 100:
        return
    attempt.last_report = now
    attempt.conn.send_bytes(protocol.progress_message(attempt.job_id, attempt.attempt,
                                                      float(percent), stage))


# -- checkpoints (R37) ----------------------------------------------------------------------

def save_state(state: Any, force: bool = False) -> None:
    """Store a small JSON state for this attempt: the next attempt of the job (after a
    stop, a crash, a timeout) starts from it (``resume_state()``).

    Written fenced like a settle, at most once a second unless ``force``. This is
    also the job's save point: when its pool is stopping (or the job is cancelled)
    the state is written now and ``jobpool.Interrupted`` is raised, a
    ``BaseException``; let it propagate. A job stopped so is back in line without
    spending an attempt (a cancelled one is dead, "cancelled"). Outside a pool's
    child it does nothing.
    """
    try:
        text = serialize.to_json(state, _state_encoder.encode)
    except serialize.NotJSON as exc:
        raise ValueError(f"save_state: the state must be JSON: {exc.reason}") from None
    size = len(text.encode())
    if size > MAX_STATE_BYTES:
        raise ValueError(f"save_state: the state is {size} bytes as JSON, over the "
                         f"{MAX_STATE_BYTES}-byte limit")
    attempt = attempt_now()
    if attempt is None:
        return
    attempt.check_interrupt()
    now = time.monotonic()
    # Written now when forced, when the throttle allows, or at the first save point
    # after an interrupt (the state the next attempt goes on from).
    first_stop = attempt.interrupted is not None and not attempt.told
    if force or first_stop or now - attempt.last_state >= STATE_INTERVAL:
        attempt.request(protocol.SAVE_STATE, text)
        attempt.last_state = now
    if attempt.interrupted is not None:
        attempt.told = True
        raise Interrupted(attempt.interrupted)


def resume_state() -> Any:
    """The state this job last saved in an earlier attempt (or this one), or None."""
    attempt = attempt_now()
    if attempt is None:
        return None
    text = attempt.request(protocol.READ_STATE)
    return None if text is None else serialize.loads(text)


# -- batches (R34) --------------------------------------------------------------------------

class MemberBatch:
    """The batch of the running job, from inside it (``jobpool.current_batch()``).

    Its adds go over the child's pipe and are committed by the supervisor before
    the job's own settle, so the batch cannot finish while they are on the way.
    Each add is keyed by the job's id and its position among this attempt's adds:
    a retried job that adds the same jobs again gets back the ones its earlier
    attempt made (their handles say ``duplicate``), never a second copy."""

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt

    def add(self, signature: Any, *, meta: dict[str, Any] | None = None) -> Any:
        """One more member (``job.s(...)``); its ``Handle``. It carries this job's
        metadata, or ``meta`` instead when given (R54)."""
        from jobpool.handles import Signature
        if not isinstance(signature, Signature):
            raise EnqueueError(f"current_batch().add takes a signature (job.s(...)), "
                               f"not {type(signature).__name__}")
        from jobpool.store import rows
        signature.refuse_previous("current_batch().add")
        # On a clock of 0: the store puts the rows on its own (rows.NewJob.at).
        row = rows.new_job(signature.name, signature.args, signature.kwargs, None, None, None,
                           None, None, None, None, 0.0, None, meta=meta)
        return self._send([row])[0]

    def add_many(self, name: str, items: Any, *, meta: dict[str, Any] | None = None
                 ) -> list[Any]:
        """Many members of one job (tuples of arguments or signatures); their handles.
        They carry this job's metadata, or ``meta`` instead when given (R54)."""
        from jobpool.store import rows
        items = rows.item_list(items)
        options = rows.enqueue_options(name, None, None, None, None, None, None, 0.0)
        new_rows = rows.new_jobs(options, items, meta=meta)
        handles: list[Any] = []
        for start in range(0, len(new_rows), ADDS_PER_REQUEST):
            handles += self._send(new_rows[start:start + ADDS_PER_REQUEST])
        return handles

    def _send(self, new_rows: list) -> list[Any]:
        from jobpool.handles import Handle
        attempt = self._attempt
        if attempt_now() is not attempt:
            raise RuntimeError("a job's current_batch() is used after the job returned")
        answers = attempt.request(protocol.BATCH_ADD, attempt.adds, tuple(map(tuple, new_rows)))
        attempt.adds += len(new_rows)
        return [Handle(job_id, duplicate=duplicate) for job_id, duplicate in answers]


def current_batch() -> MemberBatch:
    """The batch of the job running now, to add members to it (R34).

    Only inside a job that a pool (or ``jobpool.testing.drain``) runs; an add from a
    job that is not a batch member raises ``EnqueueError``."""
    attempt = attempt_now()
    if attempt is None:
        raise RuntimeError("current_batch() is called outside a job run by a pool: "
                           "use store.batch() and Batch.add to add from elsewhere")
    return MemberBatch(attempt)


def batch_results(batch: Any = None, *, page: int = 100,
                  allow_pickle: bool = False) -> Iterator[tuple[int, Any]]:
    """R60: ``(id, result)`` of each member of a batch that stored a result, in id
    order, read from inside a job: a callback passes the ``batch=`` it was given
    (or a batch id); a member, nothing, for its own batch. Read ``page`` members at a
    time through the pool as the iteration goes, so a batch of any size costs a
    bounded message each; results are decoded as ``Handle.result`` would (R39).
    From a producer, ``Batch.results()`` reads the same."""
    from jobpool.handles import member_results
    attempt = attempt_now()
    if attempt is None:
        raise RuntimeError("batch_results() is called outside a job run by a pool: "
                           "use store.batch(...) or Batch(store, id) and its results()")
    if isinstance(batch, Mapping):
        batch = batch.get("id")
    elif batch is None:
        batch = attempt.batch
        if batch is None:
            raise EnqueueError(f"job {attempt.job_id} is in no batch: pass the batch= a "
                               f"callback receives, or a batch id")
    if not whole_within(batch, 1, INT64_MAX):
        raise ValueError(f"batch_results takes a callback's batch= or a batch id, "
                         f"not {batch!r}")
    if not whole_within(page, 1, MAX_RESULTS_PAGE):
        raise ValueError(f"page must be an integer from 1 to {MAX_RESULTS_PAGE}, not {page!r}")

    def page_after(after: int) -> Any:
        if attempt_now() is not attempt:
            raise RuntimeError("a job's batch_results() is iterated after the job returned")
        return attempt.request(protocol.BATCH_RESULTS, batch, after, page)
    return member_results(page_after, allow_pickle)

