//! The audit trail of management actions (table `audit_entries`): every member operation and
//! coordination removal asked of the control plane, with who asked, what, on which target and
//! what came of it.
//!
//! # Scopes
//! Member operations belong to a cluster; coordination actions (evict a host, release a claim
//! or a lease) to none, since the coordination API serves every cluster alike: they are kept
//! with no cluster ([`AuditScope::Coordination`]).
//!
//! # Bounded refusals
//! Anyone who can reach the server can be refused, so refused entries are capped: after each
//! one is written, the refused entries of that scope (a cluster, or the coordination API)
//! beyond the newest [`MAX_REFUSED`] are deleted. Accepted and failed entries need the admin token (a failure is an accepted request
//! the store could not carry out) and are kept as long as the rest of the history
//! (`--retention-days`), the coordination trail too. A request naming
//! no known cluster is not written at all (there is nothing to file it under).

use sqlx::FromRow;

/// Refused entries kept per cluster (the newest).
pub const MAX_REFUSED: i64 = 1_000;

pub(super) const INSERT: &str = "\
INSERT INTO audit_entries (cluster_id, at_ms, token_id, action, target, outcome, status,
    reason, operation_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id";

/// Deletes the refused entries of cluster `$1` older than its `$2` newest: the subquery finds
/// the newest one beyond the bound (none, so nothing is deleted, while there are fewer).
pub(super) const PRUNE_REFUSED: &str = "\
DELETE FROM audit_entries WHERE cluster_id = $1 AND outcome = 'refused' AND id <= (
    SELECT id FROM audit_entries WHERE cluster_id = $1 AND outcome = 'refused'
    ORDER BY id DESC LIMIT 1 OFFSET $2)";

/// [`PRUNE_REFUSED`] for the coordination scope (`$1` is the bound).
pub(super) const PRUNE_REFUSED_COORDINATION: &str = "\
DELETE FROM audit_entries WHERE cluster_id IS NULL AND outcome = 'refused' AND id <= (
    SELECT id FROM audit_entries WHERE cluster_id IS NULL AND outcome = 'refused'
    ORDER BY id DESC LIMIT 1 OFFSET $1)";

/// The entries with when their queued member operation was handed to an agent.
pub(super) const SELECT: &str = "\
SELECT a.id, a.at_ms, a.token_id, a.action, a.target, a.outcome, a.status, a.reason,
    a.operation_id, o.delivered_ms
FROM audit_entries a LEFT JOIN member_operations o ON o.id = a.operation_id
WHERE ";

/// Retention of the coordination trail (the cluster trails go with their clusters' history,
/// `sql::RETENTION`): `$1` cutoff, `$2` chunk.
pub(super) const RETENTION_COORDINATION: &str = "\
DELETE FROM audit_entries WHERE id IN
    (SELECT id FROM audit_entries WHERE cluster_id IS NULL AND at_ms < $1 LIMIT $2)";

/// Whose trail an entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditScope {
    /// A cluster's member operations (its id).
    Cluster(i64),
    /// Coordination actions, which belong to no cluster.
    Coordination,
}

impl AuditScope {
    pub(super) fn cluster_id(self) -> Option<i64> {
        match self {
            Self::Cluster(id) => Some(id),
            Self::Coordination => None,
        }
    }
}

/// What came of a management request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditOutcome {
    /// Done (or queued) as asked.
    Accepted,
    /// Turned down: a missing or wrong token, operations off, an unknown member, a bad body.
    Refused,
    /// Allowed, but the server could not carry it out (the store failed).
    Failed,
}

impl AuditOutcome {
    /// Its stored and shown name: `accepted`, `refused` or `failed`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }
}

/// An entry to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEntry {
    /// Server time of the request.
    pub at_ms: i64,
    /// Which token asked (an id, never the secret).
    pub token_id: String,
    /// What was asked (`member.leave`, `member.down`).
    pub action: String,
    /// What it was asked of (a member's `host:port`, or what the request named).
    pub target: String,
    /// What came of it.
    pub outcome: AuditOutcome,
    /// The HTTP status answered.
    pub status: u16,
    /// Why it was refused or failed ('' when accepted).
    pub reason: String,
    /// The queued operation, when accepted.
    pub operation_id: Option<i64>,
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct AuditRow {
    /// Ascending id: with `at_ms`, the paging cursor.
    pub id: i64,
    /// Server time of the request.
    pub at_ms: i64,
    /// Which token asked.
    pub token_id: String,
    /// What was asked.
    pub action: String,
    /// Of what.
    pub target: String,
    /// `accepted`, `refused` or `failed`.
    pub outcome: String,
    /// The HTTP status answered.
    pub status: i64,
    /// Why it was refused or failed ('' when accepted).
    pub reason: String,
    /// The queued operation, when accepted.
    pub operation_id: Option<i64>,
    /// When the queued operation was handed to an agent (none yet, or no operation).
    pub delivered_ms: Option<i64>,
}

/// Filters for `Store::audit_entries`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only entries about this target.
    pub target: Option<String>,
    /// Only entries before this `(at_ms, id)` position (the cursor of the previous page).
    pub before: Option<(i64, i64)>,
    /// Page size.
    pub limit: i64,
}
