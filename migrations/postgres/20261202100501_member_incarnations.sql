-- Members are kept per incarnation: (cluster, address, uid). A restarted process at the same
-- host:port is a new row, so an event about the old incarnation (its removal, its
-- reachability) never changes the new one. `first_seen_ms` (when the server first heard of
-- the incarnation, server clock) tells which incarnation of an address is the newest; `status_rank` orders
-- statuses the way gossip merges them (joining < weakly-up < up < leaving < exiting < down <
-- removed), so a status never goes back whatever order reports arrive in. Existing rows are
-- kept (one incarnation per address, as before).
ALTER TABLE members ADD COLUMN status_rank bigint NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN first_seen_ms bigint NOT NULL DEFAULT 0;
UPDATE members SET
    status_rank = CASE status WHEN 'joining' THEN 0 WHEN 'weakly-up' THEN 1 WHEN 'up' THEN 2
        WHEN 'leaving' THEN 3 WHEN 'exiting' THEN 4 WHEN 'down' THEN 5 WHEN 'removed' THEN 6
        ELSE 0 END,
    first_seen_ms = CASE WHEN status_ms > 0 THEN status_ms ELSE reachability_ms END;
ALTER TABLE members DROP CONSTRAINT members_pkey;
ALTER TABLE members ADD PRIMARY KEY (cluster_id, address, uid);
