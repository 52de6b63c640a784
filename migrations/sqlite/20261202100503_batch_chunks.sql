-- A batch too big for one short transaction is written in chunks (issue 14, item 10):
-- `pending_from` is the number of its rows stored so far while it is partly written, NULL once
-- it is whole (every batch stored before this migration is whole). A retry of a partly written
-- batch (after a crash) resumes there, so no row is written twice.
ALTER TABLE batches ADD COLUMN pending_from bigint;
