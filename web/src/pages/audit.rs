//! The audit page: who asked for which leave or down, and what came of it.

use askama::Template;

use super::Layout;
use crate::format::TimeText;

/// Badge class of an audit outcome.
#[must_use]
pub fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "accepted" | "delivered" => "ok",
        "refused" => "warn",
        _ => "bad",
    }
}

/// One management request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditView {
    /// When the server received it.
    pub at: TimeText,
    /// Which token asked (an id, never the secret).
    pub token: String,
    /// `member.leave`, `member.down`, `member.operate`.
    pub action: String,
    /// What it was asked of.
    pub target: String,
    /// The audit page filtered to the target.
    pub target_href: String,
    /// The target's node page, when the target is a known node.
    pub node_href: Option<String>,
    /// `accepted`, `refused` or `failed`.
    pub outcome: String,
    /// Badge class of the outcome.
    pub outcome_class: &'static str,
    /// The HTTP status answered.
    pub status: i64,
    /// Why it was refused or failed ('' when accepted).
    pub reason: String,
    /// The queued operation's id ('' when none).
    pub operation: String,
}

/// The audit trail of management actions, newest first.
#[derive(Debug, Template)]
#[template(path = "audit.html")]
pub struct AuditPage {
    /// Shared parts.
    pub layout: Layout,
    /// The target filter ('' for every target).
    pub target: String,
    /// Entries, newest first.
    pub rows: Vec<AuditView>,
    /// The newest coordination removals (every cluster), newest first.
    pub coordination: Vec<AuditView>,
    /// The next (older) page, when there is one.
    pub older_href: Option<String>,
    /// Link clearing the filter.
    pub clear_href: String,
    /// Refused entries kept per cluster.
    pub refused_kept: String,
}
