-- A PostgreSQL store as jobpool at 62cea58 (revision 9) made it, with tests/schemas/make_old_store.py:
-- pg_dump --inserts --no-owner --no-privileges, its schema renamed __SCHEMA__ (tests/test_old_stores.py).
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: __SCHEMA__; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA __SCHEMA__;


--
-- Name: jobpool_batch_finished(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.jobpool_batch_finished() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '__SCHEMA__'
    AS $$
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
$$;


--
-- Name: jobpool_enqueue_callback(jsonb, jsonb, double precision, double precision, text); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.jobpool_enqueue_callback(spec jsonb, info jsonb, line_at double precision, due double precision, channel text) RETURNS bigint
    LANGUAGE plpgsql
    SET search_path TO '__SCHEMA__'
    AS $$
DECLARE
    new_id bigint;
BEGIN
    INSERT INTO jobs (queue, name, key, payload, serializer, priority, status, run_at, line_at,
                      max_attempts, deadline, timeout, created_at, chain, grp)
    VALUES (spec ->> 'queue', spec ->> 'name', NULL,
            convert_to(jsonb_set((spec ->> 'payload')::jsonb, '{1,batch}', info)::text, 'UTF8'),
            'json', (spec ->> 'priority')::integer, 'ready', due, line_at,
            (spec ->> 'max_attempts')::integer, NULL, (spec ->> 'timeout')::float8, due, NULL,
            (SELECT ''::text FROM jobpool_limits
              WHERE scope = 'name' AND target = spec ->> 'name'))
    RETURNING id INTO new_id;
    PERFORM pg_notify(channel, spec ->> 'queue');
    RETURN new_id;
END
$$;


--
-- Name: jobpool_limited_row(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.jobpool_limited_row() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '__SCHEMA__'
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM jobpool_limits WHERE scope = 'name' AND target = NEW.name) THEN
        RETURN NEW;
    END IF;
    INSERT INTO jobpool_lanes AS l (queue, priority, name, grp)
    VALUES (NEW.queue, NEW.priority, NEW.name, NEW.grp)
    ON CONFLICT (queue, priority, name, grp) DO UPDATE SET seq = l.seq + 1;
    RETURN NEW;
END
$$;


--
-- Name: jobpool_member_ended(); Type: FUNCTION; Schema: __SCHEMA__; Owner: -
--

CREATE FUNCTION __SCHEMA__.jobpool_member_ended() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO '__SCHEMA__'
    AS $$
DECLARE
    ended record;
    left_in_shard integer;
BEGIN
    SELECT status, finished_at, batch_id INTO ended FROM finished_jobs WHERE id = OLD.id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF ended.batch_id IS DISTINCT FROM OLD.batch_id THEN
        UPDATE finished_jobs SET batch_id = OLD.batch_id WHERE id = OLD.id;
    END IF;
    UPDATE jobpool_batch_shards
       SET pending = pending - 1,
           done = done + (ended.status = 'done')::integer,
           dead = dead + (ended.status = 'dead')::integer
     WHERE batch_id = OLD.batch_id AND shard = mod(OLD.id, 16)
       AND EXISTS (SELECT 1 FROM jobpool_batches
                    WHERE id = OLD.batch_id AND finished_at IS NULL)
    RETURNING pending INTO left_in_shard;
    IF left_in_shard = 0 THEN
        -- The batch row's lock: jobpool_batch_finished looks at every shard.
        UPDATE jobpool_batches SET changed_at = ended.finished_at
         WHERE id = OLD.batch_id AND finished_at IS NULL;
    END IF;
    RETURN NULL;
END
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: finished_jobs; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.finished_jobs (
    id bigint NOT NULL,
    queue text NOT NULL,
    name text NOT NULL,
    key text,
    payload bytea NOT NULL,
    serializer text NOT NULL,
    priority integer NOT NULL,
    status text NOT NULL,
    run_at double precision NOT NULL,
    line_at double precision NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer,
    crashes integer NOT NULL,
    deferrals integer NOT NULL,
    deadline double precision,
    timeout double precision,
    last_error text,
    progress double precision,
    stage text,
    result bytea,
    created_at double precision NOT NULL,
    started_at double precision,
    finished_at double precision NOT NULL,
    chain jsonb,
    chain_root bigint,
    hook_done integer DEFAULT 0 NOT NULL,
    batch_id bigint,
    state text,
    state_at double precision,
    grp text,
    meta jsonb,
    CONSTRAINT finished_jobs_status_check CHECK ((status = ANY (ARRAY['done'::text, 'dead'::text])))
);


--
-- Name: jobs; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobs (
    id bigint NOT NULL,
    queue text NOT NULL,
    name text NOT NULL,
    key text,
    payload bytea NOT NULL,
    serializer text NOT NULL,
    priority integer NOT NULL,
    status text NOT NULL,
    run_at double precision NOT NULL,
    line_at double precision NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer,
    crashes integer DEFAULT 0 NOT NULL,
    deferrals integer DEFAULT 0 NOT NULL,
    deadline double precision,
    timeout double precision,
    lease_owner text,
    lease_expires_at double precision,
    last_error text,
    progress double precision,
    stage text,
    created_at double precision NOT NULL,
    started_at double precision,
    chain jsonb,
    chain_root bigint,
    cancel_requested integer DEFAULT 0 NOT NULL,
    batch_id bigint,
    state text,
    state_at double precision,
    grp text,
    meta jsonb,
    CONSTRAINT jobs_status_check CHECK ((status = ANY (ARRAY['ready'::text, 'running'::text])))
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.01', autovacuum_analyze_scale_factor='0.02');


--
-- Name: all_jobs; Type: VIEW; Schema: __SCHEMA__; Owner: -
--

CREATE VIEW __SCHEMA__.all_jobs AS
 SELECT jobs.id,
    jobs.queue,
    jobs.name,
    jobs.key,
    jobs.payload,
    jobs.serializer,
    jobs.priority,
    jobs.status,
    jobs.run_at,
    jobs.attempts,
    jobs.max_attempts,
    jobs.crashes,
    jobs.deferrals,
    jobs.deadline,
    jobs.timeout,
    jobs.lease_owner,
    jobs.lease_expires_at,
    jobs.last_error,
    jobs.progress,
    jobs.stage,
    NULL::bytea AS result,
    jobs.created_at,
    jobs.started_at,
    NULL::double precision AS finished_at,
    jobs.chain_root,
    jobs.cancel_requested,
    jobs.batch_id,
    jobs.state,
    jobs.state_at,
    (jobs.meta)::text AS meta
   FROM __SCHEMA__.jobs
UNION ALL
 SELECT finished_jobs.id,
    finished_jobs.queue,
    finished_jobs.name,
    finished_jobs.key,
    finished_jobs.payload,
    finished_jobs.serializer,
    finished_jobs.priority,
    finished_jobs.status,
    finished_jobs.run_at,
    finished_jobs.attempts,
    finished_jobs.max_attempts,
    finished_jobs.crashes,
    finished_jobs.deferrals,
    finished_jobs.deadline,
    finished_jobs.timeout,
    NULL::text AS lease_owner,
    NULL::double precision AS lease_expires_at,
    finished_jobs.last_error,
    finished_jobs.progress,
    finished_jobs.stage,
    finished_jobs.result,
    finished_jobs.created_at,
    finished_jobs.started_at,
    finished_jobs.finished_at,
    finished_jobs.chain_root,
    0 AS cancel_requested,
    finished_jobs.batch_id,
    finished_jobs.state,
    finished_jobs.state_at,
    (finished_jobs.meta)::text AS meta
   FROM __SCHEMA__.finished_jobs;


--
-- Name: attempts; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.attempts (
    seq bigint NOT NULL,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    owner text,
    pid integer,
    started_at double precision NOT NULL,
    ended_at double precision NOT NULL,
    outcome text NOT NULL,
    error text,
    exit_status text,
    peak_rss bigint,
    cpu_s double precision,
    strays integer
);


--
-- Name: attempts_seq_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE __SCHEMA__.attempts ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME __SCHEMA__.attempts_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: jobpool_batch_adds; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_batch_adds (
    batch_id bigint NOT NULL,
    add_key text NOT NULL,
    job_id bigint NOT NULL
);


--
-- Name: jobpool_batch_shards; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_batch_shards (
    batch_id bigint NOT NULL,
    shard integer NOT NULL,
    pending integer DEFAULT 0 NOT NULL,
    done integer DEFAULT 0 NOT NULL,
    dead integer DEFAULT 0 NOT NULL
);


--
-- Name: jobpool_batches; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_batches (
    id bigint NOT NULL,
    created_at double precision NOT NULL,
    changed_at double precision NOT NULL,
    total integer DEFAULT 0 NOT NULL,
    done integer DEFAULT 0 NOT NULL,
    dead integer DEFAULT 0 NOT NULL,
    closed_at double precision,
    cancelled_at double precision,
    finished_at double precision,
    on_success jsonb,
    on_complete jsonb,
    success_job bigint,
    complete_job bigint
);


--
-- Name: jobpool_batches_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE __SCHEMA__.jobpool_batches ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME __SCHEMA__.jobpool_batches_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: jobpool_groups; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_groups (
    name text NOT NULL,
    grp text NOT NULL,
    tokens double precision,
    refilled_at double precision
);


--
-- Name: jobpool_lanes; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_lanes (
    id bigint NOT NULL,
    queue text NOT NULL,
    priority integer NOT NULL,
    name text NOT NULL,
    grp text NOT NULL,
    served_at double precision,
    seq bigint DEFAULT 0 NOT NULL
);


--
-- Name: jobpool_lanes_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE __SCHEMA__.jobpool_lanes ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME __SCHEMA__.jobpool_lanes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: jobpool_limits; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_limits (
    scope text NOT NULL,
    target text NOT NULL,
    max_running integer,
    rate text,
    burst integer DEFAULT 1 NOT NULL,
    group_by text,
    set_by text NOT NULL,
    set_at double precision NOT NULL,
    CONSTRAINT jobpool_limits_scope_check CHECK ((scope = ANY (ARRAY['name'::text, 'queue'::text])))
);


--
-- Name: jobpool_meta; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_meta (
    key text NOT NULL,
    value text NOT NULL
);


--
-- Name: jobpool_queues; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_queues (
    queue text NOT NULL,
    paused_at double precision
);


--
-- Name: jobpool_rollups; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.jobpool_rollups (
    minute double precision NOT NULL,
    name text NOT NULL,
    done bigint DEFAULT 0 NOT NULL,
    retried bigint DEFAULT 0 NOT NULL,
    dead bigint DEFAULT 0 NOT NULL,
    wait_n bigint DEFAULT 0 NOT NULL,
    wait_sum double precision DEFAULT 0 NOT NULL,
    wait_max double precision DEFAULT 0 NOT NULL,
    w0 bigint DEFAULT 0 NOT NULL,
    w1 bigint DEFAULT 0 NOT NULL,
    w2 bigint DEFAULT 0 NOT NULL,
    w3 bigint DEFAULT 0 NOT NULL,
    w4 bigint DEFAULT 0 NOT NULL,
    w5 bigint DEFAULT 0 NOT NULL,
    w6 bigint DEFAULT 0 NOT NULL,
    w7 bigint DEFAULT 0 NOT NULL,
    w8 bigint DEFAULT 0 NOT NULL,
    w9 bigint DEFAULT 0 NOT NULL,
    run_n bigint DEFAULT 0 NOT NULL,
    run_sum double precision DEFAULT 0 NOT NULL,
    run_max double precision DEFAULT 0 NOT NULL,
    r0 bigint DEFAULT 0 NOT NULL,
    r1 bigint DEFAULT 0 NOT NULL,
    r2 bigint DEFAULT 0 NOT NULL,
    r3 bigint DEFAULT 0 NOT NULL,
    r4 bigint DEFAULT 0 NOT NULL,
    r5 bigint DEFAULT 0 NOT NULL,
    r6 bigint DEFAULT 0 NOT NULL,
    r7 bigint DEFAULT 0 NOT NULL,
    r8 bigint DEFAULT 0 NOT NULL,
    r9 bigint DEFAULT 0 NOT NULL
);


--
-- Name: jobs_id_seq; Type: SEQUENCE; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE __SCHEMA__.jobs ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME __SCHEMA__.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: periodic; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.periodic (
    name text NOT NULL,
    last_occurrence double precision NOT NULL
);


--
-- Name: pools; Type: TABLE; Schema: __SCHEMA__; Owner: -
--

CREATE TABLE __SCHEMA__.pools (
    owner text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    procs integer NOT NULL,
    queues text NOT NULL,
    core text NOT NULL,
    started_at double precision NOT NULL,
    heartbeat_at double precision NOT NULL,
    counters text DEFAULT '{}'::text NOT NULL,
    slots text DEFAULT '[]'::text NOT NULL,
    stop_requested integer DEFAULT 0 NOT NULL,
    desired_procs integer,
    names text DEFAULT ''::text NOT NULL
);


--
-- Data for Name: attempts; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.attempts OVERRIDING SYSTEM VALUE VALUES (1, 1, 1, 'vm:7777:30535', 7777, 1796232874.639659, 1796232874.6575098, 'done', NULL, NULL, NULL, 0.00017733300000000174, NULL);
INSERT INTO __SCHEMA__.attempts OVERRIDING SYSTEM VALUE VALUES (2, 2, 1, 'vm:7777:30535', 7777, 1796232874.6575098, 1796232874.6957333, 'error', 'ValueError: boom <b>bold</b> [red]
Traceback (most recent call last):
  File "/tmp/old/62cea58/jobpool/child.py", line 192, in _outcome_of
    value = job.fn(*args, **kwargs)
            ^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/old/62cea58/jobpool/testing.py", line 299, in body
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
  File "/work/main/tests/schemas/make_old_store.py", line 49, in fails
    raise ValueError("boom <b>bold</b> [red]")
ValueError: boom <b>bold</b> [red]', NULL, NULL, 0.0009062770000000109, NULL);
INSERT INTO __SCHEMA__.attempts OVERRIDING SYSTEM VALUE VALUES (3, 3, 1, 'vm:7777:30535', 7777, 1796232874.6957333, 1796232874.7072773, 'retry', 'Retry: try again tomorrow', NULL, NULL, 0.0001549600000000373, NULL);
INSERT INTO __SCHEMA__.attempts OVERRIDING SYSTEM VALUE VALUES (4, 4, 1, 'vm:7777:30535', 7777, 1796232874.7072773, 1796232874.7190099, 'done', NULL, NULL, NULL, 0.00010631799999999414, NULL);
INSERT INTO __SCHEMA__.attempts OVERRIDING SYSTEM VALUE VALUES (5, 5, 1, 'vm:7777:30535', 7777, 1796232874.7190099, 1796232874.7309635, 'done', NULL, NULL, NULL, 0.00015655300000000372, NULL);


--
-- Data for Name: finished_jobs; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.finished_jobs VALUES (1, 'default', 'old.ok', NULL, '\x5b5b315d2c7b7d5d', 'json', 0, 'done', 1796232873.631502, 1796232873.631502, 1, 5, 0, 0, NULL, 300, NULL, 100, NULL, '\x7b226e223a312c2274657874223a22636166c3a920e29883227d', 1796232873.631502, 1796232874.639659, 1796232874.6575098, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.finished_jobs VALUES (2, 'default', 'old.fails', NULL, '\x5b5b5d2c7b7d5d', 'json', 0, 'dead', 1796232873.639262, 1796232873.639262, 1, 1, 0, 0, NULL, 300, 'ValueError: boom <b>bold</b> [red]; no attempts left after 1
Traceback (most recent call last):
  File "/tmp/old/62cea58/jobpool/child.py", line 192, in _outcome_of
    value = job.fn(*args, **kwargs)
            ^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/old/62cea58/jobpool/testing.py", line 299, in body
    return fn(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^
  File "/work/main/tests/schemas/make_old_store.py", line 49, in fails
    raise ValueError("boom <b>bold</b> [red]")
ValueError: boom <b>bold</b> [red]', NULL, NULL, NULL, 1796232873.639262, 1796232874.6575098, 1796232874.6957333, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.finished_jobs VALUES (4, 'default', 'old.first', NULL, '\x5b5b32315d2c7b7d5d', 'json', 0, 'done', 1796232873.647201, 1796232873.647201, 1, 5, 0, 0, NULL, 300, NULL, 100, NULL, '\x3432', 1796232873.647201, 1796232874.7072773, 1796232874.7190099, '[{"name": "old.second", "queue": "default", "payload": "[[1],{}]", "timeout": null, "priority": 0, "max_attempts": null}, {"name": "old.third", "queue": "default", "payload": "[[],{\"k\":\"v\"}]", "timeout": null, "priority": 0, "max_attempts": null}]', NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.finished_jobs VALUES (5, 'default', 'old.member', NULL, '\x5b5b315d2c7b7d5d', 'json', 0, 'done', 1796232873.654975, 1796232873.654975, 1, 5, 0, 0, NULL, 300, NULL, 100, NULL, NULL, 1796232873.654975, 1796232874.7190099, 1796232874.7309635, NULL, NULL, 0, 1, NULL, NULL, NULL, NULL);


--
-- Data for Name: jobpool_batch_adds; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobpool_batch_shards; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.jobpool_batch_shards VALUES (1, 6, 1, 0, 0);
INSERT INTO __SCHEMA__.jobpool_batch_shards VALUES (1, 5, 0, 1, 0);


--
-- Data for Name: jobpool_batches; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.jobpool_batches VALUES (1, 1796232873.651152, 1796232874.7309635, 2, 1, 0, 1796232873.666915, NULL, NULL, '{"name": "old.callback", "queue": "default", "payload": "[[\"sales\"],{}]", "timeout": null, "priority": 0, "max_attempts": null}', NULL, NULL, NULL);


--
-- Data for Name: jobpool_groups; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobpool_lanes; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobpool_limits; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobpool_meta; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.jobpool_meta VALUES ('revision', '9');
INSERT INTO __SCHEMA__.jobpool_meta VALUES ('schema', '1');


--
-- Data for Name: jobpool_queues; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobpool_rollups; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobs; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.jobs VALUES (6, 'default', 'old.member_left', NULL, '\x5b5b325d2c7b7d5d', 'json', 0, 'ready', 1796232873.663071, 1796232873.663071, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1796232873.663071, NULL, NULL, NULL, 0, 1, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.jobs VALUES (7, 'default', 'old.ready', 'k1', '\x5b5b2272225d2c7b7d5d', 'json', 0, 'ready', 1796232873.675213, 1796232873.675213, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1796232873.675213, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.jobs VALUES (8, 'default', 'old.later', NULL, '\x5b5b226c225d2c7b7d5d', 'json', 0, 'ready', 1827768873.67929, 1827768873.67929, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1796232873.67929, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.jobs VALUES (9, 'default', 'old.killer', NULL, '\x5b5b5d2c7b7d5d', 'json', 0, 'running', 1796232873.683133, 1796232873.683133, 1, 5, 0, 0, NULL, 300, 'vm:7783:30676', 1796233204.5330944, NULL, NULL, NULL, 1796232873.683133, 1796232874.5330944, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.jobs VALUES (3, 'default', 'old.retries', NULL, '\x5b5b5d2c7b7d5d', 'json', 0, 'ready', 1796319274.7072773, 1796319274.7072773, 1, 5, 0, 0, NULL, 300, NULL, NULL, 'Retry: try again tomorrow', NULL, NULL, 1796232873.643118, 1796232874.6957333, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL);
INSERT INTO __SCHEMA__.jobs VALUES (10, 'default', 'old.second', NULL, '\x5b5b315d2c7b7d5d', 'json', 0, 'ready', 1796232874.7190099, 1796232874.7190099, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1796232874.7190099, NULL, '[{"name": "old.third", "queue": "default", "payload": "[[],{\"k\":\"v\"}]", "timeout": null, "priority": 0, "max_attempts": null}]', 4, 0, NULL, NULL, NULL, NULL, NULL);


--
-- Data for Name: periodic; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: pools; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Name: attempts_seq_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.attempts_seq_seq', 5, true);


--
-- Name: jobpool_batches_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.jobpool_batches_id_seq', 1, true);


--
-- Name: jobpool_lanes_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.jobpool_lanes_id_seq', 1, false);


--
-- Name: jobs_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.jobs_id_seq', 10, true);


--
-- Name: attempts attempts_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (seq);


--
-- Name: finished_jobs finished_jobs_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.finished_jobs
    ADD CONSTRAINT finished_jobs_pkey PRIMARY KEY (id);


--
-- Name: jobpool_batch_adds jobpool_batch_adds_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_batch_adds
    ADD CONSTRAINT jobpool_batch_adds_pkey PRIMARY KEY (batch_id, add_key);


--
-- Name: jobpool_batch_shards jobpool_batch_shards_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_batch_shards
    ADD CONSTRAINT jobpool_batch_shards_pkey PRIMARY KEY (batch_id, shard);


--
-- Name: jobpool_batches jobpool_batches_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_batches
    ADD CONSTRAINT jobpool_batches_pkey PRIMARY KEY (id);


--
-- Name: jobpool_groups jobpool_groups_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_groups
    ADD CONSTRAINT jobpool_groups_pkey PRIMARY KEY (name, grp);


--
-- Name: jobpool_lanes jobpool_lanes_id_key; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_lanes
    ADD CONSTRAINT jobpool_lanes_id_key UNIQUE (id);


--
-- Name: jobpool_lanes jobpool_lanes_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_lanes
    ADD CONSTRAINT jobpool_lanes_pkey PRIMARY KEY (queue, priority, name, grp);


--
-- Name: jobpool_limits jobpool_limits_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_limits
    ADD CONSTRAINT jobpool_limits_pkey PRIMARY KEY (scope, target);


--
-- Name: jobpool_meta jobpool_meta_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_meta
    ADD CONSTRAINT jobpool_meta_pkey PRIMARY KEY (key);


--
-- Name: jobpool_queues jobpool_queues_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_queues
    ADD CONSTRAINT jobpool_queues_pkey PRIMARY KEY (queue);


--
-- Name: jobpool_rollups jobpool_rollups_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobpool_rollups
    ADD CONSTRAINT jobpool_rollups_pkey PRIMARY KEY (minute, name);


--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);


--
-- Name: periodic periodic_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.periodic
    ADD CONSTRAINT periodic_pkey PRIMARY KEY (name);


--
-- Name: pools pools_pkey; Type: CONSTRAINT; Schema: __SCHEMA__; Owner: -
--

ALTER TABLE ONLY __SCHEMA__.pools
    ADD CONSTRAINT pools_pkey PRIMARY KEY (owner);


--
-- Name: attempts_job; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX attempts_job ON __SCHEMA__.attempts USING btree (job_id, seq);


--
-- Name: batches_finished; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX batches_finished ON __SCHEMA__.jobpool_batches USING btree (finished_at);


--
-- Name: finished_jobs_batch; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_batch ON __SCHEMA__.finished_jobs USING btree (batch_id, status) WHERE (batch_id IS NOT NULL);


--
-- Name: finished_jobs_chain; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_chain ON __SCHEMA__.finished_jobs USING btree (chain_root, id) WHERE (chain_root IS NOT NULL);


--
-- Name: finished_jobs_hooks; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_hooks ON __SCHEMA__.finished_jobs USING btree (name) WHERE ((status = 'dead'::text) AND (hook_done = 0));


--
-- Name: finished_jobs_key; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_key ON __SCHEMA__.finished_jobs USING btree (name, key, finished_at) WHERE (key IS NOT NULL);


--
-- Name: finished_jobs_meta; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_meta ON __SCHEMA__.finished_jobs USING gin (meta jsonb_path_ops) WHERE (meta IS NOT NULL);


--
-- Name: finished_jobs_name; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_name ON __SCHEMA__.finished_jobs USING btree (name, id);


--
-- Name: finished_jobs_queue; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_queue ON __SCHEMA__.finished_jobs USING btree (queue, id);


--
-- Name: finished_jobs_status; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_status ON __SCHEMA__.finished_jobs USING btree (status, finished_at);


--
-- Name: jobpool_lanes_rotation; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobpool_lanes_rotation ON __SCHEMA__.jobpool_lanes USING btree (queue, priority DESC, served_at NULLS FIRST, name, grp);


--
-- Name: jobs_batch; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_batch ON __SCHEMA__.jobs USING btree (batch_id) WHERE (batch_id IS NOT NULL);


--
-- Name: jobs_chain; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_chain ON __SCHEMA__.jobs USING btree (chain_root, id) WHERE (chain_root IS NOT NULL);


--
-- Name: jobs_claim_order; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_claim_order ON __SCHEMA__.jobs USING btree (queue, priority DESC, line_at, id) WHERE (status = 'ready'::text);


--
-- Name: jobs_group_order; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_group_order ON __SCHEMA__.jobs USING btree (queue, name, grp, priority, line_at, id) WHERE ((status = 'ready'::text) AND (grp IS NOT NULL));


--
-- Name: jobs_live_key; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE UNIQUE INDEX jobs_live_key ON __SCHEMA__.jobs USING btree (name, key) WHERE (key IS NOT NULL);


--
-- Name: jobs_meta; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_meta ON __SCHEMA__.jobs USING gin (meta jsonb_path_ops) WHERE (meta IS NOT NULL);


--
-- Name: jobs_owners; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_owners ON __SCHEMA__.jobs USING btree (lease_owner) WHERE (status = 'running'::text);


--
-- Name: jobs_ready_name; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_ready_name ON __SCHEMA__.jobs USING btree (name, id) WHERE (status = 'ready'::text);


--
-- Name: jobs_ready_queue; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_ready_queue ON __SCHEMA__.jobs USING btree (queue, id) WHERE (status = 'ready'::text);


--
-- Name: jobpool_batches jobpool_batch_finished; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER jobpool_batch_finished BEFORE UPDATE ON __SCHEMA__.jobpool_batches FOR EACH ROW WHEN (((new.closed_at IS NOT NULL) AND (new.finished_at IS NULL))) EXECUTE FUNCTION __SCHEMA__.jobpool_batch_finished();


--
-- Name: jobs jobpool_limited_insert; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER jobpool_limited_insert BEFORE INSERT ON __SCHEMA__.jobs FOR EACH ROW WHEN ((new.grp IS NOT NULL)) EXECUTE FUNCTION __SCHEMA__.jobpool_limited_row();


--
-- Name: jobs jobpool_limited_ready; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER jobpool_limited_ready BEFORE UPDATE OF status ON __SCHEMA__.jobs FOR EACH ROW WHEN (((new.grp IS NOT NULL) AND (new.status = 'ready'::text) AND (old.status <> 'ready'::text))) EXECUTE FUNCTION __SCHEMA__.jobpool_limited_row();


--
-- Name: jobs jobpool_member_ended; Type: TRIGGER; Schema: __SCHEMA__; Owner: -
--

CREATE TRIGGER jobpool_member_ended AFTER DELETE ON __SCHEMA__.jobs FOR EACH ROW WHEN ((old.batch_id IS NOT NULL)) EXECUTE FUNCTION __SCHEMA__.jobpool_member_ended();


--
-- PostgreSQL database dump complete
--


