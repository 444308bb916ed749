"""The ``jobpool`` command: parse, build a config, call the library, exit.

No SQL and no job logic lives here (STYLE habit 8). Any ``JobpoolError`` or bad
value becomes one line on stderr and exit status 1; argparse usage errors exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import io
import json
import logging
import math
import os
import re
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Sequence

from jobpool import bounds, config, core, jobs, listing, liveness, options, procinfo, serialize
from jobpool.display import counted, markup_escape, meta_text, shown, to_nowhere, whole_text
from jobpool.errors import EnqueueError, JobNotFound, JobpoolError, RegistryError
from jobpool.events import JsonFormatter, PlainFormatter
from jobpool.queueplan import parse_queues
from jobpool.serialize import MAX_PAYLOAD_BYTES
from jobpool.store.rows import (DUE_ALREADY, LISTED_STATUSES, MADE_DUE, NO_SUCH_JOB,
                                enqueue_options)
from jobpool.store.urls import check_store_name, is_postgres_url
from jobpool.store import factory
from jobpool.store.factory import connect
from jobpool.store.sqlite.options import DEFAULT_MODE, validate_mode
from jobpool.store.urls import resolve_path


if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _table(**options: Any) -> Table:
    from rich.table import Table
    return Table(**options)


#: Environment variables with which rich treats a pipe as a terminal.
_FORCED_TERMINAL = {"TTY_COMPATIBLE", "FORCE_COLOR"}


class _Stdout:
    """stdout's rich ``Console``, made on first use.

    ``jobpool start`` without a terminal never prints through rich, and importing
    it took a fifth of a pool's start-up (~60 ms of ~300), which a short batch
    pays in full.
    """

    def __init__(self) -> None:
        self._console: Console | None = None

    @property
    def is_terminal(self) -> bool:
        if self._console is None and not sys.stdout.isatty() \
                and not _FORCED_TERMINAL.intersection(os.environ):
            return False  # rich would say the same for a pipe or a file
        return self.console.is_terminal

    @property
    def console(self) -> Console:
        if self._console is None:
            from jobpool.display import console
            self._console = console()  # R46: what comes from jobs prints as text
        return self._console

    def line(self, text: str) -> None:
        """One line of jobpool's own words, as text (no markup, no highlighting). Off a
        terminal it is never wrapped, whatever the width (``COLUMNS``, else 80): a
        reader of a log or a pipe gets each statement on one line, as it greps it."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=not self.is_terminal)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


class _GuardedOutput:
    """Standard output while a command runs. A reader that went away (``jobpool jobs
    list | head``) or a write that failed (``> /dev/full``) ends the command's output,
    not the command: what it was doing (a retry of every dead job, say) is carried out
    and reported by its exit code, and the rest of its output is dropped. Before, the
    first failed write raised out of the command as a traceback (exit 1), after its
    action had committed, and a user ran it again."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        #: The first write that failed, other than a reader gone (which is no error).
        self.failed: OSError | None = None
        self._dropping = False

    def write(self, text: str) -> int:
        if not self._dropping:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._drop(exc)
        return len(text)

    def flush(self) -> None:
        if not self._dropping:
            try:
                self._stream.flush()
            except OSError as exc:
                self._drop(exc)

    def _drop(self, exc: OSError) -> None:
        self._dropping = True
        if not isinstance(exc, BrokenPipeError):
            self.failed = exc
        to_nowhere(self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


#: Commands that run until stopped, whose output ``_GuardedOutput`` leaves alone (so is
#: ``top`` but with ``--once``: its loop would run on for ever, printing to nobody).
_SERVING = frozenset({"start", "web"})


class UserError(JobpoolError):
    """A CLI mistake: reported as one line."""



def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, not {text!r}")
    if value > bounds.INT64_MAX:
        # Past a store's 64-bit ids and counts: the driver's overflow was a traceback.
        raise argparse.ArgumentTypeError(f"expected a whole number up to {bounds.INT64_MAX}, "
                                         f"not {text!r}")
    return value


def _queue_running(text: str) -> int:
    """R35: ``limits set --running N`` (``bounds.queue_running``)."""
    try:
        return bounds.queue_running(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _chunk_setting(text: str) -> tuple[str, int]:
    """R63: ``--chunk NAME=N``."""
    name, sep, size = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=N, not {text!r}")
    try:
        value: int | str = int(size)
    except ValueError:
        value = size  # refused below, named as given
    try:
        return name, options.validate_chunk(value)
    except EnqueueError as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc}") from None


def _whole_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, not {text!r}")
    return value


def _seconds(text: str) -> float:
    return _checked_seconds(text, positive=False)


def _positive_seconds(text: str) -> float:
    return _checked_seconds(text, positive=True)


def _checked_seconds(text: str, *, positive: bool) -> float:
    """A flag's number of seconds: 0 (or more than 0) to R41's 10 years. Whatever is
    wrong with it (negative, zero, not a number, too large), the refusal says the
    same: what is allowed and what was typed."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not ((value > 0 if positive else value >= 0) and bounds.check_delay(value) is None):
        allowed = "above 0, at most 10 years" if positive else "from 0 to 10 years"
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds {allowed} (like 30 or 0.5), not {text!r}")
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _duration(text: str) -> float:
    """``90``, ``45s``, ``30m``, ``12h``, ``7d`` or ``2w`` as seconds."""
    unit = text[-1:].lower()
    number = text[:-1] if unit in _UNITS else text
    try:
        value = float(number) * _UNITS.get(unit, 1)
    except ValueError:
        value = math.nan
    if not (value >= 0 and bounds.check_delay(value) is None):
        raise argparse.ArgumentTypeError(
            f"expected a duration from 0 to 10 years, like 90, 45s, 30m, 12h, 7d or 2w, "
            f"not {text!r}")
    return value


#: The options that take a value (``Parser.add_argument`` notes them), and what of a
#: value argparse would take for an option instead: a leading dash and a digit or dot.
_VALUE_FLAGS: set[str] = set()
_DASHED_NUMBER = re.compile(r"-[\d.]")


def _attached(argv: Sequence[str]) -> list[str]:
    """``--result-ttl -1h`` as ``--result-ttl=-1h``. argparse takes a value that starts
    with a dash for an option unless it reads as a negative number ("expected one
    argument"); attached, it reaches the flag's own check, which says what is allowed."""
    attached: list[str] = []
    for index, arg in enumerate(argv):
        if arg == "--":
            return attached + list(argv[index:])
        if attached and attached[-1] in _VALUE_FLAGS and _DASHED_NUMBER.match(arg):
            attached[-1] = f"{attached[-1]}={arg}"
        else:
            attached.append(arg)
    return attached


def _store_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """R39: ``--mode 600``, ``660`` or ``0o660`` (octal, as chmod takes it) as an int,
    checked with ``--allow-world-writable`` in view; a refusal quotes what was typed."""
    text = args.mode
    if text is None:
        args.mode = DEFAULT_MODE
        return
    digits = text[2:] if text.lower().startswith("0o") else text
    try:
        mode = int(digits, 8)
    except ValueError:
        parser.error(f"--mode {text}: expected octal permission bits like 600 or 660")
    try:
        args.mode = validate_mode(mode, allow_world_writable=args.allow_world_writable,
                                  typed=f"--mode {text}", allow_with="--allow-world-writable")
    except ValueError as exc:
        parser.error(str(exc))


def _json_value(kind: type, flag: str):
    def parse(text: str) -> Any:
        try:
            value = serialize.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{flag} is not valid JSON: {exc.msg}") from None
        except RecursionError:  # the decoder's own bound on depth
            raise argparse.ArgumentTypeError(f"{flag} is nested too deeply") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(
                f"{flag} must be a JSON {'array' if kind is list else 'object'}")
        return value
    return parse


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit 2), not a usage dump."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.nargs is None:
            _VALUE_FLAGS.update(action.option_strings)
        return action

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class _Unbuilt:
    """Stands for the parser of a command this run does not parse (``build_parser``'s
    ``argv``): whatever is added to it is dropped. It holds nothing (a value set on it
    would be shared by every unbuilt command), so setting one fails."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Callable[..., "_Unbuilt"]:
        return lambda *args, **kwargs: self


_UNBUILT = _Unbuilt()


def _commands(parser: Any, chosen: str | None, **options: Any) -> Callable[..., Any]:
    """``parser.add_subparsers(**options).add_parser``, building only the ``chosen``
    command's parser (every one when None). Building all of them cost every run ~9 ms
    here where building one costs ~4 (argparse looks for translations of its own words
    for every parser and option)."""
    if isinstance(parser, _Unbuilt):
        return lambda *args, **kwargs: _UNBUILT
    action = parser.add_subparsers(**options)

    def add(name: str, **kwargs: Any) -> Any:
        if chosen is not None and name != chosen:
            return _UNBUILT
        return action.add_parser(name, **kwargs)
    return add


#: Every command (tests/test_cli.py holds these names to the parser's).
COMMAND_NAMES = ("start", "enqueue", "top", "status", "jobs", "dead", "batches", "limits", "doctor",
                 "pools", "stop", "scale", "pause", "resume", "metrics", "web")
#: The commands that have commands of their own (``jobs list``), and theirs.
GROUP_COMMANDS = {"jobs": ("list", "show", "cancel", "run-now", "reset-state"),
                  "dead": ("list", "show", "retry", "delete", "purge"),
                  "batches": ("list", "show", "cancel"),
                  "limits": ("list", "set", "clear")}


def _chosen(argv: Sequence[str] | None) -> tuple[str | None, str | None]:
    """The command ``argv`` starts with, and its group's command after it, each None
    where it names none that exists: that level is then built in full (its help lists
    every command, and a mistake is told with every choice)."""
    if not argv or argv[0] not in COMMAND_NAMES:
        return None, None
    command = argv[0]
    inner = argv[1] if len(argv) > 1 and command in GROUP_COMMANDS else None
    return command, inner if inner in GROUP_COMMANDS.get(command, ()) else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; given the ``argv`` it is to parse, only the parser of the
    command it names is built (``_commands``)."""
    command, inner = _chosen(argv)
    common = Parser(add_help=False)
    common.add_argument("--db", help="the store: an SQLite file path or a postgresql:// URL "
                                     "(default $JOBPOOL_DB or ./jobpool.db)")
    common.add_argument("--app", help="module whose import registers the jobs")
    common.add_argument("-v", "--verbose", action="store_true",
                        help="print the full traceback of an error (also JOBPOOL_DEBUG=1)")
    # Only the commands that may create a store take --mode (R39).
    creating = Parser(add_help=False)
    creating.add_argument("--mode", help="file mode of a store this command creates, in octal "
                                        "(default 600: only its owner reads it; 660 shares it "
                                        "with the group; never execute or special bits)")
    creating.add_argument("--allow-world-writable", action="store_true",
                          help="let --mode give others write access (anyone who can write "
                               "a store can run any registered job)")

    parser = Parser(prog="jobpool", description="Run and inspect a jobpool store.")
    sub = _commands(parser, command, dest="command", required=True, metavar="COMMAND",
                    parser_class=Parser)

    start = sub("start", parents=[common, creating], help="run a pool of worker processes")
    start.add_argument("--procs", type=_positive_int, default=config.default_procs(),
                       help="child processes (default: CPU count; at most max(64, 32 x CPU count) "
                            "unless --max-procs says more)")
    start.add_argument("--max-procs", type=_positive_int, metavar="N",
                       help="raise the bound on --procs and on scale requests to N")
    start.add_argument("--dead-after", type=_positive_seconds, default=liveness.DEAD_AFTER,
                       metavar="SECONDS",
                       help="a pool whose heartbeat is this old is dead and its leases are "
                            f"reclaimed (default {liveness.DEAD_AFTER:g})")
    start.add_argument("--metrics", metavar="ADDR",
                       help="serve Prometheus /metrics and /healthz: PORT or :PORT (loopback), "
                            "HOST:PORT, [::1]:PORT")
    start.add_argument("--queues", help="comma-separated queues, in order of preference; "
                                        "with weights (high:3,default:1) claims are shared "
                                        "by weight")
    start.add_argument("--burst", action="store_true",
                       help="exit once nothing is running, ready or due within the poll interval; "
                            "retries in backoff further out stay queued (see --wait-retries)")
    start.add_argument("--wait-retries", type=_seconds, metavar="SECONDS",
                       help="with --burst: also wait for retries and other jobs due within "
                            "SECONDS (default 0)")
    start.add_argument("--max-jobs", type=_positive_int, help="exit after this many attempts")
    start.add_argument("--store-timeout", type=_positive_seconds, metavar="SECONDS",
                       help="with --burst: exit with status 3 after this long of continuous "
                            f"store errors (default {config.STORE_TIMEOUT:g})")
    start.add_argument("--drain", type=_seconds, default=config.DRAIN,
                       help=f"seconds running jobs get to finish on stop (default {config.DRAIN:g})")
    start.add_argument("--coalesce-us", type=_whole_number, default=0, metavar="N",
                       help="hold a settle up to N microseconds while other children still "
                            "run, so their outcomes share one store transaction (fewer "
                            "transactions, at up to N us of pickup; default 0: settle at once)")
    start.add_argument("--spin-us", type=_whole_number, default=round(config.SPIN * 1e6),
                       metavar="N",
                       help="while jobs end that soon, look for a child's outcome up to N "
                            "microseconds before sleeping (a wake-up costs more than the looks; "
                            f"default {config.SPIN * 1e6:.0f}, at most {config.SPIN_MAX * 1e6:.0f}, "
                            "0: sleep at once)")
    start.add_argument("--no-pump", dest="pump", action="store_false", default=config.PUMP,
                       help="serve every job through the general loop, not the pump of "
                            "plain jobs (the same behaviour, slower; JOBPOOL_PUMP=0 too)")
    start.add_argument("--chunk", type=_chunk_setting, action="append", default=[],
                       metavar="NAME=N",
                       help="give a free slot up to N ready rows of job NAME at once, run one "
                            "after the other in its child (the job's own chunk= otherwise; "
                            "1: none); repeatable")
    start.add_argument("--poll-interval", type=_positive_seconds, default=config.POLL_INTERVAL,
                       help=f"fallback poll interval in seconds (default {config.POLL_INTERVAL:g})")
    start.add_argument("--max-tasks-per-child", type=_positive_int, default=0,
                       help="recycle a child after this many jobs")
    start.add_argument("--max-crashes", type=_positive_int, metavar="N",
                       help="child deaths before a job is quarantined (default 3; jobs may set theirs)")
    start.add_argument("--memory-limit", type=_positive_int, metavar="MIB",
                       help="kill a child whose RSS passes this during a job (jobs may set their own)")
    start.add_argument("--max-memory-per-child", type=_positive_int, metavar="MIB",
                       help="recycle a child whose RSS passes this after a job")
    start.add_argument("--result-ttl", type=_duration, default=config.RESULT_TTL,
                       help=f"how long done jobs are kept, e.g. 12h "
                            f"(default {config.RESULT_TTL / 3600:g}h)")
    start.add_argument("--dead-letter-limit", type=_positive_int, default=config.DEAD_LETTER_LIMIT,
                       help=f"dead jobs kept, newest first (default {config.DEAD_LETTER_LIMIT})")
    start.add_argument("--no-dashboard", action="store_true",
                       help="log lines instead of the live dashboard on a terminal")
    start.add_argument("--log-format", choices=("plain", "json"), default="plain")
    start.add_argument("-q", "--quiet", action="store_true", help="log warnings only")

    enqueue = sub("enqueue", parents=[common, creating], help="queue one job by name")
    enqueue.add_argument("name")
    enqueue.add_argument("--args", type=_json_value(list, "--args"), default=[], action=_Once,
                         help="JSON array of positional arguments")
    enqueue.add_argument("--kwargs", type=_json_value(dict, "--kwargs"), default={}, action=_Once,
                         help="JSON object of keyword arguments")
    enqueue.add_argument("--key", help="identity key: no second live job with it")
    enqueue.add_argument("--key-period", type=_duration, metavar="AGE",
                         help="with --key: nor one that finished within AGE (like 1d, 12h)")
    enqueue.add_argument("--delay", type=_seconds, help="seconds before it may run")
    enqueue.add_argument("--priority", type=int, help="higher runs first")
    enqueue.add_argument("--queue", help="queue name (default: the job's)")
    enqueue.add_argument("--max-attempts", type=_positive_int)
    enqueue.add_argument("--group", help="its group for the job's max_running and rate "
                                         "(default: its group_by keyword argument)")
    enqueue.add_argument("--json", action="store_true", help="print the handle as JSON")
    enqueue.add_argument("--from", dest="from_file", metavar="FILE",
                         help="queue one job per line of FILE ('-': stdin): a JSON array of "
                              "arguments, or an object with args and kwargs; all in one transaction")
    enqueue.add_argument("--on-complete", metavar="NAME",
                         help="with --from: make the file one batch; job NAME runs once every "
                              "job of it has ended (given batch=, a summary)")
    enqueue.add_argument("--on-success", metavar="NAME",
                         help="with --from: as --on-complete, but only if none of them went dead")

    top = sub("top", parents=[common], help="live dashboard of a store (read-only)")
    top.add_argument("--refresh", type=_seconds,
                     help="seconds between frames (default 0.5; off a terminal, 5)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")

    status = sub("status", parents=[common], help="counts by status")
    status.add_argument("--json", action="store_true")

    jobs_cmd = sub("jobs", help="list, show, cancel and run jobs now")
    jobs_sub = _commands(jobs_cmd, inner, dest="jobs_command", required=True, metavar="COMMAND",
                         parser_class=Parser)
    jobs_list = jobs_sub("list", parents=[common], help="list jobs, newest first")
    jobs_list.add_argument("--status", choices=LISTED_STATUSES,
                           help="ready means due now; scheduled, due later")
    jobs_list.add_argument("--name", help="only jobs of this name")
    jobs_list.add_argument("--queue", help="only jobs in this queue")
    jobs_list.add_argument("--chain", type=_positive_int, metavar="ID",
                           help="the chain started by job ID")
    jobs_list.add_argument("--limit", type=_positive_int, default=_LISTED, metavar="N",
                           help=f"list the newest N jobs (default {_LISTED}); a last line "
                                f"says how many more there are")
    jobs_list.add_argument("--after", type=_positive_int, metavar="ID",
                           help="the next page: the jobs listed after job ID (below it, "
                                "newest first), as the last line says")
    jobs_list.add_argument("--key", help="only the job of this key (with --name)")
    jobs_list.add_argument("--batch", type=_positive_int, metavar="ID",
                           help="only the members of batch ID")
    searched = jobs_list.add_argument_group(
        "search", "no index serves these: each page searches a window of --scan ids")
    searched.add_argument("--group", help="only jobs of this limit group")
    searched.add_argument("--error", metavar="TEXT", help="only jobs whose last error "
                                                          "contains TEXT (case-sensitive)")
    searched.add_argument("--args", metavar="TEXT", help="only jobs whose arguments "
                                                         "contain TEXT (case-sensitive)")
    for end in ("created-from", "created-to", "finished-from", "finished-to"):
        # Registered as taking a value, as Parser.add_argument does (a group's does not):
        # "--created-from -1e9" was "expected one argument".
        action = searched.add_argument(f"--{end}", metavar="TIME",
                                       help="Unix seconds or ISO 8601 (UTC unless it says)"
                                       if end == "created-from" else None)
        if isinstance(action, argparse.Action):  # not a command this run leaves unbuilt
            _VALUE_FLAGS.update(action.option_strings)
    searched.add_argument("--meta", type=_meta_pair, action="append", metavar="KEY=VALUE",
                          help="only jobs whose metadata has KEY equal to VALUE (JSON if it "
                               "reads as a JSON scalar, else text); repeat for more keys. "
                               "Indexed on PostgreSQL, searched on SQLite")
    searched.add_argument("--scan", type=_positive_int, metavar="N",
                          help="ids a page searches (default 10 000, at most 100 000)")
    jobs_list.add_argument("--json", action="store_true")
    jobs_show = jobs_sub("show", parents=[common], help="one job and its attempts")
    jobs_show.add_argument("id", type=_positive_int)
    jobs_show.add_argument("--json", action="store_true")
    jobs_cancel = jobs_sub("cancel", parents=[common], help="cancel a ready or running job")
    jobs_cancel.add_argument("ids", type=_positive_int, nargs="+", metavar="ID")
    jobs_run_now = jobs_sub(
        "run-now", parents=[common],
        help="make waiting jobs (scheduled, or out a retry's backoff) due now")
    jobs_run_now.add_argument("ids", type=_positive_int, nargs="*", metavar="ID")
    jobs_run_now.add_argument("--all-scheduled", action="store_true",
                              help="every waiting job (with --name and --queue, only those)")
    jobs_run_now.add_argument("--name", help="with --all-scheduled: only jobs of this name")
    jobs_run_now.add_argument("--queue", help="with --all-scheduled: only jobs in this queue")
    jobs_reset = jobs_sub("reset-state", parents=[common],
                          help="forget a job's saved state: its next attempt starts afresh")
    jobs_reset.add_argument("ids", type=_positive_int, nargs="+", metavar="ID")

    dead = sub("dead", help="dead letters: list, show, retry, delete, purge")
    dead_sub = _commands(dead, inner, dest="dead_command", required=True, metavar="COMMAND",
                         parser_class=Parser)
    dead_list = dead_sub("list", parents=[common], help="dead jobs, newest first")
    dead_list.add_argument("--name")
    dead_list.add_argument("--limit", type=_positive_int, default=100)
    dead_list.add_argument("--json", action="store_true")
    dead_show = dead_sub("show", parents=[common], help="a dead job and its attempts")
    dead_show.add_argument("id", type=_positive_int)
    dead_show.add_argument("--json", action="store_true")
    dead_retry = dead_sub("retry", parents=[common], help="run dead jobs again")
    dead_retry.add_argument("ids", type=_positive_int, nargs="*", metavar="ID")
    dead_retry.add_argument("--all", action="store_true", help="every dead job (see --name)")
    dead_retry.add_argument("--name", help="with --all: only jobs of this name")
    dead_retry.add_argument("--reset-state", action="store_true",
                            help="start them afresh, not from the state they saved")
    dead_delete = dead_sub("delete", parents=[common], help="delete dead jobs")
    dead_delete.add_argument("ids", type=_positive_int, nargs="+", metavar="ID")
    dead_purge = dead_sub("purge", parents=[common], help="delete old dead jobs")
    dead_purge.add_argument("--older-than", type=_duration, required=True,
                            help="age like 7d, 12h or 30m")

    batches = sub("batches", help="batches of jobs with callbacks: list, show, cancel")
    batches_sub = _commands(batches, inner, dest="batches_command", required=True, metavar="COMMAND",
                            parser_class=Parser)
    batches_list = batches_sub("list", parents=[common], help="batches, newest first")
    batches_list.add_argument("--open", action="store_true",
                              help="only those whose callbacks have not fired")
    batches_list.add_argument("--limit", type=_positive_int, default=100)
    batches_list.add_argument("--json", action="store_true")
    batches_show = batches_sub("show", parents=[common],
                               help="a batch: counts, members by status, callbacks")
    batches_show.add_argument("id", type=_positive_int)
    batches_show.add_argument("--json", action="store_true")
    batches_cancel = batches_sub(
        "cancel", parents=[common], help="cancel a batch's unfinished jobs; no callback fires")
    batches_cancel.add_argument("id", type=_positive_int)

    limits = sub("limits", help="concurrency and rate limits: list, set, clear")
    limits_sub = _commands(limits, inner, dest="limits_command", required=True, metavar="COMMAND",
                           title="commands")
    limits_list = limits_sub(
        "list", parents=[common], help="every limit, its running jobs, groups and tokens left")
    limits_list.add_argument("--json", action="store_true")
    limits_set = limits_sub(
        "set", parents=[common], help="at most N jobs of a queue running at once, on all pools")
    limits_set.add_argument("--queue", required=True)
    limits_set.add_argument("--running", type=_queue_running, required=True, metavar="N")
    limits_clear = limits_sub("clear", parents=[common], help="drop a queue's limit")
    limits_clear.add_argument("--queue", required=True)
    doctor = sub("doctor", parents=[common],
                 help="check a store; --salvage copies what is readable to a new one")
    doctor.add_argument("--salvage", metavar="NEW", help="path of a new store to copy into")

    pools = sub("pools", parents=[common], help="the supervisors running on a store")
    pools.add_argument("--json", action="store_true")
    stop = sub("stop", parents=[common], help="ask the pools on a store to stop gracefully")
    stop.add_argument("--wait", type=_seconds, default=0.0,
                      help="seconds to wait for them to go (default: do not wait)")
    scale = sub("scale", parents=[common], help="change --procs of running pools")
    scale.add_argument("--procs", type=_positive_int, required=True)
    pause = sub("pause", parents=[common],
                help="stop claiming from a queue on every pool (running jobs finish)")
    pause.add_argument("queue")
    resume = sub("resume", parents=[common], help="claim from a paused queue again")
    resume.add_argument("queue")
    store_metrics = sub("metrics", parents=[common],
                        help="the store's queue gauges for Prometheus (read-only)")
    store_metrics.add_argument("--serve", metavar="ADDR",
                               help="serve them at ADDR/metrics (PORT, :PORT, HOST:PORT, "
                                    "[::1]:PORT) instead of printing them once")
    store_metrics.add_argument("--every", type=_seconds,
                               help="with --serve: read the store at most this often (seconds, "
                                    "at least 15; default 15)")
    web = sub("web", parents=[common],
              help="the web dashboard and its JSON API (needs the web extra)")
    web.add_argument("--bind", metavar="ADDR",
                     help="HOST:PORT to listen on (default 127.0.0.1:8700; port 0: any free "
                          "port); beyond loopback only with a token")
    web.add_argument("--token", default=os.environ.get("JOBPOOL_WEB_TOKEN") or None,
                     help="the token pages and the API ask for (default $JOBPOOL_WEB_TOKEN)")
    web.add_argument("--token-label", metavar="LABEL",
                     help="with --token: who acted, as web_action events name the token's "
                          "holder (default token)")
    web.add_argument("--read-only", action="store_true", help="no forms; every action refused")
    web.add_argument("--log-format", choices=("plain", "json"), default="plain")
    for fleet_command in (stop, scale):
        fleet_command.add_argument("--pool", metavar="OWNER",
                                   help="only this pool (its owner, as `jobpool pools` shows it)")
        fleet_command.add_argument("--host", help="only the pools on this host")
    return parser


def import_app(module: str | None) -> None:
    """Import the user's job module, as ``celery -A`` does, from the current directory."""
    if not module:
        return
    if os.sep in module or module.startswith(".") or (module.endswith(".py")
                                                      and os.path.isfile(module)):
        # importlib's own words named a line of jobpool's (a relative import's package).
        raise UserError(f"--app takes a module's import name (like myjobs or pkg.jobs), "
                        f"not a path: {module!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except SystemExit as exc:
        # ``sys.exit(0)`` at import (a script's guard run on import) ended the command
        # with 0, having done nothing.
        raise UserError(f"cannot import --app {module}: it called sys.exit({exc.code!r}) "
                        f"while being imported") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever the user's module raises on
        # import, its own BaseException subclasses and a GeneratorExit included
        if _debug():
            raise
        raise UserError(f"cannot import --app {module}: {_where(exc, module)}"
                        " (-v or JOBPOOL_DEBUG=1 for the traceback)") from None


def _paths_after_app(args: argparse.Namespace, cwd: str) -> None:
    """After the ``--app`` import: the store it names (``--db``, else ``$JOBPOOL_DB``,
    which the app may set as it is imported, else ``./jobpool.db``) and the files a
    command reads or writes (``--from``, ``--salvage``), each relative one taken from
    ``cwd``, the directory the command was run from, even when the module changed
    directory as it was imported (the store moved to a new empty file elsewhere, the
    --from file was not found, the salvage was written beside the app's files).
    A module that stayed where it was imported leaves them as they were typed, so
    what a command prints names them as its user did."""
    try:
        moved = os.getcwd() != cwd
    except OSError:  # the module moved into a directory since removed
        moved = True
    try:
        path = resolve_path(getattr(args, "db", None))
    except ValueError:
        pass  # $JOBPOOL_DB that is not a store's name: the command says so, as without --app
    else:
        if hasattr(args, "db") and not is_postgres_url(path):
            args.db = os.path.join(cwd, path) if moved else path
    if not moved:
        return
    for dest in ("from_file", "salvage"):
        value = getattr(args, dest, None)
        if isinstance(value, str) and value != "-":
            setattr(args, dest, os.path.join(cwd, value))


def _debug() -> bool:
    return os.environ.get("JOBPOOL_DEBUG", "") not in ("", "0") or _verbose


def _where(exc: BaseException, module: str) -> str:
    """The error and where it arose: the file and line of a syntax error or of a
    refused job's declaration (R1a), else the deepest frame of the traceback (the
    line in the user's code that raised)."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}"
    if isinstance(exc, RegistryError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}: RegistryError: {exc.msg}"
    if isinstance(exc, ModuleNotFoundError) and exc.name and module.startswith(exc.name):
        return text  # the module itself is missing: there is no line to name
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename]
    if not own:
        return text
    frame = own[-1]
    return f"{frame.filename}, line {frame.lineno}: {text}"


#: Set by ``-v``: errors at the CLI print their traceback.
_verbose = False


def _configure_logging(fmt: str, quiet: bool, *, job_records: bool = False) -> None:
    """Events to stderr (beside a live dashboard, ``_with_dashboard`` sends them to it).

    ``job_records`` (``start``): what the jobs log goes to the same place in the same
    format, each record naming its job (R48), unless the app configured the root
    logger itself (it has a handler), as ``logging.basicConfig`` would leave it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    _route_logs(handler, logging.WARNING if quiet else logging.INFO, job_records)


#: Marks the root handler jobpool installed (R48), so a later route replaces it.
_OURS = "_jobpool_route"


def _route_logs(handler: logging.Handler, level: int, job_records: bool) -> None:
    """Send jobpool's records, and with ``job_records`` the root logger's when the
    app gave it no handler of its own, to ``handler`` at ``level``."""
    root = logging.getLogger("jobpool")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    everything = logging.getLogger()
    if job_records and all(getattr(h, _OURS, False) for h in everything.handlers):
        setattr(handler, _OURS, True)
        everything.handlers[:] = [handler]
        everything.setLevel(level)


def cmd_start(args: argparse.Namespace, out: _Stdout) -> int:
    from jobpool.supervisor import Supervisor
    for name, size in args.chunk:  # before the store is opened (it was made, then refused)
        if jobs.lookup(name) is None:
            raise UserError(f"--chunk {name}={size}: no job named {name!r} is registered"
                            + (f" by --app {args.app}" if args.app else " (add --app)"))
    spec = parse_queues(args.queues) if args.queues else None
    pool = config.PoolConfig(
        db=resolve_path(args.db), procs=args.procs, queues=spec.queues if spec else None,
        weights=spec.weights if spec else None, burst=args.burst,
        max_jobs=args.max_jobs, drain=args.drain, poll_interval=args.poll_interval,
        max_tasks_per_child=args.max_tasks_per_child, result_ttl=args.result_ttl,
        dead_letter_limit=args.dead_letter_limit, memory_limit=args.memory_limit,
        max_crashes=args.max_crashes, max_memory_per_child=args.max_memory_per_child,
        mode=args.mode, allow_world_writable=args.allow_world_writable,
        max_procs=args.max_procs, dead_after=args.dead_after,
        store_timeout=args.store_timeout, wait_retries=args.wait_retries, metrics=args.metrics,
        coalesce=args.coalesce_us / 1e6, chunks=tuple(args.chunk),
        pump=args.pump, spin=args.spin_us / 1e6)
    dashboard = out.is_terminal and not args.no_dashboard and args.log_format == "plain"
    _configure_logging(args.log_format, args.quiet, job_records=True)
    supervisor = Supervisor(pool)
    if not dashboard:
        return supervisor.run()
    return _with_dashboard(supervisor, pool.db)


def _with_dashboard(supervisor, db: str) -> int:
    """R29: the live dashboard beside the pool, in a process of its own forked before
    the pool starts: the supervisor keeps a single thread, so no fork of a child
    ever copies a lock another thread holds. The pool's log lines (warnings: the
    dashboard shows the rest) go to the dashboard over a pipe and print above its
    frame; closing the pipe tells it the pool is done."""
    from jobpool import dashboard
    from jobpool.forked import Forked, refuse_other_threads
    refuse_other_threads()  # the dashboard is the pool's first fork
    read_end, write_end = os.pipe()
    viewer = Forked.start(dashboard.run_beside_pool, db, read_end, os.getpid(), keep=(read_end,))
    supervisor.companions.add(viewer.pid)
    os.close(read_end)
    lines = os.fdopen(write_end, "w", buffering=1, encoding="utf-8", errors="replace")
    handler = logging.StreamHandler(lines)
    handler.setFormatter(PlainFormatter())
    _route_logs(handler, logging.WARNING, False)
    everything = logging.getLogger()
    if everything.handlers and all(getattr(h, _OURS, False) for h in everything.handlers):
        # What jobs log stays on stderr, the descriptor a child keeps (R43; the pipe's
        # is closed there), and only its warnings, as before the dashboard drew (R48).
        everything.setLevel(logging.WARNING)
    try:
        return supervisor.run()
    finally:
        logging.getLogger("jobpool").handlers[:] = []
        try:
            lines.close()  # EOF: the dashboard draws its last frame and exits
        except BrokenPipeError:
            pass  # it is gone already
        viewer.stop(5.0)


#: The longest line a ``--from`` file may have: a job's payload at its bound (R41), as
#: JSON text escapes it at most (six bytes a byte), and room for its keys.
_FROM_LINE_MOST = 6 * MAX_PAYLOAD_BYTES + 4096


def _lines_of(fh: Any, source: str) -> list[str]:
    """The lines of a ``--from`` file (read as bytes), each within ``_FROM_LINE_MOST``
    (``/dev/zero`` or a file with no line ends is refused, not read into memory whole),
    a read or decoding failure named with its line."""
    lines: list[str] = []
    while True:
        try:
            raw = fh.readline(_FROM_LINE_MOST + 1)
        except OSError as exc:
            raise UserError(f"cannot read --from {source}: {exc.strerror or exc}") from None
        if not raw:
            return lines
        number = len(lines) + 1
        if len(raw) > _FROM_LINE_MOST:
            raise UserError(f"--from {source} line {number}: longer than {_FROM_LINE_MOST} "
                            f"bytes (one job's arguments are at most {MAX_PAYLOAD_BYTES})")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"--from {source} line {number}: not UTF-8 text") from None
        # A lone CR ends a line too (JSON text holds none unescaped), as it did when the
        # whole file was split into lines.
        lines.extend(text.rstrip("\r\n").split("\r"))


def _read_items(source: str, out: _Stdout) -> tuple[list, list[int]]:
    """Parse a JSON-lines file of job arguments, naming the line of any mistake; the
    items and the line each came from (blank lines are skipped, so the store's "item
    N" is not line N + 1)."""
    stream = None
    if source == "-":
        if sys.stdin is None:
            raise UserError("cannot read --from -: standard input is closed")
        # Its bytes; a text stream put in its place (an embedding caller's) as UTF-8.
        stream = getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode())
    try:
        fh = stream or open(source, "rb")
    except OSError as exc:
        raise UserError(f"cannot read --from {source}: {exc.strerror}") from None
    items: list[Any] = []
    numbers: list[int] = []
    with fh:
        lines = _lines_of(fh, source)
    progress = None
    if out.is_terminal and len(lines) > 1000:
        from rich.progress import Progress
        progress = Progress(console=out.console, transient=True)
        progress.start()
        task = progress.add_task("reading jobs", total=len(lines))
    try:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                value = serialize.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"--from {source} line {number}: not JSON ({exc.msg})") from None
            except RecursionError:  # the decoder's own bound on depth
                raise UserError(f"--from {source} line {number}: nested too deeply") from None
            numbers.append(number)
            if isinstance(value, list):
                items.append(tuple(value))
            elif (isinstance(value, dict) and set(value) <= {"args", "kwargs"}
                  and isinstance(value.get("args", []), list)
                  and isinstance(value.get("kwargs") or {}, dict)):
                # Not tuple() of anything: "ab" would be the arguments "a" and "b".
                items.append(jobs.Signature("", tuple(value.get("args", ())), value.get("kwargs")))
            else:
                raise UserError(f"--from {source} line {number}: expected a JSON array of "
                                f"arguments or an object with args (an array) and kwargs "
                                f"(an object)")
            if progress is not None and number % 1000 == 0:
                progress.update(task, completed=number)
    finally:
        if progress is not None:
            progress.stop()
    return items, numbers


def cmd_enqueue(args: argparse.Namespace, out: _Stdout) -> int:
    if args.app:  # main() imported it
        for flag, name in (("", args.name), ("--on-success ", args.on_success),
                           ("--on-complete ", args.on_complete)):
            if name and jobs.lookup(name) is None:
                raise UserError(f"{flag}no job named {name!r} is registered by --app {args.app}")
    batched = args.on_complete or args.on_success
    if batched and not args.from_file:
        raise UserError("--on-complete and --on-success make a --from file one batch: add --from")
    # Everything that can be refused without the store is, before it is opened: a
    # refused command made a new store file, whose --mode a corrected one then ignored.
    if args.from_file:
        if args.args or args.kwargs or args.key or args.group or args.key_period is not None:
            raise UserError("--from takes the arguments from the file (a job's group from its "
                            "group_by keyword argument); drop --args, --kwargs, --key, "
                            "--key-period and --group")
        items, numbers = _read_items(args.from_file, out)
        if batched and not items:
            raise UserError(f"--from {args.from_file} has no jobs: a batch of none would "
                            f"fire its callbacks at once")
    # The options every job of the command takes (its name, priority, queue...).
    enqueue_options(args.name, args.delay, args.priority, None, args.max_attempts, args.queue,
                    None, time.time())
    store = connect(args.db, mode=args.mode, allow_world_writable=args.allow_world_writable)
    if args.from_file:
        batch = store.batch(on_success=jobs.Signature(args.on_success) if args.on_success else None,
                            on_complete=jobs.Signature(args.on_complete) if args.on_complete
                            else None) if batched else None
        with out.status(f"writing {counted(len(items), 'job')}", spinner="dots") if out.is_terminal \
                else _nothing():
            try:
                handles = store.enqueue_many(args.name, items, delay=args.delay,
                                             priority=args.priority, queue=args.queue,
                                             max_attempts=args.max_attempts,
                                             batch=batch.id if batch else None)
            except BaseException as exc:
                try:  # an empty batch was listed as an empty cancelled one
                    if batch is not None:
                        batch.give_up()
                except JobpoolError as cleanup:  # hides nothing of the enqueue's own error
                    print(f"jobpool: warning: batch {batch.id} of the failed enqueue is left "
                          f"as it is: {shown(cleanup)}", file=sys.stderr)
                item = exc.item if isinstance(exc, EnqueueError) else None
                if item is not None and item < len(numbers):
                    said = str(exc).removeprefix(f"item {item}: ")
                    raise UserError(f"--from {args.from_file} line {numbers[item]}: {said}"
                                    ) from None
                raise
            if batch is not None:
                batch.close()
        if args.json:
            print(json.dumps({"ids": [h.id for h in handles],
                              **({"batch": batch.id} if batch else {})}))
        else:
            print(f"queued {counted(len(handles), 'job')}"
                  + (f" ({handles[0].id}-{handles[-1].id})" if handles else "")
                  + (f" in batch {batch.id}" if batch else ""))
        return 0
    handle = store.enqueue_with(args.name, args=args.args, kwargs=args.kwargs, key=args.key,
                                delay=args.delay, priority=args.priority, queue=args.queue,
                                max_attempts=args.max_attempts, key_period=args.key_period,
                                group=args.group)
    if args.json:
        out.print_json(json.dumps({"id": handle.id, "duplicate": handle.duplicate}))
    elif handle.duplicate:
        status = store.get(handle.id)["status"]
        out.print(f"job {handle.id} with key {args.key!r} "
                  + (f"is {status} since less than --key-period ago" if status in ("done", "dead")
                     else "is already queued") + ": nothing queued")
    else:
        out.print(f"queued job {handle.id}")
    return 0


def cmd_status(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, readonly=True)
    counts = store.stats()
    unserved = store.unserved()
    paused = store.paused_queues()
    if args.json:
        print(json.dumps(dict(counts, unserved=unserved, paused=paused)))
        return 0
    supervisors = counts.pop("supervisors")
    # A line of its own: as the table's title, a long path folded over the narrow table.
    out.line(f"jobpool store {store.path}")
    table = _table()
    for key in counts:
        table.add_column(key, justify="right")
    table.add_row(*(str(v) for v in counts.values()))
    out.print(table)
    for pool in supervisors:
        out.line(f"pool {pool['owner']}: {counted(pool['procs'], 'process', 'processes')}, "
                 f"{pool.get('completed', 0)} completed, {pool.get('retried', 0)} retried, "
                 f"{pool.get('dead', 0)} dead, "
                 f"{counted(pool.get('crashes', 0), 'crash', 'crashes')}, "
                 f"{counted(pool.get('settle_failures', 0), 'settle failure')}")
    _print_unserved(out, unserved)
    _print_paused(out, paused)
    # The claims run in the server on PostgreSQL; this install's core serves SQLite.
    out.line("claims: postgres" if is_postgres_url(store.path) else f"core: {core.NAME}")
    return 0


def _print_unserved(out: _Stdout, unserved: list[dict[str, Any]]) -> None:
    """R28: ready jobs that no running pool serves would wait for ever unseen."""
    for group in unserved:
        out.line(f"ready, no running pool serves it: {liveness.describe_unserved(group)}")


_LIST_FIELDS = ("id", "name", "queue", "status", "attempts", "max_attempts", "key", "priority",
                "last_error", "run_at", "progress")


def _listed(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """A row as ``--json`` lists it; R44: with ``malformed`` when it has columns that
    hold what they should not (each one's stored value is described there)."""
    listed = {k: row[k] for k in fields}
    if "malformed" in row:
        listed["malformed"] = row["malformed"]
    return listed


def _cell(value: str | None) -> str:
    """A text column's cell; R44: None where the row's value was malformed."""
    return "?" if value is None else value


def _error_cell(row: dict[str, Any]) -> str:
    """The first line of a row's error; R44: a malformed row says so first."""
    error = (row["last_error"] or "").split("\n", 1)[0]
    if "malformed" in row:
        flag = f"[malformed: {', '.join(row['malformed'])}]"
        return f"{flag} {error}" if error else flag
    return error


def _meta_pair(text: str) -> tuple[str, Any]:
    """R54: ``--meta KEY=VALUE`` (``jobpool.listing.meta_pair``)."""
    try:
        return listing.meta_pair(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_jobs_list(args: argparse.Namespace, out: _Stdout) -> int:
    chosen = dict(status=args.status, name=args.name, queue=args.queue, chain=args.chain,
                  after=args.after, key=args.key, batch=args.batch, group=args.group,
                  error=args.error, args=args.args, scan=args.scan,
                  meta=dict(args.meta) if args.meta else None)
    try:
        for span in ("created", "finished"):
            ends = tuple(None if text is None else listing.parse_time(text, f"--{span}-{end}")
                         for end, text in (("from", getattr(args, f"{span}_from")),
                                           ("to", getattr(args, f"{span}_to"))))
            chosen[span] = ends if ends != (None, None) else None
        store = connect(args.db, readonly=True)
        rows, more, window = listing.search_page(store, chosen, args.limit, _MORE_COUNTED)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.json:
        print(json.dumps([_listed(row, _LIST_FIELDS + ("meta",)) for row in rows]))
        return 0
    table = _table(box=None)
    cells = [(str(row["id"]), _cell(row["name"]), _cell(row["queue"]), row["status"],
              _attempts_text(row), row["key"] or "") for row in rows]
    widths = []
    for index, column in enumerate(("id", "name", "queue", "status", "attempts", "key")):
        # These keep their width; the error column is the one that gives way.
        widths.append(min(40, max([len(column)] + [len(c[index]) for c in cells])))
        table.add_column(column, no_wrap=True, min_width=widths[-1])
    room = out.width - sum(widths) - 2 * len(widths) - 1
    # R67: the metadata, when a listed job has some, shares the room left with the
    # error, each cut with an ellipsis; a listing without metadata keeps its columns.
    metas = [meta_text(row.get("meta")) for row in rows]
    if any(metas):
        errors = any(row["last_error"] or "malformed" in row for row in rows)
        share = max(room // 2 - 1 if errors else room - 12, 10)
        table.add_column("meta", overflow="ellipsis", no_wrap=True, max_width=share)
        room -= share + 2
    table.add_column("last error", overflow="ellipsis", no_wrap=True, max_width=max(room, 10))
    for row, cell, meta in zip(rows, cells, metas):
        table.add_row(*cell, *((meta,) if any(metas) else ()), _error_cell(row))
    out.print(table)
    if more > 0:
        then = f"--after {rows[-1]['id']} lists the next page"
        if more >= _MORE_COUNTED:
            out.line(f"… at least {_spaced(more)} more ({then})")
        else:
            out.line(f"… {_spaced(more)} more (--limit {len(rows) + more} lists them all; {then})")
    elif window is not None:
        older = f"; --after {window.older} searches older jobs" if window.older else ""
        out.line(f"searched jobs {window.low} to {window.high}{older}")
    return 0


#: ``jobs list`` lists this many jobs unless --limit says otherwise...
_LISTED = 100
#: ... and counts those it left out up to this many (a count reads an index entry for
#: each row it counts).
_MORE_COUNTED = 100_000


def _spaced(number: int) -> str:
    """``1 234 567``: thousands apart, as a count reads at a glance."""
    return f"{number:,}".replace(",", " ")


#: Columns holding Unix times, shown to people as local times.
_TIME_FIELDS = frozenset({"run_at", "line_at", "deadline", "lease_expires_at", "created_at", "state_at",
                          "started_at", "finished_at"})


def _when(at: Any, now: float) -> str:
    """``2026-11-30 14:03:07 (in 5m)`` in the local time zone: what `jobs show`
    prints for a stored time. A time no calendar holds (a deadline of ``inf``, which an
    enqueue may write; a row written by hand, R44) is shown as the number it is."""
    from jobpool.dashboard import duration
    if isinstance(at, bool) or not isinstance(at, (int, float)):
        return shown(at)
    if at == math.inf:
        return "never"
    try:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    except (OverflowError, OSError, ValueError):
        return f"{bounds.number_text(at)} (no date)"
    delta = at - now
    span = duration(abs(delta))
    return f"{stamp} ({'in ' + span if delta > 0 else span + ' ago'})"


def _attempts_text(row: dict[str, Any]) -> str:
    """``spent/budget``; the budget is ``?`` while a job enqueued by name waits for
    the pool that claims it to apply the job's own max_attempts."""
    return f"{whole_text(row['attempts'])}/{whole_text(row['max_attempts'])}"


def cmd_jobs_show(args: argparse.Namespace, out: _Stdout, *, dead_only: bool = False) -> int:
    store = connect(args.db, readonly=True)
    row = store.get(args.id)
    if dead_only and row["status"] != "dead":  # `dead show` showed a ready job as dead
        raise UserError(f"job {args.id} is {row['status']}, not dead: `jobpool jobs show "
                        f"{args.id}` shows it")
    row["attempt_log"] = store.attempts(args.id)
    if args.json:
        print(json.dumps(row, default=str))
        return 0
    attempt_log = row.pop("attempt_log")
    malformed = row.pop("malformed", {})
    now = time.time()
    for key, value in row.items():
        if value is None or key == "last_error":
            continue
        if key in _TIME_FIELDS and isinstance(value, (int, float)):
            value = _when(value, now)
        elif key == "meta":
            value = json.dumps(value, ensure_ascii=False)  # R54: as it was enqueued
        out.print(f"[bold]{key:>16}[/] {markup_escape(value)}", highlight=False, markup=True)
    for key, why in malformed.items():
        # R44: a column that holds what it should not, named with what it holds.
        out.print(f"[bold]{key:>16}[/] malformed: {markup_escape(why)}", highlight=False,
                  markup=True)
    if row["last_error"]:
        out.print("[bold]      last_error[/]", highlight=False, markup=True)
        out.print(row["last_error"], highlight=False)
    if attempt_log:
        table = _table(title="attempts", title_justify="left", box=None)
        # R40: only when some attempt left processes behind, to spare the 80 columns.
        strays = any(a.get("strays") for a in attempt_log)
        for column in ("#", "outcome", "pid", "exit", "wall s", "cpu s", "peak MiB",
                       *(("killed",) if strays else ()), "error"):
            table.add_column(column, overflow="ellipsis", no_wrap=True)
        for a in attempt_log:
            # An attempt line is data (R44): a figure that is no number is left blank.
            ended, started, cpu, rss = (a[k] if bounds.finite_number(a[k]) else None
                                        for k in ("ended_at", "started_at", "cpu_s", "peak_rss"))
            table.add_row(str(a["attempt"]), str(a["outcome"]), str(a["pid"] or ""),
                          str(a["exit_status"] or ""),
                          f"{ended - started:.3f}" if ended is not None and started is not None
                          else "",
                          f"{cpu:.3f}" if cpu is not None else "",
                          f"{rss / 2**20:.1f}" if rss else "",
                          *((str(a.get("strays") or ""),) if strays else ()),
                          str(a["error"] or "").split("\n", 1)[0])
        out.print(table)
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _report(results: dict[int, str], verb: str) -> int:
    """One line per id; exit 1 if any id could not be acted on."""
    failed = 0
    for job_id, what in results.items():
        if what == verb:
            print(f"job {job_id}: {what}")
        else:
            failed += 1
            print(f"job {job_id}: not {verb}: {what}", file=sys.stderr)
    return 1 if failed else 0


def cmd_jobs_cancel(args: argparse.Namespace, out: _Stdout) -> int:
    """R31: every id answered once, in one transaction: an unknown id among them (it
    ended the command with the ids before it cancelled and unsaid) is a line of its own."""
    store = connect(args.db, create=False)
    results = {}
    for job_id, what in store.cancel_many(args.ids).items():
        results[job_id] = {"cancelled": "cancelled", "requested": "cancelled"}.get(
            what, what if what == NO_SUCH_JOB else f"already {what}")
        if what == "requested":
            # R31: the pool reads the request at its next heartbeat. An attempt that
            # ends before that is settled as it ended; the request stays on the row,
            # so a retry (or a later run the job booked) is cancelled once it runs.
            print(f"job {job_id}: running: its pool stops it within about a second and "
                  f"settles it dead (cancelled); if the job ends first, that end stands "
                  f"(done stays done), and a retry it earns is cancelled when it starts")
            results.pop(job_id)
    return _report(results, "cancelled")


def cmd_jobs_run_now(args: argparse.Namespace, out: _Stdout) -> int:
    """R51: ``jobs run-now``: by id (one line each; exit 1 if any was refused), or every
    waiting job matching ``--name``/``--queue``."""
    if args.all_scheduled == bool(args.ids):
        raise UserError("jobs run-now takes job ids or --all-scheduled, not "
                        + ("both" if args.ids else "neither"))
    if (args.name or args.queue) and not args.all_scheduled:
        raise UserError("--name and --queue choose jobs for --all-scheduled; with ids, leave them out")
    store = connect(args.db, create=False)
    if args.all_scheduled:
        moved = store.run_now_matching(name=args.name, queue=args.queue)
        print(f"{counted(moved, 'waiting job')} due now")
        return 0
    answers = store.run_now(args.ids)
    return _report({job_id: MADE_DUE if what == MADE_DUE else
                    "ready and due already" if what == DUE_ALREADY else
                    what if what == NO_SUCH_JOB else f"it is {what}"
                    for job_id, what in answers.items()}, MADE_DUE)


def cmd_jobs_reset_state(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    results = {}
    for job_id in dict.fromkeys(args.ids):  # each once, every one answered
        if store.reset_state(job_id):
            results[job_id] = "reset"
        else:
            try:
                store.get(job_id)
            except JobNotFound:
                results[job_id] = NO_SUCH_JOB
            else:
                results[job_id] = "no saved state"
    return _report(results, "reset")


def cmd_dead_list(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, readonly=True)
    rows = store.dead.list(name=args.name, limit=args.limit)
    if args.json:
        print(json.dumps([_listed(row, _LIST_FIELDS + ("finished_at", "meta")) for row in rows]))
        return 0
    # R67: a dead job's metadata (which request, which tenant) beside it, when one has some.
    metas = [meta_text(row.get("meta")) for row in rows]
    table = _table(box=None)
    for column in ("id", "name", "attempts", *(("meta",) if any(metas) else ()), "reason"):
        table.add_column(column, overflow="ellipsis", no_wrap=column != "reason",
                         max_width=max(out.width // 4, 10) if column == "meta" else None)
    for row, meta in zip(rows, metas):
        table.add_row(str(row["id"]), _cell(row["name"]), _attempts_text(row),
                      *((meta,) if any(metas) else ()), _error_cell(row))
    out.print(table)
    return 0


def cmd_dead_show(args: argparse.Namespace, out: _Stdout) -> int:
    return cmd_jobs_show(args, out, dead_only=True)


def cmd_dead_retry(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    if args.all and args.ids:
        raise UserError("give job ids or --all (with an optional --name), not both")
    if not args.all and not args.ids:
        raise UserError("say which dead jobs to retry: job ids, or --all (with an optional --name)")
    if args.name and not args.all:
        raise UserError("--name goes with --all")
    ids = store.dead.ids(name=args.name) if args.all else args.ids
    if args.all and not ids:
        print("no dead jobs to retry")
        return 0
    report = store.dead.retry_report(ids, reset_state=args.reset_state)
    code = _report(report.answers, "retried")
    # R34: a member of a finished batch runs alone, and one of a cancelled batch counts
    # in it again; an operator retrying a batch's dead members would otherwise wait for
    # callbacks that do not come.
    for batch in report.unfollowed():
        members = batch.members
        many = len(members) > 1
        named = ", ".join(map(str, members[:10])) + (", ..." if len(members) > 10 else "")
        state, does = (("was cancelled", f"count{'' if many else 's'} in it again")
                       if batch.cancelled else ("is finished", f"run{'' if many else 's'} outside it"))
        print(f"batch {batch.batch_id} {state}: job{'s' if many else ''} {named} {does}, and no "
              f"callback of the batch follows {'their' if many else 'its'} end")
    return code


def cmd_dead_delete(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    return _report(store.dead.delete(args.ids), "deleted")


def cmd_dead_purge(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    if out.is_terminal:
        from rich.progress import Progress, SpinnerColumn, TextColumn
        with Progress(SpinnerColumn(), TextColumn("purging dead jobs: {task.completed} deleted"),
                      console=out.console, transient=True) as bar:
            task = bar.add_task("purge", total=None)
            count = store.dead.purge(args.older_than, progress=lambda n: bar.advance(task, n))
    else:
        count = store.dead.purge(args.older_than)
    print(f"purged {counted(count, 'dead job')}")
    return 0


def _since(at: float | None, now: float, form: str) -> str:
    """How long ago ``at`` was, in ``form``; ``?`` for a time a row holds as none (R44)."""
    return "?" if at is None else form.format(now - at)


def cmd_pools(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, readonly=True)
    pools = store.pools()
    if args.json:
        print(json.dumps(pools, default=repr))  # an owner SQLite keeps as bytes (R44)
        return 0
    if not pools:
        print("no pools are running on this store")
        return 0

    now = time.time()
    refusals = []
    cells = []
    for pool in pools:
        counters = pool["counters"]
        # R24/R24b: a row whose supervisor is gone is shown as such until a running
        # pool reclaims its leases and removes it.
        state = f"dead: {pool['dead']}" if pool["dead"] else "running"
        cells.append((pool["host"], str(pool["pid"]), state, str(pool["procs"]), pool["queues"],
                      pool["core"], _since(pool["started_at"], now, "{:.0f}s"),
                      _since(pool["heartbeat_at"], now, "{:.1f}s ago"),
                      str(counters.get("completed", 0)), str(counters.get("dead", 0))))
        if counters.get("scale_refused"):
            refusals.append(f"pool {pool['host']}:{pool['pid']} refused a scale: "
                            f"{counters['scale_refused']}")
    table, left_out = _fitted(out.width, _POOL_COLUMNS, cells, _POOLS_FIT)
    out.print(table)
    if left_out:
        out.line(f"({', '.join(left_out)}: left out at {out.width} columns; --json has every "
                 f"field)")
    for line in refusals:
        out.line(line)
    _print_unserved(out, store.unserved())
    _print_paused(out, store.paused_queues())
    return 0


_POOL_COLUMNS = ("host", "pid", "state", "procs", "queues", "core", "up", "heartbeat", "done",
                 "dead")


def _fitted(width: int, columns: Sequence[str], cells: list[tuple[str, ...]],
            steps: Sequence[tuple[str, str]]) -> tuple[Table, list[str]]:
    """A table of ``cells`` that keeps every value whole within ``width``: until the
    columns fit, ``steps`` are taken in turn, each ``("drop", column)`` (left out) or
    ``("fold", column)`` (its values wrap onto more lines, down to ``_FOLDED`` wide);
    a column neither dropped nor folded never shrinks. Also the columns left out."""
    natural = {name: max(len(name), *(len(row[index]) for row in cells))
               for index, name in enumerate(columns)}
    shown, folded = list(columns), set()

    def room() -> int:
        return sum(min(natural[name], _FOLDED) if name in folded else natural[name]
                   for name in shown) + 2 * (len(shown) - 1)
    for step, name in steps:
        if room() <= width:
            break
        if step == "drop":
            shown.remove(name)
        else:
            folded.add(name)
    table = _table(box=None, pad_edge=False, padding=(0, 1))
    for name in shown:
        table.add_column(name, no_wrap=name not in folded, overflow="fold")
    for row in cells:
        table.add_row(*(row[columns.index(name)] for name in shown))
    return table, [name for name in columns if name not in shown]


#: How narrow ``_fitted`` may fold a column.
_FOLDED = 10
#: ``pools`` at a width too small for all its columns: the core and the uptime go
#: first, then a dead pool's reason wraps (it is what an operator looks for), then
#: queues and host names wrap.
_POOLS_FIT = (("drop", "core"), ("drop", "up"), ("fold", "state"), ("fold", "queues"),
              ("fold", "host"))


def cmd_stop(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    count = store.request_stop(owner=args.pool, host=args.host)
    if not count:
        if args.pool or args.host:
            raise UserError(_no_pool_chosen(store, args))
        print("no pools are running on this store")
        return 0
    print(f"asked {count} pool(s) to stop", flush=True)
    if not args.wait:
        return 0
    asked = liveness.chosen(store.pools(), owner=args.pool, host=args.host)
    end = time.monotonic() + args.wait
    while True:
        running = _still_running(store, asked)
        if not running:
            break
        if time.monotonic() >= end:
            print(f"{len(running)} of {len(asked)} pool(s) still running after --wait "
                  f"{args.wait:g}: {', '.join(shown(p['owner']) for p in running)}",
                  file=sys.stderr)
            return 1
        time.sleep(0.1)
    away = sum(1 for pool in asked if not _on_this_host(pool))
    print(("all pools stopped" if not (args.pool or args.host) else "the pools asked stopped")
          + f": {len(asked)} pool(s), "
          + (f"{away} of them on other hosts (gone from the store)" if away
             else "every process exited"))
    return 0


def _still_running(store, pools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """R25: those of ``pools`` not stopped yet. A pool on this host has stopped once its
    process has exited: it leaves the store's pools table before it closes the store
    (an SQLite file's last checkpoint) and exits. Elsewhere, once its row is gone."""
    listed = {pool["owner"] for pool in liveness.live_pools(store.pools())}
    return [pool for pool in pools
            if (not procinfo.owner_exited(pool["owner"]) if _on_this_host(pool)
                else pool["owner"] in listed)]


def _on_this_host(pool: dict[str, Any]) -> bool:
    owner = pool["owner"]  # a row is data (R44): an owner of no text names no host
    return isinstance(owner, str) and owner.partition(":")[0] == procinfo.host_id()


def cmd_scale(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    count = store.request_scale(args.procs, owner=args.pool, host=args.host)
    if not count:
        raise UserError(_no_pool_chosen(store, args) if args.pool or args.host
                        else "no pools are running on this store")
    # Each pool judges a request against its own bound (R41), which only it knows; past
    # the least default bound, say so rather than let "asked" read as "done".
    least = bounds.LEAST_MAX_PROCS
    print(f"asked {counted(count, 'pool')} to run "
          f"{counted(args.procs, 'process', 'processes')}"
          + (f"; a pool stops at its own bound (--max-procs; at least {least} by default) "
             f"and says so in `jobpool pools`" if args.procs > least else ""))
    return 0


def cmd_pause(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    if store.pause(args.queue):
        print(f"paused queue {args.queue}: running pools claim nothing more from it "
              f"(within a heartbeat); its running jobs finish, enqueues still succeed")
    else:
        print(f"queue {args.queue} was already paused")
    return 0


def cmd_resume(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    if store.resume(args.queue):
        print(f"resumed queue {args.queue}")
    else:
        print(f"queue {args.queue} was not paused")
    return 0


def cmd_metrics(args: argparse.Namespace, out: _Stdout) -> int:
    from jobpool.store_metrics import StoreGauges, serve
    store = connect(args.db, readonly=True)
    gauges = StoreGauges(store, every=args.every)
    if not args.serve:
        gauges.refresh()
        text = gauges.exposition().decode()
        if out.is_terminal:
            # R46: a queue's name is the store's text; a file or a pipe (a textfile
            # collector) gets the exposition exact, a terminal no control character.
            text = "".join(shown(line) + "\n" for line in text.splitlines())
        print(text, end="")  # nothing when stdout is closed
        return 0
    serve(gauges, args.serve, lambda line: print(line, flush=True))
    return 0


def _print_paused(out: _Stdout, paused: list[str]) -> None:
    """R38: a paused queue explains ready jobs that nobody claims."""
    if paused:
        out.line(f"paused queues: {', '.join(paused)} (jobpool resume QUEUE)")


def _no_pool_chosen(store, args: argparse.Namespace) -> str:
    """What --pool/--host matched none of, and what there is."""
    asked = " and ".join(f"{flag} {value}" for flag, value in
                         (("--pool", args.pool), ("--host", args.host)) if value)
    live = liveness.live_pools(store.pools())
    there = ", ".join(f"{p['owner']} on {p['host']}" for p in live) or "none"
    return f"no live pool matches {asked} (live pools: {there})"


def _batch_state(status: Any) -> str:
    if status.cancelled:
        return "cancelled" + ("" if status.finished else " (ending)")
    if status.finished:
        return "finished"
    return "closed" if status.closed else "open"


def cmd_limits_list(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, readonly=True)
    listing = store.limits.listing()
    if args.json:
        print(json.dumps(listing))
        return 0
    if not listing["limits"]:
        print("no limits: every job runs as slots free (job limits come from @job(max_running="
              ", rate=); queue limits from `jobpool limits set`)")
        return 0
    table = _table(box=None)
    for column in ("limit", "of", "max running", "rate", "burst", "per", "running", "set by"):
        table.add_column(column, overflow="ellipsis", no_wrap=True)
    for row in listing["limits"]:
        table.add_row(row["scope"], row["target"], _or_dash(row["max_running"]),
                      _or_dash(row["rate"]), str(row["burst"]) if row["rate"] else "-",
                      _or_dash(row["group_by"]), _or_dash(row.get("running")), row["set_by"])
    out.print(table)
    if listing["groups"]:
        groups = _table(box=None)
        for column in ("job", "group", "running", "max running", "tokens left"):
            groups.add_column(column, overflow="ellipsis", no_wrap=True)
        for group in listing["groups"]:
            groups.add_row(group["name"], group["group"] or "(whole name)", str(group["running"]),
                           _or_dash(group["max_running"]), _or_dash(group["tokens"]))
        out.print(groups)
    return 0


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def cmd_limits_set(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    queue = args.queue
    store.limits.set_queue(queue, args.running)
    print(f"queue {queue}: at most {counted(args.running, 'job')} running at once across every pool "
          f"(from each pool's next heartbeat; running jobs are not stopped)")
    return 0


def cmd_limits_clear(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    queue = args.queue
    if store.limits.clear_queue(queue):
        print(f"queue {queue}: no limit")
    else:
        print(f"queue {queue} had no limit")
    return 0


def cmd_batches_list(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, readonly=True)
    found = store.batches.list(open_only=args.open, limit=args.limit)
    if args.json:
        print(json.dumps([b.as_dict() for b in found]))
        return 0
    now = time.time()
    from jobpool.dashboard import duration
    table = _table(box=None)
    for column in ("id", "state", "ended", "dead", "callbacks", "age"):
        table.add_column(column, overflow="ellipsis", no_wrap=True)
    for b in found:
        callbacks = ", ".join(n for n in (b.on_success, b.on_complete) if n)
        table.add_row(str(b.id), _batch_state(b), f"{b.done + b.dead}/{b.total}", str(b.dead),
                      callbacks, "?" if b.created_at is None
                      else duration(max(0.0, now - b.created_at)))
    out.print(table)
    return 0


def cmd_batches_show(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, readonly=True)
    status = store.batch_status(args.id)
    members = store.batches.members(args.id)
    callbacks = {}
    for which, name, job_id in (("on_success", status.on_success, status.success_job),
                                ("on_complete", status.on_complete, status.complete_job)):
        if name is not None:
            job_status = None
            if job_id is not None:
                try:
                    job_status = store.get(job_id)["status"]
                except JobNotFound:
                    job_status = "swept"
            callbacks[which] = {"name": name, "job": job_id, "status": job_status}
    if args.json:
        print(json.dumps(dict(status.as_dict(), members=members, callbacks=callbacks)))
        return 0
    now = time.time()
    out.print(f"[bold]batch {status.id}[/] {_batch_state(status)}: {counted(status.total, 'job')}, "
              f"{status.done} done, {status.dead} dead, {status.pending} pending", markup=True,
              highlight=False)
    out.print(f"  created {_when(status.created_at, now)}", highlight=False)
    if status.finished_at is not None:
        out.print(f"  finished {_when(status.finished_at, now)}", highlight=False)
    if members:
        out.print("  members in the store: " + ", ".join(
            f"{count} {state}" for state, count in sorted(members.items())), highlight=False)
    for which, callback in callbacks.items():
        out.print(f"  {which}: {callback['name']}: {_callback_state(status, callback)}",
                  highlight=False)
    return 0


def _callback_state(status: Any, callback: dict) -> str:
    if callback["job"] is not None:
        return f"job {callback['job']} ({callback['status']})"
    if status.cancelled:
        return "never: the batch was cancelled"
    if not status.finished:
        return "fires when the last job ends" + ("" if status.closed else ", once closed")
    return "not fired: a job went dead"


def cmd_batches_cancel(args: argparse.Namespace, out: _Stdout) -> int:
    store = connect(args.db, create=False)
    before = store.batch_status(args.id)
    if before.finished:
        raise UserError(f"batch {args.id} is {_batch_state(before)} already: nothing to cancel")
    status = store.batches.cancel(args.id)
    running = store.batches.members(args.id).get("running", 0)
    dead = status.dead - before.dead
    print(f"batch {args.id} cancelled: {counted(dead, 'job')} dead now"
          + (f", {counted(running, 'running one')} asked to stop" if running else "")
          + "; no callback will fire")
    return 0


def cmd_doctor(args: argparse.Namespace, out: _Stdout) -> int:
    path = resolve_path(args.db)
    if is_postgres_url(path):
        if args.salvage:
            raise JobpoolError("--salvage copies what is readable from a damaged SQLite file; "
                               "a PostgreSQL database is backed up and restored with its own "
                               "tools (pg_dump)")
        pg_doctor = factory.doctor(path)
        pg_report = pg_doctor.check(path)
        print("\n".join(pg_doctor.describe(pg_report)),
              file=sys.stdout if pg_report.ok else sys.stderr)
        return 0 if pg_report.ok else 1
    doctor = factory.doctor(path)
    if args.salvage:
        report = doctor.salvage(path, args.salvage)
        print(f"copied {counted(report.copied, 'job')} from {shown(path)} into {shown(args.salvage)}")
        if report.unreadable:
            print(f"{counted(len(report.unreadable), 'job row')} could not be read: "
                  f"{', '.join(map(str, report.unreadable[:20]))}", file=sys.stderr)
        for problem in report.problems:
            print(f"problem: {shown(problem)}", file=sys.stderr)
        return 1 if report.unreadable or report.problems else 0
    report = doctor.check(path)
    if report.ok:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(report.counts.items())) or "no jobs"
        print(f"{shown(path)}: ok ({counts})")
        return 0
    if report.problems:
        print(f"{shown(path)}: {len(report.problems)} problem(s); `jobpool doctor --salvage NEW` "
              f"copies what is readable into a new store", file=sys.stderr)
        for problem in report.problems:
            print(f"  {shown(problem)}", file=sys.stderr)
    if report.malformed_count:
        _print_malformed(path, report.malformed, report.malformed_count)
    return 1


def _print_malformed(path: str, named: list[str], count: int) -> None:
    """R44: the rows doctor found malformed, by id and column (stderr)."""
    from jobpool.store.row_codec import DOCTOR_NOTE
    print(f"{shown(path)}: {count} malformed row(s): {DOCTOR_NOTE}", file=sys.stderr)
    for line in named:
        print(f"  {shown(line)}", file=sys.stderr)
    if count > len(named):
        print(f"  … and {count - len(named)} more", file=sys.stderr)


def cmd_top(args: argparse.Namespace, out: _Stdout) -> int:
    from jobpool.dashboard import run_top
    store = connect(args.db, readonly=True)
    run_top(store, out.console, refresh=None if args.refresh is None else max(args.refresh, 0.1),
            once=args.once)
    return 0


def _web_ready(args: argparse.Namespace) -> None:
    """Before ``web`` imports its ``--app``: the web extra is there (said before a heavy
    import, not after it), and the logging the app's own import-time records go to."""
    try:
        import starlette  # noqa: F401 - the web extra's one check
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        raise UserError(f"the web extra is not installed: pip install '{root}[web]'") from None
    _configure_logging(args.log_format, False)


def cmd_web(args: argparse.Namespace, out: _Stdout) -> int:
    # main() ran _web_ready and imported the --app (R33: the periodic page's schedules
    # are the app's registrations).
    from jobpool.web.server import serve
    serve(args.db, args.bind, token=args.token, token_label=args.token_label,
          read_only=args.read_only, announce=lambda line: print(line, flush=True))
    return 0


COMMANDS = {
    "top": cmd_top,
    "doctor": cmd_doctor,
    "start": cmd_start,
    "enqueue": cmd_enqueue,
    "status": cmd_status,
    ("jobs", "list"): cmd_jobs_list,
    ("jobs", "show"): cmd_jobs_show,
    ("jobs", "cancel"): cmd_jobs_cancel,
    ("jobs", "run-now"): cmd_jobs_run_now,
    ("jobs", "reset-state"): cmd_jobs_reset_state,
    ("dead", "list"): cmd_dead_list,
    ("dead", "show"): cmd_dead_show,
    ("dead", "retry"): cmd_dead_retry,
    ("dead", "delete"): cmd_dead_delete,
    ("dead", "purge"): cmd_dead_purge,
    ("batches", "list"): cmd_batches_list,
    ("batches", "show"): cmd_batches_show,
    ("batches", "cancel"): cmd_batches_cancel,
    ("limits", "list"): cmd_limits_list,
    ("limits", "set"): cmd_limits_set,
    ("limits", "clear"): cmd_limits_clear,
    "pools": cmd_pools,
    "stop": cmd_stop,
    "scale": cmd_scale,
    "pause": cmd_pause,
    "metrics": cmd_metrics,
    "resume": cmd_resume,
    "web": cmd_web,
}


class _Once(argparse.Action):
    """An option given once: ``--args '[1]' --args '[2]'`` queued ``[2]`` alone, where
    a user may have meant both (the last one silently won)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, f"_given_{self.dest}", False):
            parser.error(f"argument {option_string}: given twice; give it once "
                         f"(one JSON value holds them all)")
        setattr(namespace, f"_given_{self.dest}", True)
        setattr(namespace, self.dest, values)


#: (command or None for any, option, its flag, the option it works with, its flag): an
#: option that does nothing without its partner is refused, not ignored (``start
#: --wait-retries 60`` without ``--burst`` waited for nothing, and a reader of the
#: command line would think it did).
_NEEDS = (("start", "wait_retries", "--wait-retries", "burst", "--burst"),
          ("start", "store_timeout", "--store-timeout", "burst", "--burst"),
          ("enqueue", "key_period", "--key-period", "key", "--key"),
          ("metrics", "every", "--every", "serve", "--serve"),
          ("web", "token_label", "--token-label", "token", "--token (or $JOBPOOL_WEB_TOKEN)"),
          (None, "allow_world_writable", "--allow-world-writable", "mode", "--mode"))

#: Pairs of options of which one would silently undo the other.
_CONFLICTS = (("top", "refresh", "--refresh", "once", "--once"),
              ("start", "chunk", "--chunk", "max_jobs", "--max-jobs"))

#: Their values when not given (left None by the parser, to tell "not given" apart).
_UNSET = {"wait_retries": 0.0, "store_timeout": config.STORE_TIMEOUT, "every": 15.0,
          "token_label": "token"}


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and value is not False and value != []


def _refuse_idle_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what _NEEDS and _CONFLICTS name, in one line, exit 2; for ``start`` say it
    and go on: a pool is a service, and a unit file that carried such an option (ignored
    until now) must not stop starting after an upgrade."""
    def said(problem: str) -> None:
        if args.command == "start":
            print(f"jobpool start: warning: {problem}", file=sys.stderr)
        else:
            parser.error(problem)
    for command, dest, flag, partner, partner_flag in _NEEDS:
        if dest == "key_period" and _given(args, "from_file"):
            continue  # --from refuses it with --key, in its own words
        if command in (None, args.command) and _given(args, dest) and not _given(args, partner):
            said(f"argument {flag}: only works with {partner_flag}; add {partner_flag} or "
                 f"drop {flag}" + ("; ignored" if args.command == "start" else ""))
    for command, dest, flag, other, other_flag in _CONFLICTS:
        if args.command == command and _given(args, dest) and _given(args, other):
            said(f"argument {flag}: does not work with {other_flag}; "
                 + ("ignored" if args.command == "start" else "drop one"))
    if args.command == "start":
        names = [name for name, _size in args.chunk]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:  # the last one silently won
            said(f"argument --chunk: {twice[0]!r} given twice; the last one is used")
    for dest, value in _UNSET.items():
        if getattr(args, dest, value) is None:
            setattr(args, dest, value)


def _refuse_empty_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """No option takes an empty string. Each read one as not given: ``dead retry --all
    --name "$NAME"`` with ``NAME`` unset retried every dead job, ``stop --pool ''`` said
    no pool runs while one did, ``start --queues ''`` served every queue."""
    flags: dict[str, str] = {}
    # A command's own argument (``pause QUEUE``) checks itself, and so does an option
    # whose value its type has read (``--args '[""]'``: an empty string is a fine argument).
    checked_elsewhere: set[str] = set()
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            elif action.option_strings and action.type is None:
                flags.setdefault(action.dest, action.option_strings[-1])
            else:
                checked_elsewhere.add(action.dest)
    for dest in checked_elsewhere:
        flags.pop(dest, None)
    for dest, value in vars(args).items():
        if dest in flags and (value == "" or (isinstance(value, list) and "" in value)):
            parser.error(f"argument {flags[dest]}: expected a value, not an empty string")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    if bounds.SETTING_PROBLEMS:  # read from the environment at import
        parser.error(bounds.SETTING_PROBLEMS[0])
    args = parser.parse_args(_attached(argv))
    _refuse_empty_values(parser, args)
    _refuse_idle_options(parser, args)
    if hasattr(args, "mode"):
        _store_mode(parser, args)
    if getattr(args, "db", None) is not None:
        try:
            check_store_name(args.db, "--db")
        except ValueError as exc:
            parser.error(str(exc))
    global _verbose
    _verbose = bool(getattr(args, "verbose", False))
    sub = getattr(args, f"{args.command}_command", None)
    key = (args.command, sub) if sub else args.command
    out: Any = _Stdout()
    stdout = sys.stdout
    # A pool and the web server answer for their own output (the live dashboard, R46;
    # a job's prints in a child, R43): only the short commands are guarded.
    serving = args.command in _SERVING or (args.command == "top" and not args.once)
    guarded = _GuardedOutput(stdout) if stdout is not None and not serving else None
    if guarded is not None:
        sys.stdout = guarded
    try:
        # Every command imports the --app it is given (as `celery -A` does): one that
        # did not took a module that does not exist, or does not import, in silence.
        if args.command == "web":
            _web_ready(args)
        if getattr(args, "app", None):
            cwd = os.getcwd()
            import_app(args.app)
            _paths_after_app(args, cwd)
        code = COMMANDS[key](args, out)
    except (JobpoolError, ValueError) as exc:
        if _debug():
            traceback.print_exc()
        print(f"jobpool: error: {shown(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if guarded is not None:
            guarded.flush()
        sys.stdout = stdout
    if guarded is not None and guarded.failed is not None:
        print(f"jobpool: error: cannot write to standard output: "
              f"{guarded.failed.strerror or guarded.failed}", file=sys.stderr)
        return code or 1
    return code


def run() -> None:
    """The ``jobpool`` command: ``main()``, then exit without the interpreter's teardown.

    Every command closes what it opened (a pool reaps its children and hook
    processes and closes its store, so its WAL is checkpointed away) before
    ``main`` returns; what is left is freeing the heap object by object, which
    took ~60 ms of a 0.3 s ``jobpool start --burst``.
    """
    code = main()
    logging.shutdown()
    from jobpool.forked import leave
    leave(code)  # a reader that went away (`jobpool jobs list | head`) is no error here


if __name__ == "__main__":
    run()
