//! SQL shared by both backends: `$N` parameters, `ON CONFLICT … DO UPDATE`, integer time
//! arithmetic; nothing PostgreSQL- or SQLite-only.

// --- ingest ---

/// A known cluster is left alone: updating its row on every batch would make every agent's
/// ingest transaction wait for the others' (the row lock is held until commit). Clusters are
/// keyed by `cluster_key` (name and identity fingerprint, see `troupe_protocol::cluster_key`).
pub(crate) const INSERT_CLUSTER: &str = "\
INSERT INTO clusters (cluster_key, name, identity, first_seen_ms, last_report_ms)
VALUES ($1, $2, $3, $4, $4)
ON CONFLICT (cluster_key) DO NOTHING";

/// The id and identity of the cluster with a key: the caller checks the identity is the one
/// reported (a key is a fingerprint, so that two identities could in principle share one).
pub(crate) const CLUSTER_ID: &str = "SELECT id, identity FROM clusters WHERE cluster_key = $1";

/// Dropped counts are running totals: keep the largest seen, whatever order batches arrive in.
pub(crate) const UPSERT_AGENT: &str = "\
INSERT INTO agents (cluster_id, node, incarnation, meta_node, first_seen_ms, last_report_ms,
    last_sent_ms, last_sequence, dropped_membership, dropped_singleton, dropped_router,
    dropped_dead_letters, dropped_health, dropped_depth_samples, dropped_spool_batches,
    clock_skew_ms)
VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (cluster_id, node, incarnation) DO UPDATE SET
    meta_node = excluded.meta_node,
    last_report_ms = excluded.last_report_ms,
    last_sent_ms = CASE WHEN excluded.last_sequence >= agents.last_sequence
        THEN excluded.last_sent_ms ELSE agents.last_sent_ms END,
    clock_skew_ms = CASE WHEN excluded.last_sequence >= agents.last_sequence
        THEN excluded.clock_skew_ms ELSE agents.clock_skew_ms END,
    last_sequence = CASE WHEN excluded.last_sequence > agents.last_sequence
        THEN excluded.last_sequence ELSE agents.last_sequence END,
    dropped_membership = CASE WHEN excluded.dropped_membership > agents.dropped_membership
        THEN excluded.dropped_membership ELSE agents.dropped_membership END,
    dropped_singleton = CASE WHEN excluded.dropped_singleton > agents.dropped_singleton
        THEN excluded.dropped_singleton ELSE agents.dropped_singleton END,
    dropped_router = CASE WHEN excluded.dropped_router > agents.dropped_router
        THEN excluded.dropped_router ELSE agents.dropped_router END,
    dropped_dead_letters = CASE WHEN excluded.dropped_dead_letters > agents.dropped_dead_letters
        THEN excluded.dropped_dead_letters ELSE agents.dropped_dead_letters END,
    dropped_health = CASE WHEN excluded.dropped_health > agents.dropped_health
        THEN excluded.dropped_health ELSE agents.dropped_health END,
    dropped_depth_samples = CASE WHEN excluded.dropped_depth_samples > agents.dropped_depth_samples
        THEN excluded.dropped_depth_samples ELSE agents.dropped_depth_samples END,
    dropped_spool_batches = CASE WHEN excluded.dropped_spool_batches > agents.dropped_spool_batches
        THEN excluded.dropped_spool_batches ELSE agents.dropped_spool_batches END
RETURNING id";

pub(crate) const INSERT_BATCH: &str = "\
INSERT INTO batches (agent_id, sequence, received_ms, items) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING";

/// One row per incarnation (address, uid); `$8`, the server's receive time, is when the server
/// first heard of it. A status replaces the stored one only if it is further along the
/// lifecycle (`status_rank`); the same status reported again keeps the earliest time.
pub(crate) const UPSERT_MEMBER_STATUS: &str = "\
INSERT INTO members (cluster_id, address, uid, status, status_rank, roles, status_ms,
    first_seen_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (cluster_id, address, uid) DO UPDATE SET
    status = excluded.status, status_rank = excluded.status_rank, roles = excluded.roles,
    status_ms = excluded.status_ms
WHERE excluded.status_rank > members.status_rank
   OR (excluded.status_rank = members.status_rank
       AND (members.status_ms = 0 OR excluded.status_ms < members.status_ms))";

/// The reachability of one incarnation; a row it creates has no status time yet. Ordered by
/// the reporting agent's batch sequence when the same agent set it, else by event time.
pub(crate) const UPSERT_MEMBER_REACHABILITY: &str = "\
INSERT INTO members (cluster_id, address, uid, status, status_rank, roles, status_ms,
    reachable, observers, reachability_ms, first_seen_ms, reachability_agent_id,
    reachability_seq)
VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8, $9, $10, $11, $12)
ON CONFLICT (cluster_id, address, uid) DO UPDATE SET
    reachable = excluded.reachable, observers = excluded.observers,
    reachability_ms = excluded.reachability_ms,
    reachability_agent_id = excluded.reachability_agent_id,
    reachability_seq = excluded.reachability_seq
WHERE CASE WHEN members.reachability_agent_id = excluded.reachability_agent_id
    THEN members.reachability_seq <= excluded.reachability_seq
    ELSE members.reachability_ms <= excluded.reachability_ms END";

/// Ordered by the agent's batch sequence when the same agent set it, else by event time.
pub(crate) const UPDATE_LEADER: &str = "\
UPDATE clusters SET leader = $2, leader_at_ms = $3, leader_agent_id = $4, leader_seq = $5
WHERE id = $1
  AND CASE WHEN leader_agent_id = $4 THEN leader_seq <= $5 ELSE leader_at_ms <= $3 END";

/// Ordered by the agent's batch sequence when the same agent set the host, else by event time;
/// a start by another agent always follows a recorded stop (an instance starts after the
/// previous one stopped, whatever the two reporters' clocks say).
pub(crate) const UPSERT_SINGLETON_HOST: &str = "\
INSERT INTO singletons (cluster_id, name, role, host, host_at_ms, host_agent_id, host_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (cluster_id, name) DO UPDATE SET
    role = excluded.role, host = excluded.host, host_at_ms = excluded.host_at_ms,
    host_agent_id = excluded.host_agent_id, host_seq = excluded.host_seq
WHERE CASE WHEN singletons.host_agent_id = excluded.host_agent_id
    THEN singletons.host_seq <= excluded.host_seq
    ELSE singletons.host IS NULL OR singletons.host_at_ms <= excluded.host_at_ms END";

/// A stop clears the host only if the stopped instance is the one on record.
pub(crate) const UPSERT_SINGLETON_STOPPED: &str = "\
INSERT INTO singletons (cluster_id, name, role, host, host_at_ms, host_agent_id, host_seq)
VALUES ($1, $2, $3, NULL, $5, $6, $7)
ON CONFLICT (cluster_id, name) DO UPDATE SET host = NULL, host_at_ms = excluded.host_at_ms,
    host_agent_id = excluded.host_agent_id, host_seq = excluded.host_seq
WHERE singletons.host = $4
  AND CASE WHEN singletons.host_agent_id = excluded.host_agent_id
    THEN singletons.host_seq <= excluded.host_seq
    ELSE singletons.host_at_ms <= excluded.host_at_ms END";

pub(crate) const UPSERT_SINGLETON_LEASE: &str = "\
INSERT INTO singletons (cluster_id, name, role, lease, lease_holder, lease_at_ms,
    lease_agent_id, lease_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (cluster_id, name) DO UPDATE SET
    lease = excluded.lease, lease_holder = excluded.lease_holder,
    lease_at_ms = excluded.lease_at_ms, lease_agent_id = excluded.lease_agent_id,
    lease_seq = excluded.lease_seq
WHERE CASE WHEN singletons.lease_agent_id = excluded.lease_agent_id
    THEN singletons.lease_seq <= excluded.lease_seq
    ELSE singletons.lease_at_ms <= excluded.lease_at_ms END";

/// `RouterStarted` brings role and routee path, `RouteesChanged` the routees: keep the rest.
pub(crate) const UPSERT_ROUTER: &str = "\
INSERT INTO routers (cluster_id, path, strategy, role, routee_path, routees, updated_ms,
    updated_agent_id, updated_seq)
VALUES ($1, $2, $3, $4, $5, COALESCE($6, '[]'), $7, $8, $9)
ON CONFLICT (cluster_id, path) DO UPDATE SET
    strategy = excluded.strategy,
    role = COALESCE(excluded.role, routers.role),
    routee_path = COALESCE(excluded.routee_path, routers.routee_path),
    routees = CASE WHEN $6 IS NULL THEN routers.routees ELSE excluded.routees END,
    updated_ms = excluded.updated_ms, updated_agent_id = excluded.updated_agent_id,
    updated_seq = excluded.updated_seq
WHERE CASE WHEN routers.updated_agent_id = excluded.updated_agent_id
    THEN routers.updated_seq <= excluded.updated_seq
    ELSE routers.updated_ms <= excluded.updated_ms END";

/// An agent's own health: ordered by its batch sequence alone.
pub(crate) const UPDATE_HEALTH: &str = "\
UPDATE agents SET health = $2, health_at_ms = $3, health_seq = $4
WHERE id = $1 AND health_seq <= $4";

/// Operations go only to an agent that can carry them out: a ready one (or one that reports no
/// health), never one still starting, draining or fenced (it is not yet, or no longer, a
/// serving member; the operation waits for the next ready reporter).
pub(crate) const TAKE_OPERATIONS: &str = "\
UPDATE member_operations SET delivered_ms = $2
WHERE cluster_id = $1 AND delivered_ms IS NULL
  AND EXISTS (SELECT 1 FROM agents WHERE id = $3
              AND COALESCE(health, 'ready') = 'ready')
RETURNING id, address, operation";

pub(crate) const UPSERT_DEAD_LETTER_MINUTE_ROW: &str = "\
INSERT INTO dead_letter_minutes (cluster_id, agent_id, minute_ms, recipient, message_type, count)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (cluster_id, minute_ms, agent_id, recipient, message_type)
DO UPDATE SET count = dead_letter_minutes.count + excluded.count";

// --- queries ---

/// The latest report of a cluster is its agents' latest (see `INSERT_CLUSTER`).
pub(crate) const CLUSTERS: &str = "\
SELECT c.id, c.cluster_key, c.name, c.identity, c.leader, c.first_seen_ms,
    COALESCE((SELECT MAX(a.last_report_ms) FROM agents a WHERE a.cluster_id = c.id),
        c.last_report_ms) AS last_report_ms
FROM clusters c ORDER BY c.name, c.cluster_key";

pub(crate) const CLUSTER: &str = "\
SELECT c.id, c.cluster_key, c.name, c.identity, c.leader, c.first_seen_ms,
    COALESCE((SELECT MAX(a.last_report_ms) FROM agents a WHERE a.cluster_id = c.id),
        c.last_report_ms) AS last_report_ms
FROM clusters c WHERE c.cluster_key = $1";

/// The time of a cluster's oldest stored event or dead letter (NULL for none): one probe of
/// each table's `(cluster_id, at_ms, id)` index (of each day partition on PostgreSQL).
pub(crate) const FIRST_EVENT_MS: &str = "\
SELECT MIN(f.at_ms) FROM (
    SELECT MIN(at_ms) AS at_ms FROM events WHERE cluster_id = $1
    UNION ALL SELECT MIN(at_ms) AS at_ms FROM dead_letters WHERE cluster_id = $1
) AS f";

/// The clusters reported under a name (one per identity), by key.
pub(crate) const CLUSTERS_NAMED: &str = "\
SELECT c.id, c.cluster_key, c.name, c.identity, c.leader, c.first_seen_ms,
    COALESCE((SELECT MAX(a.last_report_ms) FROM agents a WHERE a.cluster_id = c.id),
        c.last_report_ms) AS last_report_ms
FROM clusters c WHERE c.name = $1 ORDER BY c.cluster_key";

/// Every incarnation of every address; `Store::members` keeps the current one of each.
pub(crate) const MEMBERS: &str = "\
SELECT address, uid, status, status_rank, roles, status_ms, first_seen_ms, reachable, observers
FROM members WHERE cluster_id = $1 ORDER BY address, uid";

pub(crate) const AGENTS: &str = "\
SELECT id, node, incarnation, meta_node, first_seen_ms, last_report_ms, last_sent_ms,
    last_sequence, health, dropped_membership, dropped_singleton, dropped_router,
    dropped_dead_letters, dropped_health, dropped_depth_samples, dropped_spool_batches,
    clock_skew_ms
FROM agents WHERE cluster_id = $1 ORDER BY node, first_seen_ms DESC, id DESC";

/// Followed by the bound cluster id and optional filters.
pub(crate) const EVENTS_SELECT: &str = "\
SELECT e.id, e.at_ms, e.kind, e.subject, e.detail, a.node, a.incarnation
FROM events e JOIN agents a ON a.id = e.agent_id
WHERE e.cluster_id = ";

/// Followed by the bound cluster id and optional filters.
pub(crate) const DEAD_LETTERS_SELECT: &str = "\
SELECT d.id, d.at_ms, d.recipient, d.sender, d.message_type, d.reason, a.node
FROM dead_letters d JOIN agents a ON a.id = d.agent_id
WHERE d.cluster_id = ";

/// Followed by the bound cluster id, optional filters and [`DEAD_LETTER_GROUPS_ORDER`].
pub(crate) const DEAD_LETTER_GROUPS_SELECT: &str = "\
SELECT d.recipient, d.reason, CAST(COUNT(*) AS BIGINT) AS count, MAX(d.at_ms) AS last_ms
FROM dead_letters d
WHERE d.cluster_id = ";

/// The grouping of [`DEAD_LETTER_GROUPS_SELECT`], biggest first; followed by the bound limit.
pub(crate) const DEAD_LETTER_GROUPS_ORDER: &str =
    " GROUP BY d.recipient, d.reason ORDER BY count DESC, d.recipient, d.reason LIMIT ";

/// Followed by the bound cluster id, optional filters and the grouping.
pub(crate) const DEAD_LETTER_COUNTS_SELECT: &str = "\
SELECT d.minute_ms, CAST(SUM(d.count) AS BIGINT) AS count
FROM dead_letter_minutes d
WHERE d.cluster_id = ";

pub(crate) const SINGLETONS: &str = "\
SELECT name, role, host, host_at_ms, lease, lease_holder
FROM singletons WHERE cluster_id = $1 ORDER BY name";

pub(crate) const ROUTERS: &str = "\
SELECT path, strategy, role, routee_path, routees, updated_ms
FROM routers WHERE cluster_id = $1 ORDER BY path";

pub(crate) const DEPTH_TICKS: &str = "\
SELECT t.at_ms, a.node, t.samples
FROM depth_ticks t JOIN agents a ON a.id = t.agent_id
WHERE t.cluster_id = $1 AND t.at_ms >= $2 AND t.at_ms < $3
ORDER BY t.at_ms LIMIT $4";

/// Followed by the bound cluster id, the node filter and the time windows.
pub(crate) const DEPTH_TICKS_SELECT: &str = "\
SELECT t.at_ms, a.node, t.samples
FROM depth_ticks t JOIN agents a ON a.id = t.agent_id
WHERE t.cluster_id = ";

/// Counts at most `$3` rows (one range of the time index), so the count of a busy hour stays
/// cheap: the dashboard shows `≥ cap` then.
pub(crate) const COUNT_EVENTS_SINCE: &str = "\
SELECT COUNT(*) FROM (SELECT 1 FROM events WHERE cluster_id = $1 AND at_ms >= $2 LIMIT $3) AS e";

pub(crate) const INSERT_OPERATION: &str = "\
INSERT INTO member_operations (cluster_id, address, operation, requested_ms)
VALUES ($1, $2, $3, $4) RETURNING id";

pub(crate) const TOTALS: &str = "\
SELECT (SELECT COUNT(*) FROM batches), (SELECT COUNT(*) FROM events),
    (SELECT COUNT(*) FROM dead_letters), (SELECT COUNT(*) FROM depth_ticks)";

// --- retention: each takes ($1 cutoff_ms, $2 chunk, $3 cluster_id) ---

/// Per cluster, so the deletes find expired rows through the (cluster_id, at_ms) indexes.
/// SQLite runs all six; PostgreSQL the last three, its history going by whole day partitions
/// (`partitions::RETENTION`).
pub(crate) const RETENTION: [&str; 6] = [
    "DELETE FROM events WHERE id IN
        (SELECT id FROM events WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    "DELETE FROM dead_letters WHERE id IN
        (SELECT id FROM dead_letters WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    "DELETE FROM depth_ticks WHERE id IN
        (SELECT id FROM depth_ticks WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    // Only whole minutes before the cutoff.
    "DELETE FROM dead_letter_minutes
     WHERE (cluster_id, minute_ms, agent_id, recipient, message_type) IN
        (SELECT cluster_id, minute_ms, agent_id, recipient, message_type
         FROM dead_letter_minutes WHERE cluster_id = $3 AND minute_ms + 60000 <= $1 LIMIT $2)",
    "DELETE FROM batches WHERE (agent_id, sequence) IN
        (SELECT b.agent_id, b.sequence FROM batches b JOIN agents a ON a.id = b.agent_id
         WHERE a.cluster_id = $3 AND b.received_ms < $1 LIMIT $2)",
    // The audit trail lives as long as the history it explains.
    "DELETE FROM audit_entries WHERE id IN
        (SELECT id FROM audit_entries WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
];

// --- the live stream: rows after a position, in id (= commit) order ---

pub(crate) const STREAM_EVENTS: &str = "\
SELECT e.id, e.at_ms, e.kind, e.subject, e.detail, a.node, a.incarnation
FROM events e JOIN agents a ON a.id = e.agent_id
WHERE e.cluster_id = $1 AND e.id > $2 ORDER BY e.id LIMIT $3";

pub(crate) const STREAM_DEAD_LETTERS: &str = "\
SELECT d.id, d.at_ms, d.recipient, d.sender, d.message_type, d.reason, a.node, a.incarnation
FROM dead_letters d JOIN agents a ON a.id = d.agent_id
WHERE d.cluster_id = $1 AND d.id > $2 ORDER BY d.id LIMIT $3";

/// A cluster's newest positions: committed ids only, so nothing in flight is skipped.
pub(crate) const STREAM_POSITION: &str = "\
SELECT COALESCE((SELECT id FROM events WHERE cluster_id = $1 ORDER BY id DESC LIMIT 1), 0),
    COALESCE((SELECT id FROM dead_letters WHERE cluster_id = $1 ORDER BY id DESC LIMIT 1), 0)";

/// Makes a PostgreSQL transaction one snapshot for all its reads (SQLite's read transactions
/// already are).
pub(crate) const REPEATABLE_READ: &str =
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY";

// --- readiness ---

/// The migrations applied successfully (sqlx's bookkeeping table).
pub(crate) const APPLIED_MIGRATIONS: &str =
    "SELECT version FROM _sqlx_migrations WHERE success = TRUE";
