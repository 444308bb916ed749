-- A SQLite store as jobpool at 37da1c8 (schema 10) made it, with tests/schemas/make_old_store.py:
-- sqlite3.Connection.iterdump() (tests/test_old_stores.py).
BEGIN TRANSACTION;
CREATE TABLE attempts (
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
);
INSERT INTO "attempts" VALUES(1,1,'vm:7693:29644',7693,1.7962328648696107864e+09,1.7962328648701758384e+09,'done',NULL,NULL,NULL,1.79256999999988231309e-04,NULL);
INSERT INTO "attempts" VALUES(2,1,'vm:7693:29644',7693,1.7962328648701758384e+09,1.79623286487572574616e+09,'error','ValueError: boom <b>bold</b> [red]
Traceback (most recent call last):
  File "/tmp/old/37da1c8/jobpool/child.py", line 202, in _outcome_of
    value = job.fn(*args, **kwargs)
            ^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/old/37da1c8/jobpool/testing.py", line 299, in body
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
  File "/work/main/tests/schemas/make_old_store.py", line 49, in fails
    raise ValueError("boom <b>bold</b> [red]")
ValueError: boom <b>bold</b> [red]',NULL,NULL,1.04194900000004198048e-03,NULL);
INSERT INTO "attempts" VALUES(3,1,'vm:7693:29644',7693,1.79623286487572574616e+09,1.79623286487658905983e+09,'retry','Retry: try again tomorrow',NULL,NULL,1.38485999999993225628e-04,NULL);
INSERT INTO "attempts" VALUES(4,1,'vm:7693:29644',7693,1.79623286487658905983e+09,1.79623286487716436387e+09,'done',NULL,NULL,NULL,1.33378999999989034108e-04,NULL);
INSERT INTO "attempts" VALUES(5,1,'vm:7693:29644',7693,1.79623286487716436387e+09,1.79623286488699984543e+09,'done',NULL,NULL,NULL,2.04183000000024428288e-04,NULL);
CREATE TABLE jobpool_batch_adds (
    batch_id INTEGER NOT NULL,
    add_key  TEXT    NOT NULL,
    job_id   INTEGER NOT NULL,
    PRIMARY KEY (batch_id, add_key)
) WITHOUT ROWID
;
CREATE TABLE jobpool_batches (
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
);
INSERT INTO "jobpool_batches" VALUES(1,1.79623286402286911006e+09,1.79623286488699984543e+09,2,1,0,1.79623286403482294078e+09,NULL,NULL,'{"name":"old.callback","payload":"[[\"sales\"],{}]","queue":"default","priority":0,"max_attempts":null,"timeout":null}',NULL,NULL,NULL);
CREATE TABLE jobpool_groups (
    name        TEXT NOT NULL,
    grp         TEXT NOT NULL,
    tokens      REAL,
    refilled_at REAL,
    PRIMARY KEY (name, grp)
) WITHOUT ROWID
;
CREATE TABLE jobpool_lanes (
    id        INTEGER PRIMARY KEY,
    queue     TEXT    NOT NULL,
    priority  INTEGER NOT NULL,
    name      TEXT    NOT NULL,
    grp       TEXT    NOT NULL,
    served_at REAL,
    seq       INTEGER NOT NULL DEFAULT 0,
    UNIQUE (queue, priority, name, grp)
);
CREATE TABLE jobpool_limits (
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
;
CREATE TABLE jobpool_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID
;
INSERT INTO "jobpool_meta" VALUES('schema','10');
CREATE TABLE jobpool_queues (
    queue     TEXT PRIMARY KEY,
    paused_at REAL
) WITHOUT ROWID
;
CREATE TABLE jobpool_rollups (minute REAL NOT NULL, name TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0, retried INTEGER NOT NULL DEFAULT 0, dead INTEGER NOT NULL DEFAULT 0, wait_n INTEGER NOT NULL DEFAULT 0, wait_sum REAL NOT NULL DEFAULT 0, wait_max REAL NOT NULL DEFAULT 0, w0 INTEGER NOT NULL DEFAULT 0, w1 INTEGER NOT NULL DEFAULT 0, w2 INTEGER NOT NULL DEFAULT 0, w3 INTEGER NOT NULL DEFAULT 0, w4 INTEGER NOT NULL DEFAULT 0, w5 INTEGER NOT NULL DEFAULT 0, w6 INTEGER NOT NULL DEFAULT 0, w7 INTEGER NOT NULL DEFAULT 0, w8 INTEGER NOT NULL DEFAULT 0, w9 INTEGER NOT NULL DEFAULT 0, run_n INTEGER NOT NULL DEFAULT 0, run_sum REAL NOT NULL DEFAULT 0, run_max REAL NOT NULL DEFAULT 0, r0 INTEGER NOT NULL DEFAULT 0, r1 INTEGER NOT NULL DEFAULT 0, r2 INTEGER NOT NULL DEFAULT 0, r3 INTEGER NOT NULL DEFAULT 0, r4 INTEGER NOT NULL DEFAULT 0, r5 INTEGER NOT NULL DEFAULT 0, r6 INTEGER NOT NULL DEFAULT 0, r7 INTEGER NOT NULL DEFAULT 0, r8 INTEGER NOT NULL DEFAULT 0, r9 INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (minute, name)) WITHOUT ROWID;
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY,
    queue            TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    key              TEXT,
    payload          BLOB    NOT NULL,
    serializer       TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('ready', 'running', 'done', 'dead')),
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
    meta             TEXT
);
INSERT INTO "jobs" VALUES(1,'default','old.ok',NULL,'[[1],{}]','json',0,'done',1.79623286394400548935e+09,1.79623286394400548935e+09,1,5,0,0,NULL,300.0,NULL,NULL,NULL,100.0,NULL,'{"n":1,"text":"café ☃"}',1.79623286394400548935e+09,1.7962328648696107864e+09,1.7962328648701758384e+09,NULL,NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(2,'default','old.fails',NULL,'[[],{}]','json',0,'dead',1.79623286401949095727e+09,1.79623286401949095727e+09,1,1,0,0,NULL,300.0,NULL,NULL,'ValueError: boom <b>bold</b> [red]; no attempts left after 1
Traceback (most recent call last):
  File "/tmp/old/37da1c8/jobpool/child.py", line 202, in _outcome_of
    value = job.fn(*args, **kwargs)
            ^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/old/37da1c8/jobpool/testing.py", line 299, in body
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
  File "/work/main/tests/schemas/make_old_store.py", line 49, in fails
    raise ValueError("boom <b>bold</b> [red]")
ValueError: boom <b>bold</b> [red]',NULL,NULL,NULL,1.79623286401949095727e+09,1.7962328648701758384e+09,1.79623286487572574616e+09,NULL,NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(3,'default','old.retries',NULL,'[[],{}]','json',0,'ready',1.79631926487658905985e+09,1.79631926487658905985e+09,1,5,0,0,NULL,300.0,NULL,NULL,'Retry: try again tomorrow',NULL,NULL,NULL,1.79623286402018332479e+09,1.79623286487572574616e+09,NULL,NULL,NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(4,'default','old.first',NULL,'[[21],{}]','json',0,'done',1.79623286402077579496e+09,1.79623286402077579496e+09,1,5,0,0,NULL,300.0,NULL,NULL,NULL,100.0,NULL,'42',1.79623286402077579496e+09,1.79623286487658905983e+09,1.79623286487716436387e+09,'[{"name":"old.second","payload":"[[1],{}]","queue":"default","priority":0,"max_attempts":null,"timeout":null},{"name":"old.third","payload":"[[],{\"k\":\"v\"}]","queue":"default","priority":0,"max_attempts":null,"timeout":null}]',NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(5,'default','old.member',NULL,'[[1],{}]','json',0,'done',1.79623286402609848972e+09,1.79623286402609848972e+09,1,5,0,0,NULL,300.0,NULL,NULL,NULL,100.0,NULL,NULL,1.79623286402609848972e+09,1.79623286487716436387e+09,1.79623286488699984543e+09,NULL,NULL,0,0,1,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(6,'default','old.member_left',NULL,'[[2],{}]','json',0,'ready',1.79623286403084802629e+09,1.79623286403084802629e+09,0,NULL,0,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79623286403084802629e+09,NULL,NULL,NULL,NULL,0,0,1,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(7,'default','old.ready','k1','[["r"],{}]','json',0,'ready',1.79623286403670263293e+09,1.79623286403670263293e+09,0,NULL,0,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79623286403670263293e+09,NULL,NULL,NULL,NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(8,'default','old.later',NULL,'[["l"],{}]','json',0,'ready',1.82776886403876662259e+09,1.82776886403876662259e+09,0,NULL,0,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79623286403876662254e+09,NULL,NULL,NULL,NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(9,'default','old.killer',NULL,'[[],{}]','json',0,'running',1.79623286404282474521e+09,1.79623286404282474521e+09,1,5,0,0,NULL,300.0,'vm:7695:29713',1.79623319478832793238e+09,NULL,NULL,NULL,NULL,1.79623286404282474521e+09,1.79623286478832793235e+09,NULL,NULL,NULL,0,0,NULL,NULL,NULL,NULL,NULL);
INSERT INTO "jobs" VALUES(10,'default','old.second',NULL,'[[1],{}]','json',0,'ready',1.79623286487716436387e+09,1.79623286487716436387e+09,0,NULL,0,0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,1.79623286487716436387e+09,NULL,NULL,'[{"name":"old.third","payload":"[[],{\"k\":\"v\"}]","queue":"default","priority":0,"max_attempts":null,"timeout":null}]',4,0,0,NULL,NULL,NULL,NULL,NULL);
CREATE TABLE periodic (
    name            TEXT PRIMARY KEY,
    last_occurrence REAL NOT NULL
) WITHOUT ROWID
;
CREATE TABLE pools (
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
;
CREATE INDEX jobs_claim_order
    ON jobs (queue, priority DESC, line_at, id, run_at, name) WHERE status = 'ready'
;
CREATE UNIQUE INDEX jobs_live_key
    ON jobs (name, key) WHERE key IS NOT NULL AND status IN ('ready', 'running')
;
CREATE INDEX jobs_leases
    ON jobs (lease_expires_at) WHERE status = 'running'
;
CREATE INDEX jobs_status ON jobs (status, finished_at)
;
CREATE INDEX attempts_job ON attempts (job_id);
CREATE INDEX jobs_key ON jobs (name, key) WHERE key IS NOT NULL
;
CREATE INDEX batches_finished ON jobpool_batches (finished_at);
CREATE INDEX jobs_batch ON jobs (batch_id) WHERE batch_id IS NOT NULL
;
CREATE TRIGGER batch_finished
AFTER UPDATE OF done, dead, closed_at, cancelled_at ON jobpool_batches
WHEN NEW.closed_at IS NOT NULL AND NEW.finished_at IS NULL AND NEW.done + NEW.dead >= NEW.total
BEGIN
    INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                      max_attempts, deadline, timeout, created_at, chain, grp, meta)
    SELECT json_extract(NEW.on_success, '$.queue'), json_extract(NEW.on_success, '$.name'), NULL,
           json_set(json_extract(NEW.on_success, '$.payload'), '$[1].batch', json(json_object('id', NEW.id, 'total', NEW.total, 'done', NEW.done, 'dead', NEW.dead,
    'dead_ids', json(coalesce((SELECT json_group_array(id) FROM (
        SELECT id FROM jobs INDEXED BY jobs_batch WHERE batch_id = NEW.id AND status = 'dead'
         ORDER BY id LIMIT 1000)), '[]')),
    'dead_ids_truncated', json(CASE WHEN NEW.dead > 1000 THEN 'true' ELSE 'false' END)))),
           'json', json_extract(NEW.on_success, '$.priority'), 'ready', NEW.changed_at,
           NEW.created_at, json_extract(NEW.on_success, '$.max_attempts'), NULL,
           json_extract(NEW.on_success, '$.timeout'), NEW.changed_at, NULL,
           (SELECT '' FROM jobpool_limits WHERE scope = 'name' AND target = json_extract(NEW.on_success, '$.name')),
           CASE WHEN json_type(NEW.on_success, '$.meta') = 'object'
                THEN json_extract(NEW.on_success, '$.meta') END
     WHERE NEW.on_success IS NOT NULL AND NEW.dead = 0 AND NEW.cancelled_at IS NULL;
    UPDATE jobpool_batches SET success_job = last_insert_rowid()
     WHERE id = NEW.id AND NEW.on_success IS NOT NULL AND NEW.dead = 0 AND NEW.cancelled_at IS NULL;
    INSERT OR IGNORE INTO jobpool_lanes (queue, priority, name, grp)
SELECT queue, priority, name, grp FROM jobs
 WHERE id = last_insert_rowid() AND grp IS NOT NULL AND status = 'ready'
   AND name IN (SELECT target FROM jobpool_limits WHERE scope = 'name') AND NEW.on_success IS NOT NULL AND NEW.dead = 0 AND NEW.cancelled_at IS NULL;
    INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                      max_attempts, deadline, timeout, created_at, chain, grp, meta)
    SELECT json_extract(NEW.on_complete, '$.queue'), json_extract(NEW.on_complete, '$.name'), NULL,
           json_set(json_extract(NEW.on_complete, '$.payload'), '$[1].batch', json(json_object('id', NEW.id, 'total', NEW.total, 'done', NEW.done, 'dead', NEW.dead,
    'dead_ids', json(coalesce((SELECT json_group_array(id) FROM (
        SELECT id FROM jobs INDEXED BY jobs_batch WHERE batch_id = NEW.id AND status = 'dead'
         ORDER BY id LIMIT 1000)), '[]')),
    'dead_ids_truncated', json(CASE WHEN NEW.dead > 1000 THEN 'true' ELSE 'false' END)))),
           'json', json_extract(NEW.on_complete, '$.priority'), 'ready', NEW.changed_at,
           NEW.created_at, json_extract(NEW.on_complete, '$.max_attempts'), NULL,
           json_extract(NEW.on_complete, '$.timeout'), NEW.changed_at, NULL,
           (SELECT '' FROM jobpool_limits WHERE scope = 'name' AND target = json_extract(NEW.on_complete, '$.name')),
           CASE WHEN json_type(NEW.on_complete, '$.meta') = 'object'
                THEN json_extract(NEW.on_complete, '$.meta') END
     WHERE NEW.on_complete IS NOT NULL AND NEW.cancelled_at IS NULL;
    UPDATE jobpool_batches SET complete_job = last_insert_rowid()
     WHERE id = NEW.id AND NEW.on_complete IS NOT NULL AND NEW.cancelled_at IS NULL;
    INSERT OR IGNORE INTO jobpool_lanes (queue, priority, name, grp)
SELECT queue, priority, name, grp FROM jobs
 WHERE id = last_insert_rowid() AND grp IS NOT NULL AND status = 'ready'
   AND name IN (SELECT target FROM jobpool_limits WHERE scope = 'name') AND NEW.on_complete IS NOT NULL AND NEW.cancelled_at IS NULL;
    UPDATE jobpool_batches SET finished_at = NEW.changed_at WHERE id = NEW.id;
END;
CREATE INDEX jobpool_lanes_rotation
    ON jobpool_lanes (queue, priority DESC, served_at, name, grp)
;
CREATE INDEX jobs_group_order
    ON jobs (queue, name, grp, priority, line_at, id, run_at)
 WHERE status = 'ready' AND grp IS NOT NULL
;
CREATE INDEX jobs_name ON jobs (name);
CREATE INDEX jobs_queue ON jobs (queue);
CREATE INDEX jobs_chain ON jobs (chain_root) WHERE chain_root IS NOT NULL
;
COMMIT;
