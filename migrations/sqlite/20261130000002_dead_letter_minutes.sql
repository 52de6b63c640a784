-- Dead letters counted per minute, agent, recipient and message type, kept up to date by
-- ingest, so per-minute counts read a few hundred rows per minute instead of every dead
-- letter. The agent is part of the key so that agents never wait on each other's rows.
CREATE TABLE dead_letter_minutes (
    cluster_id   bigint NOT NULL,
    minute_ms    bigint NOT NULL,
    agent_id     bigint NOT NULL,
    recipient    text   NOT NULL,
    message_type text   NOT NULL,
    count        bigint NOT NULL,
    PRIMARY KEY (cluster_id, minute_ms, agent_id, recipient, message_type)
);
