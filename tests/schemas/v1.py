"""Schema 1, as the first release (commit 54d690b) created it: frozen here, never generated
from sql.py, so the upgrade test starts from what stores on disk really hold."""

SCHEMA_VERSION = "1"

CREATE_META = """
CREATE TABLE IF NOT EXISTS jobpool_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID
"""

CREATE_JOBS = """
CREATE TABLE IF NOT EXISTS jobs (
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
    hook_done        INTEGER NOT NULL DEFAULT 0
)
"""

CREATE_CLAIM_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_claim_order
    ON jobs (queue, priority DESC, line_at, id, run_at, name) WHERE status = 'ready'
"""

CREATE_KEY_INDEX = """
CREATE UNIQUE INDEX IF NOT EXISTS jobs_live_key
    ON jobs (name, key) WHERE key IS NOT NULL AND status IN ('ready', 'running')
"""

CREATE_LEASE_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_leases
    ON jobs (lease_expires_at) WHERE status = 'running'
"""

CREATE_STATUS_INDEX = """
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, finished_at)
"""

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
    cpu_s       REAL
)
"""

CREATE_ATTEMPTS_INDEX = "CREATE INDEX IF NOT EXISTS attempts_job ON attempts (job_id)"

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
    desired_procs  INTEGER
) WITHOUT ROWID
"""

CREATE_PERIODIC = """
CREATE TABLE IF NOT EXISTS periodic (
    name            TEXT PRIMARY KEY,
    last_occurrence REAL NOT NULL
) WITHOUT ROWID
"""

SCHEMA = (
    CREATE_META,
    CREATE_JOBS,
    CREATE_CLAIM_INDEX,
    CREATE_KEY_INDEX,
    CREATE_LEASE_INDEX,
    CREATE_STATUS_INDEX,
    CREATE_ATTEMPTS,
    CREATE_ATTEMPTS_INDEX,
    CREATE_POOLS,
    CREATE_PERIODIC,
)

