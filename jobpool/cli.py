"""The ``jobpool`` command: parse, build a config, call the library, exit.

No SQL and no job logic lives here (STYLE habit 8). Any ``JobpoolError`` or bad
value becomes one line on stderr and exit status 1; argparse usage errors exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

from jobpool import core, jobs
from jobpool.errors import JobpoolError
from jobpool.events import JsonFormatter, PlainFormatter
from jobpool.store.sqlite import connect, resolve_path


class UserError(JobpoolError):
    """A CLI mistake: reported as one line."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of seconds, not {text}")
    return value


def _json_value(kind: type, flag: str):
    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"{flag} is not valid JSON: {exc.msg}") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(
                f"{flag} must be a JSON {'array' if kind is list else 'object'}")
        return value
    return parse


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (and exit 2), not a usage dump."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument("--db", help="store path (default $JOBPOOL_DB or ./jobpool.db)")
    common.add_argument("--app", help="module whose import registers the jobs")

    parser = Parser(prog="jobpool", description="Run and inspect a jobpool store.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)

    start = sub.add_parser("start", parents=[common], help="run a pool of worker processes")
    start.add_argument("--procs", type=_positive_int, default=os.cpu_count() or 1,
                       help="child processes (default: CPU count)")
    start.add_argument("--queues", help="comma-separated queues, in order of preference")
    start.add_argument("--burst", action="store_true",
                       help="exit once nothing is running, ready or due within the poll interval")
    start.add_argument("--max-jobs", type=_positive_int, help="exit after this many attempts")
    start.add_argument("--drain", type=_seconds, default=5.0,
                       help="seconds running jobs get to finish on stop (default 5)")
    start.add_argument("--poll-interval", type=_seconds, default=None,
                       help="fallback poll interval in seconds (default 1)")
    start.add_argument("--max-tasks-per-child", type=_positive_int, default=0,
                       help="recycle a child after this many jobs")
    start.add_argument("--log-format", choices=("plain", "json"), default="plain")
    start.add_argument("-q", "--quiet", action="store_true", help="log warnings only")

    enqueue = sub.add_parser("enqueue", parents=[common], help="queue one job by name")
    enqueue.add_argument("name")
    enqueue.add_argument("--args", type=_json_value(list, "--args"), default=[],
                         help="JSON array of positional arguments")
    enqueue.add_argument("--kwargs", type=_json_value(dict, "--kwargs"), default={},
                         help="JSON object of keyword arguments")
    enqueue.add_argument("--key", help="identity key: no second live job with it")
    enqueue.add_argument("--delay", type=_seconds, help="seconds before it may run")
    enqueue.add_argument("--priority", type=int, help="higher runs first")
    enqueue.add_argument("--queue", help="queue name (default: the job's)")
    enqueue.add_argument("--max-attempts", type=_positive_int)
    enqueue.add_argument("--json", action="store_true", help="print the handle as JSON")

    status = sub.add_parser("status", parents=[common], help="counts by status")
    status.add_argument("--json", action="store_true")

    jobs_cmd = sub.add_parser("jobs", help="list and show jobs")
    jobs_sub = jobs_cmd.add_subparsers(dest="jobs_command", required=True, metavar="COMMAND",
                                       parser_class=Parser)
    jobs_list = jobs_sub.add_parser("list", parents=[common], help="list jobs")
    jobs_list.add_argument("--status", choices=("ready", "running", "done", "dead"))
    jobs_list.add_argument("--name")
    jobs_list.add_argument("--limit", type=_positive_int, default=100)
    jobs_list.add_argument("--json", action="store_true")
    jobs_show = jobs_sub.add_parser("show", parents=[common], help="one job and its attempts")
    jobs_show.add_argument("id", type=_positive_int)
    jobs_show.add_argument("--json", action="store_true")
    return parser


def import_app(module: str | None) -> None:
    """Import the user's job module, as ``celery -A`` does, from the current directory."""
    if not module:
        return
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise UserError(f"cannot import --app {module}: {exc}") from None


def _configure_logging(fmt: str, quiet: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root = logging.getLogger("jobpool")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False


def cmd_start(args: argparse.Namespace, out: Console) -> int:
    from jobpool.supervisor import POLL_INTERVAL, PoolConfig, Supervisor
    import_app(args.app)
    queues = tuple(q.strip() for q in args.queues.split(",") if q.strip()) if args.queues else None
    config = PoolConfig(db=resolve_path(args.db), procs=args.procs, queues=queues,
                        burst=args.burst, max_jobs=args.max_jobs, drain=args.drain,
                        poll_interval=args.poll_interval or POLL_INTERVAL,
                        max_tasks_per_child=args.max_tasks_per_child)
    _configure_logging(args.log_format, args.quiet)
    return Supervisor(config).run()


def cmd_enqueue(args: argparse.Namespace, out: Console) -> int:
    import_app(args.app)
    if args.app and jobs.lookup(args.name) is None:
        raise UserError(f"no job named {args.name!r} is registered by --app {args.app}")
    store = connect(args.db)
    handle = store.enqueue_with(args.name, args=args.args, kwargs=args.kwargs, key=args.key,
                                delay=args.delay, priority=args.priority, queue=args.queue,
                                max_attempts=args.max_attempts)
    if args.json:
        out.print_json(json.dumps({"id": handle.id, "duplicate": handle.duplicate}))
    elif handle.duplicate:
        out.print(f"job {handle.id} already queued with key {args.key!r}")
    else:
        out.print(f"queued job {handle.id}")
    return 0


def cmd_status(args: argparse.Namespace, out: Console) -> int:
    store = connect(args.db, create=False)
    counts = store.stats()
    if args.json:
        print(json.dumps(counts))
        return 0
    table = Table(title=f"jobpool store {store.path}", title_justify="left")
    for key in counts:
        table.add_column(key, justify="right")
    table.add_row(*(str(v) for v in counts.values()))
    out.print(table)
    out.print(f"core: {core.NAME}")
    return 0


_LIST_FIELDS = ("id", "name", "queue", "status", "attempts", "max_attempts", "key", "priority",
                "last_error", "run_at", "progress")


def cmd_jobs_list(args: argparse.Namespace, out: Console) -> int:
    store = connect(args.db, create=False)
    rows = store.list_jobs(status=args.status, name=args.name, limit=args.limit)
    if args.json:
        print(json.dumps([{k: row[k] for k in _LIST_FIELDS} for row in rows]))
        return 0
    table = Table(box=None)
    for column in ("id", "name", "queue", "status", "attempts", "key", "last error"):
        table.add_column(column, overflow="ellipsis", no_wrap=True)
    for row in rows:
        error = (row["last_error"] or "").split("\n", 1)[0]
        table.add_row(str(row["id"]), row["name"], row["queue"], row["status"],
                      f"{row['attempts']}/{row['max_attempts']}", row["key"] or "", error)
    out.print(table)
    return 0


def cmd_jobs_show(args: argparse.Namespace, out: Console) -> int:
    store = connect(args.db, create=False)
    row = store.get(args.id)
    row["attempt_log"] = store.attempts(args.id)
    if args.json:
        print(json.dumps(row, default=str))
        return 0
    attempt_log = row.pop("attempt_log")
    for key, value in row.items():
        if value is None or key == "last_error":
            continue
        out.print(f"[bold]{key:>16}[/] {value}", highlight=False)
    if row["last_error"]:
        out.print("[bold]      last_error[/]", highlight=False)
        out.print(row["last_error"], markup=False, highlight=False)
    if attempt_log:
        table = Table(title="attempts", title_justify="left", box=None)
        for column in ("#", "outcome", "pid", "exit", "wall s", "cpu s", "peak MiB", "error"):
            table.add_column(column, overflow="ellipsis", no_wrap=True)
        for a in attempt_log:
            wall = a["ended_at"] - a["started_at"]
            table.add_row(str(a["attempt"]), a["outcome"], str(a["pid"] or ""),
                          a["exit_status"] or "", f"{wall:.3f}",
                          f"{a['cpu_s']:.3f}" if a["cpu_s"] is not None else "",
                          f"{a['peak_rss'] / 2**20:.1f}" if a["peak_rss"] else "",
                          (a["error"] or "").split("\n", 1)[0])
        out.print(table)
    return 0


COMMANDS = {
    "start": cmd_start,
    "enqueue": cmd_enqueue,
    "status": cmd_status,
    ("jobs", "list"): cmd_jobs_list,
    ("jobs", "show"): cmd_jobs_show,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    key = (args.command, args.jobs_command) if args.command == "jobs" else args.command
    out = Console()
    try:
        return COMMANDS[key](args, out)
    except (JobpoolError, ValueError) as exc:
        print(f"jobpool: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
