-- The control plane's history store (PostgreSQL).
--
-- Laid out for ingest speed: typed columns, times as epoch milliseconds (bigint), one row per
-- event, dead letter or depth tick, and only the indexes the management API's queries use.
-- "Current state" tables (members, singletons, routers) are small and updated inside the
-- ingest transaction, so reads of "what is the cluster like now" never scan history.

CREATE TABLE clusters (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text   NOT NULL UNIQUE,
    leader         text,
    leader_at_ms   bigint NOT NULL DEFAULT 0,
    first_seen_ms  bigint NOT NULL,
    last_report_ms bigint NOT NULL
);

-- One row per agent incarnation.
CREATE TABLE agents (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id            bigint NOT NULL REFERENCES clusters (id),
    node                  text   NOT NULL,
    incarnation           bigint NOT NULL,
    meta_node             text,
    first_seen_ms         bigint NOT NULL,
    last_report_ms        bigint NOT NULL,
    last_sent_ms          bigint NOT NULL,
    last_sequence         bigint NOT NULL,
    health                text,
    health_at_ms          bigint NOT NULL DEFAULT 0,
    dropped_membership    bigint NOT NULL DEFAULT 0,
    dropped_singleton     bigint NOT NULL DEFAULT 0,
    dropped_router        bigint NOT NULL DEFAULT 0,
    dropped_dead_letters  bigint NOT NULL DEFAULT 0,
    dropped_health        bigint NOT NULL DEFAULT 0,
    dropped_depth_samples bigint NOT NULL DEFAULT 0,
    UNIQUE (cluster_id, node, incarnation)
);

-- Batches already stored: the primary key makes a retried batch a no-op.
CREATE TABLE batches (
    agent_id    bigint NOT NULL,
    sequence    bigint NOT NULL,
    received_ms bigint NOT NULL,
    items       bigint NOT NULL,
    PRIMARY KEY (agent_id, sequence)
);

-- Membership, singleton, router and health events. `detail` is the event body as JSON text
-- (text, not jsonb: nothing queries inside it, and text costs the server least per row).
CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id bigint NOT NULL,
    agent_id   bigint NOT NULL,
    at_ms      bigint NOT NULL,
    kind       text   NOT NULL,
    subject    text,
    detail     text   NOT NULL
);
-- The history newest first (by event time), with or without a time window.
CREATE INDEX events_time ON events (cluster_id, at_ms, id);
-- A singleton's or member's history.
CREATE INDEX events_subject ON events (cluster_id, subject, at_ms, id);

-- Dead letters: the high-volume event kind, in typed columns.
CREATE TABLE dead_letters (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id   bigint NOT NULL,
    agent_id     bigint NOT NULL,
    at_ms        bigint NOT NULL,
    recipient    text   NOT NULL,
    sender       text,
    message_type text   NOT NULL,
    reason       text   NOT NULL
);
-- Newest first, time windows, and per-minute counts (an index-only range scan).
CREATE INDEX dead_letters_time ON dead_letters (cluster_id, at_ms, id);

-- Mailbox depths, one row per agent and sampling tick; `samples` is the tick's
-- [{path, router, depth}] as JSON text.
CREATE TABLE depth_ticks (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id bigint NOT NULL,
    agent_id   bigint NOT NULL,
    at_ms      bigint NOT NULL,
    samples    text   NOT NULL
);
-- BRIN costs almost nothing on append-mostly data read by time range.
CREATE INDEX depth_ticks_at ON depth_ticks USING brin (at_ms);

-- Current state, as the latest report (by event time) said.
CREATE TABLE members (
    cluster_id      bigint  NOT NULL,
    address         text    NOT NULL,
    uid             bigint  NOT NULL,
    status          text    NOT NULL,
    roles           text    NOT NULL,
    status_ms       bigint  NOT NULL,
    reachable       boolean NOT NULL DEFAULT true,
    observers       text    NOT NULL DEFAULT '[]',
    reachability_ms bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster_id, address)
);

CREATE TABLE singletons (
    cluster_id    bigint NOT NULL,
    name          text   NOT NULL,
    role          text,
    host          text,
    host_at_ms    bigint NOT NULL DEFAULT 0,
    lease         text,
    lease_holder  text,
    lease_at_ms   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster_id, name)
);

CREATE TABLE routers (
    cluster_id  bigint NOT NULL,
    path        text   NOT NULL,
    strategy    text   NOT NULL,
    role        text,
    routee_path text,
    routees     text   NOT NULL DEFAULT '[]',
    updated_ms  bigint NOT NULL,
    PRIMARY KEY (cluster_id, path)
);

-- Member operations (leave/down) waiting for an agent of the cluster to pick them up.
CREATE TABLE member_operations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster_id   bigint NOT NULL,
    address      text   NOT NULL,
    operation    text   NOT NULL,
    requested_ms bigint NOT NULL,
    delivered_ms bigint
);
