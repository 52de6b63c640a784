-- Clusters keyed by (name, identity) (issue 14, item 4): two clusters of the same name with
-- different secrets are different rows, never merged. `identity` is the keyed hash of the
-- cluster secret that agents report (64 hex digits; '' for agents that report none).
-- `cluster_key` is how the API and the dashboard address the cluster: the name alone without
-- an identity, `name~<first 16 hex digits of the identity>` with one. The unique constraint of
-- the old `name` column moves with it to `cluster_key`; every existing row keeps its id, its
-- history and its key (its name, no identity).
ALTER TABLE clusters RENAME COLUMN name TO cluster_key;
ALTER TABLE clusters ADD COLUMN name text NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN identity text NOT NULL DEFAULT '';
UPDATE clusters SET name = cluster_key;
CREATE INDEX clusters_name ON clusters (name);
