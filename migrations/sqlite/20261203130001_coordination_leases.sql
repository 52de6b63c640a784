-- Coordination grants made through the API when the store is SQLite (with PostgreSQL they are
-- the coordination schema's `leases` table): durable in the store's file, so a server restart
-- ends no grant. A row is a grant until `expires_at_ms` (epoch milliseconds, judged against
-- SQLite's clock in each statement); an expired row is a free name.
CREATE TABLE coordination_leases (
    name TEXT PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    token INTEGER NOT NULL,
    ttl_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
);

-- The last fencing token handed out: tokens increase across holders and restarts.
CREATE TABLE coordination_lease_tokens (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT INTO coordination_lease_tokens (id, last) VALUES (1, 0);
