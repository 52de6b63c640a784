//! Rows the store returns: plain data, the same for both backends.

use sqlx::FromRow;

/// A cluster and its current leader.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct ClusterRow {
    /// Internal id.
    pub id: i64,
    /// How the API addresses it: its name, and its identity's fingerprint when it has one
    /// (`troupe_protocol::cluster_key`).
    pub cluster_key: String,
    /// The cluster's (actor system's) name; several clusters may share it.
    pub name: String,
    /// The identity its agents report ('' for agents that report none).
    pub identity: String,
    /// The leader's address, as last reported.
    pub leader: Option<String>,
    /// First report from any of its agents.
    pub first_seen_ms: i64,
    /// Latest report from any of its agents.
    pub last_report_ms: i64,
}

/// One agent incarnation as last reported.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct AgentRow {
    /// Internal id.
    pub id: i64,
    /// Its address.
    pub node: String,
    /// Its incarnation (stored signed; the wire value is `incarnation as u64`).
    pub incarnation: i64,
    /// The machine it runs on.
    pub meta_node: Option<String>,
    /// First report.
    pub first_seen_ms: i64,
    /// Latest report received (server clock).
    pub last_report_ms: i64,
    /// `sent_at_ms` of the latest batch (agent clock).
    pub last_sent_ms: i64,
    /// Highest batch sequence stored.
    pub last_sequence: i64,
    /// Latest health state (`starting`, `ready`, `draining`, `fenced`).
    pub health: Option<String>,
    /// Dropped membership events (running total).
    pub dropped_membership: i64,
    /// Dropped singleton events.
    pub dropped_singleton: i64,
    /// Dropped router events.
    pub dropped_router: i64,
    /// Dropped dead letters.
    pub dropped_dead_letters: i64,
    /// Dropped health events.
    pub dropped_health: i64,
    /// Dropped depth samples.
    pub dropped_depth_samples: i64,
    /// Whole report batches its spool gave up (full, refused on replay, torn or unreadable).
    pub dropped_spool_batches: i64,
    /// The agent's clock minus the server's, as measured on its latest batch: its send time
    /// minus the receive time (transit included, so slightly negative for a correct clock).
    pub clock_skew_ms: i64,
}

/// The health shown for an agent that has been silent for longer than the silence limit.
pub const SILENT_HEALTH: &str = "unknown";

impl AgentRow {
    /// Whether it sent nothing for longer than `silence_ms` before `now_ms` (a report exactly
    /// `silence_ms` old is not silence yet).
    #[must_use]
    pub fn silent_at(&self, now_ms: i64, silence_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_report_ms) > silence_ms
    }

    /// Its health as shown at `now_ms`: [`SILENT_HEALTH`] once it has been silent for longer
    /// than `silence_ms`, else what it last reported (`None` before its first health report).
    /// The stored health is untouched: the next report shows it again.
    #[must_use]
    pub fn health_at(&self, now_ms: i64, silence_ms: i64) -> Option<&str> {
        if self.silent_at(now_ms, silence_ms) {
            Some(SILENT_HEALTH)
        } else {
            self.health.as_deref()
        }
    }
}

/// A member incarnation as the reports said.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct MemberRow {
    /// Its address.
    pub address: String,
    /// Its incarnation.
    pub uid: i64,
    /// Its status (`up`, `leaving`, …): the furthest along its lifecycle any report said.
    pub status: String,
    /// The status's place in the lifecycle (joining 0 … removed 6).
    pub status_rank: i64,
    /// When the server first heard of this incarnation (server clock).
    pub first_seen_ms: i64,
    /// Roles, as a JSON array.
    pub roles: String,
    /// When its status last changed.
    pub status_ms: i64,
    /// Whether every observer reaches it.
    pub reachable: bool,
    /// Who calls it unreachable, as a JSON array.
    pub observers: String,
}

/// A stored event (not a dead letter), with the agent that reported it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct EventRow {
    /// Ascending id: the paging cursor.
    pub id: i64,
    /// When it happened (agent clock).
    pub at_ms: i64,
    /// Its kind (`MemberUp`).
    pub kind: String,
    /// What it is about (member address, singleton name, router path).
    pub subject: Option<String>,
    /// The event body as JSON text.
    pub detail: String,
    /// The reporting agent's address.
    pub node: String,
    /// The reporting agent's incarnation.
    pub incarnation: i64,
}

/// A stored dead letter.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct DeadLetterRow {
    /// Ascending id: the paging cursor.
    pub id: i64,
    /// When it happened.
    pub at_ms: i64,
    /// Where the message was going.
    pub recipient: String,
    /// Who sent it.
    pub sender: Option<String>,
    /// The message's type name.
    pub message_type: String,
    /// Why it was not delivered.
    pub reason: String,
    /// The reporting agent's address.
    pub node: String,
}

/// A stored dead letter with its reporter's incarnation, for the live stream.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct StreamDeadLetterRow {
    /// Ascending id: the stream position.
    pub id: i64,
    /// When it happened.
    pub at_ms: i64,
    /// Where the message was going.
    pub recipient: String,
    /// Who sent it.
    pub sender: Option<String>,
    /// The message's type name.
    pub message_type: String,
    /// Why it was not delivered.
    pub reason: String,
    /// The reporting agent's address.
    pub node: String,
    /// The reporting agent's incarnation.
    pub incarnation: i64,
}

/// Where a cluster's live stream stands: the last event and dead-letter ids delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamPosition {
    /// The last event id (0: none).
    pub event_id: i64,
    /// The last dead-letter id (0: none).
    pub dead_letter_id: i64,
}

/// A cluster's current state and the stream position it is current at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSnapshot {
    /// The cluster (leader as of the snapshot).
    pub cluster: ClusterRow,
    /// Its members (removed ones included).
    pub members: Vec<MemberRow>,
    /// Events and dead letters after this position are not in the snapshot.
    pub position: StreamPosition,
}

/// Dead letters of one recipient and reason.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct DeadLetterGroup {
    /// Where the messages were going.
    pub recipient: String,
    /// Why they were not delivered.
    pub reason: String,
    /// How many.
    pub count: i64,
    /// When the newest of them happened.
    pub last_ms: i64,
}

/// Dead letters in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromRow)]
pub struct MinuteCount {
    /// Start of the minute.
    pub minute_ms: i64,
    /// How many.
    pub count: i64,
}

/// A singleton's current host and lease.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct SingletonRow {
    /// Its name.
    pub name: String,
    /// The role hosts carry.
    pub role: Option<String>,
    /// Where the instance runs, if anywhere.
    pub host: Option<String>,
    /// Since when.
    pub host_at_ms: i64,
    /// The lease's name.
    pub lease: Option<String>,
    /// Who holds the lease.
    pub lease_holder: Option<String>,
}

/// A router's routees.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct RouterRow {
    /// Its path.
    pub path: String,
    /// Its strategy.
    pub strategy: String,
    /// The role routees carry.
    pub role: Option<String>,
    /// The routee actor's path on each member.
    pub routee_path: Option<String>,
    /// The routee set, as a JSON array.
    pub routees: String,
    /// When it last changed.
    pub updated_ms: i64,
}

/// One depth tick of one agent.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct DepthTickRow {
    /// When it was sampled.
    pub at_ms: i64,
    /// The reporting agent's address.
    pub node: String,
    /// The samples as JSON text (`[{path, router, depth}]`).
    pub samples: String,
}

/// Row counts of the history tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Batches stored.
    pub batches: i64,
    /// Events (not dead letters).
    pub events: i64,
    /// Dead letters.
    pub dead_letters: i64,
    /// Depth ticks.
    pub depth_ticks: i64,
}

/// What ingesting one batch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOutcome {
    /// The batch had been stored before; nothing was written.
    pub duplicate: bool,
    /// Events stored, dead letters included.
    pub stored_events: u64,
    /// Depth samples stored.
    pub stored_depth_samples: u64,
    /// Operations waiting for this agent's cluster, now marked delivered.
    pub operations: Vec<troupe_protocol::MemberOperation>,
}

/// The current incarnation of each address among `rows` (sorted by address), by address.
///
/// A new incarnation joins at an address only once the old one is removed or being removed, so
/// the current one is a not-removed incarnation if there is one, then the one the server heard
/// of last, then the less advanced status, then the higher uid. Older incarnations are gone
/// from the cluster whatever their last reported status (their removal may never be reported).
#[must_use]
pub fn current_incarnations(rows: Vec<MemberRow>) -> Vec<MemberRow> {
    let key = |m: &MemberRow| {
        (
            m.status != "removed",
            m.first_seen_ms,
            std::cmp::Reverse(m.status_rank),
            m.uid,
        )
    };
    let mut current: Vec<MemberRow> = Vec::new();
    for row in rows {
        match current.last_mut() {
            Some(last) if last.address == row.address => {
                if key(&row) > key(last) {
                    *last = row;
                }
            }
            _ => current.push(row),
        }
    }
    current
}

/// A JSON text column holding a list of strings (roles, observers, routees) as a list; empty
/// when malformed.
#[must_use]
pub fn string_list(json: &str) -> Vec<String> {
    serde_json::from_str(json).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{AgentRow, SILENT_HEALTH};

    fn agent(last_report_ms: i64, health: Option<&str>) -> AgentRow {
        AgentRow {
            id: 1,
            node: "a:1".to_owned(),
            incarnation: 1,
            meta_node: None,
            first_seen_ms: 0,
            last_report_ms,
            last_sent_ms: last_report_ms,
            last_sequence: 1,
            health: health.map(str::to_owned),
            dropped_membership: 0,
            dropped_singleton: 0,
            dropped_router: 0,
            dropped_dead_letters: 0,
            dropped_health: 0,
            dropped_depth_samples: 0,
            dropped_spool_batches: 0,
            clock_skew_ms: 0,
        }
    }

    #[test]
    fn an_agent_is_silent_only_past_the_limit_and_keeps_its_reported_health() {
        let row = agent(100_000, Some("ready"));
        assert_eq!(row.health_at(100_000 + 15_000, 15_000), Some("ready"));
        assert_eq!(row.health_at(100_000 + 15_001, 15_000), Some(SILENT_HEALTH));
        assert!(!row.silent_at(115_000, 15_000) && row.silent_at(115_001, 15_000));
        assert_eq!(row.health.as_deref(), Some("ready"), "the row is untouched");
        // A report from "the future" (server clocks stepping back) is not silence.
        assert_eq!(row.health_at(90_000, 15_000), Some("ready"));
        // Silent before any health report: still unknown; reporting without health: none.
        assert_eq!(
            agent(0, None).health_at(20_000, 15_000),
            Some(SILENT_HEALTH)
        );
        assert_eq!(agent(10_000, None).health_at(20_000, 15_000), None);
        assert!(!agent(i64::MIN, None).silent_at(i64::MIN, 0));
        assert!(agent(i64::MIN, None).silent_at(i64::MAX, i64::MAX - 1));
    }
}
