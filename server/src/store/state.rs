//! What a batch changes in the "current state" tables, computed without a database.
//!
//! # Ordering
//! Agents report the same cluster change several times (every node observes it) and batches
//! arrive out of order, so every change carries the event time and the SQL applies it only if
//! it is not older than what is stored (`stored_ms <= at_ms`). Within one batch, later events
//! win ties.
//!
//! # Clocks
//! The server does not trust a reporter's clock alone. Event times later than the receive
//! time plus the allowed skew ([`clamp_times`], `--max-clock-skew-ms`) are stored as the
//! receive time. A current-state value remembers the agent incarnation and batch sequence that
//! set it: a later batch of the same agent replaces it whatever its times say (an agent's own
//! reports are ordered by its sequence), a report of another agent when its time is not older.
//!
//! # Incarnations
//! Member state is kept per incarnation (address and uid): a restarted process at the same
//! `host:port` is another member, and an event about the old incarnation (its removal, its
//! reachability) never touches the new one's row. A member's status only moves forward in its
//! lifecycle ([`status_rank`], the order gossip merges statuses in), so reports arriving in
//! any order, from any reporter, end at the most advanced status reported; among reports of
//! the same status the earliest time is kept as "since when".

use troupe_protocol::{AgentIdentity, EventBody, MemberChange, MemberStatus, ReportBatch};

/// One change to the current-state tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StateChange {
    /// A member incarnation's status (and roles) changed.
    MemberStatus {
        at_ms: i64,
        address: String,
        uid: i64,
        status: &'static str,
        /// The status's place in the lifecycle (see [`status_rank`]).
        rank: i64,
        roles: String,
    },
    /// A member incarnation's reachability changed.
    Reachability {
        at_ms: i64,
        address: String,
        uid: i64,
        status: &'static str,
        rank: i64,
        roles: String,
        reachable: bool,
        observers: String,
    },
    /// The cluster's leader changed.
    Leader { at_ms: i64, leader: Option<String> },
    /// A singleton instance started (or restarted) on `host`.
    SingletonHosted {
        at_ms: i64,
        singleton: String,
        role: Option<String>,
        host: String,
    },
    /// A singleton instance stopped on `host`; the singleton has no host unless another
    /// started since.
    SingletonStopped {
        at_ms: i64,
        singleton: String,
        role: Option<String>,
        host: String,
    },
    /// A singleton's lease changed hands (`holder` `None`: nobody holds it).
    Lease {
        at_ms: i64,
        singleton: String,
        role: Option<String>,
        lease: String,
        holder: Option<String>,
    },
    /// A router started or its routees changed.
    Router {
        at_ms: i64,
        path: String,
        strategy: &'static str,
        role: Option<String>,
        routee_path: Option<String>,
        routees: Option<String>,
    },
    /// The reporting agent's health changed.
    Health { at_ms: i64, health: &'static str },
}

/// `batch` with every event and depth-tick time later than `received_ms + max_ahead_ms`
/// clamped to `received_ms` (a clock ahead of the server's by more than the allowed skew): a
/// report dated in the future can never outrank the reports that follow it. Borrowed when no
/// time needs clamping.
pub(crate) fn clamp_times(
    batch: &ReportBatch,
    received_ms: i64,
    max_ahead_ms: i64,
) -> std::borrow::Cow<'_, ReportBatch> {
    let limit = received_ms.saturating_add(max_ahead_ms);
    let ahead = batch.events.iter().any(|e| e.at_ms > limit)
        || batch.depth_samples.iter().any(|t| t.at_ms > limit);
    if !ahead {
        return std::borrow::Cow::Borrowed(batch);
    }
    let mut clamped = batch.clone();
    for event in &mut clamped.events {
        if event.at_ms > limit {
            event.at_ms = received_ms;
        }
    }
    for tick in &mut clamped.depth_samples {
        if tick.at_ms > limit {
            tick.at_ms = received_ms;
        }
    }
    std::borrow::Cow::Owned(clamped)
}

/// The state changes in `batch`, in batch order.
///
/// Member status, reachability, leader and health changes overwrite whole values, so only the
/// last one per member (or per cluster, per agent) in a batch is kept: a busy batch costs one
/// upsert per member, not one per event. Singleton and router changes merge fields or depend
/// on the stored row, so all of them are kept.
pub(crate) fn state_changes(batch: &ReportBatch) -> Vec<StateChange> {
    let reporter = &batch.identity;
    let all: Vec<StateChange> = batch
        .events
        .iter()
        .filter_map(|event| change_for(reporter, event.at_ms, &event.body))
        .collect();
    // Walk backwards so the last change per key is the one seen first.
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<StateChange> = all
        .iter()
        .rev()
        .filter(|change| change.overwrite_key().is_none_or(|key| seen.insert(key)))
        .cloned()
        .collect();
    kept.reverse();
    // Take row locks in one global order (table, then key) so that concurrent batches
    // touching the same rows wait for each other instead of deadlocking; the sort is stable,
    // so changes to one row keep their batch order.
    kept.sort_by(|a, b| a.lock_order().cmp(&b.lock_order()));
    kept
}

/// Which value a change overwrites whole, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum OverwriteKey<'a> {
    MemberStatus(&'a str, i64),
    Reachability(&'a str, i64),
    Leader,
    Health,
}

impl StateChange {
    /// The row this change locks, as (table rank, key).
    fn lock_order(&self) -> (u8, &str) {
        match self {
            Self::Health { .. } => (0, ""),
            Self::Leader { .. } => (1, ""),
            Self::MemberStatus { address, .. } | Self::Reachability { address, .. } => (2, address),
            Self::SingletonHosted { singleton, .. }
            | Self::SingletonStopped { singleton, .. }
            | Self::Lease { singleton, .. } => (3, singleton),
            Self::Router { path, .. } => (4, path),
        }
    }

    fn overwrite_key(&self) -> Option<OverwriteKey<'_>> {
        match self {
            Self::MemberStatus { address, uid, .. } => {
                Some(OverwriteKey::MemberStatus(address, *uid))
            }
            Self::Reachability { address, uid, .. } => {
                Some(OverwriteKey::Reachability(address, *uid))
            }
            Self::Leader { .. } => Some(OverwriteKey::Leader),
            Self::Health { .. } => Some(OverwriteKey::Health),
            _ => None,
        }
    }
}

fn roles_json(change: &MemberChange) -> String {
    serde_json::to_string(&change.member.roles).unwrap_or_else(|_| "[]".to_owned())
}

/// A status's place in the member lifecycle: joining 0, weakly-up 1, up 2, leaving 3,
/// exiting 4, down 5, removed 6. A stored status is replaced only by a higher one.
pub(crate) fn status_rank(status: MemberStatus) -> i64 {
    MemberStatus::ALL
        .iter()
        .position(|s| *s == status)
        .unwrap_or_default() as i64
}

fn member_status(at_ms: i64, change: &MemberChange) -> StateChange {
    StateChange::MemberStatus {
        at_ms,
        address: change.member.address.clone(),
        uid: change.member.uid as i64,
        status: change.member.status.as_str(),
        rank: status_rank(change.member.status),
        roles: roles_json(change),
    }
}

fn reachability(
    reporter: &AgentIdentity,
    at_ms: i64,
    change: &MemberChange,
    reachable: bool,
) -> StateChange {
    // With no observers named, the verdict is the reporting node's own.
    let observers = if reachable {
        Vec::new()
    } else if change.observers.is_empty() {
        vec![reporter.node.clone()]
    } else {
        change.observers.clone()
    };
    StateChange::Reachability {
        at_ms,
        address: change.member.address.clone(),
        uid: change.member.uid as i64,
        status: change.member.status.as_str(),
        rank: status_rank(change.member.status),
        roles: roles_json(change),
        reachable,
        observers: serde_json::to_string(&observers).unwrap_or_else(|_| "[]".to_owned()),
    }
}

fn change_for(reporter: &AgentIdentity, at_ms: i64, body: &EventBody) -> Option<StateChange> {
    Some(match body {
        EventBody::MemberJoined(c)
        | EventBody::MemberWeaklyUp(c)
        | EventBody::MemberUp(c)
        | EventBody::MemberLeft(c)
        | EventBody::MemberExited(c)
        | EventBody::MemberDown(c)
        | EventBody::MemberRemoved(c)
        | EventBody::SelfUp(c) => member_status(at_ms, c),
        EventBody::MemberUnreachable(c) => reachability(reporter, at_ms, c, false),
        EventBody::MemberReachable(c) => reachability(reporter, at_ms, c, true),
        EventBody::LeaderChanged(c) => StateChange::Leader {
            at_ms,
            leader: c.leader.clone(),
        },
        EventBody::SingletonStarted(e) | EventBody::SingletonRestarted(e) => {
            StateChange::SingletonHosted {
                at_ms,
                singleton: e.singleton.clone(),
                role: e.role.clone(),
                host: e.host.clone(),
            }
        }
        EventBody::SingletonStopped(e) => StateChange::SingletonStopped {
            at_ms,
            singleton: e.singleton.clone(),
            role: e.role.clone(),
            host: e.host.clone(),
        },
        EventBody::LeaseAcquired(e) => StateChange::Lease {
            at_ms,
            singleton: e.singleton.clone(),
            role: e.role.clone(),
            lease: e.lease.clone(),
            holder: Some(e.holder.clone().unwrap_or_else(|| reporter.node.clone())),
        },
        EventBody::LeaseLost(e) | EventBody::LeaseReleased(e) => StateChange::Lease {
            at_ms,
            singleton: e.singleton.clone(),
            role: e.role.clone(),
            lease: e.lease.clone(),
            holder: e.holder.clone(),
        },
        EventBody::RouterStarted(e) => StateChange::Router {
            at_ms,
            path: e.router.clone(),
            strategy: e.strategy.as_str(),
            role: e.role.clone(),
            routee_path: Some(e.routee_path.clone()),
            routees: None,
        },
        EventBody::RouteesChanged(e) => StateChange::Router {
            at_ms,
            path: e.router.clone(),
            strategy: e.strategy.as_str(),
            role: None,
            routee_path: None,
            routees: Some(serde_json::to_string(&e.routees).unwrap_or_else(|_| "[]".to_owned())),
        },
        EventBody::AgentHealthChanged(h) => StateChange::Health {
            at_ms,
            health: h.health.as_str(),
        },
        EventBody::DirectoryHostEvicted(_)
        | EventBody::SingletonHostElected(_)
        | EventBody::SingletonHandOverStarted(_)
        | EventBody::SingletonHandOverCompleted(_)
        | EventBody::SingletonHandOverTimedOut(_)
        | EventBody::SingletonMessagesHeld(_)
        | EventBody::SingletonMessagesFlushed(_)
        | EventBody::SingletonMessagesDeadLettered(_)
        | EventBody::DeadLetter(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_protocol::{AgentMeta, Event, LeaseChange, MemberInfo, PROTOCOL_VERSION};

    fn batch(events: Vec<EventBody>) -> ReportBatch {
        ReportBatch {
            version: PROTOCOL_VERSION,
            identity: AgentIdentity {
                cluster: "c".into(),
                node: "a:1".into(),
                incarnation: 1,
                meta: AgentMeta::default(),
                cluster_identity: None,
            },
            sequence: 1,
            sent_at_ms: 0,
            events: events
                .into_iter()
                .enumerate()
                .map(|(i, body)| Event {
                    at_ms: i as i64,
                    body,
                })
                .collect(),
            depth_samples: vec![],
            dropped: Default::default(),
        }
    }

    fn change(status: MemberStatus) -> MemberChange {
        MemberChange {
            member: MemberInfo {
                address: "b:1".into(),
                uid: 2,
                status,
                roles: vec!["r".into()],
            },
            previous_status: None,
            observers: vec![],
        }
    }

    #[test]
    fn unreachable_without_named_observers_is_the_reporters_verdict() {
        let changes = state_changes(&batch(vec![EventBody::MemberUnreachable(change(
            MemberStatus::Up,
        ))]));
        let [
            StateChange::Reachability {
                observers,
                reachable,
                ..
            },
        ] = changes.as_slice()
        else {
            panic!("{changes:?}");
        };
        assert!(!reachable);
        assert_eq!(observers, r#"["a:1"]"#);
    }

    #[test]
    fn acquired_lease_without_holder_is_held_by_the_reporter_and_hand_over_steps_change_no_state() {
        let lease = LeaseChange {
            singleton: "s".into(),
            role: None,
            lease: "l".into(),
            holder: None,
            reason: None,
        };
        let changes = state_changes(&batch(vec![
            EventBody::LeaseAcquired(lease),
            EventBody::SingletonMessagesHeld(troupe_protocol::SingletonMessages {
                singleton: "s".into(),
                role: None,
                count: 1,
            }),
        ]));
        assert_eq!(changes.len(), 1);
        assert!(matches!(&changes[0], StateChange::Lease { holder: Some(h), .. } if h == "a:1"));
    }

    #[test]
    fn only_the_last_status_of_each_member_in_a_batch_is_applied() {
        let mut other = change(MemberStatus::Up);
        other.member.address = "c:1".into();
        let changes = state_changes(&batch(vec![
            EventBody::MemberJoined(change(MemberStatus::Joining)),
            EventBody::MemberUp(other),
            EventBody::MemberUp(change(MemberStatus::Up)),
            EventBody::MemberUnreachable(change(MemberStatus::Up)),
            EventBody::MemberLeft(change(MemberStatus::Leaving)),
        ]));
        let applied: Vec<_> = changes
            .iter()
            .map(|c| match c {
                StateChange::MemberStatus {
                    address,
                    status,
                    at_ms,
                    ..
                } => (address.as_str(), *status, *at_ms),
                StateChange::Reachability { address, at_ms, .. } => {
                    (address.as_str(), "unreachable", *at_ms)
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            applied,
            [
                ("b:1", "unreachable", 3),
                ("b:1", "leaving", 4),
                ("c:1", "up", 1),
            ],
            "the last change per member, in lock order, batch order within a member"
        );
    }
}
