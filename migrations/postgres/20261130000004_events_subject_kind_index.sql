-- A subject's events of some kinds, newest first (the timeline's member-lifetime picture for a
-- chosen subject): one range per kind. Through the subject index alone, a subject with many
-- events of other kinds (a singleton's hand-overs) is walked through entirely: 1.0-1.2 s for a
-- week of one singleton's history with 10 million events stored.
CREATE INDEX events_subject_kind ON events (cluster_id, subject, kind, at_ms, id);
