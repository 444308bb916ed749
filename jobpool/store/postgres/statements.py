"""Every SQL statement jobpool runs against PostgreSQL, named, with the rule it keeps.

The PostgreSQL store (``store/postgres/store.py``) and its driver under the engine
(``store/postgres/driver.py``) read their statements from here, as the SQLite side reads
``store/sqlite/statements.py``. The statements run with ``search_path`` set to the store's
own schema, so no table name is qualified. Parameters are psycopg's named ``%(name)s`` placeholders.

Times are Unix seconds (``double precision``), like SQLite's, so a row reads the
same from either store; every time a statement writes comes from the database
server's clock (R7a), read once per transaction (``SERVER_NOW``).

Live rows (``ready``, ``running``) stay in ``jobs``, the hot table every claim
walks; a settle that finishes a job (``done``, ``dead``) moves its row to
``finished_jobs`` in the same statement, so the hot table holds only what can
still run and vacuum keeps it small. ``all_jobs`` reads both.
"""
from __future__ import annotations

import functools
import re

from jobpool import lifecycle
from jobpool.bounds import INT32_MAX, PRIORITY_MIN
from jobpool.limits import MAX_GROUP_CHARS
from jobpool.lifecycle import QUIET_OUTCOMES  # what the dashboard counts as no failure
from jobpool.rollups import COUNTS, MAXIMA
from jobpool.store.attempt_log import DONE_LINE, DONE_LINE_COLUMNS, log_sql
from jobpool.store.effects_sql import Dialect, assignments, quote_literal, select_list
from jobpool.store.row_codec import CHAIN_STOPPED

#: How a statement here names what ``lifecycle``'s transitions use: a given value is
#: a named parameter, the row's column its bare name.
DIALECT = Dialect(given=lambda name: f"%({name})s", column=lambda column: column,
                  least="LEAST")
#: The claim updates ``jobs AS j``; a name's defaults are arrays in the order of the
#: names this pool serves.
_CLAIM_DEFAULTS = {
    "max_attempts": "(%(max_attempts)s::integer[])[array_position(%(names)s::text[], j.name)]",
    "timeout": "(%(timeouts)s::float8[])[array_position(%(names)s::text[], j.name)]"}
_CLAIM_DIALECT = DIALECT._replace(column=lambda column: "j." + column,
                                  default_of=_CLAIM_DEFAULTS.__getitem__)
#: Several attempts settled by one statement: what each attempt gives comes from its
#: row of the unnested ``input`` (``i``), the job's own columns from ``jobs AS j``.
_INPUT_GIVEN = {"run_at": "i.new_run_at", "error": "i.new_error", "crashes": "i.new_crashes",
                "result": "i.new_result"}
_MANY_DIALECT = DIALECT._replace(
    given=lambda name: _INPUT_GIVEN.get(name) or f"%({name})s",
    column=lambda column: "j." + column)
#: ... and a finishing one's values from ``moved JOIN input`` (no aliases there).
_MANY_MOVED_DIALECT = DIALECT._replace(
    given=lambda name: _INPUT_GIVEN[name][2:] if name in _INPUT_GIVEN else f"%({name})s")

#: The schema revision ``SCHEMA`` below creates (PostgreSQL counts its own versions),
#: kept under the key ``revision`` of ``jobpool_meta``.
SCHEMA_VERSION = "17"
#: Kept under the key ``schema``: the oldest revision whose code can still use a store
#: of this revision. Every step so far only adds (tables, columns with defaults), so a
#: release that reads revision 1 keeps working on the upgraded store during a rolling
#: restart, and its check of ``schema`` (equal to "1") still passes.
READABLE_FROM = "1"

#: Behind a transaction-mode pooler (``?pooler=transaction``) a session belongs to no
#: client, and PgBouncer refuses the startup ``options`` that set them for a session:
#: each transaction sets the store's schema and R26's limits for itself, first.
SET_LOCAL_SESSION = """
SELECT set_config('search_path', %(schema)s, true),
       set_config('statement_timeout', %(statement_timeout)s, true),
       set_config('lock_timeout', %(lock_timeout)s, true),
       set_config('idle_in_transaction_session_timeout',
                  %(idle_in_transaction_session_timeout)s, true),
       set_config('synchronous_commit',
                  COALESCE(%(synchronous_commit)s, current_setting('synchronous_commit')), true)
"""

#: R7a: the server's clock, once per transaction (``now()`` is the transaction's start).
SERVER_NOW = "SELECT extract(epoch FROM now())::float8"

#: Taken while a store creates or upgrades its schema, so two hosts starting at once
#: migrate once (a transaction-level advisory lock, released at commit). Keyed by the
#: schema's name: before it exists, ``current_schema()`` has nothing to name.
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('jobpool-migrate:' || %(schema)s))"

# --- schema ------------------------------------------------------------------------------

CREATE_META = """
CREATE TABLE IF NOT EXISTS jobpool_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
)
"""

#: The hot table: live rows only. Its columns are SQLite's ``jobs`` without the
#: finished ones (result, finished_at, hook_done).
#: fillfactor 80 leaves room on each page for the new versions of the rows its
#: updates write (claim, settle back to ready), so they often stay on their page;
#: autovacuum runs after 1 % of the rows changed (default 20 %), since this table
#: is rewritten by every claim and settle and stays small only if it is vacuumed
#: often.
CREATE_JOBS = """
CREATE TABLE IF NOT EXISTS jobs (
    id               bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    queue            text    NOT NULL,
    name             text    NOT NULL,
    key              text,
    payload          bytea   NOT NULL,
    serializer       text    NOT NULL,
    priority         integer NOT NULL,
    status           text    NOT NULL CHECK (status IN ('ready', 'running')),
    run_at           float8  NOT NULL,
    line_at          float8  NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer,
    crashes          integer NOT NULL DEFAULT 0,
    deferrals        integer NOT NULL DEFAULT 0,
    deadline         float8,
    timeout          float8,
    lease_owner      text,
    lease_expires_at float8,
    last_error       text,
    progress         float8,
    stage            text,
    created_at       float8  NOT NULL,
    started_at       float8,
    chain            jsonb,
    chain_root       bigint,
    cancel_requested integer NOT NULL DEFAULT 0,
    batch_id         bigint,
    state            text,
    state_at         float8,
    grp              text,
    meta             jsonb,
    waited           boolean NOT NULL DEFAULT false
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_analyze_scale_factor = 0.02)
"""

#: Done and dead rows, moved here by the settle that finished them (a dead row
#: keeps the rest of its chain, for a retry of it from the dead letters).
CREATE_FINISHED = """
CREATE TABLE IF NOT EXISTS finished_jobs (
    id               bigint  PRIMARY KEY,
    queue            text    NOT NULL,
    name             text    NOT NULL,
    key              text,
    payload          bytea   NOT NULL,
    serializer       text    NOT NULL,
    priority         integer NOT NULL,
    status           text    NOT NULL CHECK (status IN ('done', 'dead')),
    run_at           float8  NOT NULL,
    line_at          float8  NOT NULL,
    attempts         integer NOT NULL,
    max_attempts     integer,
    crashes          integer NOT NULL,
    deferrals        integer NOT NULL,
    deadline         float8,
    timeout          float8,
    last_error       text,
    progress         float8,
    stage            text,
    result           bytea,
    created_at       float8  NOT NULL,
    started_at       float8,
    finished_at      float8  NOT NULL,
    chain            jsonb,
    chain_root       bigint,
    hook_done        integer NOT NULL DEFAULT 0,
    batch_id         bigint,
    state            text,
    state_at         float8,
    grp              text,
    meta             jsonb,
    done_owner       text,
    done_pid         integer,
    done_peak_rss    bigint,
    done_cpu_s       float8,
    done_strays      integer
)
"""
#: R61: a clean success's attempt line is in its own ``finished_jobs`` row
#: (``attempt_log.DONE_LINE_COLUMNS``, NULL on every other row).

#: R7: the claim walks this index in its ORDER BY, per queue, over ready rows only.
CREATE_CLAIM_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_claim_order
    ON jobs (queue, priority DESC, line_at, id) WHERE status = 'ready'
"""
#: R3: a key is unique among live jobs, and every row of ``jobs`` is live.
CREATE_KEY_INDEX = """
CREATE UNIQUE INDEX IF NOT EXISTS jobs_live_key ON jobs (name, key) WHERE key IS NOT NULL
"""
#: R23, R24: a dead owner's leases, and expired leases by a walk of the running rows
#: only (as many as the pools have slots), without a scan of the backlog. One index
#: where revisions 1-6 had two: every claim writes an entry in each (issue 25). Kept
#: by revision 14 over one by lease end (BENCHMARKS.md): under the claimer's generic
#: plans a turn's settles find their rows through it by owner.
CREATE_OWNER_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_owners ON jobs (lease_owner) WHERE status = 'running'
"""
DROP_LEASE_INDEX = "DROP INDEX IF EXISTS jobs_leases"
#: R31 (revision 14): running rows a cancel was asked for, by owner: the heartbeat's
#: look for its own (``CANCELS_FOR_OWNER``) reads only those. A claim writes no entry
#: here (a row is claimed with ``cancel_requested = 0``); a cancel one.
CREATE_CANCEL_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_cancels ON jobs (lease_owner)
 WHERE status = 'running' AND cancel_requested = 1
"""
#: Listings and retention of finished rows by age (R32).
CREATE_FINISHED_INDEX = """
CREATE INDEX IF NOT EXISTS finished_jobs_status ON finished_jobs (status, finished_at)
"""
#: R21: dead rows whose on_dead hook nobody took.
CREATE_HOOKS_INDEX = """
CREATE INDEX IF NOT EXISTS finished_jobs_hooks ON finished_jobs (name)
 WHERE status = 'dead' AND hook_done = 0
"""

#: A job's columns as ``get`` and ``list_jobs`` read them, from each of its tables.
SELECT_JOB_FROM = {"jobs": """
SELECT id, queue, name, key, payload, serializer, priority, status, run_at, attempts,
       max_attempts, crashes, deferrals, deadline, timeout, lease_owner, lease_expires_at,
       last_error, progress, stage, NULL::bytea AS result, created_at, started_at,
       NULL::float8 AS finished_at, chain_root, cancel_requested, batch_id, state, state_at,
       meta::text AS meta
""", "finished_jobs": """
SELECT id, queue, name, key, payload, serializer, priority, status, run_at, attempts,
       max_attempts, crashes, deferrals, deadline, timeout, NULL::text, NULL::float8,
       last_error, progress, stage, result, created_at, started_at, finished_at, chain_root,
       0, batch_id, state, state_at, meta::text
"""}
#: Every job, live or finished, as ``get`` reads them.
CREATE_ALL_JOBS = "CREATE OR REPLACE VIEW all_jobs AS " + " UNION ALL ".join(
    f"{columns} FROM {table}" for table, columns in SELECT_JOB_FROM.items())
#: The view as it is today, over a store upgraded from any revision: dropped first, as
#: an older revision's view has other columns (``CREATE OR REPLACE`` cannot rename or
#: drop one), and made once its last column exists (revision 6's ``meta``), not by the
#: step that first made it (revision 3's, which would name ``meta`` too early).
#: The columns it reads are made sure of first: a store labelled revision 3 by an early
#: build of it has no ``state`` columns (that step gained them later).
RECREATE_ALL_JOBS = (*(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}"
                       for table in ("jobs", "finished_jobs")
                       for column, kind in (("batch_id", "bigint"), ("state", "text"),
                                            ("state_at", "float8"), ("meta", "jsonb"))),
                     "DROP VIEW IF EXISTS all_jobs", CREATE_ALL_JOBS)

#: R19a: one row per attempt; ``seq`` orders them (the attempt number repeats after a Defer).
CREATE_ATTEMPTS = """
CREATE TABLE IF NOT EXISTS attempts (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint NOT NULL,
    attempt     integer NOT NULL,
    owner       text,
    pid         integer,
    started_at  float8 NOT NULL,
    ended_at    float8 NOT NULL,
    outcome     text NOT NULL,
    error       text,
    exit_status text,
    peak_rss    bigint,
    cpu_s       float8,
    strays      integer
)
"""
CREATE_ATTEMPTS_INDEX = "CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id, seq)"

#: R29: one row per live supervisor, as SQLite's ``pools``.
CREATE_POOLS = """
CREATE TABLE IF NOT EXISTS pools (
    owner          text PRIMARY KEY,
    host           text NOT NULL,
    pid            integer NOT NULL,
    procs          integer NOT NULL,
    queues         text NOT NULL,
    core           text NOT NULL,
    started_at     float8 NOT NULL,
    heartbeat_at   float8 NOT NULL,
    counters       text NOT NULL DEFAULT '{}',
    slots          text NOT NULL DEFAULT '[]',
    stop_requested integer NOT NULL DEFAULT 0,
    desired_procs  integer,
    names          text NOT NULL DEFAULT ''
)
"""

#: R33: the last occurrence enqueued per periodic job, across every host.
CREATE_PERIODIC = """
CREATE TABLE IF NOT EXISTS periodic (
    name            text PRIMARY KEY,
    last_occurrence float8 NOT NULL
)
"""

#: R38: per-queue settings every pool obeys: ``paused_at`` set while paused.
CREATE_QUEUES = """
CREATE TABLE IF NOT EXISTS jobpool_queues (
    queue     text PRIMARY KEY,
    paused_at float8
)
"""

# --- batches (R34) ---------------------------------------------------------------------------

#: R34: one row per batch, as SQLite's ``jobpool_batches`` (``store/sqlite/statements.py`` says what
#: each column holds); the counts are kept by the triggers below.
CREATE_BATCHES = """
CREATE TABLE IF NOT EXISTS jobpool_batches (
    id           bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    created_at   float8  NOT NULL,
    changed_at   float8  NOT NULL,
    total        integer NOT NULL DEFAULT 0,
    done         integer NOT NULL DEFAULT 0,
    dead         integer NOT NULL DEFAULT 0,
    closed_at    float8,
    cancelled_at float8,
    finished_at  float8,
    on_success   jsonb,
    on_complete  jsonb,
    success_job  bigint,
    complete_job bigint
)
"""
CREATE_BATCHES_INDEX = """
CREATE INDEX IF NOT EXISTS batches_finished ON jobpool_batches (finished_at)
"""
#: R34 at scale: a batch's members in ``BATCH_SHARDS`` counters (by member id), so the
#: settles of one batch's members on several hosts rarely wait on one row: each end
#: counts down its shard's ``pending``, and only the transaction that empties a shard
#: takes the batch row's lock, where it sees whether every shard is empty (the
#: emptying transactions are serialised there, so the last of them sees all the
#: others committed). One row per batch cost four supervisors 15 % (BENCHMARKS.md).
BATCH_SHARDS = 16
CREATE_BATCH_SHARDS = """
CREATE TABLE IF NOT EXISTS jobpool_batch_shards (
    batch_id bigint  NOT NULL,
    shard    integer NOT NULL,
    pending  integer NOT NULL DEFAULT 0,
    done     integer NOT NULL DEFAULT 0,
    dead     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, shard)
)
"""

#: A batch's live members (cancel) and finished ones (dead ids, ``batches show``, a
#: batch's counts by status from the index alone), each batch's (and status's) in id
#: order (R47, revision 12: a batch's page newest first is a range of its own entries,
#: however many rows were written since it began; finished rows are listed a status at
#: a time, ``LISTED_PARTS``). Revisions 3-10 had ``jobs_batch (batch_id)`` and
#: ``finished_jobs_batch (batch_id, status)``: the same entries, in no useful order.
CREATE_MEMBERS_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_batch_ids ON jobs (batch_id, id) WHERE batch_id IS NOT NULL
"""
CREATE_FINISHED_MEMBERS_INDEX = """
CREATE INDEX IF NOT EXISTS finished_jobs_batch_ids ON finished_jobs (batch_id, status, id)
 WHERE batch_id IS NOT NULL
"""
DROP_OLD_MEMBERS_INDEXES = "DROP INDEX IF EXISTS jobs_batch, finished_jobs_batch"
CREATE_BATCH_ADDS = """
CREATE TABLE IF NOT EXISTS jobpool_batch_adds (
    batch_id bigint NOT NULL,
    add_key  text   NOT NULL,
    job_id   bigint NOT NULL,
    PRIMARY KEY (batch_id, add_key)
)
"""

#: The lanes of the rows ``jobpool_row_readied`` noted, remade in key order (PL/pgSQL,
#: written into both functions that run it: a call of a third function would set the
#: schema's path once more, in every statement that remakes lanes).
_REMAKE_NOTED_LANES = """
    due := current_setting('jobpool.lanes_due', true);
    IF coalesce(due, '') <> '' THEN
        PERFORM set_config('jobpool.lanes_due', '', true);
        -- Each noted row read by its id (a LATERAL subquery kept apart by OFFSET 0 is
        -- planned as a lookup by id, whatever jobs held when the session planned it).
        INSERT INTO jobpool_lanes AS l (queue, priority, name, grp)
        SELECT DISTINCT j.queue, j.priority, j.name, j.grp
          FROM unnest(string_to_array(due, ',')::bigint[]) AS d(id),
               LATERAL (SELECT queue, priority, name, grp FROM jobs
                         WHERE id = d.id AND status = 'ready' AND grp IS NOT NULL OFFSET 0) AS j
         WHERE EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = j.name)
         ORDER BY j.queue, j.priority, j.name, j.grp
        ON CONFLICT (queue, priority, name, grp) DO UPDATE SET seq = l.seq + 1;
    END IF;
"""
#: R34: a member's row leaves ``jobs`` only when it finishes (moved to
#: ``finished_jobs`` by the same statement: a settle, a grouped settle, a cancel),
#: so its batch counts it when it leaves, as the status it was moved with. Fired once
#: at the end of the moving statement, when the moved rows are visible, over all the
#: rows it moved (a statement's trigger: a row's trigger locked the shards in the order
#: the statement ended its rows, so two turns ending members of one batch in two shards
#: could take them in opposite orders and deadlock). The shards are taken in one order,
#: shard then batch (a dead retry's and a batch cancel's), and only then the rows of the
#: batches whose shards emptied, by id. A row moved by a release that does not know
#: batches lost its batch on the way: it is put back. The functions run with the schema
#: they were made in (``SET search_path FROM CURRENT``), whoever's connection fires them.
CREATE_MEMBERS_ENDED_FUNCTION = f"""
CREATE OR REPLACE FUNCTION jobpool_members_ended() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    due text;
    ended record;
    lost_id bigint;
    left_in_shard integer;
    emptied bigint[] := '{{}}';
    emptied_at float8[] := '{{}}';
BEGIN
    PERFORM set_config('jobpool.members_moved', '', true);  -- see jobpool_member_moved
    -- The statement's lanes before its shards (see jobpool_row_readied).
{_REMAKE_NOTED_LANES.strip(chr(10))}
    -- Each moved member's finished row read by its id (a LATERAL subquery kept apart by
    -- OFFSET 0: a join of the two would be planned once for the session, perhaps while
    -- finished_jobs was empty, as a scan of it for every statement after).
    FOR ended IN
        SELECT g.batch_id, mod(g.id, {BATCH_SHARDS})::integer AS shard, count(*)::integer AS n,
               count(*) FILTER (WHERE f.status = 'done')::integer AS done,
               count(*) FILTER (WHERE f.status = 'dead')::integer AS dead,
               max(f.finished_at) AS finished_at,
               array_agg(g.id) FILTER (WHERE f.batch_id IS DISTINCT FROM g.batch_id) AS lost
          FROM gone AS g,
               LATERAL (SELECT status, finished_at, batch_id FROM finished_jobs
                         WHERE id = g.id OFFSET 0) AS f
         WHERE g.batch_id IS NOT NULL
         GROUP BY 1, 2 ORDER BY 2, 1
    LOOP
        IF ended.lost IS NOT NULL THEN
            FOREACH lost_id IN ARRAY ended.lost LOOP
                UPDATE finished_jobs SET batch_id = ended.batch_id WHERE id = lost_id;
            END LOOP;
        END IF;
        UPDATE jobpool_batch_shards
           SET pending = pending - ended.n, done = done + ended.done, dead = dead + ended.dead
         WHERE batch_id = ended.batch_id AND shard = ended.shard
           AND EXISTS (SELECT 1 FROM jobpool_batches
                        WHERE id = ended.batch_id AND finished_at IS NULL)
        RETURNING pending INTO left_in_shard;
        IF left_in_shard = 0 THEN
            emptied := emptied || ended.batch_id;
            emptied_at := emptied_at || ended.finished_at;
        END IF;
    END LOOP;
    IF cardinality(emptied) = 0 THEN
        RETURN NULL;
    END IF;
    -- The rows of the batches a shard of which emptied: jobpool_batch_finished looks at
    -- every shard, and the emptying transactions are serialised on the row.
    FOR ended IN
        SELECT e.id, max(e.at) AS at FROM unnest(emptied, emptied_at) AS e(id, at)
         GROUP BY e.id ORDER BY e.id
    LOOP
        UPDATE jobpool_batches SET changed_at = ended.at WHERE id = ended.id AND finished_at IS NULL;
    END LOOP;
    RETURN NULL;
END
$$
"""
#: A statement's trigger fires for every statement that deletes from ``jobs``, a pool's
#: every turn among them, and a function that sets the schema's path (as this one must,
#: whoever's connection fires it) and reads its transition table cost a turn about a
#: tenth of its server time. So a member's row raises a flag for the rest of the
#: transaction as it is deleted (the row trigger's WHEN: no other row calls a
#: function), the statement's trigger runs only while the flag is up (its WHEN, read
#: as each step of the statement ends, before any AFTER trigger fires), and lowers it.
CREATE_MEMBER_MOVED_FUNCTION = """
CREATE OR REPLACE FUNCTION jobpool_member_moved() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('jobpool.members_moved', 'on', true);
    RETURN OLD;  -- the row is deleted
END
$$
"""
# Triggers are dropped and made again rather than replaced: CREATE OR REPLACE TRIGGER
# needs PostgreSQL 14. Revisions 3-15 counted members with a row's trigger.
DROP_MEMBER_ENDED = "DROP TRIGGER IF EXISTS jobpool_member_ended ON jobs"
DROP_MEMBER_ENDED_FUNCTION = "DROP FUNCTION IF EXISTS jobpool_member_ended()"
DROP_MEMBER_MOVED = "DROP TRIGGER IF EXISTS jobpool_member_moved ON jobs"
CREATE_MEMBER_MOVED = """
CREATE TRIGGER jobpool_member_moved BEFORE DELETE ON jobs
FOR EACH ROW WHEN (OLD.batch_id IS NOT NULL) EXECUTE FUNCTION jobpool_member_moved()
"""
DROP_MEMBERS_ENDED = "DROP TRIGGER IF EXISTS jobpool_members_ended ON jobs"
CREATE_MEMBERS_ENDED = """
CREATE TRIGGER jobpool_members_ended AFTER DELETE ON jobs REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT WHEN (current_setting('jobpool.members_moved', true) = 'on')
EXECUTE FUNCTION jobpool_members_ended()
"""
#: The members' count by a statement's trigger, in place of revision 3's row trigger.
MEMBERS_ENDED_SCHEMA = (CREATE_MEMBER_MOVED_FUNCTION, CREATE_MEMBERS_ENDED_FUNCTION,
                        DROP_MEMBER_ENDED, DROP_MEMBER_ENDED_FUNCTION, DROP_MEMBER_MOVED,
                        CREATE_MEMBER_MOVED, DROP_MEMBERS_ENDED, CREATE_MEMBERS_ENDED)

#: R34, R11a: one callback enqueued by the store, due now, in the batch's place in
#: line, its arguments given ``batch=``, with the metadata its signature carries (R54,
#: revision 11); the pools listening are woken at commit.
CREATE_ENQUEUE_CALLBACK_FUNCTION = """
CREATE OR REPLACE FUNCTION jobpool_enqueue_callback(spec jsonb, info jsonb, line_at float8,
                                                    due float8, channel text) RETURNS bigint
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    new_id bigint;
BEGIN
    INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                      max_attempts, deadline, timeout, created_at, chain, grp, meta)
    VALUES (spec ->> 'queue', spec ->> 'name', NULL,
            convert_to(jsonb_set((spec ->> 'payload')::jsonb, '{1,batch}', info)::text, 'UTF8'),
            'json', (spec ->> 'priority')::integer, 'ready', due, line_at,
            (spec ->> 'max_attempts')::integer, NULL, (spec ->> 'timeout')::float8, due, NULL,
            (SELECT ''::text FROM jobpool_limits
              WHERE scope = 'name' AND target = spec ->> 'name'),
            CASE WHEN jsonb_typeof(spec -> 'meta') = 'object' THEN spec -> 'meta' END)
    RETURNING id INTO new_id;
    PERFORM pg_notify(channel, spec ->> 'queue');
    RETURN new_id;
EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
    -- R44 (revision 17): a callback written by hand so that it cannot be a row (no
    -- name, a priority that is no integer, a payload that is no JSON) is not
    -- enqueued: it failed the member's settle, and every turn after it, and stopped
    -- the pool. A lock's or a deadlock's error is no such thing, and goes up.
    RETURN NULL;
END
$$
"""

#: R34: the write that ends the last member of a closed batch (or closes a batch whose
#: members have all ended) enqueues its callbacks in its own transaction, once:
#: ``on_success`` only if no member went dead, ``on_complete`` always, none for a
#: cancelled batch. The channel is the store's (``postgres.channel_name``).
CREATE_BATCH_FINISHED_FUNCTION = """
CREATE OR REPLACE FUNCTION jobpool_batch_finished() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    info jsonb;
    pending integer;
    channel text := 'jobpool_' || left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 24);
BEGIN
    SELECT coalesce(sum(s.pending), 0), coalesce(sum(s.done), 0), coalesce(sum(s.dead), 0)
      INTO pending, NEW.done, NEW.dead
      FROM jobpool_batch_shards AS s WHERE s.batch_id = NEW.id;
    IF pending > 0 OR NEW.done + NEW.dead < NEW.total THEN
        RETURN NEW;  -- members still to end: only the counts are brought up to date
    END IF;
    IF NEW.cancelled_at IS NULL THEN
        info := jsonb_build_object(
            'id', NEW.id, 'total', NEW.total, 'done', NEW.done, 'dead', NEW.dead,
            'dead_ids', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM (
                SELECT id FROM finished_jobs WHERE batch_id = NEW.id AND status = 'dead'
                 ORDER BY id LIMIT 1000) AS d), '[]'::jsonb),
            'dead_ids_truncated', NEW.dead > 1000);
        IF NEW.on_success IS NOT NULL AND NEW.dead = 0 THEN
            NEW.success_job := jobpool_enqueue_callback(NEW.on_success, info, NEW.created_at,
                                                        NEW.changed_at, channel);
        END IF;
        IF NEW.on_complete IS NOT NULL THEN
            NEW.complete_job := jobpool_enqueue_callback(NEW.on_complete, info, NEW.created_at,
                                                         NEW.changed_at, channel);
        END IF;
    END IF;
    NEW.finished_at := NEW.changed_at;
    RETURN NEW;
END
$$
"""
DROP_BATCH_FINISHED = "DROP TRIGGER IF EXISTS jobpool_batch_finished ON jobpool_batches"
CREATE_BATCH_FINISHED = """
CREATE TRIGGER jobpool_batch_finished BEFORE UPDATE ON jobpool_batches
FOR EACH ROW WHEN (NEW.closed_at IS NOT NULL AND NEW.finished_at IS NULL)
EXECUTE FUNCTION jobpool_batch_finished()
"""

#: Unique keys over a period: the finished jobs of a key, newest first.
CREATE_FINISHED_KEY_INDEX = """
CREATE INDEX IF NOT EXISTS finished_jobs_key ON finished_jobs (name, key, finished_at)
 WHERE key IS NOT NULL
"""

#: Everything batches add to a store (revision 3).
BATCH_SCHEMA = (CREATE_BATCHES, CREATE_BATCH_SHARDS, CREATE_BATCHES_INDEX, CREATE_MEMBERS_INDEX,
                CREATE_FINISHED_MEMBERS_INDEX, CREATE_BATCH_ADDS, *MEMBERS_ENDED_SCHEMA,
                CREATE_ENQUEUE_CALLBACK_FUNCTION,
                CREATE_BATCH_FINISHED_FUNCTION, DROP_BATCH_FINISHED, CREATE_BATCH_FINISHED)

#: R35/R36: the limits every pool obeys (see ``store/sqlite/statements.py``, the same table).
CREATE_LIMITS = """
CREATE TABLE IF NOT EXISTS jobpool_limits (
    scope       text    NOT NULL CHECK (scope IN ('name', 'queue')),
    target      text    NOT NULL,
    max_running integer,
    rate        text,
    burst       integer NOT NULL DEFAULT 1,
    group_by    text,
    set_by      text    NOT NULL,
    set_at      float8  NOT NULL,
    PRIMARY KEY (scope, target)
)
"""
#: R35/R36: one row per (name, group): the row a claim locks (SKIP LOCKED) before it
#: counts the group's running jobs, and the group's token bucket.
CREATE_GROUPS = """
CREATE TABLE IF NOT EXISTS jobpool_groups (
    name        text NOT NULL,
    grp         text NOT NULL,
    tokens      float8,
    refilled_at float8,
    PRIMARY KEY (name, grp)
)
"""
#: R35: the lanes a limited claim rotates through (see ``store/sqlite/statements.py``). ``seq`` is
#: raised by every write that (re)makes a lane, which also takes the lane row's lock,
#: so a claim's drop of a lane it found empty (``seq`` unchanged) cannot lose a row
#: written by a transaction it could not see.
CREATE_LANES = """
CREATE TABLE IF NOT EXISTS jobpool_lanes (
    id        bigint  GENERATED BY DEFAULT AS IDENTITY UNIQUE,
    queue     text    NOT NULL,
    priority  integer NOT NULL,
    name      text    NOT NULL,
    grp       text    NOT NULL,
    served_at float8,
    seq       bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, priority, name, grp)
)
"""
def lanes_in_key_order(rows: str, before: str = "") -> str:
    """R35: the statement that makes (or bumps) the lanes of ``rows`` (a query of
    ``queue, priority, name, grp``), one each, in the lanes' key order. Every statement
    that takes several lanes takes them in this one order (a declare, a bulk write, a
    dead retry, and the readied rows of a statement, ``_REMAKE_NOTED_LANES``), so no two
    take them crosswise. ``before``: the ``WITH`` the rows are read from."""
    return f"""{before}
INSERT INTO jobpool_lanes AS l (queue, priority, name, grp)
SELECT DISTINCT queue, priority, name, grp FROM ({rows}) AS lanes
 ORDER BY queue, priority, name, grp
ON CONFLICT (queue, priority, name, grp) DO UPDATE SET seq = l.seq + 1
"""


CREATE_LANES_INDEX = """
CREATE INDEX IF NOT EXISTS jobpool_lanes_rotation
    ON jobpool_lanes (queue, priority DESC, served_at NULLS FIRST, name, grp)
"""
CREATE_GROUP_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_group_order ON jobs (queue, name, grp, priority, line_at, id)
 WHERE status = 'ready' AND grp IS NOT NULL
"""
#: R35: a grouped row's lane is made (or made again) when it is written (a dead retry's
#: row too) and on every move back to ready (a retry, defer, release, interrupt,
#: reschedule, reclaim: ``jobpool_lanes_remade``, below). Only rows with a group call it
#: (the triggers' WHEN): a row of a limited name
#: written without one gets its group from the statement that writes it
#: (``limited_group``), since a function called for every row inserted halved the bulk
#: enqueue.
CREATE_LIMITED_ROW_FUNCTION = """
CREATE OR REPLACE FUNCTION jobpool_limited_row() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = NEW.name) THEN
        RETURN NEW;
    END IF;
    INSERT INTO jobpool_lanes AS l (queue, priority, name, grp)
    VALUES (NEW.queue, NEW.priority, NEW.name, NEW.grp)
    ON CONFLICT (queue, priority, name, grp) DO UPDATE SET seq = l.seq + 1;
    RETURN NEW;
END
$$
"""
DROP_LIMITED_INSERT = "DROP TRIGGER IF EXISTS jobpool_limited_insert ON jobs"
CREATE_LIMITED_INSERT = """
CREATE TRIGGER jobpool_limited_insert BEFORE INSERT ON jobs
FOR EACH ROW WHEN (NEW.grp IS NOT NULL) EXECUTE FUNCTION jobpool_limited_row()
"""
#: Rows moved back to ready remake their lanes once, at the end of the statement that
#: moved them, in the lanes' key order (revision 16): made a row at a time, in the order
#: the statement updated its rows, two pools' turns putting back rows of two groups took
#: the two lanes in opposite orders and deadlocked. A row's trigger notes the row's id
#: for the rest of the transaction (a list no other row writes to: the WHEN), and the
#: lanes are remade from the rows so noted by whichever of the statement's triggers
#: fires first: this one, or ``jobpool_members_ended`` before it counts any member, so a
#: statement takes its lanes before its batches' shards, whichever of its steps
#: PostgreSQL ran last (a statement trigger's place in the queue is its last step's).
#: A statement that puts back no grouped row calls no function for it.
CREATE_ROW_READIED_FUNCTION = """
CREATE OR REPLACE FUNCTION jobpool_row_readied() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('jobpool.lanes_due',
                       coalesce(nullif(current_setting('jobpool.lanes_due', true), '') || ',', '')
                       || NEW.id, true);
    RETURN NEW;  -- the row is updated
END
$$
"""
CREATE_LANES_REMADE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION jobpool_lanes_remade() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    due text;
BEGIN{_REMAKE_NOTED_LANES}    RETURN NULL;
END
$$
"""
DROP_LIMITED_READY = "DROP TRIGGER IF EXISTS jobpool_limited_ready ON jobs"
DROP_ROW_READIED = "DROP TRIGGER IF EXISTS jobpool_row_readied ON jobs"
CREATE_ROW_READIED = """
CREATE TRIGGER jobpool_row_readied BEFORE UPDATE OF status ON jobs
FOR EACH ROW WHEN (NEW.grp IS NOT NULL AND NEW.status = 'ready' AND OLD.status <> 'ready')
EXECUTE FUNCTION jobpool_row_readied()
"""
DROP_LANES_REMADE = "DROP TRIGGER IF EXISTS jobpool_lanes_remade ON jobs"
CREATE_LANES_REMADE = """
CREATE TRIGGER jobpool_lanes_remade AFTER UPDATE ON jobs FOR EACH STATEMENT
WHEN (coalesce(current_setting('jobpool.lanes_due', true), '') <> '')
EXECUTE FUNCTION jobpool_lanes_remade()
"""
#: The lanes remade once a statement, in place of revision 4's row trigger on updates.
LANES_REMADE_SCHEMA = (CREATE_ROW_READIED_FUNCTION, CREATE_LANES_REMADE_FUNCTION,
                       DROP_LIMITED_READY, DROP_ROW_READIED, CREATE_ROW_READIED,
                       DROP_LANES_REMADE, CREATE_LANES_REMADE)

#: Everything limits add to a store (revision 4).
LIMIT_SCHEMA = (CREATE_LIMITS, CREATE_GROUPS, CREATE_LANES, CREATE_LANES_INDEX,
                CREATE_GROUP_INDEX, CREATE_ENQUEUE_CALLBACK_FUNCTION,  # a callback's group
                CREATE_LIMITED_ROW_FUNCTION, DROP_LIMITED_INSERT,
                CREATE_LIMITED_INSERT, *LANES_REMADE_SCHEMA)

#: R28: ``jobs list --name`` and ``--queue``, newest first, through these: the ready rows
#: of ``jobs`` (a claim's move to running writes no entry to them; running rows are
#: found through the running-only indexes, as many as the pools have slots) and every
#: row of ``finished_jobs``, written once.
CREATE_READY_NAME_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_ready_name ON jobs (name, id) WHERE status = 'ready'
"""
CREATE_READY_QUEUE_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_ready_queue ON jobs (queue, id) WHERE status = 'ready'
"""
CREATE_FINISHED_NAME_INDEX = "CREATE INDEX IF NOT EXISTS finished_jobs_name ON finished_jobs (name, id)"
CREATE_FINISHED_QUEUE_INDEX = """
CREATE INDEX IF NOT EXISTS finished_jobs_queue ON finished_jobs (queue, id)
"""
#: Everything listings add to a store (revision 5).
LISTING_SCHEMA = (CREATE_READY_NAME_INDEX, CREATE_READY_QUEUE_INDEX, CREATE_FINISHED_NAME_INDEX,
                  CREATE_FINISHED_QUEUE_INDEX)

#: R54: ``jobs list --meta key=value`` finds rows by containment (``meta @> …``)
#: through these, in either table.
META_SCHEMA = (
    "CREATE INDEX IF NOT EXISTS jobs_meta ON jobs USING gin (meta jsonb_path_ops)"
    " WHERE meta IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS finished_jobs_meta ON finished_jobs USING gin"
    " (meta jsonb_path_ops) WHERE meta IS NOT NULL")

#: R56: the pools' per-minute rollups, as SQLite's ``jobpool_rollups`` (minute on the
#: server's clock, R7a).
CREATE_ROLLUPS = (
    "CREATE TABLE IF NOT EXISTS jobpool_rollups (minute float8 NOT NULL, name text NOT NULL, "
    + ", ".join(f"{c} {'float8' if c.endswith(('_sum', '_max')) else 'bigint'} NOT NULL DEFAULT 0"
                for c in COUNTS)
    + ", PRIMARY KEY (minute, name))")

#: R47: a chain's steps by the id of its first job, in id order, in either table. Only
#: chain steps have entries: ``chain_root`` never changes, and a row in no chain matches
#: neither index's condition, so a claim or settle of one writes no entry here.
CHAIN_SCHEMA = (
    "CREATE INDEX IF NOT EXISTS jobs_chain ON jobs (chain_root, id) WHERE chain_root IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS finished_jobs_chain ON finished_jobs (chain_root, id)"
    " WHERE chain_root IS NOT NULL")

#: R69: the channel a store's finished jobs are told on, as the server computes it from
#: the schema it works in (``store.channel_name`` plus ``_done``), so no statement
#: needs it given.
FINISHED_CHANNEL = ("'jobpool_' || left(encode(sha256(convert_to(current_schema(), 'UTF8')), "
                    "'hex'), 24) || '_done'")


def told_if_waited(row: str = "") -> str:
    """R69: the ``RETURNING`` column that tells a waiter (``Handle.result``) its job
    finished: a notification of its id, at commit, only for a row some waiter marked
    (``waited``); a row nobody waits for costs one test. ``row``: the row's alias."""
    return (f"CASE WHEN {row}waited THEN pg_notify({FINISHED_CHANNEL}, {row}id::text)::text "
            "END AS told")


#: R69: a waiter marks the job it waits for, then reads it (a job that finished before
#: the mark is read as finished; one that finishes after it tells the waiter).
MARK_WAITED = "UPDATE jobs SET waited = true WHERE id = %(id)s AND NOT waited"
#: The waiter's channel, named by the server as the statements that notify name it.
FINISHED_CHANNEL_NAME = f"SELECT {FINISHED_CHANNEL}"

#: R59: a chain step's arguments with its predecessor's result under ``keyword``
#: (JSON null when it kept none), as text; NULL when that cannot be done (the result
#: is not JSON text, as a pickled one is not; the arguments are not a JSON
#: ``[args, kwargs]``), so a settle tests it rather than fail its statement, and the
#: turn with it (R44). Its own function for its exception handler.
#:
#: jsonb cannot hold a NUL character, which SQLite's JSON passes on: where the texts
#: hold a NUL's escape (``\u0000``, not an escaped backslash's ``\\u0000``), each goes
#: through jsonb as U+FFFF's escape and comes back out as a NUL's (revision 15). U+FFFF
#: is a noncharacter, kept for a program's own use; texts that also hold it (raw or
#: escaped) are not rewritten, and the chain stops there as it did before.
CREATE_WITH_PREVIOUS_FUNCTION = r"""
CREATE OR REPLACE FUNCTION jobpool_with_previous(payload text, keyword text, result bytea)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- A NUL's escape, not an escaped backslash's "u0000"; E'' strings, so a session
    -- with standard_conforming_strings off reads the backslashes alike.
    nul_escape CONSTANT text := E'(?<!\\\\)((?:\\\\\\\\)*)\\\\u0000';
    nul CONSTANT text := E'\\u0000';
    stand_in CONSTANT text := chr(65535);  -- U+FFFF, whose escape stands in for a NUL's
    given text;
    arguments jsonb;
    nuls boolean;
BEGIN
    given := COALESCE(convert_from(result, 'UTF8'), 'null');
    nuls := strpos(payload, nul) > 0 OR strpos(given, nul) > 0;
    IF nuls THEN
        IF strpos(lower(payload || given), E'\\uffff') > 0
           OR strpos(payload || given, stand_in) > 0 THEN
            RETURN NULL;
        END IF;
        payload := regexp_replace(payload, nul_escape, E'\\1\\\\uffff', 'g');
        given := regexp_replace(given, nul_escape, E'\\1\\\\uffff', 'g');
    END IF;
    arguments := payload::jsonb;
    IF jsonb_typeof(arguments) IS DISTINCT FROM 'array'
       OR jsonb_typeof(arguments -> 1) IS DISTINCT FROM 'object' OR keyword IS NULL THEN
        RETURN NULL;
    END IF;
    payload := jsonb_set(arguments, ARRAY['1', keyword], given::jsonb)::text;
    IF nuls THEN
        -- jsonb writes U+FFFF as itself, never escaped: each is a NUL that went in.
        payload := replace(payload, stand_in, nul);
    END IF;
    RETURN payload;
EXCEPTION WHEN OTHERS THEN
    -- Whatever else the text makes the server refuse (not JSON, a lone surrogate, a
    -- nesting past its stack) is this row's data: the chain stops, the turn goes on
    -- (R44).
    RETURN NULL;
END
$$
"""

#: R47 (revision 12): a page of one status, newest first, as a walk of an index that
#: holds that status's rows alone, in id order. Done and dead rows: one partial index
#: each on ``finished_jobs (id)`` (an entry written once, by the settle that moves the
#: row there): the planner then never prefers the primary key, filtered, which reads
#: every newer row of the other status first. Ready rows by the time they are due,
#: ``jobs (run_at) WHERE status = 'ready'``: scheduled (and retrying) rows are the
#: range past now, a few among a big backlog; due ones the range up to now, a few
#: among many scheduled (which status a ready row is listed under moves with the
#: clock, so no index can hold one of them alone). Its condition names ``run_at IS NOT
#: NULL`` (always so) so that only a statement that compares ``run_at`` may read it: a
#: comparison implies it, while a count of one queue's ready rows, saying nothing of
#: the time, keeps to ``jobs_ready_queue`` instead of walking every ready row by due
#: time in the hope that the queue's rows come soon. A claim writes no entry to it (its
#: row is running), an enqueue or a retry one.
STATUS_SCHEMA = (
    "CREATE INDEX IF NOT EXISTS finished_jobs_done ON finished_jobs (id) WHERE status = 'done'",
    "CREATE INDEX IF NOT EXISTS finished_jobs_dead ON finished_jobs (id) WHERE status = 'dead'",
    "CREATE INDEX IF NOT EXISTS jobs_ready_due ON jobs (run_at)"
    " WHERE status = 'ready' AND run_at IS NOT NULL")

#: R28, R47 (revision 13): the (queue, name) pairs of ready rows, each found by one step
#: of this index (``READY_BY_NAME``), to tell which ready jobs no running pool serves,
#: and a pair's ready rows counted from its range. Its condition names ``name IS NOT
#: NULL`` (always so) so that only a statement that names the name may read it: a
#: count of one queue's ready rows, stopped at its bound, keeps to ``jobs_ready_queue``
#: (whose walk stops there) instead of a bitmap of every ready row of the queue from
#: this one. An enqueue or a retry writes an entry; a claim none (its row is running).
CREATE_READY_PAIRS_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_ready_pairs ON jobs (queue, name)
 WHERE status = 'ready' AND name IS NOT NULL
"""

SCHEMA = (CREATE_META, CREATE_JOBS, CREATE_FINISHED, CREATE_CLAIM_INDEX, CREATE_KEY_INDEX,
          CREATE_OWNER_INDEX, CREATE_CANCEL_INDEX, CREATE_FINISHED_INDEX, CREATE_HOOKS_INDEX,
          CREATE_ALL_JOBS, CREATE_ATTEMPTS, CREATE_ATTEMPTS_INDEX, CREATE_POOLS, CREATE_PERIODIC,
          CREATE_QUEUES, CREATE_FINISHED_KEY_INDEX, *BATCH_SCHEMA, *LIMIT_SCHEMA, *LISTING_SCHEMA,
          *META_SCHEMA, CREATE_ROLLUPS, *CHAIN_SCHEMA, CREATE_WITH_PREVIOUS_FUNCTION,
          *STATUS_SCHEMA, CREATE_READY_PAIRS_INDEX)

#: Version -> the statements that bring a store of the version before it up to it
#: (additive only, as SQLite's ``migrations.STEPS``: a pool of the previous
#: release keeps working during a rolling restart). Each may run twice on the same
#: store (IF NOT EXISTS, OR REPLACE, IF EXISTS): an upgrade runs the store's own
#: revision's step again, which heals a store an in-between build labelled with a
#: revision before its step was whole (tests/test_migrations.py holds every step to it).
STEPS: dict[int, tuple[str, ...]] = {
    2: (CREATE_QUEUES,),  # R38: paused queues
    3: ("ALTER TABLE jobs ADD COLUMN IF NOT EXISTS batch_id bigint",  # R34: batches
        "ALTER TABLE finished_jobs ADD COLUMN IF NOT EXISTS batch_id bigint",
        # R37: a running job's saved state, kept when it finishes (``jobs show``)
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS state text",
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS state_at float8",
        "ALTER TABLE finished_jobs ADD COLUMN IF NOT EXISTS state text",
        "ALTER TABLE finished_jobs ADD COLUMN IF NOT EXISTS state_at float8",
        CREATE_FINISHED_KEY_INDEX, *BATCH_SCHEMA),  # and unique key periods
    # R35/R36: limits, a row's group (kept when it finishes, for a dead retry), lanes.
    4: ("ALTER TABLE jobs ADD COLUMN IF NOT EXISTS grp text",
        "ALTER TABLE finished_jobs ADD COLUMN IF NOT EXISTS grp text", *LIMIT_SCHEMA),
    # R28: listings of one name or one queue, newest first, through an index.
    5: LISTING_SCHEMA,
    # R54: a job's metadata, kept when it finishes, read by ``get`` (issue 28).
    6: ("ALTER TABLE jobs ADD COLUMN IF NOT EXISTS meta jsonb",
        "ALTER TABLE finished_jobs ADD COLUMN IF NOT EXISTS meta jsonb", *RECREATE_ALL_JOBS,
        *META_SCHEMA),
    # Issue 25: the running rows' expiry index dropped; jobs_owners serves R23 too.
    7: (DROP_LEASE_INDEX,),
    # R56: the pools' per-minute rollups, read by the web dashboard's charts.
    8: (CREATE_ROLLUPS,),
    # R47: a chain's steps found by its first job's id (the web dashboard's job page).
    9: CHAIN_SCHEMA,
    # R61: a clean success's attempt line in its finished row.
    10: tuple(f"ALTER TABLE finished_jobs ADD COLUMN IF NOT EXISTS {column} {kind}"
              for column, kind in zip(DONE_LINE_COLUMNS,
                                      ("text", "integer", "bigint", "float8", "integer"))),
    # R59: a chain step given its predecessor's result.
    # R54: a batch's callbacks enqueued with their signatures' metadata.
    # R69: a job some Handle.result waits for says so, and its end notifies.
    11: (CREATE_WITH_PREVIOUS_FUNCTION, CREATE_ENQUEUE_CALLBACK_FUNCTION,
         "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false"),
    # R47 (issue 27): a status's and a batch's page through an index in id order (R60:
    # a batch's results read by page through ``finished_jobs_batch_ids`` too).
    12: (*STATUS_SCHEMA, CREATE_MEMBERS_INDEX, CREATE_FINISHED_MEMBERS_INDEX,
         DROP_OLD_MEMBERS_INDEXES),
    # R28, R47 (issue 27): the pairs of ready rows a step each (the names no pool serves).
    13: (CREATE_READY_PAIRS_INDEX,),
    # R31 (issue 25): the running rows a cancel was asked for.
    14: (CREATE_CANCEL_INDEX,),
    # R59, R41: a predecessor's result holding a NUL passed on, as SQLite does.
    15: (CREATE_WITH_PREVIOUS_FUNCTION,),
    # R34, R35: a statement's members counted in their shards, and the lanes of the
    # grouped rows it put back remade, each in one order (no deadlock between two
    # turns ending members of one batch, or putting back rows of two groups).
    16: (*MEMBERS_ENDED_SCHEMA, *LANES_REMADE_SCHEMA),
    # R44: a batch's callback that cannot be a row is not enqueued (it stopped the pool).
    17: (CREATE_ENQUEUE_CALLBACK_FUNCTION,),
}

#: The tables a store makes; a schema that has any of them without ``jobpool_meta``
#: belongs to something else, and is refused rather than written into.
TABLES = ("jobpool_meta", "jobs", "finished_jobs", "all_jobs", "attempts", "pools", "periodic",
          "jobpool_queues", "jobpool_batches", "jobpool_batch_adds", "jobpool_batch_shards",
          "jobpool_limits", "jobpool_groups", "jobpool_lanes", "jobpool_rollups")
CLASHING_TABLES = """
SELECT table_name FROM information_schema.tables
 WHERE table_schema = %(schema)s AND table_name = ANY(%(names)s)
"""

#: The store's revision and the oldest revision that can use it (None: not written;
#: a store made by revision 1 has no ``revision``: it is 1).
READ_SCHEMA_VERSION = """
SELECT (SELECT value FROM jobpool_meta WHERE key = 'revision'),
       (SELECT value FROM jobpool_meta WHERE key = 'schema')
"""
WRITE_SCHEMA_VERSION = """
INSERT INTO jobpool_meta (key, value) VALUES ('revision', %(version)s), ('schema', %(readable_from)s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
"""
#: Whether this schema already holds a jobpool store (its marker table).
HAS_META = "SELECT to_regclass('jobpool_meta') IS NOT NULL"

# --- enqueue (R1-R5) ------------------------------------------------------------------------


def jsonb_of(text: str) -> str:
    """A JSON text as jsonb, or NULL when it holds ``\\u0000`` (a NUL character, which
    jsonb refuses: the cast would fail the whole statement, an enqueue or a settle)."""
    return f"CASE WHEN strpos({text}, E'\\\\u0000') = 0 THEN ({text})::jsonb END"


#: The payload of the row an insert writes, and of a row in the table, as jsonb where
#: it is JSON (NULL otherwise: pickled arguments are never parsed).
NEW_PAYLOAD = ("CASE WHEN %(serializer)s = 'json' THEN "
               + jsonb_of("convert_from(%(payload)s, 'UTF8')") + " END")
ROW_PAYLOAD = "CASE WHEN serializer = 'json' THEN " + jsonb_of("convert_from(payload, 'UTF8')") + " END"


def limited_group(name_expr: str, limits: str, payload: str) -> str:
    """R35: the group of a row written without one, by a process that does not know
    its job (an enqueue by name, a chain's next step): NULL unless its name has a
    limit; then the keyword argument its ``group_by`` names, read from the jsonb
    ``payload`` ``[args, kwargs]`` (as text, at most ``MAX_GROUP_CHARS``), or ``''``
    (the whole name's group) when the row has none. ``limits``: the table, qualified on a
    caller's own connection (R5). A bulk insert writes no group, and ``ADOPT_BULK``
    gives its rows theirs afterwards, only for a limited name."""
    return (f"(SELECT CASE WHEN group_by IS NULL THEN ''::text ELSE "
            f"COALESCE(NULLIF(left({payload} -> 1 ->> group_by, {MAX_GROUP_CHARS}), ''), '') END "
            f"FROM {limits} WHERE scope = 'name' AND target = {name_expr})")


_NEW_JOB_COLUMNS = ("queue, name, key, payload, serializer, priority, status, run_at, line_at, "
                    "max_attempts, deadline, timeout, created_at, chain, batch_id")

#: R1/R3: a live (name, key) duplicate inserts nothing and returns no row; the
#: caller then reads the id of the job that holds the key. ``run_at`` is the
#: server's now plus the delay (R7a). The same statement wakes the listening pools
#: (R11a: delivered at commit; identical notifications of one transaction arrive
#: once), so an enqueue is one round trip. ``{jobs}`` is the table, qualified by the
#: store's schema when the row goes through the caller's own connection (R5).
INSERT_JOB_INTO = f"""
WITH inserted AS (
    INSERT INTO {{jobs}} ({_NEW_JOB_COLUMNS}, grp, meta)
    VALUES (%(queue)s, %(name)s, %(key)s, %(payload)s, %(serializer)s, %(priority)s, 'ready',
            extract(epoch FROM now()) + %(delay)s, extract(epoch FROM now()) + %(delay)s,
            %(max_attempts)s, %(deadline)s, %(timeout)s, extract(epoch FROM now()), %(chain)s,
            %(batch_id)s, COALESCE(%(grp)s, {limited_group("%(name)s", "{limits}", NEW_PAYLOAD)}),
            %(meta)s::jsonb)
    ON CONFLICT (name, key) WHERE key IS NOT NULL DO NOTHING
    RETURNING id)
SELECT id, pg_notify(%(channel)s, %(queue)s) FROM inserted
"""
FIND_LIVE_KEY_IN = "SELECT id FROM {jobs} WHERE name = %(name)s AND key = %(key)s"
#: Unique keys over a period: a job with the key that finished within ``period``
#: seconds of the server's now.
#: The row an enqueue just wrote, taken back (a key period found a duplicate after all).
DELETE_NEW_JOB_IN = "DELETE FROM {jobs} WHERE id = %(id)s"
FIND_RECENT_KEY_IN = """
SELECT id FROM {finished} WHERE name = %(name)s AND key = %(key)s
   AND finished_at >= extract(epoch FROM now()) - %(period)s
 ORDER BY finished_at DESC LIMIT 1
"""
#: On the store's own connections (search_path is the store's schema).
INSERT_JOB = INSERT_JOB_INTO.format(jobs="jobs", limits="jobpool_limits")
#: R11c: the same row without its notification, for an enqueue that the notification
#: of one just before it covers.
INSERT_JOB_QUIET = INSERT_JOB.replace(
    "SELECT id, pg_notify(%(channel)s, %(queue)s) FROM inserted", "SELECT id FROM inserted")
assert INSERT_JOB_QUIET != INSERT_JOB

#: R4 at speed: ids for a batch, taken before its rows are copied in, in item order.
#: Other sessions may take ids in between, so they need not be consecutive.
RESERVE_IDS = """
SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, %(count)s)
"""
#: R4 at speed: a batch of JSON argument lists (or ``[args, kwargs]`` pairs) sent as
#: one JSON array and split by the server; each element's text is kept as written,
#: so a payload is byte for byte what a single enqueue writes. Rows are inserted in
#: item order, each taking its id from the sequence as it is inserted, so the ids,
#: sorted, are in item order (other sessions may take ids in between).
INSERT_BATCH = f"""
INSERT INTO jobs ({_NEW_JOB_COLUMNS}, grp)
SELECT %(queue)s, %(name)s, NULL,
       convert_to(CASE WHEN %(args_only)s THEN '[' || e.value::text || ',{{}}]'
                       ELSE e.value::text END, 'UTF8'),
       'json', %(priority)s, 'ready', %(run_at)s, %(run_at)s, %(max_attempts)s, NULL,
       %(timeout)s, %(now)s, NULL, %(batch_id)s, NULL
  FROM json_array_elements(%(batch)s::json) WITH ORDINALITY AS e(value, n)
 ORDER BY n
RETURNING id, EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = %(name)s)
"""
#: Any other batch (pickled arguments, one too large to judge whole), streamed with
#: COPY row by row (one round trip, no statement per row).
COPY_JOBS = f"COPY jobs (id, {_NEW_JOB_COLUMNS}, grp, meta) FROM STDIN"

#: R11a: wake the listening pools at commit; the payload names the queue.
NOTIFY_READY = "SELECT pg_notify(%(channel)s, %(queue)s)"

# --- claim (R6-R10) ------------------------------------------------------------------------

#: R6-R9: up to ``limit`` ready, due rows of one queue, in claim order (R7), for the
#: names this supervisor knows; SKIP LOCKED lets supervisors on other hosts claim
#: beside it without waiting. The attempt is spent at claim. Due means due by the
#: claimer's estimate of the server's time or the server's own, whichever is later,
#: so a job enqueued an instant ago on another host is not missed. The names and their
#: default ``max_attempts`` and ``timeout`` (for rows enqueued without them) are
#: bound as three parallel arrays, never spliced into the text. The picked rows are
#: found again by primary key (``= ANY`` of their ids), never joined back to ``jobs``:
#: the claimer runs generic plans, which guess ``LIMIT $n`` at a tenth of the rows,
#: and once the table has statistics the join's plan read all of ``jobs`` each claim
#: (a hash join over a sequential scan, or a merge join walking the whole primary key:
#: 34 ms a claim at 50 000 ready rows, against 0.5 ms; ``tests/contract/test_pg_plans.py``).
#: It returns ``row_codec.CLAIM_COLUMNS``, as SQLite's does: the follow-ups as flags
#: (1 for a chain or a batch member: its done may enqueue a row, R12, R34, R62; a batch
#: counts its members by trigger here), and
#: the chain itself as JSON text (as SQLite has it: the codec reads one form), which
#: the codec checks before the job runs (R44).
_CLAIM_PICKED = """picked AS (
    SELECT id FROM jobs
     WHERE status = 'ready' AND queue = %(queue)s
       AND run_at <= GREATEST(%(now)s, extract(epoch FROM statement_timestamp()))
       AND name = ANY(%(names)s::text[])
     ORDER BY priority DESC, line_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED)"""
_CLAIM_UPDATE = f"""UPDATE jobs AS j
   SET {assignments(lifecycle.CLAIM, _CLAIM_DIALECT)}
 WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.id, j.name, j.payload, j.serializer, j.attempts, j.max_attempts, j.crashes,
          j.timeout, j.deadline, j.priority, j.line_at,
          (j.chain IS NOT NULL OR j.batch_id IS NOT NULL)::integer, j.run_at,
          j.chain::text, j.batch_id, j.meta::text
"""
CLAIM = f"\nWITH {_CLAIM_PICKED}\n{_CLAIM_UPDATE}"

#: R63 with R8: the rows of a chunk just claimed keep their lease longer by the
#: timeouts of the rows before them (three parallel arrays).
EXTEND_LEASES = """
UPDATE jobs AS j SET lease_expires_at = j.lease_expires_at + c.extra
  FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(extra)s::float8[])
       AS c(id, attempt, extra)
 WHERE j.id = c.id AND j.attempts = c.attempt AND j.lease_owner = %(owner)s
   AND j.status = 'running'
"""

#: R62: the claim from a place in line (``%(after_priority)s``, ``%(after_line)s``,
#: ``%(after_id)s``: the last row this claimer took in this queue): higher priorities
#: walked from their front, then the same priority after that place, then the lower
#: ones, each a range of the claim index, read only as far as the limit needs. Rows
#: of this priority before the place (the entries of rows claimed since the oldest open
#: transaction began, which no scan may drop while it lasts) are not walked again.
_PICKED_FROM = """picked_{part} AS (
    SELECT id FROM jobs
     WHERE status = 'ready' AND queue = %(queue)s
       AND run_at <= GREATEST(%(now)s, extract(epoch FROM statement_timestamp()))
       AND name = ANY(%(names)s::text[]) AND {where}
     ORDER BY priority DESC, line_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED),
"""
_CLAIM_PICKED_AFTER = "".join(_PICKED_FROM.format(part=part, where=where) for part, where in (
    ("above", "priority > %(after_priority)s::integer"),
    ("on", "priority = %(after_priority)s::integer"
           " AND (line_at, id) > (%(after_line)s::float8, %(after_id)s::bigint)"),
    ("below", "priority < %(after_priority)s::integer"))) + """picked AS (
    SELECT id FROM picked_above UNION ALL SELECT id FROM picked_on
    UNION ALL SELECT id FROM picked_below LIMIT %(limit)s)"""
CLAIM_AFTER = f"\nWITH {_CLAIM_PICKED_AFTER}\n{_CLAIM_UPDATE}"


def claim_params(names, policies, default_policy) -> dict:
    """The claim's per-supervisor parameters: its names, and each one's defaults."""
    names = sorted(set(names))
    if not names:
        raise ValueError("a supervisor needs at least one registered job name")
    chosen = [policies.get(n, default_policy) for n in names]
    return {"names": names, "max_attempts": [int(p.max_attempts) for p in chosen],
            "timeouts": [float(p.timeout) for p in chosen]}


# --- settle (section 4) ------------------------------------------------------------------
# Every settle carries the fencing guard (R8): a stale supervisor's write matches no row.
# The id is cast to the column's type: psycopg sends a small Python int as smallint, and
# the planner then finds the row through another index, filtering on the id.

GUARD = ("id = %(id)s::bigint AND lease_owner = %(owner)s AND attempts = %(attempt)s::integer "
         "AND status = 'running'")

#: Columns a finishing settle copies from the live row to ``finished_jobs``.
_MOVED = ("id, queue, name, key, payload, serializer, priority, run_at, line_at, attempts, "
          "max_attempts, deferrals, deadline, timeout, stage, created_at, started_at, chain, "
          "chain_root, batch_id, state, state_at, grp, meta")

#: R19a: the attempt's line in the log, written by the settle's own statement from
#: its ``settled`` step, so a settle whose fence failed logs nothing.
_LOG_ATTEMPT = """
INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, outcome, error,
                      exit_status, peak_rss, cpu_s, strays)
SELECT id, %(attempt)s, %(owner)s, %(pid)s, %(started_at)s, %(now)s, %(outcome)s, %(log_error)s,
       %(exit_status)s, %(peak_rss)s, %(cpu_s)s, %(strays)s
  FROM settled
RETURNING job_id
"""


def _settle(steps: str) -> str:
    """One settle as one statement: ``steps`` (data-modifying CTEs, the last one named
    ``settled``, returning the id when the fence held), then the attempt's log row.
    One statement each, so a turn's settles travel to the server together."""
    return f"WITH {steps}{_LOG_ATTEMPT}"


def _json_number_within(value: str, test: str) -> str:
    """Whether the jsonb ``value`` is a number for which ``test`` (over ``{n}``, the
    number as ``numeric``) holds; never an error: the cast runs only on a number."""
    number = f"({value})::numeric"
    return (f"(CASE WHEN jsonb_typeof({value}) = 'number' THEN {test.format(n=number)} "
            "ELSE false END)")


def _json_integer(value: str, least: int, most: int) -> str:
    return _json_number_within(value, f"{{n}} = trunc({{n}}) AND {{n}} BETWEEN {least} AND {most}")


def successor_payload(chain: str, result: str) -> str:
    """R59: the next step's arguments as text: its own, or with the ``result`` (bytea)
    of its predecessor under the keyword it names (NULL when that cannot be done)."""
    step = f"({chain} -> 0)"
    return (f"CASE WHEN {step} -> 'previous' IS NULL THEN {step} ->> 'payload' "
            f"ELSE jobpool_with_previous({step} ->> 'payload', {step} ->> 'previous', {result}) END")


def chain_step_fits(chain: str, result: str = "new_result") -> str:
    """R44: whether the next step of the jsonb ``chain`` can be enqueued by
    ``_successor`` (every column it fills has its type, every cast succeeds; R59: a
    step asking for its predecessor's ``result`` gets one that is JSON), as a
    condition that is never an error itself. The claim checked the whole chain
    (``row_codec.chain``); this guards a settle against a chain changed since, so one
    row's chain can never fail the statement, and with it the turn."""
    step = f"({chain} -> 0)"
    optional = "({v} IS NULL OR jsonb_typeof({v}) = 'null' OR {test})"
    return " ".join(f"""(CASE WHEN jsonb_typeof({chain}) = 'array' AND jsonb_typeof({step}) = 'object'
    THEN jsonb_typeof({step} -> 'name') = 'string' AND jsonb_typeof({step} -> 'queue') = 'string'
     AND jsonb_typeof({step} -> 'payload') = 'string'
     AND ({step} -> 'previous' IS NULL OR {successor_payload(chain, result)} IS NOT NULL)
     AND {_json_integer(f"{step} -> 'priority'", PRIORITY_MIN, INT32_MAX)}
     AND {optional.format(v=f"{step} -> 'max_attempts'",
                          test=_json_integer(f"{step} -> 'max_attempts'", 1, INT32_MAX))}
     AND {optional.format(v=f"{step} -> 'timeout'",
                          test=_json_number_within(f"{step} -> 'timeout'", "{n} > 0 AND {n} < 1e300"))}
    ELSE false END)""".split())


#: R44: a finished row whose chain could not go on keeps its end, and says why.
_DONE_ERROR = (f"CASE WHEN chain IS NOT NULL AND NOT {chain_step_fits('chain')} "
               f"THEN {quote_literal(CHAIN_STOPPED)} ELSE last_error END")

def _successor(moved: str, name: str = "successor") -> str:
    """R12: a chain's next step, from the rows a finishing settle ``moved``, with the
    step's own metadata when it has one (R55), else their own (R54). R59: the result a
    row was given is looked up in ``done_input`` only for a step that asks for it, so a
    turn without such a step joins nothing."""
    result = "(SELECT i.new_result FROM done_input AS i WHERE i.id = m.id)"
    payload = successor_payload("chain", result)
    return f"""{name} AS (
    INSERT INTO jobs ({_NEW_JOB_COLUMNS}, chain_root, grp, meta)
    SELECT chain -> 0 ->> 'queue', chain -> 0 ->> 'name', NULL,
           convert_to({payload}, 'UTF8'), 'json',
           (chain -> 0 ->> 'priority')::integer, 'ready', %(now)s, %(now)s,
           (chain -> 0 ->> 'max_attempts')::integer, NULL, (chain -> 0 ->> 'timeout')::float8,
           %(now)s, CASE WHEN jsonb_array_length(chain) > 1 THEN chain - 0 END, NULL,
           COALESCE(chain_root, id), {limited_group("chain -> 0 ->> 'name'", "jobpool_limits",
                                                    jsonb_of(payload))},
           CASE WHEN jsonb_typeof(chain -> 0 -> 'meta') = 'object' THEN chain -> 0 -> 'meta'
                ELSE meta END
      FROM {moved} AS m WHERE chain IS NOT NULL AND {chain_step_fits('chain', result)})
"""


#: Columns a finishing transition writes besides ``_MOVED``: its status, and what the
#: live row had that the transition may change; ``result`` and ``finished_at`` only
#: when it sets them. A live row's lease and cancel flag stay behind.
_FINISHED_KEEPS = ("status", "crashes", "last_error", "progress")
_FINISHED_ONLY = ("result", "finished_at")
_LIVE_ONLY = frozenset({"lease_owner", "lease_expires_at", "cancel_requested"})


def finish_row(transition: lifecycle.Transition, dialect: Dialect, source: str,
               overrides: dict[str, str] | None = None, more: tuple[str, ...] = ()) -> str:
    """The ``INSERT`` that writes the rows of ``source`` (a CTE of rows deleted from
    ``jobs``) into ``finished_jobs`` as ``transition`` leaves them, returning their ids;
    ``more``: columns only ``overrides`` fill (a success's attempt line, R61)."""
    sets = transition.columns()
    columns = (*_MOVED.split(", "), *_FINISHED_KEEPS, *(c for c in _FINISHED_ONLY if c in sets),
               *more)
    return (f"INSERT INTO finished_jobs ({', '.join(columns)})\n"
            f"    SELECT {select_list(transition, columns, dialect, _LIVE_ONLY, overrides)}"
            f" FROM {source}\n    RETURNING id")


_SETTLES = lifecycle.SETTLES
#: R44: a done row whose chain could not go on says why (the transition keeps the
#: error otherwise).
_CHAIN_STOPPED_OVERRIDE = {"last_error": _DONE_ERROR}
#: R61: a success's attempt line, written into its finished row by the settle that
#: moves it (from the turn's ``input``), where a failure's goes to ``attempts``.
_DONE_LINE = {column: "%(owner)s" if given == "owner" else given for column, given in DONE_LINE}


#: R44: a claimed (or reclaimed) row the codec refused (``store/row_codec.py``), dead
#: at once with the reason naming the column, fenced by id, owner and status; the
#: columns move as they are (the schema's types held them), the batch's trigger
#: counts the member, and the attempt's line says ``malformed``.
SETTLE_MALFORMED = _settle(f"""moved AS (
    DELETE FROM jobs WHERE id = %(id)s::bigint AND lease_owner = %(owner)s AND status = 'running'
    RETURNING *, {told_if_waited()}),
settled AS (
    {finish_row(lifecycle.MALFORMED, DIALECT, 'moved')})
""")
#: Nothing follows it: its one statement does it all.
MALFORMED_FOLLOW_UPS: tuple[str, ...] = ()

# --- a turn in one statement (issue 25 item 1) ---------------------------------------------
# A turn's settles of every kind, their lines in the attempt log and the claim for the
# free slots of one queue, as one statement with one result: the attempts as arrays
# unnested side by side, their kind beside them, each kind's transition a step of its
# own over the rows of that kind (fenced row by row, R8), then the claim
# (R6-R9). The claim reads the table as it was before the statement (every step of a
# statement sees one snapshot), so a job this statement puts back in line is claimed by
# the next one, never twice in one; the rows it settles are ``running`` and those it
# claims ``ready``, so no row is written by two of its steps.

#: The kinds a turn statement may settle, in the order its steps are written.
TURN_KINDS = tuple(_SETTLES)
#: The attempts a turn settles, one row each: what each decision gives (``i.new_*``),
#: its line in the attempt log, and its kind (``Decision.statement``).
_INPUT_TURN = """input AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(run_ats)s::float8[],
                         %(errors)s::text[], %(crashes)s::integer[], %(results)s::bytea[],
                         %(pids)s::integer[], %(began)s::float8[], %(outcomes)s::text[],
                         %(log_errors)s::text[], %(exit_statuses)s::text[],
                         %(peak_rsses)s::bigint[], %(cpus)s::float8[], %(strays)s::integer[],
                         %(kinds)s::text[])
        AS i(id, attempt, new_run_at, new_error, new_crashes, new_result, pid, began,
             outcome, log_error, exit_status, peak_rss, cpu_s, strays, kind)),
"""
#: R61: a success's attempts, apart: a success needs its id, attempt and result, and its
#: line's pid and measures (no due time, error, crash count, outcome or exit status).
_INPUT_DONE = """done_input AS (
    SELECT * FROM unnest(%(done_ids)s::bigint[], %(done_attempts)s::integer[],
                         %(done_results)s::bytea[], %(done_pids)s::integer[],
                         %(done_peak_rsses)s::bigint[], %(done_cpus)s::float8[],
                         %(done_strays)s::integer[])
        AS i(id, attempt, new_result, pid, peak_rss, cpu_s, strays)),
"""
_GUARD_MANY = ("j.id = i.id AND j.lease_owner = %(owner)s AND j.attempts = i.attempt "
               "AND j.status = 'running'")
#: R19a: the lines of the attempts a turn settled, but a success's (R61: in its row).
_LOG_MANY = """
INSERT INTO attempts (job_id, attempt, owner, pid, started_at, ended_at, outcome, error,
                      exit_status, peak_rss, cpu_s, strays)
SELECT id, attempt, %(owner)s, pid, began, %(now)s, outcome, log_error, exit_status, peak_rss,
       cpu_s, strays
  FROM input JOIN settled USING (id)
"""

#: The claim's columns (``CLAIM``'s ``RETURNING``), as a turn statement's rows carry
#: them after a flag that tells a claimed row (true) from a settled attempt's id (false).
_CLAIM_SHAPE = ("NULL::text, NULL::bytea, NULL::text, NULL::integer, NULL::integer, "
                "NULL::integer, NULL::float8, NULL::float8, NULL::integer, NULL::float8, "
                "NULL::integer, NULL::float8, NULL::text, NULL::bigint, NULL::text")


def _turn_steps(name: str) -> str:
    """``lifecycle.SETTLES[name]`` over the rows of kind ``name`` of ``input``: a
    finishing one moves the rows to ``finished_jobs`` (a done chain's next step enqueued
    by the same statement, R12), the rest update them where they are. Its last step is
    ``settled_<name>``, returning the ids whose fence held."""
    transition = _SETTLES[name]
    done = name == "done"
    source = "done_input" if done else "input"
    guard = _GUARD_MANY if done else f"i.kind = {quote_literal(name)} AND {_GUARD_MANY}"
    if transition.finishes:
        moved = finish_row(transition, _MANY_MOVED_DIALECT, f"moved_{name} JOIN {source} USING (id)",
                           {**_CHAIN_STOPPED_OVERRIDE, **_DONE_LINE} if done else None,
                           DONE_LINE_COLUMNS if done else ())
        return (f"moved_{name} AS (DELETE FROM jobs AS j USING {source} AS i WHERE {guard}"
                f" RETURNING j.*, {told_if_waited('j.')}),\nsettled_{name} AS (\n    {moved}),\n"
                + (_successor(f"moved_{name}", f"successor_{name}") + ",\n" if done else ""))
    return f"""settled_{name} AS (
    UPDATE jobs AS j SET {assignments(transition, _MANY_DIALECT)}
      FROM input AS i WHERE {guard} RETURNING j.id),
"""


def numbered(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` with psycopg's named placeholders written as PostgreSQL's numbered ones
    (``$1``...), and the names in their order. psycopg sends such a text as it is
    (``psycopg.RawCursor``): a statement with named ones it scans for them at every run
    when the text is longer than 4 kB (it keeps the scan only for shorter ones), about a
    third of a one-job turn's CPU in the claimer for ``turn_statement``'s."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"
    out = re.sub(r"%\((\w+)\)s", number, text)
    if "%" in out:
        raise ValueError("a numbered statement keeps no other % (psycopg would not read it)")
    return out, tuple(names)


@functools.lru_cache(maxsize=None)
def turn_statement_numbered(kinds: tuple[str, ...], claim: bool,
                            after: bool = False) -> tuple[str, tuple[str, ...]]:
    """``turn_statement`` as ``numbered`` writes it (what the driver sends)."""
    return numbered(turn_statement(kinds, claim, after))


@functools.lru_cache(maxsize=None)
def turn_statement(kinds: tuple[str, ...], claim: bool, after: bool = False) -> str:
    """One turn as one statement: the settles of ``kinds`` (successes in
    ``_INPUT_DONE``'s arrays; the others in ``_INPUT_TURN``'s, ``%(kinds)s`` naming each
    attempt's) and, when ``claim``, ``CLAIM`` with its
    parameters. Its rows: ``(false, id)`` for each attempt whose fence held, padded to
    the claim's columns, and ``(true, CLAIM's columns...)`` for each claimed row. One
    text per set of kinds, so each is prepared once (a pool meets a handful)."""
    if not kinds:
        raise ValueError("a turn statement settles at least one kind (else: CLAIM)")
    unknown = set(kinds) - set(TURN_KINDS)
    if unknown:
        raise ValueError(f"no such settle: {sorted(unknown)}")
    ordered = [name for name in TURN_KINDS if name in kinds]
    steps = "".join(_turn_steps(name) for name in ordered)
    settled = " UNION ALL ".join(f"SELECT id FROM settled_{name}" for name in ordered)
    # Successes have their own arrays, the other kinds share theirs (``kinds`` tells
    # them apart); a data-modifying step runs whether or not the statement reads it.
    failures = set(kinds) != {"done"}
    text = (f"WITH {_INPUT_DONE if 'done' in kinds else ''}{_INPUT_TURN if failures else ''}"
            f"{steps}settled AS ({settled})"
            + (f",\nlogged AS ({_LOG_MANY.strip()})" if failures else ""))
    if not claim:
        return f"{text}\nSELECT false, id, {_CLAIM_SHAPE} FROM settled\n"
    # R62: ``after``: the claim from the claimer's place in line (``CLAIM_AFTER``).
    return (f"{text},\n{_CLAIM_PICKED_AFTER if after else _CLAIM_PICKED},\n"
            f"claimed AS ({_CLAIM_UPDATE})\n"
            f"SELECT true, * FROM claimed\nUNION ALL\n"
            f"SELECT false, id, {_CLAIM_SHAPE} FROM settled\n")


CRASH_CAUSES = """
SELECT error FROM attempts WHERE job_id = %(id)s AND outcome = 'crash' ORDER BY seq
"""

#: In-doubt claims: a claim that committed on the server while its reply was lost
#: (the connection dropped) left rows running under this pool that no child runs.
#: After reconnecting, the pool gives back every lease of its own it does not
#: hold, attempt and all: by R6 those jobs never ran. A lease is held by job and
#: attempt: a job it holds at one attempt whose row a turn in doubt settled and claimed
#: again (the same owner, the next attempt) is given back too, not left running.
RELEASE_IN_DOUBT = f"""
UPDATE jobs SET {assignments(lifecycle.RELEASE_IN_DOUBT, DIALECT)}
 WHERE status = 'running' AND lease_owner = %(owner)s
   AND (id, attempts) NOT IN (SELECT * FROM unnest(%(held)s::bigint[],
                                                   %(held_attempts)s::integer[]))
RETURNING id
"""

#: R26: which of the settles sent by turns whose connection dropped did commit, each
#: known by the attempt log's line it wrote (R19a): this owner's, for that claim of the
#: attempt (its start), dated by that turn's clock (no other settle has the same). A
#: success's line is in its finished row (R61), found by primary key; a failure's in
#: ``attempts``.
SETTLED_IN_DOUBT = """
WITH doubted (job_id, attempt, started_at, ended_at) AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(began)s::float8[],
                         %(ended)s::float8[]))
SELECT f.id, f.attempts, f.started_at, f.finished_at
  FROM doubted AS d JOIN finished_jobs AS f ON f.id = d.job_id
 WHERE f.done_owner = %(owner)s AND (f.attempts, f.started_at, f.finished_at)
                                   = (d.attempt, d.started_at, d.ended_at)
UNION ALL
SELECT job_id, attempt, started_at, ended_at
  FROM attempts
 WHERE owner = %(owner)s
   AND (job_id, attempt, started_at, ended_at) IN (SELECT * FROM doubted)
"""

# --- recovery (R23, R24) ------------------------------------------------------------------

RECLAIMABLE_EXPIRED = """
SELECT id, name, attempts, max_attempts, crashes, deadline, COALESCE(started_at, %(now)s),
       lease_owner
  FROM jobs WHERE status = 'running' AND lease_expires_at < %(now)s
   FOR UPDATE SKIP LOCKED
"""
LEASE_OWNERS = "SELECT DISTINCT lease_owner FROM jobs WHERE status = 'running'"
RECLAIMABLE_OWNER = """
SELECT id, name, attempts, max_attempts, crashes, deadline, COALESCE(started_at, %(now)s),
       lease_owner
  FROM jobs WHERE status = 'running' AND lease_owner = %(owner)s
   FOR UPDATE SKIP LOCKED
"""

# --- operating (R21, R22, R25, R27, R29, R31, R33) ---------------------------------------------

#: R31: a ready job is cancelled at once (moved to finished, dead); a running one
#: is flagged for its owner.
CANCEL_READY = f"""
WITH moved AS (DELETE FROM jobs WHERE id = %(id)s AND status = 'ready'
               RETURNING *, {told_if_waited()})
{finish_row(lifecycle.CANCEL_READY, DIALECT, "moved")}
"""
REQUEST_CANCEL = """
UPDATE jobs SET cancel_requested = 1 WHERE id = %(id)s AND status = 'running' RETURNING id
"""
#: R31: ``cancel_many``'s ready and running rows, each kind in one statement whatever the
#: number of ids (a row at a time, ``CANCEL_READY`` then ``REQUEST_CANCEL`` then its
#: status, was up to three round trips a row). Every row it names is locked before any
#: moves (``LOCK_NAMED``): the ready ones first, then the running ones, each in id order.
#: A row a pool's turn holds is waited for and read as the turn left it, and none
#: changes between the statements. Moving the ready rows before the running ones were
#: held let the move's trigger take a batch member's shard, then wait on a turn that
#: held a running row and wanted that shard; and taking a running row before a ready one
#: waited on a turn that had claimed the ready row (its claim comes first) and then
#: wanted the running one to settle: deadlocks both.
LOCK_NAMED = """
SELECT id FROM jobs WHERE id = ANY(%(ids)s::bigint[]) AND status = %(status)s
 ORDER BY id FOR UPDATE
"""
CANCEL_READY_MANY = f"""
WITH moved AS (DELETE FROM jobs WHERE id = ANY(%(ids)s::bigint[]) AND status = 'ready'
               RETURNING *, {told_if_waited()})
{finish_row(lifecycle.CANCEL_READY, DIALECT, "moved")}
"""
REQUEST_CANCEL_MANY = """
UPDATE jobs SET cancel_requested = 1 WHERE id = ANY(%(ids)s::bigint[]) AND status = 'running'
RETURNING id
"""
#: R51: waiting jobs due now, by id or by filter (see ``sql.RUN_NOW``).
RUN_NOW = f"""
UPDATE jobs SET {assignments(lifecycle.RUN_NOW, DIALECT)}
 WHERE id = ANY(%(ids)s::bigint[]) AND status = 'ready' AND run_at > %(now)s
RETURNING id, queue
"""
RUN_NOW_MATCHING = f"""
UPDATE jobs SET {assignments(lifecycle.RUN_NOW, DIALECT)}
 WHERE status = 'ready' AND run_at > %(now)s AND (%(name)s::text IS NULL OR name = %(name)s)
   AND (%(queue)s::text IS NULL OR queue = %(queue)s)
RETURNING id, queue
"""
STATUSES_OF = "SELECT id, status FROM all_jobs WHERE id = ANY(%(ids)s::bigint[])"
CANCELS_FOR_OWNER = """
SELECT id, attempts FROM jobs
 WHERE status = 'running' AND lease_owner = %(owner)s AND cancel_requested = 1
"""
JOB_STATUS = "SELECT status FROM all_jobs WHERE id = %(id)s"

TAKE_HOOK = """
UPDATE finished_jobs SET hook_done = 1
 WHERE id = %(id)s AND status = 'dead' AND hook_done = 0 RETURNING id
"""
PENDING_HOOKS = """
SELECT id FROM finished_jobs
 WHERE status = 'dead' AND hook_done = 0 AND name = ANY(%(names)s) ORDER BY id
"""

#: Heartbeats and progress reports commit without waiting for their WAL flush: one
#: lost to a server crash is sent again at the next beat. Claims and settles never.
COMMIT_ASYNC = "SET LOCAL synchronous_commit = off"

SET_PROGRESS = f"UPDATE jobs SET progress = %(progress)s, stage = %(stage)s WHERE {GUARD}"
#: R37: a running attempt's state, fenced like a settle; the one it resumes from; and
#: ``jobs reset-state``.
SAVE_STATE = f"""
UPDATE jobs SET state = %(state)s, state_at = extract(epoch FROM now()) WHERE {GUARD}
"""
READ_STATE = f"SELECT state FROM jobs WHERE {GUARD}"
RESET_STATE = """
WITH live AS (UPDATE jobs SET state = NULL, state_at = NULL
               WHERE id = %(id)s AND state IS NOT NULL RETURNING id),
     finished AS (UPDATE finished_jobs SET state = NULL, state_at = NULL
                   WHERE id = %(id)s AND state IS NOT NULL RETURNING id)
SELECT id FROM live UNION ALL SELECT id FROM finished
"""

#: R56: a heartbeat adds its pool's counts to its minute's row of each name (as SQLite's).
UPSERT_ROLLUP = (
    "INSERT INTO jobpool_rollups (minute, name, " + ", ".join(COUNTS) + ") VALUES (%s, %s, "
    + ", ".join("%s" for _ in COUNTS) + ") ON CONFLICT (minute, name) DO UPDATE SET "
    + ", ".join(f"{c} = GREATEST(jobpool_rollups.{c}, excluded.{c})" if c in MAXIMA
                else f"{c} = jobpool_rollups.{c} + excluded.{c}" for c in COUNTS))
TRIM_ROLLUPS = "DELETE FROM jobpool_rollups WHERE minute < %(before)s"
READ_ROLLUPS = ("SELECT minute, name, " + ", ".join(COUNTS) + " FROM jobpool_rollups "
                "WHERE minute >= %(since)s ORDER BY minute, name")
#: R56: the window added up in the query (as SQLite's); sums of ``bigint`` are
#: ``numeric`` here, so they come back as ``bigint`` again.
_TOTALS = ", ".join(f"max({c})" if c in MAXIMA else
                    f"sum({c})::{'float8' if c.endswith('_sum') else 'bigint'}" for c in COUNTS)
ROLLUPS_BY_MINUTE = ("SELECT minute, NULL, " + _TOTALS + " FROM jobpool_rollups "
                     "WHERE minute >= %(since)s AND (%(name)s::text IS NULL OR name = %(name)s) "
                     "GROUP BY minute ORDER BY minute")
ROLLUPS_BY_NAME = ("SELECT NULL, name, " + _TOTALS + " FROM jobpool_rollups "
                   "WHERE minute >= %(since)s GROUP BY name ORDER BY name")

#: R24b: the last column says the row was made by this beat (see ``sql.UPSERT_POOL``).
UPSERT_POOL = """
INSERT INTO pools (owner, host, pid, procs, queues, core, started_at, heartbeat_at, counters, slots,
                   names)
VALUES (%(owner)s, %(host)s, %(pid)s, %(procs)s, %(queues)s, %(core)s, %(now)s, %(now)s,
        %(counters)s, %(slots)s, %(names)s)
ON CONFLICT (owner) DO UPDATE SET procs = excluded.procs, heartbeat_at = excluded.heartbeat_at,
       counters = excluded.counters, slots = excluded.slots
RETURNING stop_requested, desired_procs, started_at = %(now)s
"""
ACK_STOP = "UPDATE pools SET stop_requested = 0 WHERE owner = %(owner)s"

#: R38: pause a queue (on the server's clock); changes no row when paused already.
PAUSE_QUEUE = """
INSERT INTO jobpool_queues (queue, paused_at) VALUES (%(queue)s, extract(epoch FROM now()))
ON CONFLICT (queue) DO UPDATE SET paused_at = excluded.paused_at
 WHERE jobpool_queues.paused_at IS NULL
"""
#: R38: resume a queue; changes no row when it was not paused.
RESUME_QUEUE = """
UPDATE jobpool_queues SET paused_at = NULL WHERE queue = %(queue)s AND paused_at IS NOT NULL
"""
#: R38: what every pool's heartbeat reads.
PAUSED_QUEUES = "SELECT queue FROM jobpool_queues WHERE paused_at IS NOT NULL ORDER BY queue"
ACK_SCALE = "UPDATE pools SET desired_procs = NULL WHERE owner = %(owner)s"
DELETE_POOL = "DELETE FROM pools WHERE owner = %(owner)s"
LIST_POOLS = """
SELECT owner, host, pid, procs, queues, core, started_at, heartbeat_at, counters, slots,
       stop_requested, desired_procs, names
  FROM pools ORDER BY started_at
"""
REQUEST_STOP = "UPDATE pools SET stop_requested = 1 WHERE owner = ANY(%(owners)s)"
REQUEST_SCALE = "UPDATE pools SET desired_procs = %(procs)s WHERE owner = ANY(%(owners)s)"
#: R26: a write that changes nothing, rolled back: whether this role may write here.
PROBE_WRITE = "UPDATE jobpool_meta SET value = value WHERE key = 'schema'"

ADVANCE_PERIODIC = """
INSERT INTO periodic (name, last_occurrence) VALUES (%(name)s, %(occurrence)s)
ON CONFLICT (name) DO UPDATE SET last_occurrence = excluded.last_occurrence
 WHERE periodic.last_occurrence < excluded.last_occurrence
RETURNING name
"""

# --- dead letters and retention (R32) ----------------------------------------------------------

# --- batches (R34): the statements of store/sqlite/statements.py, on the server's clock ---------------------

_NOW = "extract(epoch FROM now())"
_SERVER_CLOCK = DIALECT._replace(given=lambda name: _NOW if name == "now" else f"%({name})s")

OPEN_BATCH = f"""
INSERT INTO jobpool_batches (created_at, changed_at, on_success, on_complete)
VALUES ({_NOW}, {_NOW}, %(on_success)s::jsonb, %(on_complete)s::jsonb)
RETURNING id
"""
#: R34: see the SQLite statement of this name.
DISCARD_UNUSED_BATCH = """
DELETE FROM jobpool_batches WHERE id = %(id)s AND total = 0 AND closed_at IS NULL
"""
GROW_BATCH = """
UPDATE jobpool_batches SET total = total + %(count)s
 WHERE id = %(batch_id)s AND finished_at IS NULL AND cancelled_at IS NULL
RETURNING id
"""
CLOSE_BATCH = f"""
UPDATE jobpool_batches SET closed_at = {_NOW}, changed_at = {_NOW}
 WHERE id = %(id)s AND closed_at IS NULL
"""
CANCEL_BATCH = f"""
UPDATE jobpool_batches SET cancelled_at = {_NOW}, closed_at = coalesce(closed_at, {_NOW}),
       changed_at = {_NOW}
 WHERE id = %(id)s AND finished_at IS NULL AND cancelled_at IS NULL
"""
#: R34: a batch cancel holds the batch's shards, and a pool's turn takes a member's row
#: before its shard (the member trigger runs at the end of the turn's statement), so the
#: cancel never waits on a member's row: it passes over the rows a turn holds (SKIP
#: LOCKED) and comes back for them in transactions of their own (``MEMBERS_LEFT``).
#: Waiting for them deadlocked against any member's end while pools worked the batch.
CANCEL_READY_MEMBERS = f"""
WITH moved AS (DELETE FROM jobs WHERE status = 'ready' AND id IN (
                   SELECT id FROM jobs WHERE batch_id = %(id)s AND status = 'ready'
                      FOR UPDATE SKIP LOCKED)
               RETURNING *, {told_if_waited()})
{finish_row(lifecycle.CANCEL_READY, _SERVER_CLOCK, "moved")}
"""
REQUEST_CANCEL_MEMBERS = """
UPDATE jobs SET cancel_requested = 1 WHERE status = 'running' AND id IN (
    SELECT id FROM jobs WHERE batch_id = %(id)s AND status = 'running' AND cancel_requested = 0
       FOR UPDATE SKIP LOCKED)
"""
#: R34: how many members of a cancelled batch a cancel has yet to reach: ready, or
#: running and not yet asked to stop (rows a pool's turn held when the cancel passed).
MEMBERS_LEFT = """
SELECT count(*) FROM jobs WHERE batch_id = %(id)s
   AND (status = 'ready' OR (status = 'running' AND cancel_requested = 0))
"""
#: The members a batch cancel ended are counted by the jobpool_members_ended trigger.
MEMBERS_CANCELLED = None
#: A batch's shards, locked in order before its row: every writer takes them in
#: that order (a statement's member ends: their shards by shard and batch, then the
#: rows, ``jobpool_members_ended``), so none waits on another the other way round.
LOCK_SHARDS = """
SELECT shard FROM jobpool_batch_shards WHERE batch_id = %(id)s ORDER BY shard FOR UPDATE
"""
BATCH_COLUMNS = ("id, created_at, total, done, dead, closed_at, cancelled_at, finished_at, "
                 "on_success, on_complete, success_job, complete_job")
#: The counts are the sums of the batch's shards (its row's own are brought up to date
#: only when a shard empties); the columns are ``BATCH_COLUMNS``, as SQLite reads them.
_BATCHES = """
SELECT b.id, b.created_at, b.total, coalesce(s.done, 0), coalesce(s.dead, 0), b.closed_at,
       b.cancelled_at, b.finished_at, b.on_success, b.on_complete, b.success_job, b.complete_job
  FROM jobpool_batches AS b
  LEFT JOIN LATERAL (SELECT sum(done) AS done, sum(dead) AS dead FROM jobpool_batch_shards
                      WHERE batch_id = b.id) AS s ON true
"""
GET_BATCH = _BATCHES + " WHERE b.id = %(id)s"
LIST_BATCHES = _BATCHES + " {where} ORDER BY b.id DESC LIMIT %(limit)s"
OPEN_BATCHES = _BATCHES + " WHERE b.finished_at IS NULL ORDER BY b.id DESC LIMIT %(limit)s"
#: R34: the members a transaction added count in their shards' ``pending``.
MEMBERS_JOINED = f"""
INSERT INTO jobpool_batch_shards (batch_id, shard, pending)
SELECT %(batch_id)s, mod(id, {BATCH_SHARDS}), count(*) FROM unnest(%(ids)s::bigint[]) AS id
 GROUP BY 2 ORDER BY 2
ON CONFLICT (batch_id, shard) DO UPDATE
   SET pending = jobpool_batch_shards.pending + excluded.pending
"""
BATCH_MEMBERS = """
SELECT status, count(*) FROM jobs WHERE batch_id = %(id)s GROUP BY status
UNION ALL
SELECT status, count(*) FROM finished_jobs WHERE batch_id = %(id)s GROUP BY status
"""
#: R60: the sizes of a page of a batch's members that stored a result (a done row is
#: in ``finished_jobs``), in id order after ``after``, through ``finished_jobs_batch_ids``;
#: then the results of those up to ``through``, where the page's bytes stop it.
BATCH_RESULT_SIZES = """
SELECT id, octet_length(result) FROM finished_jobs
 WHERE batch_id = %(id)s AND id > %(after)s AND status = 'done' AND result IS NOT NULL
 ORDER BY batch_id, id LIMIT %(limit)s
"""
BATCH_RESULTS = """
SELECT id, name, serializer, result FROM finished_jobs
 WHERE batch_id = %(id)s AND id > %(after)s AND id <= %(through)s AND status = 'done'
   AND result IS NOT NULL
 ORDER BY batch_id, id
"""
#: FOR SHARE: a reclaim of the member waits for the adds (or they wait for it, and
#: find the lease gone).
MEMBER_BATCH = f"SELECT batch_id, meta::text FROM jobs WHERE {GUARD} FOR SHARE"
FIND_ADD = """
SELECT job_id FROM jobpool_batch_adds WHERE batch_id = %(batch_id)s AND add_key = %(add_key)s
"""
RECORD_ADD = """
INSERT INTO jobpool_batch_adds (batch_id, add_key, job_id)
VALUES (%(batch_id)s, %(add_key)s, %(job_id)s)
"""
#: R34: finished batches are swept with done rows, a bounded batch per call, in one
#: statement (two would each pick their own set under READ COMMITTED).
PURGE_BATCH_ADDS = None
PURGE_BATCHES = """
WITH swept AS (SELECT id FROM jobpool_batches WHERE finished_at < %(before)s
                ORDER BY finished_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
     shards AS (DELETE FROM jobpool_batch_shards WHERE batch_id IN (SELECT id FROM swept)),
     adds AS (DELETE FROM jobpool_batch_adds WHERE batch_id IN (SELECT id FROM swept))
DELETE FROM jobpool_batches WHERE id IN (SELECT id FROM swept)
"""

LIST_DEAD = """
SELECT {columns} FROM all_jobs WHERE status = 'dead' {name_filter}
 ORDER BY finished_at DESC LIMIT %(limit)s
"""
DEAD_IDS = "SELECT id FROM finished_jobs WHERE status = 'dead' {name_filter} ORDER BY id"
#: A finished row's columns that go back into ``jobs`` when it is revived.
_REVIVED = (*_MOVED.split(", "), "status", "crashes", "last_error", "progress",
            "lease_owner", "lease_expires_at", "cancel_requested")
_FINISHED_ONLY_ALL = frozenset({"result", "finished_at", "hook_done"})
#: R32: a dead job back in line with a fresh budget, under its own id; its history
#: stays in the attempt log. A live job holding its key makes the INSERT fail. A
#: member of a batch whose callbacks have not fired reopens its count (R34); the answer
#: says whether it did (a member it did not reopen runs alone).
RETRY_DEAD = f"""
WITH moved AS (DELETE FROM finished_jobs WHERE id = %(id)s AND status = 'dead' RETURNING *),
reopened AS (
    UPDATE jobpool_batch_shards AS s SET pending = s.pending + 1, dead = s.dead - 1
      FROM moved, jobpool_batches AS b
     WHERE s.batch_id = moved.batch_id AND s.shard = mod(moved.id, {BATCH_SHARDS})
       AND b.id = moved.batch_id AND b.finished_at IS NULL
    RETURNING s.batch_id)
INSERT INTO jobs ({", ".join(_REVIVED)})
SELECT {select_list(lifecycle.RETRY_DEAD, _REVIVED, DIALECT, _FINISHED_ONLY_ALL)}
  FROM moved
RETURNING id, queue, batch_id, EXISTS (SELECT 1 FROM reopened)
"""
def _revive_dead_many(which: str) -> str:
    """``RETRY_DEAD`` of the dead rows among ``%(ids)s`` that also meet ``which`` (a
    condition on ``f``, the finished row), in one statement: each moved back to ``jobs``
    under its own id, answered by its id and queue. A row the statement leaves is the
    caller's to answer."""
    return f"""
WITH moved AS (DELETE FROM finished_jobs AS f
                WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead' AND {which}
               RETURNING *)
INSERT INTO jobs ({", ".join(_REVIVED)})
SELECT {select_list(lifecycle.RETRY_DEAD, _REVIVED, DIALECT, _FINISHED_ONLY_ALL)}
  FROM moved
RETURNING id, queue
"""


#: R32: ``RETRY_DEAD`` of many rows that are dead, without a key and in no batch, in one
#: statement: only a key can meet a live job's (R3) and only a batch's member takes a
#: shard (R34), so these need neither a savepoint nor their place in the shards' order.
#: A row that is no longer so when the statement runs is left for the caller to answer.
RETRY_DEAD_LOOSE = _revive_dead_many("key IS NULL AND batch_id IS NULL")
#: R32: ``RETRY_DEAD`` of many rows that are dead with a key and in no batch, in one
#: statement the caller runs under one savepoint (R3): a row whose key a live job holds
#: stays, and so do rows sharing a key among those given (one of them may be retried:
#: the caller's row-by-row move answers which). An enqueue that takes one of the keys
#: while the statement runs fails it whole, and the caller moves the rows one by one.
RETRY_DEAD_KEYED = _revive_dead_many("""key IS NOT NULL AND batch_id IS NULL
                  AND NOT EXISTS (SELECT 1 FROM jobs AS j WHERE j.name = f.name AND j.key = f.key)
                  AND NOT EXISTS (SELECT 1 FROM finished_jobs AS g
                                   WHERE g.id = ANY(%(ids)s::bigint[]) AND g.id <> f.id
                                     AND g.status = 'dead' AND g.name = f.name
                                     AND g.key = f.key)""")
#: R34: the shards of the dead members of unfinished batches a retry is given, locked
#: before it moves any, in the order a statement's member ends take them (shard, then
#: batch): the members without a key then move in one statement (``RETRY_DEAD_MEMBERS``)
#: and any other member alone, each reopen on a shard the retry already holds. A
#: finished batch's shards are never reopened, so they are not locked: the sweep deletes
#: them (``PURGE_BATCHES``) after the old dead rows a retry may be moving.
LOCK_DEAD_MEMBERS_SHARDS = f"""
SELECT 1 FROM jobpool_batch_shards AS s
 WHERE (s.batch_id, s.shard) IN (SELECT batch_id, mod(id, {BATCH_SHARDS}) FROM finished_jobs
                                  WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead'
                                    AND batch_id IS NOT NULL)
   AND EXISTS (SELECT 1 FROM jobpool_batches AS b
                WHERE b.id = s.batch_id AND b.finished_at IS NULL)
 ORDER BY s.shard, s.batch_id
   FOR UPDATE OF s
"""
#: R32, R34: ``RETRY_DEAD`` of many dead members of batches without a key, in one
#: statement (their shards locked first, ``LOCK_DEAD_MEMBERS_SHARDS``): each shard's
#: count reopened by the number of its members moved, where the batch had not finished
#: when the statement began; each row answered with whether its shard was reopened.
RETRY_DEAD_MEMBERS = f"""
WITH moved AS (DELETE FROM finished_jobs
                WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead' AND key IS NULL
                  AND batch_id IS NOT NULL
               RETURNING *),
counted AS (SELECT batch_id, mod(id, {BATCH_SHARDS}) AS shard, count(*)::integer AS n
              FROM moved GROUP BY batch_id, mod(id, {BATCH_SHARDS})),
reopened AS (
    UPDATE jobpool_batch_shards AS s SET pending = s.pending + c.n, dead = s.dead - c.n
      FROM counted AS c, jobpool_batches AS b
     WHERE s.batch_id = c.batch_id AND s.shard = c.shard
       AND b.id = c.batch_id AND b.finished_at IS NULL
    RETURNING s.batch_id, s.shard),
revived AS (
    INSERT INTO jobs ({", ".join(_REVIVED)})
    SELECT {select_list(lifecycle.RETRY_DEAD, _REVIVED, DIALECT, _FINISHED_ONLY_ALL)}
      FROM moved
    RETURNING id, queue, batch_id)
SELECT v.id, v.queue, v.batch_id,
       EXISTS (SELECT 1 FROM reopened AS r
                WHERE r.batch_id = v.batch_id AND r.shard = mod(v.id, {BATCH_SHARDS}))
  FROM revived AS v
"""
#: R35: the lanes of the dead rows of limited names a retry is given, made (or bumped)
#: before it reopens any, in the lanes' key order: each row's insert makes its lane again
#: (``jobpool_limited_row``), which, row by row, took a lane after the row's batch shard
#: and lanes in the rows' order, where turns take lanes in key order, then shards.
DEAD_LANES = lanes_in_key_order("""
SELECT queue, priority, name, grp FROM finished_jobs
 WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead' AND grp IS NOT NULL
   AND name IN (SELECT target FROM jobpool_limits WHERE scope = 'name')""")
#: The finished rows a retry is given, read before it reopens any: each one's batch
#: (R34: it takes their shards in the order a statement's member ends take them, shard
#: then batch), and whether it is dead without a key (R3: no live job can hold its key)
#: or dead with one.
DEAD_ROWS = """
SELECT id, batch_id, status = 'dead' AND key IS NULL, status = 'dead' AND key IS NOT NULL
  FROM finished_jobs
 WHERE id = ANY(%(ids)s::bigint[])
"""
#: R34: whether a batch whose count a retry reopened has finished meanwhile: another
#: member's end emptied the last shard in a transaction that had not seen the reopen
#: (the reopen read the batch row from its statement's snapshot). Taken after every
#: shard the retry locks (shards, then the batch: the order a member's end and a batch
#: cancel lock them in), FOR SHARE waits for that end to commit and reads the batch as
#: it left it; and whether it was cancelled (a reopened member of a cancelled batch is
#: followed by no callback). A cancel that commits after the retry finds the retried
#: members ready and cancels them itself, so the retry has nothing to say of it.
BATCH_FINISHED_SINCE = """
SELECT finished_at IS NOT NULL, cancelled_at IS NOT NULL
  FROM jobpool_batches WHERE id = %(batch)s FOR SHARE
"""
#: R34: the reopen of a member whose batch finished meanwhile, taken back (the member
#: counts as the dead it was when the batch finished; it runs alone).
REOPEN_TAKEN_BACK = f"""
UPDATE jobpool_batch_shards SET pending = pending - 1, dead = dead + 1
 WHERE batch_id = %(batch)s AND shard = mod(%(id)s, {BATCH_SHARDS})
"""
#: R32: ``dead.delete``'s dead rows and their attempts' lines, in one statement whatever
#: the number of ids (a row at a time it was up to two round trips a row).
DELETE_DEAD = """
WITH gone AS (DELETE FROM finished_jobs WHERE id = ANY(%(ids)s::bigint[]) AND status = 'dead'
              RETURNING id),
logs AS (DELETE FROM attempts WHERE job_id IN (SELECT id FROM gone))
SELECT id FROM gone
"""

PURGE_FINISHED = """
WITH gone AS (
    DELETE FROM finished_jobs WHERE id IN (
        SELECT id FROM finished_jobs WHERE status = %(status)s AND finished_at < %(before)s
         LIMIT %(limit)s)
    RETURNING id),
logs AS (DELETE FROM attempts WHERE job_id IN (SELECT id FROM gone))
SELECT count(*) FROM gone
"""
DEAD_CUTOFF = """
SELECT finished_at FROM finished_jobs WHERE status = 'dead'
 ORDER BY finished_at DESC LIMIT 1 OFFSET %(keep)s
"""

# --- reading ----------------------------------------------------------------------------------

COUNT_LIVE = """
SELECT status, count(*), count(*) FILTER (WHERE run_at > %(now)s) FROM jobs GROUP BY status
"""
COUNT_FINISHED = "SELECT status, count(*) FROM finished_jobs GROUP BY status"
JOB_COLUMNS = (
    "id, queue, name, key, payload, serializer, priority, status, run_at, attempts, "
    "max_attempts, crashes, deferrals, deadline, timeout, lease_owner, lease_expires_at, "
    "last_error, progress, stage, result, created_at, started_at, finished_at, chain_root, "
    "cancel_requested, batch_id, state, state_at, meta"
)
GET_JOB = f"SELECT {JOB_COLUMNS} FROM all_jobs WHERE id = %(id)s"
#: R12: the steps one job's success will enqueue (``Store.waiting_steps``), in either table.
WAITING_STEPS = """
SELECT chain::text FROM jobs WHERE id = %(id)s
UNION ALL SELECT chain::text FROM finished_jobs WHERE id = %(id)s
"""

#: R28: a listing reads its rows through an index in its order, so it stops at its
#: limit; a sequential scan stops there only when the rows it wants are dense (a
#: count capped at 100 000 rows, a rare name). ``jobs list`` reads in a transaction
#: of its own with this set: the planner then takes an index wherever there is one.
LISTING_PLANS = "SET LOCAL enable_seqscan = off"
#: R47: a count stopped at its bound reads its index in order: a bitmap of the index
#: reads every entry of the range before the bound stops anything (where the planner
#: thinks a pair's rows few, it takes one; a backlog of one name is a million).
PAIR_PLANS = "SET LOCAL enable_bitmapscan = off"
#: R28: where ``jobs list`` finds the rows of each status it lists, as (table,
#: condition): ready and running rows in ``jobs`` (apart, each status through its own
#: partial indexes), done and dead ones in ``finished_jobs`` (apart too, R47: each
#: status's rows are in id order in their own index and in a batch's index; together,
#: a generic plan walked the primary key, filtering, for a queue's or a batch's page).
#: A ready row is due by the server's clock (R7a).
LISTED_PARTS = {
    "ready": (("jobs", "status = 'ready' AND run_at <= extract(epoch FROM now())"),),
    "scheduled": (("jobs", "status = 'ready' AND run_at > extract(epoch FROM now())"),),
    "running": (("jobs", "status = 'running'"),),
    "done": (("finished_jobs", "status = 'done'"),),
    "dead": (("finished_jobs", "status = 'dead'"),),
    None: (("jobs", "status = 'ready'"), ("jobs", "status = 'running'"),
           ("finished_jobs", "status = 'done'"), ("finished_jobs", "status = 'dead'")),
}
#: R47: a name's page of every status: its finished rows together, in id order in
#: ``finished_jobs_name (name, id)``, which holds a name's rows of both statuses. A
#: status at a time, a generic plan read the dead part by walking ``finished_jobs_dead``
#: and filtering the name, every dead row for a name with few (79 against 16 ms at a
#: million rows, BENCHMARKS.md); the condition names both statuses, which neither
#: status's index holds alone, so only the name's index serves it.
NAMED_PARTS = (*LISTED_PARTS[None][:2], ("finished_jobs", "status IN ('done', 'dead')"))
#: The listing's condition of a name (``rows.listing_filters``).
NAME_FILTER = "name = %(name)s"


def _listed_parts(status: str | None, where: list[str]) -> tuple[tuple[str, str], ...]:
    return NAMED_PARTS if status is None and NAME_FILTER in where else LISTED_PARTS[status]


def list_jobs(status: str | None, where: list[str], *, newest_first: bool,
              meta_near: bool = False, after: bool = False) -> str:
    """R28: ``jobs list``: each part's first ``%(limit)s`` rows, then the first of them
    all, with the server's clock (a ready row not due yet is listed ``scheduled``).
    ``meta_near``: a metadata filter (``META_CONTAINS`` among ``where``) read newest
    first, each part in two reads below ``%(after)s`` (``after``) or the table's
    newest id, as ``META_NEAR`` says."""
    order = "id DESC" if newest_first else "id"
    if meta_near:
        return _meta_listing(status, where, after)
    parts = " UNION ALL ".join(
        f"({SELECT_JOB_FROM[table]} FROM {table} WHERE {' AND '.join([condition, *where])}"
        f" ORDER BY {order} LIMIT %(limit)s)" for table, condition in _listed_parts(status, where))
    return (f"SELECT *, extract(epoch FROM now())::float8 FROM ({parts}) AS listed "
            f"ORDER BY {order} LIMIT %(limit)s")


#: R54: a listing's metadata filter, ``list_jobs(meta=...)``: containment, which each
#: table's GIN index (``META_SCHEMA``) serves.
META_CONTAINS = "meta @> %(meta)s::jsonb"
#: R54: how many ids below its keyset a metadata listing walks in id order first.
#: No index holds both the containment and the id order (a GIN index returns its
#: matches unordered), and the planner picks between walking the primary key
#: newest first (fast when most rows match, a walk of the whole table when few do)
#: and reading every match from the GIN index and sorting them (the reverse) by its
#: estimate of how many rows match, which statistics often cannot make: a metadata
#: value wider than ANALYZE keeps leaves it guessing 1 %, and jobs enqueued since the
#: last ANALYZE (a burst of one tenant's) are missing from it. So each part is read
#: in two steps of its own, neither left to that estimate: the ``META_NEAR`` newest
#: ids, walked in id order (a broad filter's page is found there), and only when
#: those held fewer rows than the page, the ids below them through the GIN index
#: (a narrow filter's rows, all its matches read and sorted).
META_NEAR = 10_000


def _meta_listing(status: str | None, where: list[str], after: bool) -> str:
    """``list_jobs`` with a metadata filter, newest first (``META_NEAR``): in each part
    the near read hides the containment from the GIN index (``IS TRUE``: the planner
    can only walk the primary key's range), and the far read hides the id from the
    primary key (``id + 0``: the containment's index it is) and runs only when the near
    read came back short (a condition of no row: the plan's one-time filter)."""
    near, parts = [], []
    for n, (table, condition) in enumerate(_listed_parts(status, where)):
        top = "%(after)s" if after else f"(SELECT coalesce(max(id), 0) + 1 FROM {table})"
        hidden = [f"({c}) IS TRUE" if c == META_CONTAINS else c for c in where]
        near.append(
            f"near{n} AS MATERIALIZED ({SELECT_JOB_FROM[table]} FROM {table} WHERE "
            f"{' AND '.join([condition, *hidden, f'id >= {top} - {META_NEAR}'])} "
            f"ORDER BY id DESC LIMIT %(limit)s)")
        parts.append(f"SELECT * FROM near{n}")
        parts.append(
            f"({SELECT_JOB_FROM[table]} FROM {table} WHERE "
            f"{' AND '.join([condition, *where, f'id + 0 < {top} - {META_NEAR}'])} "
            f"AND (SELECT count(*) FROM near{n}) < %(limit)s ORDER BY id + 0 DESC "
            f"LIMIT %(limit)s)")
    return (f"WITH {', '.join(near)} SELECT *, extract(epoch FROM now())::float8 FROM "
            f"({' UNION ALL '.join(parts)}) AS listed ORDER BY id DESC LIMIT %(limit)s")


def count_jobs(status: str | None, where: list[str]) -> str:
    """How many rows ``list_jobs`` could list, counting at most ``%(most)s``."""
    parts = " UNION ALL ".join(
        f"(SELECT 1 FROM {table} WHERE {' AND '.join([condition, *where])} LIMIT %(most)s)"
        for table, condition in _listed_parts(status, where))
    return f"SELECT count(*) FROM (SELECT 1 FROM ({parts}) AS found LIMIT %(most)s) AS counted"
#: R19a: a job's attempt lines in order; a success's last, from its finished row (R61).
LIST_ATTEMPTS = log_sql("finished_jobs", "seq", lambda name: f"%({name})s")
NEXT_READY = """
SELECT min(run_at) FROM jobs
 WHERE status = 'ready' AND name = ANY(%(names)s) AND queue = ANY(%(queues)s)
"""
# --- the dashboard (R29): read in one transaction by PostgresStore.dashboard -------------

#: Per-queue counts of the live statuses and of dead rows (done rows are counted apart).
QUEUE_COUNTS = """
SELECT queue, 'ready', count(*), count(*) FILTER (WHERE run_at > %(now)s)
  FROM jobs WHERE status = 'ready' GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), 0 FROM jobs WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*), 0 FROM finished_jobs WHERE status = 'dead' GROUP BY queue
"""
#: R29, R47: the dashboard's per-queue counts, each stopped at ``%(most)s`` rows (as
#: SQLite's ``DASHBOARD_QUEUE_COUNTS``): the queues with ready rows one seek each of
#: ``jobs_ready_queue``, each queue's first ``most`` ready rows, every running row, and
#: the newest ``most`` dead rows by queue.
DASHBOARD_QUEUE_COUNTS = """
WITH RECURSIVE queues(queue) AS (
    (SELECT queue FROM jobs WHERE status = 'ready' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j WHERE j.status = 'ready' AND j.queue > q.queue
             ORDER BY j.queue LIMIT 1)
      FROM queues AS q WHERE q.queue IS NOT NULL)
SELECT q.queue, 'ready', c.total, c.later
  FROM queues AS q CROSS JOIN LATERAL (
       SELECT count(*), count(*) FILTER (WHERE r.run_at > %(now)s)
         FROM (SELECT j.run_at FROM jobs AS j WHERE j.status = 'ready' AND j.queue = q.queue
                LIMIT %(most)s) AS r) AS c(total, later)
 WHERE q.queue IS NOT NULL
UNION ALL
SELECT queue, 'running', count(*), 0 FROM jobs WHERE status = 'running' GROUP BY queue
UNION ALL
SELECT d.queue, 'dead', count(*), 0
  FROM (SELECT queue FROM finished_jobs WHERE status = 'dead'
         ORDER BY finished_at DESC LIMIT %(most)s) AS d GROUP BY d.queue
"""
#: ``jobpool metrics``: when the oldest due ready row of each queue became due.
OLDEST_DUE = """
SELECT queue, min(run_at) FROM jobs WHERE status = 'ready' AND run_at <= %(now)s GROUP BY queue
"""
DONE_COUNT = """
SELECT count(*) FROM (SELECT 1 FROM finished_jobs WHERE status = 'done' LIMIT %(most)s) AS d
"""
DONE_SINCE = """
SELECT queue, count(*) FROM finished_jobs
 WHERE status = 'done' AND finished_at > %(since)s GROUP BY queue
"""
#: The newest failed attempts (the outcomes SQLite's dashboard leaves out, likewise).
#: Looked for among the newest ``FAILURE_WINDOW`` attempts only (as SQLite), a range of
#: the attempts' key: a store whose last failure is a million attempts ago reads no
#: more than that to say so (R47).
FAILURE_WINDOW = 10_000
RECENT_FAILURES = f"""
SELECT a.job_id, j.name, a.attempt, a.outcome, a.ended_at, a.error
  FROM attempts AS a LEFT JOIN all_jobs AS j ON j.id = a.job_id
 WHERE a.seq > (SELECT coalesce(max(seq), 0) FROM attempts) - %(window)s
   AND a.outcome NOT IN ({", ".join(f"'{o}'" for o in QUIET_OUTCOMES)})
 ORDER BY a.seq DESC LIMIT %(limit)s
"""
#: R29 slots (as SQLite's ``RUNNING_JOBS``), R67 with each job's metadata.
RUNNING_JOBS = """
SELECT id, name, lease_owner, attempts, started_at, timeout, progress, stage, meta::text
  FROM jobs WHERE status = 'running'
"""

#: R28, R47: the (queue, name) pairs of ready rows, to tell which ready jobs no running
#: pool serves: a walk of ``jobs_ready_pairs`` that steps from each pair to the next
#: (a loose index scan), one entry a pair, however many rows each holds.
READY_BY_NAME = """
WITH RECURSIVE pairs(queue, name) AS (
    (SELECT queue, name FROM jobs WHERE status = 'ready' AND name IS NOT NULL
      ORDER BY queue, name LIMIT 1)
    UNION ALL
    SELECT next.queue, next.name FROM pairs CROSS JOIN LATERAL (
        SELECT queue, name FROM jobs
         WHERE status = 'ready' AND name IS NOT NULL
           AND (queue, name) > (pairs.queue, pairs.name)
         ORDER BY queue, name LIMIT 1) AS next)
SELECT queue, name FROM pairs
"""
#: R28, R47: the ready rows of one pair no pool serves, counted to ``%(most)s``
#: (``COUNT_MOST + 1``: more is shown "10 000+"), a range of ``jobs_ready_pairs`` walked
#: in order, so it stops at the bound (read with ``PAIR_PLANS``).
READY_PAIR_COUNT = """
SELECT count(*) FROM (SELECT 1 FROM jobs WHERE status = 'ready' AND queue = %(queue)s
                        AND name = %(name)s LIMIT %(most)s) AS pair
"""


# --- limits (R35, R36) ---------------------------------------------------------------------
# The same statements as ``store/sqlite/statements.py`` names, for ``store/limit_claim.py`` and
# ``store/limit_store.py``; lists travel as arrays.


def listed(values) -> list:
    """A list parameter as psycopg sends it: an array."""
    return list(values)


#: A limited claim's page of lanes, in one statement: the next ``count`` lanes of these
#: names in rotation order (each name's lanes read on their own: with ``name =
#: ANY(...)`` the index could not give that order, and every lane of the queue would be
#: sorted each turn), their groups locked (``SKIP LOCKED``: a group another host's claim
#: holds is not ``held`` here, and is passed over this turn; a group met for the first
#: time is made, and so held), and each held group's bucket, running jobs and first due
#: row. The bucket is the locked row's newest version; the running jobs are counted in
#: the statement's snapshot, taken before the locks, so a claim that held one of these
#: groups and committed in between is not seen: the count only chooses, and the claim
#: (CLAIM_IDS) counts again, after the locks, before it takes a row.
LANE_PAGE = """
WITH page AS (
    SELECT l.id, l.priority, l.name, l.grp, l.served_at, l.seq
      FROM unnest(%(names)s::text[]) AS each_name(name)
     CROSS JOIN LATERAL (
           SELECT l.id, l.priority, l.name, l.grp, l.served_at, l.seq FROM jobpool_lanes AS l
            WHERE l.queue = %(queue)s AND l.name = each_name.name
            ORDER BY l.priority DESC, l.served_at NULLS FIRST, l.name, l.grp
            LIMIT %(count)s::bigint + %(offset)s::bigint) AS l
     ORDER BY l.priority DESC, l.served_at NULLS FIRST, l.name, l.grp
     LIMIT %(count)s OFFSET %(offset)s),
made AS (
    INSERT INTO jobpool_groups (name, grp) SELECT DISTINCT name, grp FROM page
    ON CONFLICT (name, grp) DO NOTHING
    RETURNING name, grp, tokens, refilled_at),
locked AS (
    SELECT g.name, g.grp, g.tokens, g.refilled_at
      FROM (SELECT DISTINCT name, grp FROM page) AS p
     CROSS JOIN LATERAL (
           SELECT g.name, g.grp, g.tokens, g.refilled_at FROM jobpool_groups AS g
            WHERE g.name = p.name AND g.grp = p.grp
              FOR UPDATE SKIP LOCKED) AS g),
held AS (SELECT * FROM made UNION ALL SELECT * FROM locked)
SELECT p.id, %(queue)s, p.priority, p.name, p.grp, p.served_at, p.seq,
       g.name IS NOT NULL, g.tokens, g.refilled_at, COALESCE(r.running, 0),
       h.id, h.priority, h.line_at
  FROM page AS p
  LEFT JOIN held AS g ON g.name = p.name AND g.grp = p.grp
  LEFT JOIN LATERAL (
       SELECT count(*) AS running FROM jobs AS j
        WHERE g.name IS NOT NULL AND j.status = 'running' AND j.name = p.name
          AND COALESCE(j.grp, '') = p.grp) AS r ON true
  LEFT JOIN LATERAL (
       SELECT j.id, j.priority, j.line_at FROM jobs AS j
        WHERE g.name IS NOT NULL AND j.status = 'ready' AND j.grp IS NOT NULL
          AND j.queue = %(queue)s AND j.name = p.name AND j.grp = p.grp
          AND j.priority = p.priority
          AND j.run_at <= GREATEST(%(now)s, extract(epoch FROM statement_timestamp()))
        ORDER BY j.line_at, j.id LIMIT 1) AS h ON true
 ORDER BY p.priority DESC, p.served_at NULLS FIRST, p.name, p.grp
"""
#: A lane's due rows in claim order (a claim's second pass).
PROBE_LANE = """
SELECT id, priority, line_at FROM jobs
 WHERE status = 'ready' AND grp IS NOT NULL AND queue = %(queue)s AND name = %(name)s
   AND grp = %(grp)s AND priority = %(priority)s::integer
   AND run_at <= GREATEST(%(now)s, extract(epoch FROM statement_timestamp()))
 ORDER BY line_at, id LIMIT %(count)s
   FOR UPDATE SKIP LOCKED
"""
#: R35: a lane another transaction holds is being made again (a row put back to ready
#: bumps its ``seq`` in an open limited turn): the two writes below pass over it rather
#: than wait for it, since that turn may wait for what this claim holds (the queue's
#: limit, another lane): a deadlock between two pools' limited turns. A lane passed over
#: keeps its rows (it is dropped by a later claim) or its place in the rotation for one
#: turn.
DROP_EMPTY_LANE = """
DELETE FROM jobpool_lanes
 WHERE id = (SELECT id FROM jobpool_lanes WHERE id = %(id)s::bigint AND seq = %(seq)s::bigint
               FOR UPDATE SKIP LOCKED)
   AND NOT EXISTS (SELECT 1 FROM jobs
                    WHERE status = 'ready' AND grp IS NOT NULL AND queue = %(queue)s
                      AND name = %(name)s AND grp = %(grp)s AND priority = %(priority)s::integer)
"""
SERVE_LANES = """
UPDATE jobpool_lanes SET served_at = %(now)s
 WHERE id IN (SELECT id FROM jobpool_lanes WHERE id = ANY(%(ids)s::bigint[])
                 ORDER BY id FOR UPDATE SKIP LOCKED)
"""
RUNNING_IN_QUEUE = "SELECT count(*) FROM jobs WHERE status = 'running' AND queue = %(queue)s"
#: A queue's limit row, locked before its running jobs are counted (waited for: the
#: other claim holding it commits within its turn).
LOCK_QUEUE_LIMIT = """
SELECT 1 FROM jobpool_limits WHERE scope = 'queue' AND target = %(queue)s FOR UPDATE
"""
SET_TOKENS = """
UPDATE jobpool_groups SET tokens = %(tokens)s, refilled_at = %(now)s
 WHERE name = %(name)s AND grp = %(grp)s
"""
#: The ready, due rows of this pool's unlimited names in a queue, in claim order.
PROBE_UNLIMITED = """
SELECT id, priority, line_at FROM jobs
 WHERE status = 'ready' AND queue = %(queue)s
   AND run_at <= GREATEST(%(now)s, extract(epoch FROM statement_timestamp()))
   AND name = ANY(%(unlimited)s::text[])
 ORDER BY priority DESC, line_at, id
 LIMIT %(count)s
   FOR UPDATE SKIP LOCKED
"""
#: The rows a limited claim chose, claimed as CLAIM claims them (same columns), found
#: by primary key as CLAIM finds its own (a join to the unnested ids is a join a generic
#: plan may run as a scan of ``jobs``). A row with a cap (``caps``, beside its id in
#: ``ids``: a group's limit, less the rows of its group this claim takes before it) is
#: taken only while its group's running jobs, counted again here, in a snapshot taken
#: after the page's locks, are fewer: what LANE_PAGE counted may miss a claim another
#: host committed just before this one locked the group.
_CAP = "(%(caps)s::integer[])[array_position(%(ids)s::bigint[], j.id)]"
CLAIM_IDS = "UPDATE jobs AS j" + CLAIM.split("UPDATE jobs AS j", 1)[1].replace(
    " WHERE j.id = ANY(ARRAY(SELECT id FROM picked))", f"""\
 WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = 'ready'
   AND ({_CAP} IS NULL
        OR (SELECT count(*) FROM jobs AS r
             WHERE r.status = 'running' AND r.name = j.name
               AND COALESCE(r.grp, '') = j.grp) < {_CAP})""")
assert "picked" not in CLAIM_IDS

PUT_LIMIT = """
INSERT INTO jobpool_limits (scope, target, max_running, rate, burst, group_by, set_by, set_at)
VALUES (%(scope)s, %(target)s, %(max_running)s, %(rate)s, %(burst)s, %(group_by)s, %(set_by)s,
        extract(epoch FROM now()))
ON CONFLICT (scope, target) DO UPDATE SET
    max_running = excluded.max_running, rate = excluded.rate, burst = excluded.burst,
    group_by = excluded.group_by, set_by = excluded.set_by, set_at = excluded.set_at
"""
DELETE_LIMIT = "DELETE FROM jobpool_limits WHERE scope = %(scope)s AND target = %(target)s"
READ_LIMITS = """
SELECT scope, target, max_running, rate, burst, group_by, set_by, set_at
  FROM jobpool_limits ORDER BY scope, target
"""
#: R35: a name that becomes limited: its rows without a group take theirs. Pools' turns
#: take a row (a claim, SKIP LOCKED) and then wait for others (their settles): an
#: adoption that waited for rows in its own order deadlocked with them, and a new pool
#: declaring a limit on a busy name could not register. It passes over rows another
#: transaction holds and comes back for them (``ADOPT_LEFT``): until then such a row is
#: claimed by no pool that knows the limit (a limited name is claimed by its groups).
ADOPT_LIMITED = f"""
UPDATE jobs SET grp = {limited_group("%(name)s", "jobpool_limits", ROW_PAYLOAD)}
 WHERE grp IS NULL AND id IN (SELECT id FROM jobs WHERE name = %(name)s AND grp IS NULL
                                 FOR UPDATE SKIP LOCKED)
"""
#: R35: whether rows of a limited name still want their group (``ADOPT_LIMITED``).
ADOPT_LEFT = """
SELECT count(*) FROM jobs WHERE name = %(name)s AND grp IS NULL
"""
#: After a bulk insert (COPY, or INSERT_BATCH, which write no group): the rows of a
#: limited name without a group take their groups (``limited_group``), and their lanes
#: are made, in the lanes' key order (R35: two producers writing rows of the same groups
#: in different orders took their lanes in those orders and deadlocked).
ADOPT_BULK = lanes_in_key_order("SELECT queue, priority, name, grp FROM adopted", f"""
WITH adopted AS (
    UPDATE jobs SET grp = {limited_group("%(name)s", "jobpool_limits", ROW_PAYLOAD)}
     WHERE id = ANY(%(ids)s::bigint[]) AND grp IS NULL
       AND EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = %(name)s)
    RETURNING queue, priority, name, grp)""")
#: R35: the lanes of the grouped rows of limited names a write is about to insert, made
#: (or bumped) in the lanes' key order before the first row: each row's insert makes its
#: own lane again (``jobpool_limited_row``), in the order the rows go in, which took two
#: producers' lanes of the same groups in opposite orders (a deadlock) until the
#: transaction already held them.
LANES_OF_GROUPS = lanes_in_key_order("""
SELECT queue, priority, name, grp
  FROM unnest(%(queues)s::text[], %(priorities)s::integer[], %(names)s::text[],
              %(groups)s::text[]) AS r(queue, priority, name, grp)
 WHERE name IN (SELECT target FROM jobpool_limits WHERE scope = 'name')""")
LANES_OF_NAME = lanes_in_key_order("""
SELECT queue, priority, name, grp FROM jobs
 WHERE name = %(name)s AND status = 'ready' AND grp IS NOT NULL""")
DROP_LANES_OF_NAME = "DELETE FROM jobpool_lanes WHERE name = %(name)s"
GROUP_ROWS = """
SELECT g.name, g.grp, g.tokens, g.refilled_at,
       (SELECT count(*) FROM jobs
         WHERE status = 'running' AND name = g.name AND COALESCE(grp, '') = g.grp)
  FROM jobpool_groups AS g ORDER BY g.name, g.grp LIMIT %(limit)s
"""
RUNNING_BY_QUEUE = "SELECT queue, count(*) FROM jobs WHERE status = 'running' GROUP BY queue"
PURGE_GROUPS = """
DELETE FROM jobpool_groups AS g
 WHERE COALESCE(g.refilled_at, 0) < %(before)s
   AND NOT EXISTS (SELECT 1 FROM jobpool_lanes AS l WHERE l.name = g.name AND l.grp = g.grp)
"""
