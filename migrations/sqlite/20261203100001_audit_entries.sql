-- Issue 20 (an audit trail of management actions): one row per member operation (leave,
-- down) and per coordination removal (evict a host, release a claim or a lease) asked of the
-- control plane, accepted or not. `cluster_id` is NULL for coordination actions (the
-- coordination API serves no one cluster). `token_id` names the token that asked (`admin:`
-- or `coordination:` and the first 12 hex digits of its SHA-256; `none` or `unknown` for a
-- missing or wrong one), never the token itself. `status` is the HTTP status answered, `reason` the error
-- text of a refusal or failure ('' when accepted), `operation_id` the queued operation of an
-- accepted one. Refused rows are kept to the newest 1000 per cluster, and 1000 of
-- coordination actions (`store::audit`).
-- AUTOINCREMENT: ids only grow, even after the newest row is deleted, so cursors stay valid.
CREATE TABLE audit_entries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster_id   bigint REFERENCES clusters (id),
    at_ms        bigint NOT NULL,
    token_id     text   NOT NULL,
    action       text   NOT NULL,
    target       text   NOT NULL,
    outcome      text   NOT NULL,
    status       bigint NOT NULL,
    reason       text   NOT NULL DEFAULT '',
    operation_id bigint
);
-- The trail newest first, of a cluster or of one target.
CREATE INDEX audit_entries_time ON audit_entries (cluster_id, at_ms, id);
CREATE INDEX audit_entries_target ON audit_entries (cluster_id, target, at_ms, id);
-- The bound on refused rows finds the 1000th newest through this.
CREATE INDEX audit_entries_outcome ON audit_entries (cluster_id, outcome, id);
