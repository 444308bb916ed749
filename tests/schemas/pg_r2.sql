-- A PostgreSQL store as jobpool at 5be3933 (revision 2) made it, holding two jobs:
-- pg_dump --schema-only --inserts, its schema renamed __SCHEMA__ (tests/contract/test_pg_old_stores.py).
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
    jobs.cancel_requested
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
    0 AS cancel_requested
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



--
-- Data for Name: finished_jobs; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobpool_meta; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.jobpool_meta VALUES ('schema', '2');


--
-- Data for Name: jobpool_queues; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: jobs; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--

INSERT INTO __SCHEMA__.jobs VALUES (1, 'default', 'old.ready', 'k1', '\x5b5b312c22c3bc225d2c7b7d5d', 'json', 0, 'ready', 1796230540.593597, 1796230540.593597, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1796230540.593597, NULL, NULL, NULL, 0);
INSERT INTO __SCHEMA__.jobs VALUES (2, 'default', 'old.later', NULL, '\x5b5b325d2c7b7d5d', 'json', 0, 'ready', 1796234140.595345, 1796234140.595345, 0, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1796230540.595345, NULL, NULL, NULL, 0);


--
-- Data for Name: periodic; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Data for Name: pools; Type: TABLE DATA; Schema: __SCHEMA__; Owner: -
--



--
-- Name: attempts_seq_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.attempts_seq_seq', 1, false);


--
-- Name: jobs_id_seq; Type: SEQUENCE SET; Schema: __SCHEMA__; Owner: -
--

SELECT pg_catalog.setval('__SCHEMA__.jobs_id_seq', 2, true);


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
-- Name: finished_jobs_hooks; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_hooks ON __SCHEMA__.finished_jobs USING btree (name) WHERE ((status = 'dead'::text) AND (hook_done = 0));


--
-- Name: finished_jobs_status; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX finished_jobs_status ON __SCHEMA__.finished_jobs USING btree (status, finished_at);


--
-- Name: jobs_claim_order; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_claim_order ON __SCHEMA__.jobs USING btree (queue, priority DESC, line_at, id) WHERE (status = 'ready'::text);


--
-- Name: jobs_leases; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_leases ON __SCHEMA__.jobs USING btree (lease_expires_at) WHERE (status = 'running'::text);


--
-- Name: jobs_live_key; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE UNIQUE INDEX jobs_live_key ON __SCHEMA__.jobs USING btree (name, key) WHERE (key IS NOT NULL);


--
-- Name: jobs_owners; Type: INDEX; Schema: __SCHEMA__; Owner: -
--

CREATE INDEX jobs_owners ON __SCHEMA__.jobs USING btree (lease_owner) WHERE (status = 'running'::text);


--
-- PostgreSQL database dump complete
--


