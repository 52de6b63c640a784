-- Members are kept per incarnation: (cluster, address, uid). A restarted process at the same
-- host:port is a new row, so an event about the old incarnation (its removal, its
-- reachability) never changes the new one. `first_seen_ms` (when the server first heard of
-- the incarnation, server clock) tells which incarnation of an address is the newest; `status_rank` orders
-- statuses the way gossip merges them (joining < weakly-up < up < leaving < exiting < down <
-- removed), so a status never goes back whatever order reports arrive in.
--
-- SQLite cannot change a primary key in place: the table is rebuilt, keeping every row.
CREATE TABLE members_by_incarnation (
    cluster_id      bigint  NOT NULL,
    address         text    NOT NULL,
    uid             bigint  NOT NULL,
    status          text    NOT NULL,
    status_rank     bigint  NOT NULL DEFAULT 0,
    roles           text    NOT NULL,
    status_ms       bigint  NOT NULL,
    first_seen_ms        bigint  NOT NULL DEFAULT 0,
    reachable       boolean NOT NULL DEFAULT true,
    observers       text    NOT NULL DEFAULT '[]',
    reachability_ms bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster_id, address, uid)
);

INSERT INTO members_by_incarnation (cluster_id, address, uid, status, status_rank, roles,
    status_ms, first_seen_ms, reachable, observers, reachability_ms)
SELECT cluster_id, address, uid, status,
    CASE status WHEN 'joining' THEN 0 WHEN 'weakly-up' THEN 1 WHEN 'up' THEN 2
        WHEN 'leaving' THEN 3 WHEN 'exiting' THEN 4 WHEN 'down' THEN 5 WHEN 'removed' THEN 6
        ELSE 0 END,
    roles, status_ms,
    CASE WHEN status_ms > 0 THEN status_ms ELSE reachability_ms END,
    reachable, observers, reachability_ms
FROM members;

DROP TABLE members;
ALTER TABLE members_by_incarnation RENAME TO members;
