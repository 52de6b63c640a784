-- Events of one kind, newest first: without it a rare kind is found by walking back through
-- every newer event of other kinds.
CREATE INDEX events_kind ON events (cluster_id, kind, at_ms, id);
