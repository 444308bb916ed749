"""The live dashboard (R29): pure render functions over a Snapshot, and one Live loop.

As in rich's ``top_lite_simulator``: the data is a dataclass
(:mod:`jobpool.snapshot`), :func:`render` turns it into a renderable without
touching the store, and :func:`run_top` is the only loop, the only reader.
Everything is sized for an 80x24 terminal over SSH first: rows are budgeted so
the frame never scrolls, cells are cut with an ellipsis, never wrapped. A wide
terminal gets more columns and puts queues beside failures.
"""
from __future__ import annotations

import math
import os
import select
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from jobpool import display
from jobpool.display import shown
from jobpool.errors import JobpoolError, StoreError
from jobpool.store.records import OPEN_BATCHES_SHOWN
from jobpool.snapshot import (DrainView, FailureView, QueueView, SlotView, Snapshot,
                              read_snapshot)

if TYPE_CHECKING:
    from jobpool.store.base import Store

#: From this many columns on, the frame gets its wide layout.
WIDE = 120

#: Elapsed time turns red past this share of the job's hard timeout (R20), while
#: there is still time to look at the job before the supervisor kills it.
LATE_SHARE = 0.8

#: R67: the most columns a running job's metadata takes in the wide frame.
META_WIDTH = 32

#: Rows kept for queues and for failures before slots take the rest; slots come
#: first because they are what changes every second.
QUEUE_ROWS = 3
FAILURE_ROWS = 3

#: ``run_top`` waits at least this many times as long as the last read took, so
#: reading a store with a large backlog uses at most a third of a core.
READ_PACING = 2.0

_BAR = "━"


# -- formatting ----------------------------------------------------------------------------

def _count(n: int, capped: bool = False) -> str:
    """Thousands separated; from ten million on in millions, so a count is
    never cut by its column; a ``+`` after a count that is only a bound (R47)."""
    return (f"{n:,}" if n < 10_000_000 else f"{n / 1_000_000:,.0f}M") + ("+" if capped else "")


def duration(seconds: float) -> str:
    """Compact and stable in width: ``42s``, ``300s``, ``17m``, ``5h``, ``3d``."""
    if seconds < 1000:
        return f"{seconds:.0f}s"
    if seconds < 60 * 100:
        return f"{seconds / 60:.0f}m"
    if seconds < 3600 * 100:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _mib(rss: int | None) -> str:
    return "" if rss is None else f"{rss / 1048576:.0f}M"


def _shorten_left(text: str, width: int) -> str:
    """Keep the end of a path, where the file name is."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - width + 1:] if width > 1 else "…"


def _line(*parts: Text | str) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        else:
            text.append_text(part)
    return text


# -- the row budget --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Budget:
    """Lines each section may use below its column header; a section cut short
    spends its last line on a "+N more" line."""

    slots: int
    queues: int
    failures: int


def _fit(count: int, lines: int) -> tuple[int, int]:
    """(rows shown, rows hidden) for ``count`` rows in ``lines`` lines."""
    if count <= lines:
        return count, 0
    shown = max(lines - 1, 0)
    return shown, count - shown


def _budget(snapshot: Snapshot, room: int, wide: bool) -> _Budget:
    """Split ``room`` lines among slots, queues and failures.

    Queues and failures keep a few rows each; slots get the rest, being what a
    person watches; lines the slots leave unused go back to queues, then failures.
    Narrow, the sections are stacked; wide, queues and failures sit side by side.
    """
    n_slots, n_failures = len(snapshot.slots), len(snapshot.failures)
    n_queues = max(len(snapshot.queues), 1)  # an empty store still shows its "no jobs" row
    q_min, f_min = min(n_queues, QUEUE_ROWS), min(n_failures, FAILURE_ROWS)
    # A short terminal keeps the slot header and two slots before the lower rows.
    while 1 + min(n_slots, 2) + _lower(q_min, f_min, n_failures, wide) > room \
            and max(q_min, f_min) > 1:
        q_min, f_min = (q_min, f_min - 1) if f_min >= q_min else (q_min - 1, f_min)
    lower = _lower(q_min, f_min, n_failures, wide)
    base = max(q_min, f_min)
    slot_lines = max(room - 1 - lower, 1)
    spare = max(room - 1 - min(n_slots, slot_lines) - lower, 0)
    if wide:
        return _Budget(slot_lines, min(n_queues, base + spare), min(n_failures, base + spare))
    queues = min(n_queues, q_min + spare)
    failures = min(n_failures, f_min + spare - (queues - q_min))
    return _Budget(slot_lines, queues, failures)


def _lower(queues: int, failures: int, n_failures: int, wide: bool) -> int:
    """Lines taken by the queue and failure sections showing that many rows."""
    if wide:
        return 1 + max(queues, failures)
    return 1 + queues + (1 + failures if n_failures else 0)


# -- header -----------------------------------------------------------------------------------

def _header(snapshot: Snapshot, width: int, wide: bool, problem: str | None,
            phase: str | None = None) -> list[Text]:
    where, totals = _where(snapshot, width, phase), _totals(snapshot)
    # Wide, the totals follow on the same line when the whole line fits; never cut.
    if wide and len(where) + 3 + len(totals) <= width:
        lines = [_line(where, "   ", totals)]
    else:
        lines = [where, totals]
    if any(p.stopping for p in snapshot.pools):
        lines.append(_stopping(snapshot))
    if snapshot.unserved:
        lines.append(_unserved(snapshot))
    lines += _batches(snapshot, width, 3 if wide else 2)
    if problem:
        lines.append(_line(Text(problem, style="bold red")))
    return lines


#: Beside its own pool (``jobpool start``), what the frame says while the store shows
#: no live pool: the pool has not registered yet, or has left (``render``'s ``phase``).
_PHASE_HEADER = {"starting": "pool starting", "stopped": "pool stopped"}
_PHASE_SLOTS = {"starting": "the pool is starting: its slots show here once it has registered",
                "stopped": "the pool has stopped"}


def _where(snapshot: Snapshot, width: int, phase: str | None = None) -> Text:
    """Store, core, pools and the clock; the store path gives way first."""
    busy = sum(1 for s in snapshot.slots if s.busy)
    n = len(snapshot.pools)
    slots = len(snapshot.slots)
    live = (Text(f"{n} pool{'s' * (n != 1)} · {slots} slot{'s' * (slots != 1)} · {busy} busy")
            if n else Text(_PHASE_HEADER.get(phase or "", "no live pool"), style="yellow"))
    if snapshot.stale_pools:
        live.append(f" ({snapshot.stale_pools} stale)", style="yellow")
    clock = time.strftime("%H:%M:%S", time.localtime(snapshot.viewer_time))
    core = f"  core {shown(snapshot.core)}  "  # a pools row's text, and the path: R46
    fixed = len("jobpool ") + len(core) + len(live) + 2 + len(clock)
    store = _shorten_left(shown(snapshot.store), max(width - fixed, 12))
    return _line(Text("jobpool ", style="bold"), Text(store, style="cyan"), core, live, "  ",
                 Text(clock, style="dim"))


def _unserved(snapshot: Snapshot) -> Text:
    """R28: ready jobs no live pool serves (a name nobody registers, a queue nobody
    reads) wait for ever; one line names them, largest first (a count past its bound
    with a ``+``, R47)."""
    groups = ", ".join(f"{_count(u.count, u.capped)} {shown(u.name)}"
                       + (f" ({shown(u.queue)})" if u.queue != "default" else "")
                       for u in snapshot.unserved)
    return _line(Text(f"ready, no pool serves: {groups}", style="bold yellow"))


def _batches(snapshot: Snapshot, width: int, most: int) -> list[Text]:
    """R34: a line per open batch, newest first, with a bar of its members' ends."""
    lines = []
    for batch in snapshot.batches[:most]:
        share = 100.0 * batch.ended / batch.total if batch.total else 100.0
        head = Text(f"batch {batch.id} ")
        tail = Text(f" {_count(batch.ended)}/{_count(batch.total)}")
        if batch.dead:
            tail.append(f" · {_count(batch.dead)} dead", style="red")
        if batch.cancelled:  # its callbacks never fire: none is named
            tail.append(" · cancelled", style="yellow")
        else:
            tail.append("" if batch.closed else " · open", style="dim")
            if batch.callbacks:
                tail.append(f" → {shown(batch.callbacks)}", style="dim")
        bar_width = max(8, min(30, width - len(head) - len(tail) - 6))
        lines.append(_line(head, _bar(share, None, bar_width), tail))
    hidden = len(snapshot.batches) - most
    if hidden > 0:
        lines.append(_more(hidden, "open batch", "open batches"))
    return lines


def _stopping(snapshot: Snapshot) -> Text:
    """R25: a line of its own (the pool line has no room left at 80 columns) for
    the pools draining, each named when more than one pool is live."""
    parts = []
    for pool in snapshot.pools:
        if pool.stopping is None:
            continue
        who = f"{shown(pool.host)}:{pool.pid} " if len(snapshot.pools) > 1 else ""
        parts.append(f"{who}stopping: {_drain(pool.stopping, snapshot.taken_at)}")
    return _line(Text("  ".join(parts), style="bold yellow"))


def _drain(stopping: DrainView, now: float) -> str:
    text = f"{stopping.running} running"
    if stopping.drain_ends_at is None:
        return text
    left = stopping.drain_ends_at - now
    # Rounded up: "ends in 0s" would be said while there is still a second to go.
    return f"{text}, drain ends in {duration(math.ceil(left))}" if left > 0 else \
        f"{text}, drain over"


def _totals(snapshot: Snapshot) -> Text:
    t, capped = snapshot.totals, snapshot.capped
    dead = t.get("dead", 0)

    def count(key: str) -> str:
        return _count(t.get(key, 0), key in capped)
    return _line(f"ready {count('ready')}  sched {count('scheduled')}  "
                 f"running {count('running')}  done {count('done')}  ",
                 Text(f"dead {count('dead')}", style="red" if dead else ""),
                 Text(f"  {_count(snapshot.done_per_min)} done/min", style="bold"))


# -- sections -----------------------------------------------------------------------------------

def _table(width: int) -> Table:
    return Table(box=None, width=width, padding=(0, 1), pad_edge=False, collapse_padding=True,
                 show_edge=False, header_style="bold")


def _more(hidden: int, one: str, many: str, detail: str = "") -> Text:
    """``+1 more queue``, ``+3 more queues (detail)``: the rows a section left out."""
    return _line(Text(f"+{display.counted(hidden, f'more {one}', f'more {many}')}{detail}",
                      style="dim"))


def _bar(progress: float | None, stage: str | None, bar_width: int) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    if progress is not None:
        pct = max(0.0, min(100.0, float(progress)))
        filled = round(pct / 100 * bar_width)
        text.append(_BAR * filled, style="bar.finished" if pct >= 100 else "bar.complete")
        text.append(_BAR * (bar_width - filled), style="bar.back")
        text.append(f" {pct:3.0f}%")
    if stage:
        text.append((" " if progress is not None else "") + shown(stage), style="italic")
    return text


def _elapsed(slot: SlotView) -> Text:
    if slot.elapsed is None:
        return Text("")
    if not slot.timeout:
        return Text(duration(slot.elapsed))
    late = slot.elapsed >= LATE_SHARE * slot.timeout
    return Text(f"{duration(slot.elapsed)}/{duration(slot.timeout)}",
                style="bold red" if late else "")


def _shown_slots(slots: Sequence[SlotView], lines: int) -> tuple[list[SlotView], int]:
    """The slots that fit; when some must be hidden, busy ones are shown first."""
    fitting, hidden = _fit(len(slots), lines)
    if hidden:
        return sorted(slots, key=lambda s: not s.busy)[:fitting], hidden
    return list(slots), 0


def _slots_section(snapshot: Snapshot, width: int, lines: int, wide: bool,
                   phase: str | None = None) -> list[RenderableType]:
    if not snapshot.slots:
        if snapshot.pools:
            idle = "the live pools report no slots yet"
        else:
            idle = _PHASE_SLOTS.get(phase or "",
                                    "no live pool on this store: start one with `jobpool start`")
        return [_line(Text(idle, style="dim"))]
    table = _table(width)
    table.add_column("slot", width=5 if wide else 4, no_wrap=True)
    if wide:
        table.add_column("pool", max_width=24, no_wrap=True, overflow="ellipsis")
    table.add_column("pid", min_width=5, justify="right", no_wrap=True)
    table.add_column("job", min_width=4, justify="right", no_wrap=True)
    # As wide as the longest name up to a cap; the progress column gets the rest,
    # since its stage text is what changes.
    table.add_column("name", max_width=40 if wide else 20, no_wrap=True, overflow="ellipsis")
    # R67: the jobs' metadata, wide only (80 columns have no room for it), and only
    # when a running job has some, so a store without metadata keeps its columns.
    with_meta = wide and any(s.busy and s.meta for s in snapshot.slots)
    # R63: how many rows of a slot's chunk wait behind its job, only while some do.
    with_waiting = any(s.busy and s.waiting for s in snapshot.slots)
    if with_waiting:
        table.add_column("wait", min_width=4, justify="right", no_wrap=True)
    if wide:
        table.add_column("try", width=3, justify="right", no_wrap=True)
    if with_meta:
        table.add_column("meta", max_width=META_WIDTH, no_wrap=True, overflow="ellipsis")
    table.add_column("time", min_width=8, justify="right", no_wrap=True)
    table.add_column("progress", ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column("rss", min_width=4, justify="right", no_wrap=True)
    visible, hidden = _shown_slots(snapshot.slots, lines)
    for slot in visible:
        table.add_row(*_slot_cells(snapshot, slot, wide, with_meta, with_waiting))
    if not hidden:
        return [table]
    busy = sum(1 for s in snapshot.slots if s.busy) - sum(1 for s in visible if s.busy)
    return [table, _more(hidden, "slot", "slots", f" ({busy} busy, {hidden - busy} idle)")]


def _slot_cells(snapshot: Snapshot, slot: SlotView, wide: bool,
                with_meta: bool = False, with_waiting: bool = False) -> list[RenderableType]:
    label = str(slot.slot) if len(snapshot.pools) <= 1 else f"{slot.pool + 1}/{slot.slot}"
    pid = "" if slot.pid is None else str(slot.pid)
    if slot.busy:
        cells: list[RenderableType] = [label, pid, str(slot.job_id), Text(shown(slot.name or "?"))]
        rest: list[RenderableType] = [_elapsed(slot), _bar(slot.progress, slot.stage, 20 if wide else 8)]
    else:
        cells = [label, pid, Text("-", style="dim"), Text("idle", style="dim")]
        rest = ["", ""]
    if with_waiting:
        cells.append(_count(slot.waiting) if slot.busy and slot.waiting else "")
    if wide:
        pool = snapshot.pools[slot.pool] if 0 <= slot.pool < len(snapshot.pools) else None
        cells.insert(1, f"{pool.host}:{pool.pid}" if pool else "")
        cells.append("" if slot.attempt is None or not slot.busy else str(slot.attempt))
    if with_meta:
        cells.append(Text(shown(display.meta_text(slot.meta)) if slot.busy else "", style="dim"))
    return cells + rest + [_mib(slot.rss)]


#: Beside the queues, the failure reasons keep at least this many columns; else the two
#: sections are stacked, each the frame's width (a reason is what a person reads).
FAILURE_REASON_MIN = 60
#: Columns of a wide failure row before its reason: failed, name, try, outcome, ago, gaps.
_FAILURE_FIXED = 8 + 22 + 3 + 9 + 4 + 5
#: The queue section's columns: the widest name shown in full up to this, then counts.
_QUEUE_NAME_MAX = 24
_QUEUE_COUNTS = 5 * 9


def _queues_width(queues: Sequence[QueueView]) -> int:
    """What the queue section needs beside the failures: its longest name (bounded)
    and five counts, no more, so the failures get the rest of the line."""
    longest = max((len(shown(q.queue)) + (9 if q.paused else 0) for q in queues), default=7)
    return min(max(longest, len("queue"), len("no jobs")), _QUEUE_NAME_MAX) + _QUEUE_COUNTS


def _queues_section(queues: Sequence[QueueView], width: int, lines: int) -> list[RenderableType]:
    table = _table(width)
    table.add_column("queue", ratio=1, no_wrap=True, overflow="ellipsis")
    for column in ("ready", "sched", "running", "dead", "done/min"):
        table.add_column(column, width=8, justify="right", no_wrap=True, overflow="ellipsis")
    if not queues:
        table.add_row(Text("no jobs", style="dim"), "", "", "", "", "")
        return [table]
    fitting, hidden = _fit(len(queues), lines)
    for q in queues[:fitting]:
        name = Text(f"{shown(q.queue)} (paused)", style="yellow") if q.paused else Text(shown(q.queue))
        table.add_row(name, _count(q.ready, "ready" in q.capped),
                      _count(q.scheduled, "scheduled" in q.capped), _count(q.running),
                      Text(_count(q.dead, "dead" in q.capped), style="red" if q.dead else ""),
                      _count(q.done_per_min))
    return [table, _more(hidden, "queue", "queues")] if hidden else [table]


def _failures_section(snapshot: Snapshot, width: int, lines: int,
                      wide: bool) -> list[RenderableType]:
    failures = snapshot.failures
    if not failures:
        return [_line(Text("no recent failures", style="dim"))]
    table = _table(width)
    table.add_column("failed", width=8, justify="right", no_wrap=True, overflow="ellipsis")
    table.add_column("name", width=22 if wide else 16, no_wrap=True, overflow="ellipsis")
    if wide:
        table.add_column("try", width=3, justify="right", no_wrap=True)
        table.add_column("outcome", width=9, no_wrap=True, overflow="ellipsis")
    table.add_column("ago", width=4, justify="right", no_wrap=True)
    table.add_column("reason", ratio=1, no_wrap=True, overflow="ellipsis")
    fitting, hidden = _fit(len(failures), lines)
    for f in failures[:fitting]:
        table.add_row(*_failure_cells(snapshot, f, wide))
    return [table, _more(hidden, "failure", "failures")] if hidden else [table]


def _failure_cells(snapshot: Snapshot, f: FailureView, wide: bool) -> list[RenderableType]:
    ago = "?" if f.ended_at is None else duration(max(0.0, snapshot.taken_at - f.ended_at))
    cells: list[RenderableType] = [str(f.job_id), Text(shown(f.name or "?"))]
    if wide:
        cells += ["?" if f.attempt is None else str(f.attempt), Text(shown(f.outcome))]
    return cells + [ago, Text(shown(f.reason), style="red")]


# -- the frame ------------------------------------------------------------------------------------

def render(snapshot: Snapshot, width: int = 80, height: int = 24, *,
           problem: str | None = None, phase: str | None = None) -> RenderableType:
    """One dashboard frame, at most ``width`` columns and ``height - 1`` lines.

    ``problem`` is a line shown under the header, for a read that failed while
    an older snapshot is still on screen. ``phase`` ("starting", "stopped"): the
    frame is drawn beside its own pool, which has not registered yet or has left.
    """
    wide = width >= WIDE
    header = _header(snapshot, width, wide, problem, phase)
    left = _queues_width(snapshot.queues)
    right = width - left - 2
    side_by_side = wide and right - _FAILURE_FIXED >= FAILURE_REASON_MIN
    budget = _budget(snapshot, height - 1 - len(header), side_by_side)
    slots = _slots_section(snapshot, width, budget.slots, wide, phase)
    if not side_by_side:
        lower = _queues_section(snapshot.queues, width, budget.queues)
        if snapshot.failures:
            lower += _failures_section(snapshot, width, budget.failures, wide)
        return Group(*header, *slots, *lower)
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(width=left, no_wrap=True)
    grid.add_column(width=right, no_wrap=True)
    grid.add_row(Group(*_queues_section(snapshot.queues, left, budget.queues)),
                 Group(*_failures_section(snapshot, right, budget.failures, wide)))
    return Group(*header, *slots, grid)


def plain_lines(snapshot: Snapshot) -> list[str]:
    """The frame as one log line, for a stdout that is not a terminal (R29)."""
    t = snapshot.totals
    busy = sum(1 for s in snapshot.slots if s.busy)
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snapshot.viewer_time))
    more = {key: "+" if key in snapshot.capped else "" for key in t}
    line = (f"{clock} ready={t.get('ready', 0)}{more.get('ready', '')} "
            f"scheduled={t.get('scheduled', 0)}{more.get('scheduled', '')} "
            f"running={t.get('running', 0)} done={t.get('done', 0)}{more.get('done', '')} "
            f"dead={t.get('dead', 0)}{more.get('dead', '')} "
            f"done_per_min={snapshot.done_per_min} pools={len(snapshot.pools)} "
            f"slots={len(snapshot.slots)} busy={busy}")
    if snapshot.batches:
        # R34: the newest open batch's progress (the frame shows up to three).
        newest = snapshot.batches[0]
        count = len(snapshot.batches)
        more = "+" if count >= OPEN_BATCHES_SHOWN else ""  # the frame reads no more than that
        line += f" batches_open={count}{more} batch_{newest.id}={newest.ended}/{newest.total}"
    draining = [p.stopping for p in snapshot.pools if p.stopping is not None]
    if draining:
        # Summed over the stopping pools; the drain that ends last is the one to wait for.
        line += f" stopping={sum(d.running for d in draining)}"
        ends = [d.drain_ends_at for d in draining if d.drain_ends_at is not None]
        if len(ends) == len(draining):
            line += f" drain_ends_in={max(0, math.ceil(max(ends) - snapshot.taken_at))}s"
    return [line]


# -- the loop ---------------------------------------------------------------------------------------

#: Seconds between plain lines when stdout is not a terminal and no ``--refresh`` was
#: asked for: a line per live frame would flood a log file.
PLAIN_EVERY = 5.0
#: Seconds between live frames unless asked otherwise.
LIVE_EVERY = 0.5

#: An empty line under the live frame, where the cursor waits. Without it the
#: cursor waits at the end of the frame's last row, which fills the terminal's
#: width: the ``^C`` the terminal echoes on Ctrl-C wraps onto a new row, the
#: frame is redrawn one row lower, and its header stays behind on screen. On its
#: own line the echo is erased with the frame on the next redraw. ``render``
#: leaves it room: a frame is at most ``height - 1`` lines.
_CURSOR_LINE = Text("")


def run_top(store: Store, console: Console, *, refresh: float | None = None,
            once: bool = False, stop: threading.Event | None = None) -> None:
    """Show the dashboard until Ctrl-C or ``stop`` is set; ``once`` prints a single
    frame and returns. ``stop`` lets ``jobpool start`` run it beside its pool.
    ``refresh``: seconds between frames; by default half a second on a terminal and
    ``PLAIN_EVERY`` off one (a line per half second would flood a log file), but one
    asked for is kept off a terminal too (it was raised to ``PLAIN_EVERY`` unsaid).

    The only reader of the store: each turn reads a snapshot and hands it to
    :func:`render`. A first read that fails raises StoreError (the CLI reports
    it); a later one keeps the last frame with the error under its header.
    """
    if once:
        console.print(render(read_snapshot(store), console.width, console.height))
        return
    own_stop = stop is None
    stop = stop or threading.Event()
    previous = None
    if own_stop and threading.current_thread() is threading.main_thread():
        # Ctrl-C only sets the flag the loop waits on (STYLE habit 7): the frame is
        # finished and left once, wherever the interrupt landed.
        previous = signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    try:
        if console.is_terminal:
            _live(store, console, LIVE_EVERY if refresh is None else refresh, stop)
        else:
            _plain(store, console, PLAIN_EVERY if refresh is None else refresh, stop)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_beside_pool(db: str, logs: int, parent_pid: int, refresh: float = 0.5) -> None:
    """The dashboard of ``jobpool start`` on a terminal, in a process forked for it.

    ``logs`` is a pipe of the pool's log lines, printed above the frame; its end
    (the pool closed it) ends the dashboard with its last frame left on screen.
    Ctrl-C is the pool's to act on: a graceful stop shows here as the drain."""
    from jobpool import proctree
    from jobpool.store.factory import connect
    proctree.settle_forked(parent_pid, "jobpool-top")
    store = connect(db, readonly=True)
    try:
        _live(store, display.console(), refresh, threading.Event(), logs=logs)
    finally:
        store.close()


def _live(store: Store, console: Console, refresh: float, stop: threading.Event,
          logs: int | None = None) -> None:
    """Redraw until ``stop`` is set, or (``logs``: beside a pool) the pool closes its
    pipe. Beside its pool the frame never says "no live pool": before the pool's
    first beat it is starting, after its row is gone it has stopped."""
    phase = _Phase(beside=logs is not None)
    started = time.monotonic()
    snapshot, problem = read_snapshot(store), None
    took = time.monotonic() - started
    with Live(console=console, screen=False, auto_refresh=False, transient=False) as live:
        frame = render(snapshot, console.width, console.height, problem=problem,
                       phase=phase.of(snapshot))
        try:
            while True:
                live.update(Group(frame, _CURSOR_LINE), refresh=True)
                pause = max(refresh, READ_PACING * took)
                if stop.wait(pause) if logs is None else not _print_logs(console, logs, pause):
                    break
                started = time.monotonic()
                try:
                    snapshot, problem = read_snapshot(store), None
                except StoreError as exc:
                    problem = f"{exc} (showing the last frame)"
                took = time.monotonic() - started
                frame = render(snapshot, console.width, console.height, problem=problem,
                               phase=phase.of(snapshot))
            if logs is not None:
                # The pool is done: the last frame holds its final counts, said stopped.
                try:
                    snapshot, problem = read_snapshot(store), None
                except StoreError:
                    pass
                frame = render(snapshot, console.width, console.height, problem=problem,
                               phase="stopped")
        finally:
            # Live draws the last frame once more as it stops, from the cursor line
            # up, then ends the line: the frame alone, so nothing trails it.
            live.update(frame, refresh=False)


class _Phase:
    """Where the pool beside this dashboard is, judged from the snapshots: None away
    from a pool (``top``), "starting" until its row first shows, "stopped" after."""

    def __init__(self, beside: bool) -> None:
        self.beside = beside
        self.seen = False

    def of(self, snapshot: Snapshot) -> str | None:
        if not self.beside:
            return None
        if snapshot.pools:
            self.seen = True
            return None
        return "stopped" if self.seen else "starting"


def _print_logs(console: Console, logs: int, wait: float) -> bool:
    """Wait up to ``wait`` seconds, printing the pool's log lines above the frame as
    they come; False once the pool closed the pipe."""
    end = time.monotonic() + wait
    while True:
        ready, _, _ = select.select([logs], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            return True
        data = os.read(logs, 65536)
        if not data:
            return False
        for line in data.decode("utf-8", "replace").splitlines():
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _plain(store: Store, console: Console, every: float, stop: threading.Event) -> None:
    """The view off a terminal: its lines every ``every`` seconds. A reader that went
    away (``jobpool top | head``) ends it (rich exits 1 quietly); a write that fails
    otherwise (a full disk) is a ``JobpoolError`` saying so, not a traceback."""
    while True:
        try:
            for line in plain_lines(read_snapshot(store)):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        except OSError as exc:
            display.to_nowhere(console.file)
            raise JobpoolError(f"cannot write to standard output: {exc.strerror or exc}") from None
        if stop.wait(every):
            return

