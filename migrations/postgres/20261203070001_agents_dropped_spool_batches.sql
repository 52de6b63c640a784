-- Issue 14 (reports survive a stop): whole report batches an agent's spool gave up
-- (`dropped.spool_batches`), a running total per agent incarnation like the other dropped_*
-- columns; 0 for every row stored before.
ALTER TABLE agents ADD COLUMN dropped_spool_batches bigint NOT NULL DEFAULT 0;
