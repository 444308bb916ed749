"""What runs inside a forked child: receive a job, run it, report its outcome.

Children never open the store (DESIGN.md section 1): everything they learn comes
over their pipe and everything they decide goes back over it, so the store stays
single-writer per host and nothing store-related crosses a fork.
"""
from __future__ import annotations

import _signal
import logging
import os
import resource
import signal
import sys
import traceback
from typing import Any, Callable

from jobpool import (channel, coroutines, extensions, jobs, lifecycle, log_context, procinfo,
                     proctree, protocol, running, terminal, tracing)
from jobpool._core_py import JobEnd as _LOOK  # the flags of ``core.JobEnd.look`` (both twins')
from jobpool.coroutines import PLAIN_RESULTS as _PLAIN_RESULTS, is_awaitable as _awaitable
from jobpool.errors import Defer, Fatal, Interrupted, Reschedule, Retry, SoftTimeout
from jobpool.forked import leave
from jobpool.serialize import MAX_PAYLOAD_BYTES, SerializerRefused, decode_payload, decoder_for, encode_result


log = logging.getLogger(__name__)

#: How many forks made this process, counted in each copy a fork makes (an at-fork
#: hook): code that ran a job's function, or a hook's, tells by it whether it is still
#: the same process or a copy the job's code forked (R40), with no system call. Every
#: fork of Python's runs the hook (``os.fork``, ``multiprocessing``'s, ``os.forkpty``).
_forks_into = 0


def _count_fork() -> None:
    global _forks_into
    _forks_into += 1


os.register_at_fork(after_in_child=_count_fork)


def _describe(exc: BaseException) -> str:
    """One line for ``last_error``, then the traceback for the attempt log.

    Describing an exception must never fail: a job's exception whose ``__str__``
    (or ``__repr__``) raises would otherwise kill the child, and the attempt would
    be recorded as a crash without its type. Such an exception falls back to its
    type and ``repr``, then its type alone."""
    name = type(exc).__name__
    try:
        text = str(exc)
        head = f"{name}: {text}" if text else name
    except Exception:  # noqa: BLE001 - a broken __str__ is the job's bug, not ours
        try:
            head = f"{name} (str() failed): {object.__repr__(exc)}"
        except Exception:  # noqa: BLE001
            head = name
    try:
        trace = "".join(traceback.format_exception(exc)).rstrip()
    except Exception:  # noqa: BLE001 - format_exception calls __str__ too
        trace = "".join(traceback.format_tb(exc.__traceback__)).rstrip()
    return head + "\n" + trace


def run_job(job_id: int, attempt: int, name: str, payload: bytes, serializer: str,
            retire: Callable[[int], bool], startup_error: str | None, frames: bool,
            signals: "SignalState", end: Any) -> tuple[bytes, bool]:
    """Run one job and classify how it ended; never raises. Returns the outcome
    message and whether this child exits after sending it.

    ``retire(flags)`` is asked after the job, with what ``end.look()`` found: True means
    this child exits after replying.
    ``startup_error``: an ``on_child_start`` hook of this child failed; the job does
    not run in it (its error is the attempt's), and the child is replaced.
    ``frames``: a plain success goes out as ``protocol.SUCCESS``'s fixed frame (R68).
    ``signals``, ``end``: the child's signal state and its look after each job
    (``core.JobEnd``), which put back what the job left (R20, R40, R43)."""
    cpu_before = end.clock()
    error: str | None
    if startup_error is not None:
        kind, error, delay, result = lifecycle.ERROR, startup_error, None, None
    else:
        kind, error, delay, result = run_attempt(job_id, attempt, name, payload, serializer)
    # R20: the timer and the signal mask are put back by the look, the handlers here
    # when it found one changed; R40: a child of this child is the attempt's.
    flags = end.look()
    if flags & _LOOK.HANDLERS:
        signals.restore_handlers()
    strays = 0
    cpu_after = end.cpu
    if flags & _LOOK.STRAYS:
        # R40: whatever the attempt started and left running ends with it, success
        # included; what it reaps counts in the attempt's CPU.
        strays = proctree.kill_strays(spare=proctree.python_helpers())
        if strays:
            log.warning("job %s (%s) left %d process(es) running; killed them", job_id, name,
                        strays)
        cpu_after = end.clock()
    cpu_s = cpu_after - cpu_before
    retiring = retire(flags) or startup_error is not None
    peak_rss = end.peak_rss
    if frames and kind == lifecycle.DONE and error is None and delay is None and result is None \
            and not strays:
        return protocol.success_frame(job_id, attempt, peak_rss, cpu_s, retiring), retiring
    return protocol.outcome_message(job_id, attempt, kind, error, delay, result,
                                    peak_rss, cpu_s, retiring, strays), retiring


class SignalState:
    """What a job may leave of the child's signal state that would reach the next
    jobs of the child, put back after each attempt (R20's amendment): a timer it
    armed itself and left running (``signal.alarm()``, ``setitimer(ITIMER_REAL)``),
    signals it blocked, and the handlers it set for the signals a later job may meet.
    The timer's SIGALRM came during the next job, or between two: by default it ends
    the process, and an innocent job was settled as the crash (or failed on the job's
    own handler). A SIGALRM left blocked kept the next jobs' soft timeouts from firing
    (each ran to its hard timeout); SIGPIPE set back to its default killed a later job
    that wrote to a closed pipe (Python ignores it, so that job would see an error).
    The timer and the mask are put back after every job by ``core.JobEnd`` (made from
    ``mask`` and ``handlers``), which also says whether a handler changed: then
    ``restore_handlers`` sets them back."""

    #: Handlers put back: what a later job meets (a pipe, a child's end, a stop, a
    #: hang-up, a user signal); SIGALRM's is the soft timeout's to set (R20).
    HANDLED = (signal.SIGPIPE, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
               signal.SIGUSR1, signal.SIGUSR2)

    def __init__(self) -> None:
        #: The signals the child blocks between jobs (read, not changed).
        self.mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        self.handlers: tuple = ()
        self.keep_handlers()

    def keep_handlers(self) -> None:
        """Take the handlers as they are now as those a job finds (asked again after
        the ``on_child_start`` hooks, which may set their own)."""
        self.handlers = tuple((int(signum), _signal.getsignal(signum))
                              for signum in self.HANDLED)

    def restore_handlers(self) -> None:
        """The handlers a job changed, set back (``core.JobEnd`` found one; the timer and
        the mask it puts back itself, after every job)."""
        # The C module's own call: ``signal.getsignal`` makes an enum of each answer.
        getsignal = _signal.getsignal
        for signum, handler in self.handlers:
            if getsignal(signum) != handler and handler is not None:
                signal.signal(signum, handler)


def run_attempt(job_id: int, attempt: int, name: str, payload: bytes, serializer: str, *,
                soft_timeout: bool = True, job: jobs.Job | None = None
                ) -> tuple[int, str | None, float | None, Any]:
    """Decode one attempt's payload and run its body inside the middleware: ``(kind,
    error, delay, result)``; never raises. ``soft_timeout=False`` arms no SIGALRM:
    ``jobpool.testing.drain`` runs jobs in its caller's process, whose handler and
    timer are its own; it also passes ``job``, the registered job wrapped to notice
    a Ctrl-C (default: the job registered under ``name``)."""
    job = job or jobs.lookup(name)
    if job is None:
        return lifecycle.FATAL, f"job {name!r} is not registered in this worker", None, None
    try:
        # R39: the registered job, not the row, decides how far decoding may go.
        args, kwargs = decode_payload(payload, decoder_for(serializer, job.serializer))
    except SerializerRefused as exc:
        return lifecycle.FATAL, str(exc), None, None
    except Exception as exc:  # noqa: BLE001 - any decode failure is the payload's fault
        return lifecycle.FATAL, f"payload cannot be decoded: {type(exc).__name__}: {exc}", None, None
    # R48: what the job logs, through the root's and jobpool's handlers, names it.
    with log_context.installed():
        given = running.attempt_now()
        meta = given.meta if given else None
        if tracing.for_job(meta):
            # R57: inside the job's span, with its producer's trace context current.
            return tracing.run_traced(
                job.name, job_id, attempt, given.queue if given else None, meta,
                lambda: _with_middleware(job, job_id, attempt, args, kwargs, soft_timeout))[:4]
        return _with_middleware(job, job_id, attempt, args, kwargs, soft_timeout)[:4]


def _with_middleware(job: jobs.Job, job_id: int, attempt: int, args: tuple, kwargs: dict,
                     soft_timeout: bool = True):
    """The body between the middleware's ``before`` and ``after`` hooks: ``_call``'s
    ``(kind, error, delay, result, value, raised)``; what a hook raises is the
    attempt's error (an ordinary retry), never the child's death."""
    stack = extensions.middleware()
    if not stack:
        return _call(job, args, kwargs, soft_timeout)
    given = running.attempt_now()
    info = extensions.AttemptInfo(job_id, job.name, attempt, args, kwargs,
                                  running.meta_of(given.meta if given is not None else None))
    for middleware in stack:
        try:
            middleware.before(info)
        except BaseException as exc:  # noqa: BLE001 - the user's hook: an error like any
            return lifecycle.ERROR, _hook_error(middleware, "before", exc), None, None, None, exc
    kind, error, delay, result, value, raised = _call(job, info.args, info.kwargs, soft_timeout)
    outcome = extensions.AttemptResult(lifecycle.KIND_NAMES[kind], error, raised, value)
    for middleware in reversed(stack):
        try:
            middleware.after(info, outcome)
        except BaseException as exc:  # noqa: BLE001
            return lifecycle.ERROR, _hook_error(middleware, "after", exc), None, None, None, exc
    return kind, error, delay, result, value, raised


def _hook_error(hook: Any, method: str, exc: BaseException) -> str:
    head, _, trace = _describe(exc).partition("\n")
    return f"middleware {type(hook).__name__}.{method} failed: {head}\n{trace}"


def run_child_start_hooks() -> str | None:
    """Run the ``on_child_start`` hooks; the first failure, described, or None."""
    for hook in extensions.child_start_hooks():
        try:
            hook()
        except BaseException as exc:  # noqa: BLE001 - reported as each attempt's error
            head, _, trace = _describe(exc).partition("\n")
            name = getattr(hook, "__qualname__", repr(hook))
            return f"on_child_start hook {name} failed: {head}\n{trace}"
    return None


def _soft_timeout(signum, frame) -> None:
    raise SoftTimeout.after(_soft_limit)


_soft_limit = 0.0


def _call(job: jobs.Job, args: tuple, kwargs: dict, soft_timeout: bool = True):
    global _soft_limit
    limit = job.soft_timeout if soft_timeout else None
    if job.is_coroutine:
        # Its loop's timer cancels it instead: a SIGALRM would raise wherever the
        # loop happens to be, mostly in its own machinery, not in the job.
        return _outcome_of(job, args, kwargs, limit)
    armed = bool(limit)
    if limit:
        # R20: SIGALRM raises SoftTimeout in the job's own frame so it can clean up;
        # the supervisor's hard timeout still follows.
        _soft_limit = limit
        signal.signal(signal.SIGALRM, _soft_timeout)
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return _outcome_of(job, args, kwargs)
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _outcome_of(job: jobs.Job, args: tuple, kwargs: dict, soft_limit: float | None = None):
    """``(kind, error, delay, stored result, returned value, raised exception)``.

    A coroutine job's coroutine is run to completion here (``coroutines.run``,
    R20), inside the same classification, so it ends in every way a plain call
    does. ``soft_limit`` is a coroutine job's soft timeout.

    Arguments that do not bind to the function (a row written by a name its
    writer had not registered, or by an older release) are dead at once (FATAL,
    R1): every attempt would fail alike. Bound first, apart from the call, so a
    ``TypeError`` raised inside the body stays an ordinary error, retried."""
    problem = job.arguments.problem(args, kwargs)
    if problem is not None:
        return lifecycle.FATAL, job.arguments.refusal(job.name, problem), None, None, None, None
    forks = _forks_into
    try:
        value = job.fn(*args, **kwargs)
        if job.is_coroutine:
            value = coroutines.run(value, soft_limit)
    except BaseException as exc:  # noqa: BLE001 - classified below, in the job's own process
        if _forks_into != forks:
            end_forked_copy(exc)
        return _raised(job, exc)
    if _forks_into != forks:
        end_forked_copy(None)
    # An awaitable that nobody awaited: the body it stands for never ran, so the
    # attempt is not done. Dead at once (FATAL): every attempt would return one.
    # Only the type is looked at, and not for None or JSON's types: a plain job's
    # run stays as cheap as it was.
    if value is not None and type(value) not in _PLAIN_RESULTS and _awaitable(value):
        return lifecycle.FATAL, coroutines.unawaited_error(job.name, value), None, None, value, None
    if not job.store_result:
        return lifecycle.DONE, None, None, None, value, None
    # The body has done its work: a result that cannot be stored is dead at once
    # (FATAL), never a retry that would run the body again. Checked here, before
    # anything crosses the pipe (R41: results are bounded like payloads).
    try:
        result = encode_result(value, job.serializer)
    except Exception as exc:  # noqa: BLE001 - whatever the encoder raises
        return lifecycle.FATAL, f"result cannot be stored: {_safe_text(exc)}", None, None, value, None
    size = len(result.encode() if isinstance(result, str) else result)
    if size > MAX_PAYLOAD_BYTES:
        return lifecycle.FATAL, (f"result cannot be stored: it is {size} bytes, over the "
                            f"{MAX_PAYLOAD_BYTES}-byte limit"), None, None, value, None
    return lifecycle.DONE, None, None, result, value, None


def _raised(job: jobs.Job, exc: BaseException):
    """``_outcome_of``'s answer for an attempt whose body raised ``exc``."""
    if isinstance(exc, Retry):
        return lifecycle.RETRY, f"Retry: {exc.reason}", exc.after, None, None, exc
    if isinstance(exc, Fatal):
        return lifecycle.FATAL, f"Fatal: {exc.reason}", None, None, None, exc
    if isinstance(exc, Defer):
        return lifecycle.DEFER, f"Defer: {exc.reason}", exc.delay, None, None, exc
    if isinstance(exc, Reschedule):
        return lifecycle.RESCHEDULE, f"Reschedule: {exc.reason}", exc.delay, None, None, exc
    if isinstance(exc, Interrupted):
        # R37: stopped at a save point; the pool decides what that means (it asked).
        return lifecycle.INTERRUPTED, f"interrupted at a save point ({exc.reason})", None, None, \
            None, exc
    # Any other, SystemExit and KeyboardInterrupt included, is a failure too.
    kind = lifecycle.FATAL if job.fatal and isinstance(exc, job.fatal) else lifecycle.ERROR
    return kind, _describe(exc), None, None, None, exc


def end_forked_copy(raised: BaseException | None) -> None:
    """End a process the job forked that came back out of the job's function (R40):
    it returned, or raised (``sys.exit()`` included), in the copy the fork made of
    this child, so it is on its way back into the child's loop, where it would report
    an outcome for the attempt its parent is still running and read the next job off
    the same pipe. It ends here instead, as a Python program whose main code ended
    so would (0, a ``SystemExit``'s status, or 1 after the traceback on stderr), its
    standard streams flushed and without the exit handlers it inherited
    (``forked.leave``), as ``multiprocessing``'s forked processes end."""
    code = 0
    try:
        if isinstance(raised, SystemExit):
            status = raised.code
            if status is None or isinstance(status, int):
                code = int(status or 0)
            else:
                print(status, file=sys.stderr)
                code = 1
        elif raised is not None:
            traceback.print_exception(raised)
            code = 1
    except BaseException:  # noqa: BLE001 - a closed stream, a broken __str__: still end
        code = code or 1
    finally:
        leave(code & 0xFF)


def _safe_text(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # noqa: BLE001 - see _describe
        return type(exc).__name__


class ProcessSettings:
    """What a job may leave of its child's process settings, put back after each attempt
    (R20's amendment): its resource limits, its file mode mask and its working
    directory. A job that caps itself (``setrlimit`` of its CPU seconds, its address
    space, its file size) and returns left the cap on every later job of the child: CPU
    seconds count over the child's whole life, so the next job was killed by SIGXCPU
    for time it never used, and a lowered address space or descriptor limit failed a
    later job that needed more. A job's ``os.umask`` made every later job's files with
    its mode; its ``os.chdir`` (into a checkout it then removed, say) moved every later
    job's relative paths. A limit the job lowered for good (its hard limit) cannot be
    raised again: the child retires. ``core.JobEnd`` puts the mask and the directory
    back after every job and looks at the limits (``limits``, a ``core.Limits``);
    ``put_back_limits`` sets back those it found changed."""

    #: What a later job meets: its CPU seconds, memory, file size, descriptors and
    #: processes (a stack, core or locked-memory limit a job sets reaches nobody else's
    #: work; each one looked at is a system call after every job).
    RESOURCES = tuple(getattr(resource, name) for name in (
        "RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC")
        if hasattr(resource, name))

    def __init__(self) -> None:
        """Take the settings as they are now as those a job finds: made after the
        ``on_child_start`` hooks, which may set their own."""
        from jobpool import core  # see child_main
        self.mask = os.umask(0)
        os.umask(self.mask)
        try:
            self.cwd: str | None = os.getcwd()
        except OSError:
            self.cwd = None  # started in a directory since removed: nothing to go back to
        self.values = {r: resource.getrlimit(r) for r in self.RESOURCES}
        #: What ``core.JobEnd`` compares the limits with after each job.
        self.limits = core.Limits(self.RESOURCES)

    def put_back_limits(self) -> bool:
        """Set back the limits the job changed; False when one cannot be raised again
        (recycle the child)."""
        for r in self.limits.changed():
            try:
                resource.setrlimit(r, self.values[r])
            except (ValueError, OSError):
                return False
        return True


class StandardStreams:
    """A child's fds 0-2 as it was forked with them, put back after every job.

    A job that closes or redirects its standard streams (``os.close(1)``, a
    daemonising library) would otherwise leave them broken for every later job in
    this child, and the fd numbers free for the next ``open`` to take. Copies are
    kept on non-inheritable fds, so the job's own subprocesses never see them."""

    FDS = (0, 1, 2)
    _NAMES = ("stdin", "stdout", "stderr")

    def __init__(self) -> None:
        self._saved: dict[int, tuple[int, tuple[int, int]]] = {}
        for fd in self.FDS:
            try:
                st = os.fstat(fd)
                self._saved[fd] = (os.dup(fd), (st.st_dev, st.st_ino))
            except OSError:
                pass  # forked without it: nothing to restore
        #: The streams restore looks at: those the child was forked with.
        self._streams = [(fd, name) for fd, name in zip(self.FDS, self._NAMES)
                         if fd in self._saved]
        #: The ``sys`` stream objects a job finds, by name (``keep_objects``).
        self.objects: dict[str, Any] = {}
        self.keep_objects()
        self._look()

    def keep_objects(self) -> None:
        """Take the ``sys`` stream objects as they are now as those a job finds (asked
        again after the ``on_child_start`` hooks, which may wrap them): one a job put
        in their place (``sys.stdout = io.StringIO()``, a redirect left in force) is
        put back after it, or every later job's output went into it (R43)."""
        self.objects = {name: getattr(sys, name, None) for _fd, name in self._streams}

    def _look(self) -> None:
        """What ``restore`` compares the descriptors with, after each job (R43): ``files``,
        which ``core.JobEnd`` looks at too."""
        from jobpool import core  # see child_main
        self.files = core.OpenFiles([(fd, *identity)
                                     for fd, (_copy, identity) in self._saved.items()])

    def detach_terminal(self, fds: tuple[int, ...]) -> None:
        """The terminal hung up (R27): ``fds`` (on it when forked) and the copies kept
        of them now write to ``/dev/null``, so neither the running job's output nor
        a later job's fails with EIO, and ``restore`` never puts the dead terminal
        back. A descriptor the job has pointed elsewhere is left to the job."""
        for fd in fds:
            saved = self._saved.get(fd)
            if saved is None:
                continue
            copy, identity = saved
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == identity:
                    terminal.point_at_null((fd,))
            except OSError:
                pass
            terminal.point_at_null((copy,))
            try:
                st = os.fstat(copy)
            except OSError:
                continue
            self._saved[fd] = (copy, (st.st_dev, st.st_ino))
        self._look()

    def holds(self, fd: int) -> bool:
        """Whether ``fd`` is still the stream the child was forked with."""
        return fd in self._saved and fd not in self.files.changed()

    def restore(self) -> bool:
        """Put back what the job changed; False if that failed (recycle the child).
        Asked when ``core.JobEnd`` found a descriptor or an object changed (its look
        after every job makes the same comparisons, in one call)."""
        for fd in self.files.changed():  # closed, or another file: put ours back
            copy, identity = self._saved[fd]
            try:
                st = os.fstat(copy)
                if (st.st_dev, st.st_ino) != identity:
                    return False  # the job took the copy's number too: not its file
                os.dup2(copy, fd)
            except OSError:
                return False
        objects = self.objects
        for fd, name in self._streams:
            stream = getattr(sys, name, None)
            if stream is not objects[name]:
                stream = objects[name]
                setattr(sys, name, stream)
            if stream is None or stream.closed:
                try:
                    stream = os.fdopen(fd, "r" if fd == 0 else "w", closefd=False,
                                       buffering=1 if fd else -1)
                except OSError:
                    return False
                setattr(sys, name, stream)
                objects[name] = stream
        return True


def child_main(conn, parent_pid: int, max_tasks: int, max_memory: int = 0,
               frames: bool = False) -> None:
    """Entry point of a forked child; returns (and the process exits) when recycled:
    after ``max_tasks`` jobs, or when its RSS has passed ``max_memory`` bytes.
    ``frames``: the supervisor reads success frames (R68, its compiled road)."""
    proctree.settle_forked(parent_pid, "jobpool-child")
    # R40: the job's processes are its own. Its own process group, so a timeout or a
    # cancel signals them together; a subreaper, so an orphan (a setsid grandchild
    # whose parent exited) is reparented here, not to PID 1, and killed after the job.
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    proctree.become_subreaper()
    streams = StandardStreams()
    on_terminal = terminal.terminal_fds()
    if on_terminal:
        # The supervisor forwards its terminal's hang-up (R27): see terminal.py.
        signal.signal(signal.SIGHUP, lambda signum, frame: streams.detach_terminal(on_terminal))
    me = _forks_into
    signals = SignalState()
    startup_error = run_child_start_hooks()
    if _forks_into != me:
        end_forked_copy(None)  # R40: a start hook's fork came back here
    streams.keep_objects()
    signals.keep_handlers()
    settings = ProcessSettings()  # as the start hooks left them
    tracing.preload()  # R57: OpenTelemetry, where the application or a hook uses it
    done = 0
    # The pipe's messages, read and written in C when the core is built (the same bytes
    # as ``recv_bytes``/``send_bytes``; a job's own requests still use ``conn``). Loaded
    # here, not with this module: the compiled core also holds the SQLite driver, whose
    # store modules a child never loads (R43; its parent, which forked it, has them).
    from jobpool import core
    read_message, write_message = core.read_message, core.write_message
    # R43: the pipes to the pool as they were made. A job may close their numbers, or
    # open files of its own on them: looked at after each job, in one call.
    pipes = core.OpenFiles(conn.identities())
    # R20, R40, R43: what a job may leave behind, looked at after each in one call.
    end = core.JobEnd(signals.mask, signals.handlers, pipes, settings.limits, settings.mask,
                      settings.cwd, streams)
    try:
        while True:
            try:
                message = read_message(conn)
            except (EOFError, OSError):
                return  # the supervisor closed our pipe: it is stopping or gone
            job = protocol.loads(message)
            if isinstance(job[0], str):
                continue  # an interrupt for the job just finished (R37): it is over
            job_id, attempt, name, payload, serializer, queue, batch, meta = job
            running.current = running.Attempt(conn, job_id, attempt, name, queue, batch, meta)
            done += 1

            def retire(flags: int, done: int = done) -> bool:
                # Decided before the reply goes out, so the supervisor never sends a job
                # to a child that is about to exit. A leaky job's memory goes back to
                # the system with this process, and a child whose pipes the job moved
                # (mended, so the outcome still goes out) with its descriptor table.
                # ``flags``: what ``end.look()`` found changed.
                moved = bool(flags & _LOOK.PIPES)
                if moved:
                    conn.mend()  # first: the reply needs the pipes (if the job has not)
                # Then the limits: a CPU cap the job left may end this child any moment.
                return bool((flags & _LOOK.LIMITS and not settings.put_back_limits()) or moved
                            or (max_tasks and done >= max_tasks)
                            or (max_memory and (procinfo.rss_bytes(os.getpid()) or 0) > max_memory)
                            or (flags & _LOOK.STREAMS and not streams.restore()))
            try:
                reply, retiring = run_job(job_id, attempt, name, payload, serializer, retire,
                                          startup_error, frames, signals, end)
            except channel.PipeLost as exc:
                # The job took the pipes' numbers and no new end could be had (``mend``).
                # Nothing goes out onto the job's files; the pool settles the attempt
                # when this child's exit shows.
                if streams.holds(2):  # else fd 2 may be the job's file too
                    try:
                        os.write(2, f"jobpool child {os.getpid()}: job {job_id} left no pipe to "
                                    f"the pool ({exc}); its outcome is lost\n".encode(errors="replace"))
                    except OSError:
                        pass
                return
            finally:
                running.current = None
            if _forks_into != me:
                # R40: a fork made around the job's body (by a middleware's hook, say) came
                # back here; the job's own function ends its forks itself (_outcome_of).
                end_forked_copy(None)
            try:
                write_message(conn, reply)
            except OSError:
                return
            if retiring:
                return
    finally:
        # R40: the helpers Python keeps for this process (a pool's fork server, say)
        # end with it, not after it as orphans of the supervisor's.
        proctree.end_python_helpers()
