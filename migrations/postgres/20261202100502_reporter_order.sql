-- Current state ordered by what the server knows (issue 14, item 8). Each current-state value
-- remembers which agent incarnation set it and in which of its batches (`*_agent_id`,
-- `*_seq`): a later batch of the same agent replaces it whatever the event times say; a
-- report of another agent replaces it when its event time (clamped to the receive time plus
-- the allowed clock skew) is not older. `agents.clock_skew_ms` is the agent's send time minus
-- the server's receive time of its latest batch. Existing rows keep their values (agent 0:
-- none, so the next report is ordered by time as before).
ALTER TABLE clusters ADD COLUMN leader_agent_id bigint NOT NULL DEFAULT 0;
ALTER TABLE clusters ADD COLUMN leader_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN reachability_agent_id bigint NOT NULL DEFAULT 0;
ALTER TABLE members ADD COLUMN reachability_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE singletons ADD COLUMN host_agent_id bigint NOT NULL DEFAULT 0;
ALTER TABLE singletons ADD COLUMN host_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE singletons ADD COLUMN lease_agent_id bigint NOT NULL DEFAULT 0;
ALTER TABLE singletons ADD COLUMN lease_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE routers ADD COLUMN updated_agent_id bigint NOT NULL DEFAULT 0;
ALTER TABLE routers ADD COLUMN updated_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN health_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN clock_skew_ms bigint NOT NULL DEFAULT 0;
