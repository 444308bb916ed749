"""Every SQL statement jobpool runs against SQLite, named, with the rule it keeps.

Both cores (compiled and pure) and the store read their statements from here, so
a guard changed in one place is changed everywhere. Times are Unix seconds (REAL).
"""
import json
from typing import Any, Callable, NamedTuple

from jobpool import lifecycle
from jobpool.limits import MAX_GROUP_CHARS
from jobpool.lifecycle import QUIET_OUTCOMES
from jobpool.rollups import COUNTS, MAXIMA
from jobpool.store.attempt_log import DONE_EXIT_STATUS, DONE_LINE, log_sql
from jobpool.store.effects_sql import Dialect, assignments, quote_literal, value_sql
from jobpool.store.rows import ListingDialect

#: How a statement here names what ``lifecycle``'s transitions use: a given value
#: is a named parameter, the row's column its bare name.
DIALECT = Dialect(given=lambda name: ":" + name, column=lambda column: column)
#: The claim's policy defaults are per-name CASEs built once per supervisor
#: (``claim_sql`` fills them in).
_CLAIM_DEFAULTS = {"max_attempts": "{max_attempts}", "timeout": "{timeouts}"}
_CLAIM_DIALECT = DIALECT._replace(default_of=_CLAIM_DEFAULTS.__getitem__)

#: The schema ``SCHEMA`` below creates; older stores are upgraded by store/sqlite/migrations.py.
SCHEMA_VERSION = "15"

#: Page size of a new store. A supervisor's commit rewrites one page per index
#: and table it touches (about nine per job), so the page size sets how many bytes
#: each job costs the WAL: 1 KiB pages made the W1 drain 13 % faster than 4 KiB
#: (BENCHMARKS.md). Rows and index entries are far smaller than a page.
PAGE_SIZE = 1024

# --- the WAL's size (R26a), in one place: store/sqlite/checkpoint.py explains the policy ---

#: ``journal_size_limit`` of the supervisor's connections: what a WAL a burst grew
#: is trimmed back to when it starts over.
WAL_KEEP_BYTES = 16 * 1024 * 1024
#: WAL size past which the supervisor's checkpointer also starts the file over.
WAL_RESTART_BYTES = 4 * 1024 * 1024
#: ``journal_size_limit`` of producers' and operators' connections (they do not
#: checkpoint on a schedule; this bounds what one of them leaves behind).
WAL_PRODUCER_LIMIT = 64 * 1024 * 1024
#: ``wal_autocheckpoint`` of producers' and operators' connections while the disk has
#: room: a commit that leaves the WAL past this many pages copies it into the store.
WAL_PRODUCER_PAGES = 1000
#: R26a: whether a pool has beaten since ``:since``: its checkpointer copies the WAL into
#: the store within a tenth of a second of a change, so a bulk enqueue leaves it that.
LIVE_POOL = "SELECT 1 FROM pools WHERE heartbeat_at > :since LIMIT 1"

#: Marker table: a file without it (and with other tables) is not a jobpool store.
CREATE_META = """
CREATE TABLE IF NOT EXISTS jobpool_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID
"""

#: One row per job. ``line_at`` is the job's place in line (R7, R17): equal to
#: ``run_at`` except after a Defer, which moves ``run_at`` but keeps ``line_at``.
#: ``max_attempts`` and ``timeout`` are NULL when the enqueuer left them to the
#: job's registered options (enqueue by name without importing the job); the
#: first claim writes in the values of the supervisor that runs it.
#: ``chain`` holds the successors still to enqueue (R12) as a JSON list of
#: ``{name, payload, queue, priority, max_attempts, timeout}``; ``chain_root`` is
#: the id of the chain's first job. ``cancel_requested`` asks the owning
#: supervisor to kill a running job (R31); ``hook_done`` marks an on_dead hook as
#: taken (R21). The status's CHECK names its four values as comparisons joined by
#: OR (``STATUS_CHECK``): SQLite evaluates an ``IN`` list of more than two constants
#: through a temporary B-tree it builds anew each time a statement writes a row, so
#: ``status IN (...)`` (``STATUS_CHECK_IN_LIST``, schemas 1-13) cost every enqueue,
#: claim and settle one such B-tree made and thrown away.
STATUS_CHECK_IN_LIST = "CHECK (status IN ('ready', 'running', 'done', 'dead'))"
STATUS_CHECK = "CHECK (status = 'ready' OR status = 'running' OR status = 'done' OR status = 'dead')"
CREATE_JOBS = """
CREATE TABLE IF NOT EXISTS jobs (
    id               INTEGER PRIMARY KEY,
    queue            TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    key              TEXT,
    payload          BLOB    NOT NULL,
    serializer       TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    status           TEXT    NOT NULL {status_check},
    run_at           REAL    NOT NULL,
    line_at          REAL    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER,
    crashes          INTEGER NOT NULL DEFAULT 0,
    deferrals        INTEGER NOT NULL DEFAULT 0,
    deadline         REAL,
    timeout          REAL,
    lease_owner      TEXT,
    lease_expires_at REAL,
    last_error       TEXT,
    progress         REAL,
    stage            TEXT,
    result           BLOB,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    chain            TEXT,
    chain_root       INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    hook_done        INTEGER NOT NULL DEFAULT 0,
    batch_id         INTEGER,
    state            TEXT,
    state_at         REAL,
    grp              TEXT,
    meta             TEXT,
    done_owner       TEXT,
    done_pid         INTEGER,
    done_peak_rss    INTEGER,
    done_cpu_s       REAL,
    done_strays      INTEGER,
    done_exit_status TEXT
)
""".format(status_check=STATUS_CHECK)
#: R61: a success's attempt line in its row (``attempt_log``), with its exit status, and
#: each column's type: added to a store of schema 10 by ``ADD_DONE_LINE``.
DONE_LINE_HERE = (*DONE_LINE, DONE_EXIT_STATUS)
_DONE_LINE_TYPES = ("TEXT", "INTEGER", "INTEGER", "REAL", "INTEGER", "TEXT")
ADD_DONE_LINE = tuple(f"ALTER TABLE jobs ADD COLUMN {column} {kind}"
                      for (column, _field), kind in zip(DONE_LINE_HERE, _DONE_LINE_TYPES))

#: R7: the claim walks this index in claim order, per queue, touching only ready
#: rows; ``name`` and ``run_at`` ride along so the walk filters without visiting
#: the table, and counts of ready/scheduled rows read it alone.
CREATE_CLAIM_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_claim_order
    ON jobs (queue, priority DESC, line_at, id, run_at, name) WHERE status = 'ready'
"""

#: R3: a key is unique among live jobs only; done and dead rows free it.
CREATE_KEY_INDEX = """
CREATE UNIQUE INDEX IF NOT EXISTS jobs_live_key
    ON jobs (name, key) WHERE key IS NOT NULL AND status IN ('ready', 'running')
"""

#: Unique keys over a period: every job of a key (a few rows), to find one that
#: finished recently. Neither its columns nor its condition change after insert, so
#: no claim or settle ever writes to it (a condition on status made the W1 drain
#: measurably slower).
CREATE_FINISHED_KEY_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_key ON jobs (name, key) WHERE key IS NOT NULL
"""

#: R23: reclaim finds expired leases without scanning the table.
CREATE_LEASE_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_leases
    ON jobs (lease_expires_at) WHERE status = 'running'
"""

#: Finished rows by status and age: sweeps (R32), the dead letters newest first, done
#: rows of the last minute. Only finished rows have an entry (schema 12): a settle
#: writes one, an enqueue and a claim none (until schema 11 every row had one, which
#: its claim moved; that was 9 % of a job's WAL, BENCHMARKS.md). The condition is
#: written so that a pool of schema 11 still running while its store is upgraded can
#: read through it by name (``INDEXED BY jobs_status``): its sweep's ``status =
#: :status AND finished_at < :before`` (SQLite cannot see that a bound status is done
#: or dead, but a finish time compared is a finish time that is not NULL) and its
#: ``status = 'dead'`` and ``'done'`` reads. Every done or dead row has a finish time,
#: so the three terms hold the same rows; a row that says otherwise (R44) is in it too.
CREATE_STATUS_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, finished_at)
 WHERE status = 'done' OR status = 'dead' OR finished_at IS NOT NULL
"""

#: R47 (schema 12): the ready, done and dead rows of each status in id order (an
#: SQLite index ends in the rowid), so a page of one of them, newest first, and its
#: count read about as many entries as they show, however many rows are of the other
#: statuses or older (a due ready row's page also reads the rows for their due time,
#: skipping the scheduled ones among them). Running rows have none (``jobs_leases``
#: holds them): a claim removes its row's entry at the front of the ready rows, next
#: to where the settle of the turn before appended its done rows, so one page of the
#: index takes both, and an enqueue appends one.
CREATE_STATUS_IDS_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_status_ids ON jobs (status)
 WHERE status = 'ready' OR status = 'done' OR status = 'dead'
"""

#: R47 (schema 12, keyed by queue and name in schema 13): ready rows by queue, name and
#: the time they are due. Each (queue, name) pair of ready rows is found by one seek
#: (``READY_PAIRS``: the names no pool serves, R28), and within a pair the scheduled
#: and retrying rows (due after now) are a range, a few among a big backlog. Whether a
#: ready row is due moves with the clock, so no index can hold either alone. The count
#: and the page of scheduled rows read it alone, a range per pair. An enqueue, a retry
#: or a deferral writes an entry, a claim removes it (schema 12 keyed it by due time
#: alone: the same writes, and a claim's entry as near the front of its pair's range).
CREATE_READY_DUE_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_ready_due ON jobs (queue, name, run_at) WHERE status = 'ready'
"""

#: R47: the index a page of one status (and no other indexed filter) reads its ids from.
STATUS_INDEXES = {"ready": "jobs_status_ids", "scheduled": "jobs_ready_due",
                  "running": "jobs_leases", "done": "jobs_status_ids", "dead": "jobs_status_ids"}

#: Schema 12: the status index over finished rows only, and the two above.
STATUS_SCHEMA = (CREATE_STATUS_INDEX, CREATE_STATUS_IDS_INDEX, CREATE_READY_DUE_INDEX)
#: The upgrade from schema 11 (whose ``jobs_status`` held every row).
RESHAPE_STATUS_INDEX = ("DROP INDEX IF EXISTS jobs_status", *STATUS_SCHEMA)
#: The upgrade from schema 12 (whose ``jobs_ready_due`` was keyed by due time alone).
REKEY_READY_DUE = ("DROP INDEX IF EXISTS jobs_ready_due", CREATE_READY_DUE_INDEX)

#: One row per attempt: how it ended (R19a forensics). Defer undoes the attempt
#: number, so (job_id, attempt) is not unique; rows are ordered by their rowid.
CREATE_ATTEMPTS = """
CREATE TABLE IF NOT EXISTS attempts (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    owner       TEXT,
    pid         INTEGER,
    started_at  REAL NOT NULL,
    ended_at    REAL NOT NULL,
    outcome     TEXT NOT NULL,
    error       TEXT,
    exit_status TEXT,
    peak_rss    INTEGER,
    cpu_s       REAL,
    strays      INTEGER
)
"""

CREATE_ATTEMPTS_INDEX = "CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id)"

#: One row per live supervisor (R29, R29a): its heartbeat, counters and slots,
#: the job names it serves (comma-separated), and the requests operators leave
#: for it (stop, a new --procs).
CREATE_POOLS = """
CREATE TABLE IF NOT EXISTS pools (
    owner          TEXT PRIMARY KEY,
    host           TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    procs          INTEGER NOT NULL,
    queues         TEXT NOT NULL,
    core           TEXT NOT NULL,
    started_at     REAL NOT NULL,
    heartbeat_at   REAL NOT NULL,
    counters       TEXT NOT NULL DEFAULT '{}',
    slots          TEXT NOT NULL DEFAULT '[]',
    stop_requested INTEGER NOT NULL DEFAULT 0,
    desired_procs  INTEGER,
    names          TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID
"""

#: R33: the last occurrence enqueued per periodic job, so each occurrence is
#: enqueued once however many supervisors race for it.
CREATE_PERIODIC = """
CREATE TABLE IF NOT EXISTS periodic (
    name            TEXT PRIMARY KEY,
    last_occurrence REAL NOT NULL
) WITHOUT ROWID
"""

#: R38: per-queue settings kept in the store, so every pool obeys the same ones:
#: ``paused_at`` is set while the queue is paused (NULL: it is claimed from).
CREATE_QUEUES = """
CREATE TABLE IF NOT EXISTS jobpool_queues (
    queue     TEXT PRIMARY KEY,
    paused_at REAL
) WITHOUT ROWID
"""

#: R34: one row per batch. ``total`` grows with each member's insert; ``done`` and
#: ``dead`` are counted by the statements that end members (MEMBER_DONE and the rest,
#: run by the transition engine of both cores, and by a cancel), and the trigger
#: below enqueues the callbacks when they reach the total. ``on_success`` and
#: ``on_complete`` hold the callbacks as ``{name, payload, queue, priority,
#: max_attempts, timeout}`` (a chain step's shape); ``success_job`` and
#: ``complete_job`` the ids of the jobs they became. ``changed_at`` is the time of
#: the last write that moved a count or closed the batch: the callbacks are due then
#: (triggers have no ``now`` of their own), and keep the batch's place in line
#: (``created_at``). ``finished_at``: the callbacks fired (or, cancelled, its last
#: member ended); nothing changes a finished batch again.
CREATE_BATCHES = """
CREATE TABLE IF NOT EXISTS jobpool_batches (
    id           INTEGER PRIMARY KEY,
    created_at   REAL    NOT NULL,
    changed_at   REAL    NOT NULL,
    total        INTEGER NOT NULL DEFAULT 0,
    done         INTEGER NOT NULL DEFAULT 0,
    dead         INTEGER NOT NULL DEFAULT 0,
    closed_at    REAL,
    cancelled_at REAL,
    finished_at  REAL,
    on_success   TEXT,
    on_complete  TEXT,
    success_job  INTEGER,
    complete_job INTEGER
)
"""

#: R34: open batches for the dashboard, finished ones by age for the sweep.
CREATE_BATCHES_INDEX = "CREATE INDEX IF NOT EXISTS batches_finished ON jobpool_batches (finished_at)"

#: R34: a batch's members (the dead ids a callback receives, ``batches show``).
#: Only rows of a batch are in it, and a row's batch never changes, so no claim or
#: settle writes to it.
CREATE_MEMBERS_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL
"""

#: R34: what a running member added to its own batch, keyed by the member's id and
#: the add's position in its attempt, so a retried member's adds are not made twice.
CREATE_BATCH_ADDS = """
CREATE TABLE IF NOT EXISTS jobpool_batch_adds (
    batch_id INTEGER NOT NULL,
    add_key  TEXT    NOT NULL,
    job_id   INTEGER NOT NULL,
    PRIMARY KEY (batch_id, add_key)
) WITHOUT ROWID
"""

def limited_group(name_expr: str, payload: str | None = None) -> str:
    """R35: the group of a row written without one, by a process that does not know
    its job (an enqueue by name, a chain's next step): NULL unless its name has a
    limit; then the keyword argument its ``group_by`` names, read from the JSON text
    ``payload`` ``[args, kwargs]`` (as text, at most ``MAX_GROUP_CHARS``), or ``''``
    (the whole name's group) when the row has none. Uncorrelated when ``name_expr``
    is a parameter and there is no ``payload``: a statement that writes many rows of
    one name looks the name up once, puts them in the whole name's group, and
    ``REGROUP_NEW`` gives those of a limit per group theirs afterwards."""
    if payload is None:
        return f"(SELECT '' FROM jobpool_limits WHERE scope = 'name' AND target = {name_expr})"
    argument = (f"json_extract({payload}, '$[1].\"' || group_by || '\"')")
    return (f"(SELECT CASE WHEN group_by IS NULL THEN '' ELSE COALESCE(NULLIF(substr(CAST("
            f"CASE WHEN json_valid({payload}) THEN {argument} END AS TEXT), 1, "
            f"{MAX_GROUP_CHARS}), ''), '') END "
            f"FROM jobpool_limits WHERE scope = 'name' AND target = {name_expr})")


#: A row's payload as JSON text where it is JSON (NULL otherwise: pickled arguments
#: are never read).
ROW_PAYLOAD = "CASE WHEN serializer = 'json' THEN CAST(payload AS TEXT) END"


#: R35: the lanes of rows just written (ids ``:first`` to ``:last``) of limited names.
#: Run by the writes that insert rows, not by a trigger on ``jobs``: a trigger's program
#: runs for every row inserted, limited or not, and cost W1's bulk enqueue a third.
LANES_OF_NEW = """
INSERT OR IGNORE INTO jobpool_lanes (queue, priority, name, grp)
SELECT DISTINCT queue, priority, name, grp FROM jobs
 WHERE id BETWEEN :first AND :last AND grp IS NOT NULL AND status = 'ready'
   AND name IN (SELECT target FROM jobpool_limits WHERE scope = 'name')
"""
#: The same for the one row a chain step or a callback just inserted.
LANE_OF_LAST_ROW = """
INSERT OR IGNORE INTO jobpool_lanes (queue, priority, name, grp)
SELECT queue, priority, name, grp FROM jobs
 WHERE id = last_insert_rowid() AND grp IS NOT NULL AND status = 'ready'
   AND name IN (SELECT target FROM jobpool_limits WHERE scope = 'name')
"""
#: Whether a name has a limit, and the keyword argument that names its rows' groups
#: (one look per enqueue_many, before its lanes are made).
LIMITED_NAME = "SELECT group_by FROM jobpool_limits WHERE scope = 'name' AND target = :name"
#: R35: rows ``:first`` to ``:last`` a batch insert of ``:name`` (limited per group)
#: wrote in the whole name's group, each given the group its own arguments name.
REGROUP_NEW = f"""
UPDATE jobs SET grp = {limited_group(":name", ROW_PAYLOAD)}
 WHERE id BETWEEN :first AND :last AND grp = ''
"""
LIMITED_NAMES = "SELECT target FROM jobpool_limits WHERE scope = 'name'"


#: The ``batch`` keyword argument a callback receives (R34), built from the row.
_BATCH_INFO = """json_object('id', NEW.id, 'total', NEW.total, 'done', NEW.done, 'dead', NEW.dead,
    'dead_ids', json(coalesce((SELECT json_group_array(id) FROM (
        SELECT id FROM jobs INDEXED BY jobs_batch WHERE batch_id = NEW.id AND status = 'dead'
         ORDER BY id LIMIT 1000)), '[]')),
    'dead_ids_truncated', json(CASE WHEN NEW.dead > 1000 THEN 'true' ELSE 'false' END))"""


def _fire(column: str, condition: str) -> str:
    """The callback in ``column`` enqueued when ``condition`` holds: due at once, its
    place in line the batch's creation time."""
    return f"""
    INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                      max_attempts, deadline, timeout, created_at, chain, grp, meta)
    SELECT json_extract(NEW.{column}, '$.queue'), json_extract(NEW.{column}, '$.name'), NULL,
           json_set(json_extract(NEW.{column}, '$.payload'), '$[1].batch', json({_BATCH_INFO})),
           'json', json_extract(NEW.{column}, '$.priority'), 'ready', NEW.changed_at,
           NEW.created_at, json_extract(NEW.{column}, '$.max_attempts'), NULL,
           json_extract(NEW.{column}, '$.timeout'), NEW.changed_at, NULL,
           {limited_group(f"json_extract(NEW.{column}, '$.name')")},
           CASE WHEN json_type(NEW.{column}, '$.meta') = 'object'
                THEN json_extract(NEW.{column}, '$.meta') END
     WHERE {condition};
    UPDATE jobpool_batches SET {column.replace('on_', '')}_job = last_insert_rowid()
     WHERE id = NEW.id AND {condition};
    {LANE_OF_LAST_ROW.strip()} AND {condition};"""


def _readable(column: str) -> str:
    """R44 (schema 15): a callback the trigger can enqueue: JSON whose name, queue and
    priority are there and whose payload is JSON, on a batch row with its times.
    Anything else (a row written by hand) is not enqueued: it failed the member's
    settle, and every turn after it, and stopped the pool. (CASE keeps each JSON
    function off text that is not JSON: an AND's order is not promised.)"""
    spec = f"NEW.{column}"
    return (f"CASE WHEN json_valid({spec}) THEN json_extract({spec}, '$.name') IS NOT NULL "
            f"AND json_extract({spec}, '$.queue') IS NOT NULL "
            f"AND json_extract({spec}, '$.priority') IS NOT NULL "
            f"AND coalesce(json_valid(json_extract({spec}, '$.payload')), 0) ELSE 0 END "
            f"AND NEW.changed_at IS NOT NULL AND NEW.created_at IS NOT NULL")


_FIRES_SUCCESS = ("NEW.on_success IS NOT NULL AND NEW.dead = 0 AND NEW.cancelled_at IS NULL AND "
                  + _readable("on_success"))
_FIRES_COMPLETE = "NEW.on_complete IS NOT NULL AND NEW.cancelled_at IS NULL AND " + _readable(
    "on_complete")

#: R34: when the last member of a closed batch ends (or a batch is closed with all its
#: members ended), the same transaction enqueues its callbacks, once: ``on_success``
#: only if no member went dead, ``on_complete`` always; a cancelled batch fires none.
#: R54: each with the metadata its signature carries (schema 10), else none.
DROP_BATCH_FINISHED = "DROP TRIGGER IF EXISTS batch_finished"
CREATE_BATCH_FINISHED = f"""
CREATE TRIGGER IF NOT EXISTS batch_finished
AFTER UPDATE OF done, dead, closed_at, cancelled_at ON jobpool_batches
WHEN NEW.closed_at IS NOT NULL AND NEW.finished_at IS NULL AND NEW.done + NEW.dead >= NEW.total
BEGIN{_fire("on_success", _FIRES_SUCCESS)}{_fire("on_complete", _FIRES_COMPLETE)}
    UPDATE jobpool_batches SET finished_at = NEW.changed_at WHERE id = NEW.id;
END
"""

#: Everything batches add to a store (schema 4).
BATCH_SCHEMA = (CREATE_BATCHES, CREATE_BATCHES_INDEX, CREATE_MEMBERS_INDEX, CREATE_BATCH_ADDS,
                CREATE_BATCH_FINISHED)

#: R35/R36: the limits every pool obeys. ``scope`` 'name': a job's declared
#: ``max_running`` (per group), ``rate`` (as written, ``30/m``) and ``burst``, and
#: the keyword argument that names its rows' groups, written by the last pool that
#: started with it registered (``set_by``); 'queue': ``jobpool limits set --queue``.
CREATE_LIMITS = """
CREATE TABLE IF NOT EXISTS jobpool_limits (
    scope       TEXT    NOT NULL CHECK (scope IN ('name', 'queue')),
    target      TEXT    NOT NULL,
    max_running INTEGER,
    rate        TEXT,
    burst       INTEGER NOT NULL DEFAULT 1,
    group_by    TEXT,
    set_by      TEXT    NOT NULL,
    set_at      REAL    NOT NULL,
    PRIMARY KEY (scope, target)
) WITHOUT ROWID
"""

#: R35/R36: one row per (name, group) a limited claim has met: the row a claim locks
#: (on PostgreSQL) before it counts the group's running jobs, and the group's token
#: bucket (``tokens`` as of ``refilled_at``; NULL: full).
CREATE_GROUPS = """
CREATE TABLE IF NOT EXISTS jobpool_groups (
    name        TEXT NOT NULL,
    grp         TEXT NOT NULL,
    tokens      REAL,
    refilled_at REAL,
    PRIMARY KEY (name, grp)
) WITHOUT ROWID
"""

#: R35: a lane per (queue, priority, name, group) of a limited name that may have
#: ready rows, made when such a row is written or goes back to ready, dropped by a
#: claim that finds it empty. A limited claim visits a queue's lanes by priority,
#: then the one served longest ago first (``served_at``; NULL, never served, first):
#: the rotation between groups. ``seq`` counts the writes that (re)made the lane, so
#: a claim drops only a lane nothing has refilled since it looked (PostgreSQL).
CREATE_LANES = """
CREATE TABLE IF NOT EXISTS jobpool_lanes (
    id        INTEGER PRIMARY KEY,
    queue     TEXT    NOT NULL,
    priority  INTEGER NOT NULL,
    name      TEXT    NOT NULL,
    grp       TEXT    NOT NULL,
    served_at REAL,
    seq       INTEGER NOT NULL DEFAULT 0,
    UNIQUE (queue, priority, name, grp)
)
"""
CREATE_LANES_INDEX = """
CREATE INDEX IF NOT EXISTS jobpool_lanes_rotation
    ON jobpool_lanes (queue, priority DESC, served_at, name, grp)
"""

#: R35: a group's ready rows in claim order, for a lane's probe. Only rows of limited
#: names have a group in the store's eyes (``grp``); other rows are not in it.
CREATE_GROUP_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_group_order
    ON jobs (queue, name, grp, priority, line_at, id, run_at)
 WHERE status = 'ready' AND grp IS NOT NULL
"""

#: Everything limits add to a store (schema 5).
LIMIT_SCHEMA = (CREATE_LIMITS, CREATE_GROUPS, CREATE_LANES, CREATE_LANES_INDEX,
                CREATE_GROUP_INDEX)

#: R28: ``jobs list --name`` and ``--queue`` find their rows here, newest first: an
#: SQLite index ends in the rowid, so each one holds its value's rows in id order.
#: Neither column changes after the insert: claims and settles never write to them.
CREATE_NAME_INDEX = "CREATE INDEX IF NOT EXISTS jobs_name ON jobs (name)"
CREATE_QUEUE_INDEX = "CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (queue)"
#: Everything listings add to a store (schema 6).
LISTING_SCHEMA = (CREATE_NAME_INDEX, CREATE_QUEUE_INDEX)

#: R56: per minute (its start, on the clock of the pools' beats) and job name, what the
#: pools ran: settles, and pickup latency and run time as count, sum, max and a
#: histogram (``jobpool.rollups``). Keyed by minute first, so a chart's window and the
#: trim of what is past ``rollups.KEEP`` are ranges of the key.
CREATE_ROLLUPS = (
    "CREATE TABLE IF NOT EXISTS jobpool_rollups (minute REAL NOT NULL, name TEXT NOT NULL, "
    + ", ".join(f"{c} {'REAL' if c.endswith(('_sum', '_max')) else 'INTEGER'} NOT NULL DEFAULT 0"
                for c in COUNTS)
    + ", PRIMARY KEY (minute, name)) WITHOUT ROWID")

#: R47: a chain's steps, by the id of its first job (the job page's steps before and
#: after it, ``list_jobs(chain=)``), in id order (an SQLite index ends in the rowid).
#: Only chain steps have an entry, written once at their insert: ``chain_root`` never
#: changes, so no claim or settle writes to it, and a job in no chain costs nothing.
CREATE_CHAIN_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_chain ON jobs (chain_root) WHERE chain_root IS NOT NULL
"""

SCHEMA = (
    CREATE_META,
    CREATE_JOBS,
    CREATE_CLAIM_INDEX,
    CREATE_KEY_INDEX,
    CREATE_LEASE_INDEX,
    *STATUS_SCHEMA,
    CREATE_ATTEMPTS,
    CREATE_ATTEMPTS_INDEX,
    CREATE_POOLS,
    CREATE_PERIODIC,
    CREATE_QUEUES,
    CREATE_FINISHED_KEY_INDEX,
    *BATCH_SCHEMA,
    *LIMIT_SCHEMA,
    *LISTING_SCHEMA,
    CREATE_ROLLUPS,
    CREATE_CHAIN_INDEX,
)

# --- enqueue -------------------------------------------------------------------

#: R1/R3: the row is written only after validation; a live (name, key) duplicate
#: makes the INSERT fail on jobs_live_key and the caller returns the existing id.
#: R35: a row of a limited name written without a group gets one (``limited_group``).
#: ``INSERT_JOB_RETURNING`` answers the row's id and group (a grouped row needs its lane).
#: The columns a new row is written with, in ``NewJob``'s order (status between them).
_NEW_JOB_COLUMNS = """jobs (queue, name, key, payload, serializer, priority, status,
                  run_at, line_at, max_attempts, deadline, timeout, created_at, chain, batch_id,
                  grp, meta)"""
INSERT_JOB = f"""
INSERT INTO {_NEW_JOB_COLUMNS}
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'ready', ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
        COALESCE(?15, {limited_group("?2", "CASE WHEN ?5 = 'json' THEN CAST(?4 AS TEXT) END")}),
        ?16)
"""
INSERT_JOB_RETURNING = INSERT_JOB + "RETURNING id, grp\n"

#: R1-R5 for the commonest enqueue (no key, no batch): the row of a name without a
#: limit (R35) in one statement that SQLite commits itself, with no ``BEGIN`` and
#: ``COMMIT`` of its own (a fifth of a non-durable enqueue's CPU). Its group is the
#: one given, as ``INSERT_JOB`` gives an unlimited name's row. A name with a limit
#: writes nothing here: its row needs its group and its lane, written together in
#: ``INSERT_JOB_RETURNING``'s transaction.
INSERT_UNLIMITED_JOB = f"""
INSERT INTO {_NEW_JOB_COLUMNS}
SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'ready', ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16
 WHERE NOT EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = ?2)
"""

#: R4 at speed: a whole enqueue_many batch as one JSON array, unpacked by SQLite
#: itself (one bound value instead of thirteen per row). Its elements are either
#: ``[args, kwargs]`` payloads, or (``:args_only``) argument lists that become the
#: payload ``[args,{}]``, byte for byte what a single enqueue writes. Each row's id
#: is ``:first`` (``NEXT_JOB_ID``, read in the same transaction) plus its element's
#: array index, so the ids follow the order given whatever order ``json_each`` hands
#: the elements over in: an ``ORDER BY key`` made SQLite sort the whole batch in a
#: temporary B-tree first, a tenth of a 100 000-row enqueue (BENCHMARKS.md).
INSERT_BATCH = """
INSERT INTO jobs (id, queue, name, key, payload, serializer, priority, status,
                  run_at, line_at, max_attempts, deadline, timeout, created_at, chain, batch_id,
                  grp)
SELECT :first + key, :queue, :name, NULL,
       CASE WHEN :args_only THEN '[' || value || ',{}]' ELSE value END,
       'json', :priority, 'ready', :run_at, :run_at, :max_attempts, NULL, :timeout, :now, NULL,
       :batch_id, """ + limited_group(":name") + """
  FROM json_each(:batch)
"""

#: The id SQLite would give the next row (one more than the largest, as for a row
#: inserted without one): ``INSERT_BATCH``'s first.
NEXT_JOB_ID = "SELECT coalesce(max(id), 0) + 1 FROM jobs"

#: R1: the first payload of a batch over the size limit (bytes of its UTF-8 text;
#: an argument list gains the five bytes of ``[`` and ``,{}]``).
BATCH_OVERSIZED = """
SELECT key, size FROM (
    SELECT key, length(CAST(value AS BLOB)) + CASE WHEN :args_only THEN 5 ELSE 0 END AS size
      FROM json_each(:batch))
 WHERE size > :max_bytes ORDER BY key LIMIT 1
"""

#: Unique keys over a period: a job with the key that finished since ``:since``.
FIND_RECENT_KEY = """
SELECT id FROM jobs INDEXED BY jobs_key
 WHERE name = :name AND key = :key AND status IN ('done', 'dead') AND finished_at >= :since
 ORDER BY finished_at DESC LIMIT 1
"""

#: R3: the live job that holds a key.
FIND_LIVE_KEY = """
SELECT id FROM jobs WHERE name = ? AND key = ? AND status IN ('ready', 'running')
"""

# --- claim (R6-R10) ----------------------------------------------------------------

#: What a claim answers for each row it takes, in this order (``row_codec``'s claimed
#: row): the row as the claim leaves it (its attempt spent, its policy's defaults
#: filled in where it had none), then its follow-ups (``Lease.follow_ups``' flags).
CLAIMED = ("id", "name", "payload", "serializer", "attempts", "max_attempts", "crashes",
           "timeout", "deadline", "priority", "line_at",
           "(chain IS NOT NULL OR batch_id IS NOT NULL) + 2 * (grp IS NOT NULL)"
           " + 4 * (batch_id IS NOT NULL AND chain IS NULL)", "run_at",
           "chain", "batch_id", "meta")


def _claimed_values() -> str:
    """``CLAIMED`` read before the claim writes the row: each column the claim sets
    as the value it sets it to (``lifecycle.CLAIM``'s, the text ``CLAIM_TAKE_TEMPLATE``
    writes it with)."""
    sets = dict(lifecycle.CLAIM.sets)
    return ", ".join(value_sql(sets[c], _CLAIM_DIALECT) if c in sets else c for c in CLAIMED)


#: R8/R9: a claim is two statements inside the turn's BEGIN IMMEDIATE, whose lock no
#: other writer can take between them: ``CLAIM_PICK_TEMPLATE`` reads up to ``:limit``
#: ready, due rows of one queue, in claim order (R7), for the names this supervisor
#: knows, with the values the claim gives them; ``CLAIM_TAKE_TEMPLATE`` claims each
#: by its id. One ``UPDATE ... RETURNING`` did both, but SQLite runs a RETURNING
#: clause as a program of its own for each row, about a quarter of a one-job turn's
#: statements (BENCHMARKS.md). INDEXED BY pins the walk to the claim-order index: the
#: planner otherwise may pick an index of ready rows by status or by due time
#: (``jobs_status_ids``, ``jobs_ready_due``) and sort every ready row on each claim.
#: ``{served}`` is the condition on the names the supervisor serves, built once per
#: supervisor from quoted literals (``claim_sql``, ``name_is_one_of``).
CLAIM_PICK_TEMPLATE = f"""
SELECT {_claimed_values()}
  FROM jobs INDEXED BY jobs_claim_order
 WHERE status = 'ready' AND queue = :queue AND run_at <= :now AND {{served}}
 ORDER BY priority DESC, line_at, id
 LIMIT :limit
"""

#: The attempt is spent here, at claim time; the status in the guard, so a row that
#: is no longer ready is never claimed (it cannot change between the two statements).
CLAIM_TAKE_TEMPLATE = f"""
UPDATE jobs
   SET {assignments(lifecycle.CLAIM, _CLAIM_DIALECT)}
 WHERE id = :id AND status = 'ready'
"""


class ClaimText(NamedTuple):
    """A supervisor's claim (``CLAIM_PICK_TEMPLATE``, ``CLAIM_TAKE_TEMPLATE``), filled in."""

    pick: str
    take: str


#: Up to this many names, a claim tells a row it serves by comparing its name with each
#: (``name_is_one_of``); beyond, by an ``IN`` list, which SQLite answers from a temporary
#: B-tree it builds each time the statement runs (a few microseconds a turn) and then
#: asks once a row, where comparisons cost each row they look at one per name (the
#: claim looks past the ready rows of names it does not serve, R28).
NAMES_COMPARED = 8


def name_is_one_of(names) -> str:
    """The claim's condition that a row's ``name`` is one of ``names`` (sorted, none
    twice): ``name = 'a' OR name = 'b'`` up to ``NAMES_COMPARED`` names, ``name IN
    ('a', 'b', ...)`` beyond."""
    names = sorted(set(names))
    if len(names) > NAMES_COMPARED:
        return f"name IN ({', '.join(quote_literal(n) for n in names)})"
    return "(" + " OR ".join(f"name = {quote_literal(n)}" for n in names) + ")"


def per_name_case(policies: dict, field: str, fallback) -> str:
    """``CASE name WHEN 'a' THEN 1 ... ELSE fallback END`` over one ``Policy`` field."""
    if not policies:
        return repr(fallback)
    whens = " ".join(f"WHEN {quote_literal(n)} THEN {getattr(p, field)!r}"
                     for n, p in sorted(policies.items()))
    return f"(CASE name {whens} ELSE {fallback!r} END)"


def claim_sql(names, policies, default_policy) -> ClaimText:
    """The claim for one supervisor: its names, and their default ``max_attempts`` and
    ``timeout`` for rows left NULL."""
    names = sorted(set(names))
    if not names:
        raise ValueError("a supervisor needs at least one registered job name")
    known = {n: policies[n] for n in names if n in policies}
    fill = {"served": name_is_one_of(names),
            "max_attempts": per_name_case(known, "max_attempts", int(default_policy.max_attempts)),
            "timeouts": per_name_case(known, "timeout", float(default_policy.timeout))}
    return ClaimText(CLAIM_PICK_TEMPLATE.format(**fill), CLAIM_TAKE_TEMPLATE.format(**fill))


#: R63 with R8: the rows of a chunk just claimed keep their lease longer by the
#: timeouts of the rows before them (``:rows``, a JSON array of [id, attempt, seconds]).
EXTEND_LEASES = """
WITH chunk(id, attempt, extra) AS (
    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
      FROM json_each(:rows))
UPDATE jobs SET lease_expires_at = lease_expires_at + (SELECT extra FROM chunk WHERE chunk.id = jobs.id)
 WHERE id IN (SELECT id FROM chunk) AND lease_owner = :owner AND status = 'running'
   AND attempts = (SELECT attempt FROM chunk WHERE chunk.id = jobs.id)
"""


# --- settle (section 4) ----------------------------------------------------------
# Every settle statement carries the fencing guard: id, lease owner, attempt
# number and status. A stale supervisor's write matches no row (lease_lost).

GUARD = "id = :id AND lease_owner = :owner AND attempts = :attempt AND status = 'running'"

#: ``lifecycle.Decision.statement`` -> the fenced UPDATE that applies it: what each
#: does to the row is ``lifecycle.SETTLES``'s.
#: R61: a success writes its attempt's line into its own row (from the parameters
#: ``rows.attempt_params`` names), where every other end of an attempt adds a row of
#: ``attempts`` (``INSERT_ATTEMPT``).
SETTLE = {name: f"UPDATE jobs SET {assignments(transition, DIALECT)}"
                + "".join(f", {column} = :{given}" for column, given in DONE_LINE_HERE
                          if name == "done")
                + f" WHERE {GUARD}"
          for name, transition in lifecycle.SETTLES.items()}
SETTLE_DONE, SETTLE_RETRY, SETTLE_DEAD = SETTLE["done"], SETTLE["retry"], SETTLE["dead"]
SETTLE_DEFER, SETTLE_RESCHEDULE = SETTLE["defer"], SETTLE["reschedule"]
SETTLE_REQUEUE, SETTLE_RELEASE = SETTLE["requeue"], SETTLE["release"]
SETTLE_INTERRUPT = SETTLE["interrupt"]

#: R34: a member's end counts in its batch, in the transaction of the settle that ended
#: it (run after it for a lease claimed with follow-ups; for a job in no batch, or a
#: batch finished already, it changes nothing). The transition engine runs it on
#: SQLite: a trigger on every status change cost the W1 drain 6 %.
MEMBER_DONE = """
UPDATE jobpool_batches SET done = done + 1, changed_at = :now
 WHERE id = (SELECT batch_id FROM jobs WHERE id = :id) AND finished_at IS NULL
"""
MEMBER_DEAD = """
UPDATE jobpool_batches SET dead = dead + 1, changed_at = :now
 WHERE id = (SELECT batch_id FROM jobs WHERE id = :id) AND finished_at IS NULL
"""
#: R34: ``dead retry`` of a member before the callbacks fired reopens its count;
#: after, the batch is finished and the retried job runs alone. Answers whether the
#: batch reopened was cancelled (it fires no callback when the member ends).
MEMBER_REOPENED = """
UPDATE jobpool_batches SET dead = dead - 1
 WHERE id = (SELECT batch_id FROM jobs WHERE id = :id) AND finished_at IS NULL
RETURNING cancelled_at IS NOT NULL
"""
#: PostgreSQL counts the members a transaction added in its batch's shards, and locks
#: them before a batch cancel; SQLite needs no shards (one writer at a time).
MEMBERS_JOINED = None
LOCK_SHARDS = None

#: R34: a batch's ready members cancelled at once count as dead together.
MEMBERS_CANCELLED = """
UPDATE jobpool_batches SET dead = dead + :cancelled, changed_at = :now
 WHERE id = :id AND finished_at IS NULL
"""

#: R59: the next step's arguments: its own, with its predecessor's result (the row's
#: ``result``, just written by SETTLE_DONE; JSON null when it kept none) under the
#: keyword the step names, when it names one. ``json()`` refuses a result that is
#: not JSON text (a pickled one is a BLOB), and with it the statement alone: the
#: chain stops there, saying why (R44), as for any step that cannot be enqueued.
_SUCCESSOR_PAYLOAD = """CASE WHEN json_extract(chain, '$[0].previous') IS NULL
            THEN json_extract(chain, '$[0].payload')
            ELSE json_set(json_extract(chain, '$[0].payload'),
                          '$[1].' || json_extract(chain, '$[0].previous'), json(result)) END"""

#: R12: the next step of a chain, enqueued in the transaction that completes its
#: predecessor (run right after SETTLE_DONE matched), so a step is never lost or
#: doubled. The rest of the chain travels with it. Run only for a job whose claim
#: returned a chain (a job's ``chain`` is written once, at enqueue). R54, R55: the
#: step carries its own metadata when it has one (a JSON object), else its
#: predecessor's.
ENQUEUE_SUCCESSOR = f"""
INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                  max_attempts, deadline, timeout, created_at, chain, chain_root, grp, meta)
SELECT json_extract(chain, '$[0].queue'), json_extract(chain, '$[0].name'), NULL,
       {_SUCCESSOR_PAYLOAD}, 'json', json_extract(chain, '$[0].priority'),
       'ready', :now, :now, json_extract(chain, '$[0].max_attempts'), NULL,
       json_extract(chain, '$[0].timeout'), :now,
       CASE WHEN json_array_length(chain) > 1 THEN json_remove(chain, '$[0]') END,
       COALESCE(chain_root, id), {limited_group("json_extract(chain, '$[0].name')",
                                                _SUCCESSOR_PAYLOAD)},
       CASE WHEN json_type(chain, '$[0].meta') = 'object' THEN json_extract(chain, '$[0].meta')
            ELSE meta END
  FROM jobs WHERE id = :id AND chain IS NOT NULL
"""

#: SQLite's primary result codes for a statement refused for what it computed (a
#: function's error such as "malformed JSON", a constraint, a type, a size): SQLite
#: rolls back that statement alone and the transaction goes on. Other failures (I/O,
#: a full disk, a lock) may end the transaction, and end the turn with it.
_STATEMENT_ALONE = frozenset({1, 18, 19, 20})


def statement_failed_alone(exc: BaseException, in_transaction: bool) -> bool:
    """R44: whether a failed statement left its transaction whole (and a caller may
    go on with what the row's data made impossible), as ``exc`` and the connection's
    state after it say."""
    code = getattr(exc, "sqlite_errorcode", None)
    return bool(in_transaction) and code is not None and (code & 0xFF) in _STATEMENT_ALONE


#: R44: a chain whose next step could not be enqueued (the row's ``chain`` changed
#: since its claim checked it): the job's own end stands, and its row says why the
#: chain stopped there. Run in the settle's transaction, after the failed insert.
CHAIN_STOPPED = "UPDATE jobs SET last_error = :error WHERE id = :id"

#: R68: what a success's follow-ups run in the compiled turn, in the order
#: ``SqliteDriver.settle`` runs them (``_core.Connection._settle_ends``).
SUCCESS_ENDS = (ENQUEUE_SUCCESSOR, LANE_OF_LAST_ROW, CHAIN_STOPPED, MEMBER_DONE)

#: R44: a claimed (or reclaimed) row the codec refused (``store/row_codec.py``), dead
#: at once with the reason naming the column. Fenced by id, owner and status alone
#: and naming no other column of the row, so the column that is wrong cannot fail it
#: (the owner compared as the bytes it holds: a reclaimed row's may not be UTF-8); its
#: batch's count and the attempt's line follow (``MALFORMED_FOLLOW_UPS``).
SETTLE_MALFORMED = f"""
UPDATE jobs SET {assignments(lifecycle.MALFORMED, DIALECT)}
 WHERE id = :id AND CAST(lease_owner AS BLOB) = CAST(:owner AS BLOB) AND status = 'running'
RETURNING id
"""

#: Forensics: one row per settled attempt (R19a), written in the settle transaction.
INSERT_ATTEMPT = """
INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, outcome,
                      error, exit_status, peak_rss, cpu_s, strays)
VALUES (:id, :attempt, :owner, :pid, :started_at, :now, :outcome,
        :error, :exit_status, :peak_rss, :cpu_s, :strays)
"""

#: R44: what follows ``SETTLE_MALFORMED`` in its transaction: the batch counts its
#: member dead (R34), and the attempt log says the row was refused (R19a).
MALFORMED_FOLLOW_UPS = (MEMBER_DEAD, INSERT_ATTEMPT)

#: R19a: the causes of earlier child deaths, for a quarantine reason.
CRASH_CAUSES = """
SELECT error FROM attempts WHERE job_id = ? AND outcome = 'crash' ORDER BY rowid
"""

# --- recovery (R23, R24) -----------------------------------------------------------

#: R23: running rows whose lease expired, read as leases to settle: each one goes
#: through ``lifecycle.decide`` (kind EXPIRED) like any other attempt's end.
RECLAIMABLE_EXPIRED = """
SELECT id, name, attempts, max_attempts, crashes, deadline, COALESCE(started_at, :now),
       lease_owner
  FROM jobs WHERE status = 'running' AND lease_expires_at < :now
"""

#: R24: the owners holding leases, to spot a dead supervisor on this host.
LEASE_OWNERS = "SELECT DISTINCT lease_owner FROM jobs WHERE status = 'running'"

#: R24, R24b: the running rows of a supervisor that died (kind OWNER_DIED).
RECLAIMABLE_OWNER = """
SELECT id, name, attempts, max_attempts, crashes, deadline, COALESCE(started_at, :now),
       lease_owner
  FROM jobs WHERE status = 'running' AND lease_owner = :owner
"""

# --- operating (R21, R29, R31, R33) ------------------------------------------------------

#: R31: a ready job is cancelled at once; a running one is flagged for its owner.
CANCEL_READY = f"""
UPDATE jobs SET {assignments(lifecycle.CANCEL_READY, DIALECT)} WHERE id = :id AND status = 'ready'
"""
REQUEST_CANCEL = "UPDATE jobs SET cancel_requested = 1 WHERE id = :id AND status = 'running'"

#: R51: waiting jobs (scheduled, or out a retry's backoff) due now, by id or by filter;
#: the answers for the ids it did not move come from ``STATUSES_OF``.
RUN_NOW = f"""
UPDATE jobs SET {assignments(lifecycle.RUN_NOW, DIALECT)}
 WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'ready' AND run_at > :now
RETURNING id, queue
"""
RUN_NOW_MATCHING = f"""
UPDATE jobs SET {assignments(lifecycle.RUN_NOW, DIALECT)}
 WHERE status = 'ready' AND run_at > :now AND (:name IS NULL OR name = :name)
   AND (:queue IS NULL OR queue = :queue)
RETURNING id, queue
"""
STATUSES_OF = "SELECT id, status FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))"
#: R31: the running jobs of one owner that an operator asked to cancel.
CANCELS_FOR_OWNER = """
SELECT id, attempts FROM jobs
 WHERE status = 'running' AND lease_owner = :owner AND cancel_requested = 1
"""

#: R21: take an on_dead hook before running it, so two supervisors never both run it.
TAKE_HOOK = """
UPDATE jobs SET hook_done = 1 WHERE id = :id AND status = 'dead' AND hook_done = 0 RETURNING id
"""
#: R21: dead jobs whose hook a previous supervisor did not get to.
PENDING_HOOKS = "SELECT id FROM jobs WHERE status = 'dead' AND hook_done = 0 AND name IN ({names})"

#: R37: a running attempt's state, fenced like a settle: a stale attempt writes nothing.
SAVE_STATE = f"UPDATE jobs SET state = :state, state_at = :now WHERE {GUARD}"
#: R37: the state the running attempt resumes from (fenced: only its own job's).
READ_STATE = f"SELECT state FROM jobs WHERE {GUARD}"
#: R37: ``jobs reset-state``: the next attempt starts afresh.
RESET_STATE = """
UPDATE jobs SET state = NULL, state_at = NULL WHERE id = :id AND state IS NOT NULL RETURNING id
"""

#: R22: progress from a child, written at the heartbeat; fenced like a settle.
SET_PROGRESS = f"""
UPDATE jobs SET progress = :progress, stage = :stage WHERE {GUARD}
"""

#: R24b: the last column says the row was made by this beat (only an insert writes
#: started_at): its first beat, or its row was removed by a pool that judged it dead.
UPSERT_POOL = """
INSERT INTO pools (owner, host, pid, procs, queues, core, started_at, heartbeat_at, counters, slots,
                   names)
VALUES (:owner, :host, :pid, :procs, :queues, :core, :now, :now, :counters, :slots, :names)
ON CONFLICT (owner) DO UPDATE SET procs = excluded.procs, heartbeat_at = excluded.heartbeat_at,
       counters = excluded.counters, slots = excluded.slots
RETURNING stop_requested, desired_procs, started_at = :now
"""
#: The pool has read its stop / scale request: clear it so it is acted on once.
ACK_STOP = "UPDATE pools SET stop_requested = 0 WHERE owner = :owner"
ACK_SCALE = "UPDATE pools SET desired_procs = NULL WHERE owner = :owner"
DELETE_POOL = "DELETE FROM pools WHERE owner = :owner"
LIST_POOLS = """
SELECT owner, host, pid, procs, queues, core, started_at, heartbeat_at, counters, slots,
       stop_requested, desired_procs, names
  FROM pools ORDER BY started_at
"""
#: R25/R27: requests go to the pools judged live (a JSON array of owners), so a
#: dead pool's row is never counted as a pool that was asked.
#: R26: a write that changes nothing, rolled back: whether this connection can write
#: at all (a pool refuses to start on a store it cannot write).
PROBE_WRITE = "UPDATE jobpool_meta SET value = value WHERE key = 'schema'"

REQUEST_STOP = "UPDATE pools SET stop_requested = 1 WHERE owner IN (SELECT value FROM json_each(:owners))"
REQUEST_SCALE = """
UPDATE pools SET desired_procs = :procs WHERE owner IN (SELECT value FROM json_each(:owners))
"""

#: R38: pause a queue; changes no row when it is paused already.
PAUSE_QUEUE = """
INSERT INTO jobpool_queues (queue, paused_at) VALUES (:queue, :now)
ON CONFLICT (queue) DO UPDATE SET paused_at = excluded.paused_at
 WHERE jobpool_queues.paused_at IS NULL
"""
#: R38: resume a queue; changes no row when it was not paused.
RESUME_QUEUE = "UPDATE jobpool_queues SET paused_at = NULL WHERE queue = :queue AND paused_at IS NOT NULL"
#: R38: what every pool's heartbeat reads.
PAUSED_QUEUES = "SELECT queue FROM jobpool_queues WHERE paused_at IS NOT NULL ORDER BY queue"

#: R33: advance a periodic job to ``occurrence`` only if nobody has yet.
ADVANCE_PERIODIC = """
INSERT INTO periodic (name, last_occurrence) VALUES (:name, :occurrence)
ON CONFLICT (name) DO UPDATE SET last_occurrence = excluded.last_occurrence
 WHERE last_occurrence < excluded.last_occurrence
"""

#: R33/R47: every periodic job's last enqueued occurrence (one row a periodic name).
LIST_PERIODIC = "SELECT name, last_occurrence FROM periodic ORDER BY name"

#: R56: a heartbeat adds what its pool counted to the row of its minute and each name.
UPSERT_ROLLUP = (
    "INSERT INTO jobpool_rollups (minute, name, " + ", ".join(COUNTS) + ") VALUES (?, ?, "
    + ", ".join("?" for _ in COUNTS) + ") ON CONFLICT (minute, name) DO UPDATE SET "
    + ", ".join(f"{c} = max({c}, excluded.{c})" if c in MAXIMA else f"{c} = {c} + excluded.{c}"
                for c in COUNTS))
#: R56: rollups past ``rollups.KEEP``, trimmed by the beats that write them (a key range).
TRIM_ROLLUPS = "DELETE FROM jobpool_rollups WHERE minute < ?"
#: R56: the charts' window, by minute then name (a key range: never the jobs).
READ_ROLLUPS = ("SELECT minute, name, " + ", ".join(COUNTS) + " FROM jobpool_rollups "
                "WHERE minute >= ? ORDER BY minute, name")
#: R56: the same window added up in the query, per minute (of the name ``?``, or of
#: every name when it is NULL) or per name, so a page over three days of many names
#: reads a row a minute, not a row a minute and name.
_TOTALS = ", ".join(f"max({c})" if c in MAXIMA else f"sum({c})" for c in COUNTS)
ROLLUPS_BY_MINUTE = ("SELECT minute, NULL, " + _TOTALS + " FROM jobpool_rollups "
                     "WHERE minute >= :since AND (:name IS NULL OR name = :name) "
                     "GROUP BY minute ORDER BY minute")
ROLLUPS_BY_NAME = ("SELECT NULL, name, " + _TOTALS + " FROM jobpool_rollups "
                   "WHERE minute >= :since GROUP BY name ORDER BY name")

# --- batches (R34) ---------------------------------------------------------------------------

OPEN_BATCH = """
INSERT INTO jobpool_batches (created_at, changed_at, on_success, on_complete)
VALUES (:now, :now, :on_success, :on_complete)
RETURNING id
"""
#: R34: a batch opened for members whose enqueue was then refused: nothing joined it,
#: nothing was armed, so nothing of it is kept (``StoreBatches.discard_unused``).
DISCARD_UNUSED_BATCH = """
DELETE FROM jobpool_batches WHERE id = :id AND total = 0 AND closed_at IS NULL
"""
#: R34: members join an unfinished batch, in the transaction that writes them.
GROW_BATCH = """
UPDATE jobpool_batches SET total = total + :count
 WHERE id = :batch_id AND finished_at IS NULL AND cancelled_at IS NULL
RETURNING id
"""
#: R34: arms the callbacks; the batch_finished trigger fires them now if every
#: member has ended already.
CLOSE_BATCH = """
UPDATE jobpool_batches SET closed_at = :now, changed_at = :now WHERE id = :id AND closed_at IS NULL
"""
#: R34: a cancelled batch fires no callback; its unfinished members are cancelled
#: as ``jobs cancel`` cancels one (R31): ready ones dead now, running ones flagged.
CANCEL_BATCH = """
UPDATE jobpool_batches SET cancelled_at = :now, closed_at = coalesce(closed_at, :now),
       changed_at = :now
 WHERE id = :id AND finished_at IS NULL AND cancelled_at IS NULL
"""
CANCEL_READY_MEMBERS = f"""
UPDATE jobs SET {assignments(lifecycle.CANCEL_READY, DIALECT)} WHERE batch_id = :id AND status = 'ready'
"""
REQUEST_CANCEL_MEMBERS = """
UPDATE jobs SET cancel_requested = 1 WHERE batch_id = :id AND status = 'running'
"""
#: SQLite's cancel takes every member in its own transaction (one writer at a time):
#: none is left for another (PostgreSQL's ``MEMBERS_LEFT``).
MEMBERS_LEFT = None
BATCH_COLUMNS = ("id, created_at, total, done, dead, closed_at, cancelled_at, finished_at, "
                 "on_success, on_complete, success_job, complete_job")
GET_BATCH = f"SELECT {BATCH_COLUMNS} FROM jobpool_batches WHERE id = :id"
LIST_BATCHES = f"""
SELECT {BATCH_COLUMNS} FROM jobpool_batches {{where}} ORDER BY id DESC LIMIT :limit
"""
#: R29: the open batches the dashboard draws, newest first (one a producer never
#: closed stays open for ever; it must not keep newer ones off the screen).
OPEN_BATCHES = f"""
SELECT {BATCH_COLUMNS} FROM jobpool_batches INDEXED BY batches_finished
 WHERE finished_at IS NULL ORDER BY id DESC LIMIT :limit
"""
#: ``batches show``: the members still in the store, by status.
BATCH_MEMBERS = """
SELECT status, count(*) FROM jobs INDEXED BY jobs_batch WHERE batch_id = :id GROUP BY status
"""
#: R60: the sizes of a page of a batch's members that stored a result, in id order
#: after ``:after``, through the members' index (its entries end in the id); then the
#: results of those up to ``:through``, where the page's bytes stop it.
BATCH_RESULT_SIZES = """
SELECT id, length(CAST(result AS BLOB)) FROM jobs INDEXED BY jobs_batch
 WHERE batch_id = :id AND id > :after AND status = 'done' AND result IS NOT NULL
 ORDER BY id LIMIT :limit
"""
BATCH_RESULTS = """
SELECT id, name, serializer, result FROM jobs INDEXED BY jobs_batch
 WHERE batch_id = :id AND id > :after AND id <= :through AND status = 'done'
   AND result IS NOT NULL
 ORDER BY id
"""
#: R34: the batch of a running member (and R54 its metadata, which its adds carry),
#: fenced like a settle: a member whose lease is gone adds nothing.
MEMBER_BATCH = f"SELECT batch_id, meta FROM jobs WHERE {GUARD}"
FIND_ADD = """
SELECT job_id FROM jobpool_batch_adds WHERE batch_id = :batch_id AND add_key = :add_key
"""
RECORD_ADD = """
INSERT INTO jobpool_batch_adds (batch_id, add_key, job_id) VALUES (:batch_id, :add_key, :job_id)
"""
#: R34: finished batches are swept with done rows (``--result-ttl``), a bounded batch
#: per call: first their add keys, then the same rows (oldest first, by the index).
_SWEPT_BATCHES = """
SELECT id FROM jobpool_batches INDEXED BY batches_finished
 WHERE finished_at < :before ORDER BY finished_at, id LIMIT :limit
"""
PURGE_BATCH_ADDS = f"DELETE FROM jobpool_batch_adds WHERE batch_id IN ({_SWEPT_BATCHES})"
PURGE_BATCHES = f"DELETE FROM jobpool_batches WHERE id IN ({_SWEPT_BATCHES})"

# --- dead letters and retention (R32) --------------------------------------------------

#: Newest dead first, through jobs_status (finished rows by status and age).
LIST_DEAD = """
SELECT {columns} FROM jobs WHERE status = 'dead' {name_filter}
 ORDER BY finished_at DESC LIMIT :limit
"""
#: R32: a dead job back in line with a fresh attempt budget; its history stays in
#: the attempt log. Fails on jobs_live_key if a live job now holds its key.
RETRY_DEAD = f"""
UPDATE jobs SET {assignments(lifecycle.RETRY_DEAD, DIALECT)} WHERE id = :id AND status = 'dead'
RETURNING batch_id
"""
DEAD_IDS = """
SELECT id FROM jobs INDEXED BY jobs_status_ids WHERE status = 'dead' {name_filter} ORDER BY id
"""
#: Deletes take at most ``limit`` rows per statement so a sweep never holds the
#: write lock long enough to stall claims.
DELETE_DEAD = "DELETE FROM jobs WHERE id = :id AND status = 'dead' RETURNING id"
PURGE_FINISHED = """
DELETE FROM jobs WHERE id IN (
    SELECT id FROM jobs INDEXED BY jobs_status
     WHERE status = :status AND finished_at < :before LIMIT :limit)
RETURNING id
"""
#: R32: the finished_at of the newest dead row past the retention limit.
DEAD_CUTOFF = """
SELECT finished_at FROM jobs INDEXED BY jobs_status WHERE status = 'dead'
 ORDER BY finished_at DESC LIMIT 1 OFFSET :keep
"""
DELETE_ATTEMPTS = "DELETE FROM attempts WHERE job_id = ?"

# --- reading -------------------------------------------------------------------------

#: Exact counts by status (``stats()``), each from an index of that status's rows alone
#: (running: the leases; the others in id order).
COUNT_BY_STATUS = """
SELECT 'ready', count(*) FROM jobs INDEXED BY jobs_status_ids WHERE status = 'ready'
UNION ALL
SELECT 'running', count(*) FROM jobs INDEXED BY jobs_leases WHERE status = 'running'
UNION ALL
SELECT 'done', count(*) FROM jobs INDEXED BY jobs_status_ids WHERE status = 'done'
UNION ALL
SELECT 'dead', count(*) FROM jobs INDEXED BY jobs_status_ids WHERE status = 'dead'
"""
def queue_walk(table: str, column: str, index: str) -> str:
    """A recursive CTE ``table(column)`` of the queues that have ready rows, each found by
    one seek of ``index`` (which leads with the queue) past the one before, a last row
    NULL."""
    return f"""{table}({column}) AS (
    SELECT (SELECT min(queue) FROM jobs INDEXED BY {index} WHERE status = 'ready')
    UNION ALL
    SELECT (SELECT min(queue) FROM jobs INDEXED BY {index}
             WHERE status = 'ready' AND queue > {table}.{column})
      FROM {table} WHERE {column} IS NOT NULL)"""


#: R28, R47 (schema 13): the (queue, name) pairs of ready rows, as ``ready_pairs(q, n)``
#: (a last row of each queue has ``n`` NULL), walked through ``jobs_ready_due`` one seek
#: a pair (each queue's first name, then each next name past the last): a backlog of a
#: million rows over a few names reads a few entries, not every ready row.
READY_PAIRS_WALK = f"""
WITH RECURSIVE {queue_walk("ready_queues", "q", "jobs_ready_due")},
ready_pairs(q, n) AS (
    SELECT q, (SELECT min(name) FROM jobs INDEXED BY jobs_ready_due
                WHERE status = 'ready' AND queue = ready_queues.q)
      FROM ready_queues WHERE q IS NOT NULL
    UNION ALL
    SELECT q, (SELECT min(name) FROM jobs INDEXED BY jobs_ready_due
                WHERE status = 'ready' AND queue = ready_pairs.q AND name > ready_pairs.n)
      FROM ready_pairs WHERE n IS NOT NULL)
"""
#: R7/R28: the (queue, name) pairs of ready rows, to tell which ready jobs no running
#: pool serves; ``READY_PAIR_COUNT`` then counts those no pool serves.
READY_BY_NAME = READY_PAIRS_WALK + "SELECT q, n FROM ready_pairs WHERE n IS NOT NULL"
#: R28, R47: the ready rows of one (queue, name) pair no pool serves, counted to ``:most``
#: (``COUNT_MOST + 1``: more is shown "10 000+"), a range of ``jobs_ready_due``.
READY_PAIR_COUNT = """
SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_ready_due
                       WHERE status = 'ready' AND queue = :queue AND name = :name LIMIT :most)
"""
#: The (queue, name) pairs of ``READY_PAIRS_WALK`` as the condition that reads a range of
#: ``jobs_ready_due`` for each: an IN list (a join would have SQLite build a Bloom
#: filter of the index first, a walk of every ready row's entry).
IN_READY_PAIRS = "(queue, name) IN (SELECT q, n FROM ready_pairs WHERE n IS NOT NULL)"
#: Scheduled rows: a range of ``jobs_ready_due`` for each (queue, name) pair.
COUNT_SCHEDULED = READY_PAIRS_WALK + f"""
SELECT count(*) FROM jobs INDEXED BY jobs_ready_due
 WHERE {IN_READY_PAIRS} AND status = 'ready' AND run_at > ?
"""
JOB_COLUMNS = (
    "id, queue, name, key, payload, serializer, priority, status, run_at, attempts, "
    "max_attempts, crashes, deferrals, deadline, timeout, lease_owner, lease_expires_at, "
    "last_error, progress, stage, result, created_at, started_at, finished_at, chain_root, "
    "cancel_requested, batch_id, state, state_at, meta"
)
GET_JOB = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"
#: R12: the steps one job's success will enqueue (``Store.waiting_steps``).
WAITING_STEPS = "SELECT chain FROM jobs WHERE id = ?"


def list_jobs(where: list[str], *, newest_first: bool, index: str | None = None) -> str:
    """R28: ``jobs list``: the ids through an index alone (``jobs_name``, ``jobs_queue``,
    a status's own index, ``STATUS_INDEXES``, or the table's id order with no filter),
    then those rows.
    ``where`` are conditions of named parameters; ``:limit`` bounds the rows;
    ``index``: the index the ids are read from (R47: the planner's choice otherwise)."""
    order = "id DESC" if newest_first else "id"
    return (f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ("
            f"{_rows_from(index, where)} ORDER BY {order} LIMIT :limit) ORDER BY {order}")


def _rows_from(index: str | None, where: list[str], column: str = "id") -> str:
    """``column`` (the id, or 1 to count) of the rows ``where`` holds, read through
    ``index``; through ``jobs_ready_due`` (schema 13), a range of it for each (queue,
    name) pair of ready rows (``READY_PAIRS_WALK``), as it leads with those."""
    if index == "jobs_ready_due":
        return (f"{READY_PAIRS_WALK} SELECT {column} FROM jobs INDEXED BY jobs_ready_due"
                f"{_where([IN_READY_PAIRS, *where])}")
    return f"SELECT {column} FROM jobs{f' INDEXED BY {index}' if index else ''}{_where(where)}"


#: R47: how the listing's key, batch and searched filters (``rows.more_filters``) are
#: written here: ``instr`` is a case-sensitive "contains" (LIKE would take ``%`` and
#: ``_`` in the text as wildcards); the payload is compared as bytes; ``max(id)`` is
#: one step down the table's b-tree.
def _meta_matches(pairs: dict[str, Any], mark: Callable[[str], str]
                  ) -> tuple[list[str], dict[str, Any]]:
    """R54: a row whose metadata holds each pair, read with ``json_each`` (a key is
    matched as it is, no JSON path to quote); text that is not a JSON object matches
    nothing and fails no read (R44: the nested CASE keeps ``json_each`` from it)."""
    where: list[str] = []
    params: dict[str, Any] = {}
    for index, (key, value) in enumerate(pairs.items()):
        k, v = f"meta_k{index}", f"meta_v{index}"
        params[k] = key
        if value is None or isinstance(value, bool):
            test = f"type = '{'null' if value is None else str(value).lower()}'"
        else:
            test = (f"type = 'text' AND atom = {mark(v)}" if isinstance(value, str)
                    else f"type IN ('integer', 'real') AND atom = {mark(v)}")
            params[v] = value
        where.append("EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(meta) THEN CASE "
                     "WHEN json_type(meta) = 'object' THEN meta END END) "
                     f"WHERE key = {mark(k)} AND {test})")
    return where, params


LISTING_DIALECT = ListingDialect(
    mark=lambda key: f":{key}",
    contains=lambda column, param: f"instr({column}, {param}) > 0",
    payload_contains=lambda param: f"instr(CAST(payload AS BLOB), CAST({param} AS BLOB)) > 0",
    past_newest=f"({NEXT_JOB_ID})",
    meta_matches=_meta_matches,
)


def count_jobs(where: list[str], index: str | None = None) -> str:
    """How many rows ``list_jobs(where)`` could list, counting at most ``:most``."""
    return f"SELECT count(*) FROM ({_rows_from(index, where, '1')} LIMIT :most)"


def _where(conditions: list[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""

#: Why an operator action matched no row: the job's status, or no row at all.
JOB_STATUS = "SELECT status FROM jobs WHERE id = ?"
#: R19a: a job's attempt lines in order; a success's last, from its row (R61).
LIST_ATTEMPTS = log_sql("jobs", "rowid", lambda name: f":{name}", DONE_LINE_HERE)
#: Every job's attempt lines, in order of their ends: the whole log read as one table
#: (as the tests read it).
ALL_ATTEMPT_LINES = log_sql("jobs", "rowid", None, DONE_LINE_HERE)
#: Next due time of claimable work, for --burst's "nothing due soon" test.
NEXT_READY = """
SELECT min(run_at) FROM jobs INDEXED BY jobs_claim_order
 WHERE status = 'ready' AND name IN ({names}) AND queue IN ({queues})
"""


# --- the dashboard (R29): read in one transaction by SQLiteStore.dashboard --------------

#: Recent failures are looked for among this many newest rows of ``attempts`` only
#: (a success's line is in its job's row, R61), so a store whose last failure is a
#: million attempts ago costs no scan to say so.
FAILURE_WINDOW = 10_000


#: R29: per-queue counts of the live statuses. Ready rows are counted from the
#: claim-order index alone (it carries ``run_at``, so due and scheduled split
#: without visiting the table); running rows through ``jobs_leases`` (at most the
#: slots), dead ones through ``jobs_status_ids`` (``dead_letter_limit`` keeps few).
#: Done rows are left out: no index leads with (queue, status), so a GROUP BY
#: over every row scans the table (0.75-1.3 s on 1 000 000 rows).
QUEUE_COUNTS = """
SELECT queue, 'ready', count(*), total(run_at > :now)
  FROM jobs INDEXED BY jobs_claim_order WHERE status = 'ready' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), 0
  FROM jobs INDEXED BY jobs_leases WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*), 0
  FROM jobs INDEXED BY jobs_status_ids WHERE status = 'dead' GROUP BY queue
"""

#: R29, R47: the dashboard's per-queue counts, each read stopped at ``:most`` rows, so a
#: frame reads so many index entries a queue, not a backlog. The queues with ready rows
#: come from the claim-order index one seek each (its first column), and each queue's
#: ready rows are counted from its first ``:most`` entries in claim order (due and
#: scheduled among them: with ``:most`` of them, both are at least that many). Running
#: rows are all counted (at most the slots). Dead rows: the newest ``:most`` of them by
#: queue, in id order (``dead_letter_limit`` keeps fewer by default).
DASHBOARD_QUEUE_COUNTS = f"""
WITH RECURSIVE {queue_walk("queues", "queue", "jobs_claim_order")}
SELECT queue, 'ready',
       (SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_claim_order
                               WHERE status = 'ready' AND queue = queues.queue LIMIT :most)),
       (SELECT total(run_at > :now) FROM (SELECT run_at FROM jobs INDEXED BY jobs_claim_order
                                          WHERE status = 'ready' AND queue = queues.queue
                                          LIMIT :most))
  FROM queues WHERE queue IS NOT NULL
UNION ALL
SELECT queue, 'running', count(*), 0
  FROM jobs INDEXED BY jobs_leases WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*), 0
  FROM (SELECT queue FROM jobs INDEXED BY jobs_status_ids WHERE status = 'dead'
         ORDER BY id DESC LIMIT :most) GROUP BY queue
"""

#: ``jobpool metrics``: when the oldest due ready row of each queue became due,
#: from the claim-order index alone.
OLDEST_DUE = """
SELECT queue, min(run_at) FROM jobs INDEXED BY jobs_claim_order
 WHERE status = 'ready' AND run_at <= :now GROUP BY queue
"""

#: R29: done rows, counted in ``jobs_status_ids`` without visiting the table, to ``:most``.
DONE_COUNT = """
SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_status_ids WHERE status = 'done'
                       LIMIT :most)
"""

#: R29 done/min: the rows finished in the last minute, a short range of
#: ``jobs_status (status, finished_at)``.
DONE_SINCE = """
SELECT queue, count(*) FROM jobs INDEXED BY jobs_status
 WHERE status = 'done' AND finished_at > :since GROUP BY queue
"""

#: R29 recent failures: newest attempts first by rowid (the table's own order,
#: no sort), bounded to the last FAILURE_WINDOW attempts. LEFT JOIN because
#: retention may have swept the job while its attempt row is still read.
RECENT_FAILURES = f"""
SELECT a.job_id, j.name, a.attempt, a.outcome, a.ended_at, a.error
  FROM attempts AS a LEFT JOIN jobs AS j ON j.id = a.job_id
 WHERE a.rowid > (SELECT coalesce(max(rowid), 0) FROM attempts) - :window
   AND a.outcome NOT IN ({", ".join(f"'{o}'" for o in QUIET_OUTCOMES)})
 ORDER BY a.rowid DESC LIMIT :limit
"""

#: R29 slots: the running rows, read with the counts so a slot row never lags
#: them. The heartbeat's slot list is up to a beat old (a job dispatched since
#: is missing from it); it still gives each slot's pid and RSS, which only the
#: supervisor knows. All of ``jobs_leases``: running rows are at most the live
#: pools' slots, plus leases of dead pools not yet reclaimed. R67: with each job's
#: metadata, which the dashboards show beside it.
RUNNING_JOBS = """
SELECT id, name, lease_owner, attempts, started_at, timeout, progress, stage, meta
  FROM jobs INDEXED BY jobs_leases WHERE status = 'running'
"""

#: Every statement the dashboard reads with, for the test that checks their query plans.
DASHBOARD_QUERIES = (DASHBOARD_QUEUE_COUNTS, DONE_COUNT, DONE_SINCE, RECENT_FAILURES, RUNNING_JOBS,
                     READY_BY_NAME, OPEN_BATCHES)

# --- limits (R35, R36) ---------------------------------------------------------------
# A limited claim's reads and writes (``store/limit_claim.py``), inside the claim's
# transaction; lists travel as one JSON array (``listed``).


def listed(values) -> str:
    """A list parameter as SQLite takes it: one JSON array, unpacked by json_each."""
    return json.dumps(list(values))


#: R35: a lane's row made again when a row of a limited name goes back to ready (a
#: retry, defer, release, interrupt, reschedule): run by the transition engine after
#: such a settle of a lease claimed with follow-ups, and by ``dead retry``.
LANE_READY = """
INSERT OR IGNORE INTO jobpool_lanes (queue, priority, name, grp)
SELECT queue, priority, name, grp FROM jobs
 WHERE id = :id AND status = 'ready' AND grp IS NOT NULL
   AND EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = jobs.name)
"""

#: The next page of a queue's lanes of these names, in rotation order, each with its
#: group's bucket, running jobs (few: one per busy slot) and first due row, in one
#: statement: every group is held (SQLite needs no lock: one writer at a time).
LANE_PAGE = """
WITH running AS (
    SELECT name, COALESCE(grp, '') AS grp, count(*) AS n FROM jobs INDEXED BY jobs_leases
     WHERE status = 'running' AND name IN (SELECT value FROM json_each(:names)) GROUP BY 1, 2)
SELECT c.id, c.queue, c.priority, c.name, c.grp, c.served_at, c.seq, 1, c.tokens,
       c.refilled_at, COALESCE(r.n, 0), h.id, h.priority, h.line_at
  FROM (SELECT l.id, l.queue, l.priority, l.name, l.grp, l.served_at, l.seq, g.tokens, g.refilled_at,
               (SELECT id FROM jobs INDEXED BY jobs_group_order
                 WHERE status = 'ready' AND grp IS NOT NULL AND queue = l.queue
                   AND name = l.name AND grp = l.grp AND priority = l.priority
                   AND run_at <= :now
                 ORDER BY line_at, id LIMIT 1) AS head
          FROM jobpool_lanes AS l
          LEFT JOIN jobpool_groups AS g ON g.name = l.name AND g.grp = l.grp
         WHERE l.queue = :queue AND l.name IN (SELECT value FROM json_each(:names))
         ORDER BY l.priority DESC, l.served_at, l.name, l.grp
         LIMIT :count OFFSET :offset) AS c
  LEFT JOIN running AS r ON r.name = c.name AND r.grp = c.grp
  LEFT JOIN jobs AS h ON h.id = c.head
 ORDER BY c.priority DESC, c.served_at, c.name, c.grp
"""

#: A lane's due rows in claim order (``jobs_group_order``).
PROBE_LANE = """
SELECT id, priority, line_at FROM jobs INDEXED BY jobs_group_order
 WHERE status = 'ready' AND grp IS NOT NULL AND queue = :queue AND name = :name
   AND grp = :grp AND priority = :priority AND run_at <= :now
 ORDER BY line_at, id LIMIT :count
"""

#: A lane whose group has no ready row left (due or not) goes, unless it was made
#: again since the claim read it.
DROP_EMPTY_LANE = """
DELETE FROM jobpool_lanes
 WHERE id = :id AND seq = :seq
   AND NOT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_group_order
                    WHERE status = 'ready' AND grp IS NOT NULL AND queue = :queue
                      AND name = :name AND grp = :grp AND priority = :priority)
"""

#: The lanes a claim took rows from go to the back of the rotation (``:ids``, a JSON
#: array of their ids).
SERVE_LANES = """
UPDATE jobpool_lanes SET served_at = :now WHERE id IN (SELECT value FROM json_each(:ids))
"""

#: A queue's running jobs, for its limit (running rows are few: one per busy slot).
RUNNING_IN_QUEUE = """
SELECT count(*) FROM jobs INDEXED BY jobs_leases WHERE status = 'running' AND queue = :queue
"""
#: PostgreSQL locks a queue's limit row before it counts; SQLite has one writer.
LOCK_QUEUE_LIMIT = None

#: A rated group's bucket after a claim took tokens from it (made on first use).
SET_TOKENS = """
INSERT INTO jobpool_groups (name, grp, tokens, refilled_at) VALUES (:name, :grp, :tokens, :now)
ON CONFLICT (name, grp) DO UPDATE SET tokens = excluded.tokens, refilled_at = excluded.refilled_at
"""

#: The ready, due rows of this pool's unlimited names in a queue, in claim order.
PROBE_UNLIMITED_TEMPLATE = """
SELECT id, priority, line_at FROM jobs INDEXED BY jobs_claim_order
 WHERE status = 'ready' AND queue = :queue AND run_at <= :now AND {served}
 ORDER BY priority DESC, line_at, id LIMIT :count
"""

#: The rows a limited claim chose (``:ids``), picked as ``CLAIM_PICK_TEMPLATE`` picks
#: (the same values) and then each taken by ``CLAIM_TAKE_TEMPLATE``.
CLAIM_IDS_PICK_TEMPLATE = f"""
SELECT {_claimed_values()}
  FROM jobs
 WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'ready'
"""


def limited_claim_sql(names, unlimited, policies, default_policy
                      ) -> tuple[ClaimText, str | None]:
    """A limited pool's claim of chosen ids, and its probe of unlimited names (None
    when every name it serves is limited)."""
    known = {n: policies[n] for n in sorted(set(names)) if n in policies}
    fill = {"max_attempts": per_name_case(known, "max_attempts", int(default_policy.max_attempts)),
            "timeouts": per_name_case(known, "timeout", float(default_policy.timeout))}
    by_ids = ClaimText(CLAIM_IDS_PICK_TEMPLATE.format(**fill), CLAIM_TAKE_TEMPLATE.format(**fill))
    probe = PROBE_UNLIMITED_TEMPLATE.format(served=name_is_one_of(unlimited)) if unlimited else None
    return by_ids, probe


# The limits themselves (``store/limit_store.py``).

PUT_LIMIT = """
INSERT INTO jobpool_limits (scope, target, max_running, rate, burst, group_by, set_by, set_at)
VALUES (:scope, :target, :max_running, :rate, :burst, :group_by, :set_by, :now)
ON CONFLICT (scope, target) DO UPDATE SET
    max_running = excluded.max_running, rate = excluded.rate, burst = excluded.burst,
    group_by = excluded.group_by, set_by = excluded.set_by, set_at = excluded.set_at
"""
DELETE_LIMIT = "DELETE FROM jobpool_limits WHERE scope = :scope AND target = :target"
READ_LIMITS = """
SELECT scope, target, max_running, rate, burst, group_by, set_by, set_at
  FROM jobpool_limits ORDER BY scope, target
"""
#: A name that becomes limited: its live rows without a group take the one their
#: keyword argument names (a limit per group) or the whole name's, and its ready rows
#: get their lanes.
ADOPT_LIMITED = f"""
UPDATE jobs SET grp = {limited_group(":name", ROW_PAYLOAD)}
 WHERE name = :name AND grp IS NULL AND status IN ('ready', 'running')
"""
#: SQLite adopts every row in the declare's own transaction (one writer at a time).
ADOPT_LEFT = None
LANES_OF_NAME = """
INSERT OR IGNORE INTO jobpool_lanes (queue, priority, name, grp)
SELECT DISTINCT queue, priority, name, grp FROM jobs
 WHERE name = :name AND status = 'ready' AND grp IS NOT NULL
"""
#: A name no longer limited: its rows are claimed the ordinary way, its lanes go.
DROP_LANES_OF_NAME = "DELETE FROM jobpool_lanes WHERE name = :name"
#: ``limits list``: the groups met so far, their running jobs and buckets.
GROUP_ROWS = """
SELECT g.name, g.grp, g.tokens, g.refilled_at,
       (SELECT count(*) FROM jobs INDEXED BY jobs_leases
         WHERE status = 'running' AND name = g.name AND COALESCE(grp, '') = g.grp)
  FROM jobpool_groups AS g ORDER BY g.name, g.grp LIMIT :limit
"""
RUNNING_BY_QUEUE = """
SELECT queue, count(*) FROM jobs INDEXED BY jobs_leases WHERE status = 'running' GROUP BY queue
"""
#: The sweep: groups with no lane, untouched for a day (a bucket refills long before).
PURGE_GROUPS = """
DELETE FROM jobpool_groups
 WHERE COALESCE(refilled_at, 0) < :before
   AND NOT EXISTS (SELECT 1 FROM jobpool_lanes AS l
                    WHERE l.name = jobpool_groups.name AND l.grp = jobpool_groups.grp)
"""
