//! The journal behind `GET /cluster/domain-events`: this node's cluster events in a bounded
//! ring, each with an id to resume from, and the membership they add up to (the snapshot).
//!
//! # Ids
//! Each recorded event gets `<incarnation>-<sequence>`: this node's incarnation (a restarted
//! agent is a new one) and a sequence counted from 1 in this process. A stream sends the id
//! with every event; the snapshot carries the id of the last event it includes, so resuming
//! from it continues exactly after it.
//!
//! # Resume (`Last-Event-ID`)
//! - Still in the ring: every event after it, then the live ones; none missed, none repeated.
//! - Fallen out of the ring (more than its capacity happened since), or an id of another
//!   incarnation of this node: the stream cannot tell what was missed, so it opens with a
//!   `CurrentClusterState` snapshot (whatever `snapshot` says) and continues after it. A client
//!   that treats a snapshot as "replace what you know" stays exact.
//! - An id of this incarnation beyond its last event, or text of another form: 400.
//!
//! A client that reads so slowly that the ring overwrites what it has not been sent yet is
//! treated the same way: a snapshot, then on from there.
//!
//! # Event types
//! Akka's names: `MemberJoined`, `MemberWeaklyUp`, `MemberUp`, `MemberLeft`, `MemberExited`,
//! `MemberDowned`, `MemberRemoved`, `UnreachableMember`, `ReachableMember`, `LeaderChanged`
//! (the runtime's `SelfUp` has no Akka name and is not sent). Data is the server's domain-event
//! shape: `{"type", "member": {node, nodeUid, status, roles}}`, `previousStatus` on
//! `MemberRemoved`, `{"type": "LeaderChanged", "address"}`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde_json::{Value, json};
use troupe::cluster::{ClusterEvent, ClusterView, Member};
use troupe::{Address, UniqueAddress};

use super::cluster::{akka_status, member_json};

/// How many events the ring keeps by default.
pub(crate) const RING_CAPACITY: usize = 1024;

/// The name of the snapshot event.
pub(crate) const SNAPSHOT: &str = "CurrentClusterState";

/// Every event type a stream sends (and `type` accepts).
pub(crate) const EVENT_TYPES: [&str; 10] = [
    "MemberJoined",
    "MemberWeaklyUp",
    "MemberUp",
    "MemberLeft",
    "MemberExited",
    "MemberDowned",
    "MemberRemoved",
    "UnreachableMember",
    "ReachableMember",
    "LeaderChanged",
];

/// Akka's name of `event`; `None` for what Akka does not name (`SelfUp`).
#[must_use]
pub(crate) fn akka_type(event: &ClusterEvent) -> Option<&'static str> {
    Some(match event {
        ClusterEvent::MemberJoined(_) => "MemberJoined",
        ClusterEvent::MemberWeaklyUp(_) => "MemberWeaklyUp",
        ClusterEvent::MemberUp(_) => "MemberUp",
        ClusterEvent::MemberLeft(_) => "MemberLeft",
        ClusterEvent::MemberExited(_) => "MemberExited",
        ClusterEvent::MemberDown(_) => "MemberDowned",
        ClusterEvent::MemberRemoved { .. } => "MemberRemoved",
        ClusterEvent::MemberUnreachable(_) => "UnreachableMember",
        ClusterEvent::MemberReachable(_) => "ReachableMember",
        ClusterEvent::LeaderChanged(_) => "LeaderChanged",
        ClusterEvent::SelfUp(_) => return None,
    })
}

/// The JSON `data:` of `event` (Akka's shape), with its type name.
fn event_data(event: &ClusterEvent) -> Option<(&'static str, Value)> {
    let name = akka_type(event)?;
    let data = match event {
        ClusterEvent::LeaderChanged(leader) => json!({
            "type": name,
            "address": leader.as_ref().map(ToString::to_string),
        }),
        ClusterEvent::MemberRemoved { member, previous } => json!({
            "type": name,
            "member": member_json(member),
            "previousStatus": akka_status(*previous),
        }),
        ClusterEvent::MemberJoined(member)
        | ClusterEvent::MemberWeaklyUp(member)
        | ClusterEvent::MemberUp(member)
        | ClusterEvent::MemberLeft(member)
        | ClusterEvent::MemberExited(member)
        | ClusterEvent::MemberDown(member)
        | ClusterEvent::MemberUnreachable(member)
        | ClusterEvent::MemberReachable(member)
        | ClusterEvent::SelfUp(member) => json!({ "type": name, "member": member_json(member) }),
    };
    Some((name, data))
}

/// Where a stream is: after the event with this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct EventId {
    /// The node's incarnation that recorded it.
    pub incarnation: u64,
    /// Its sequence in that incarnation (0: before the first event).
    pub sequence: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.incarnation, self.sequence)
    }
}

/// A `Last-Event-ID` that is not of the form a stream sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not an event id this stream sends: the form is <incarnation>-<sequence> \
     (two decimal numbers, as in `15365700884095386388-17`)"
)]
pub(crate) struct BadEventId(pub String);

impl FromStr for EventId {
    type Err = BadEventId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadEventId(text.to_owned());
        let (incarnation, sequence) = text.trim().split_once('-').ok_or_else(bad)?;
        let number = |part: &str| {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            part.parse::<u64>().map_err(|_| bad())
        };
        Ok(Self {
            incarnation: number(incarnation)?,
            sequence: number(sequence)?,
        })
    }
}

/// The `type` filter: the event types a stream sends (all when none are named).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TypeFilter {
    only: BTreeSet<&'static str>,
}

impl TypeFilter {
    /// The filter of the `type` values (repeatable, each also comma-separated), or the
    /// message naming the unknown or empty one and the allowed values.
    pub(crate) fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut only = BTreeSet::new();
        for value in values {
            for item in value.split(',') {
                let known = EVENT_TYPES.iter().find(|t| **t == item).ok_or_else(|| {
                    let what = if item.is_empty() {
                        format!("`type` has an empty value (`{value}`)")
                    } else {
                        format!("unknown event type `{item}`")
                    };
                    format!("{what}; known: {}", EVENT_TYPES.join(", "))
                })?;
                only.insert(*known);
            }
        }
        Ok(Self { only })
    }

    /// Whether a stream with this filter sends events of type `name`.
    #[must_use]
    pub(crate) fn accepts(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.contains(name)
    }
}

/// One recorded event, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Its sequence in this incarnation.
    pub sequence: u64,
    /// Akka's type name, the SSE `event:`.
    pub event: &'static str,
    /// The JSON `data:`.
    pub data: Arc<str>,
}

/// The membership the recorded events add up to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Membership {
    /// Members (not removed), by unique address.
    pub members: BTreeMap<UniqueAddress, Member>,
    /// Members some observer calls unreachable.
    pub unreachable: BTreeSet<UniqueAddress>,
    /// The leader.
    pub leader: Option<Address>,
}

impl Membership {
    /// The membership of `view`.
    #[must_use]
    pub(crate) fn of(view: &ClusterView) -> Self {
        Self {
            members: view
                .members
                .iter()
                .map(|m| (m.node.clone(), m.clone()))
                .collect(),
            unreachable: view.unreachable.clone(),
            leader: view.leader.clone(),
        }
    }

    /// The membership after `event`.
    pub(crate) fn apply(&mut self, event: &ClusterEvent) {
        match event {
            ClusterEvent::MemberJoined(member)
            | ClusterEvent::MemberWeaklyUp(member)
            | ClusterEvent::MemberUp(member)
            | ClusterEvent::MemberLeft(member)
            | ClusterEvent::MemberExited(member)
            | ClusterEvent::MemberDown(member) => {
                self.members.insert(member.node.clone(), member.clone());
            }
            ClusterEvent::MemberRemoved { member, .. } => {
                self.members.remove(&member.node);
                self.unreachable.remove(&member.node);
            }
            ClusterEvent::MemberUnreachable(member) => {
                self.members.insert(member.node.clone(), member.clone());
                self.unreachable.insert(member.node.clone());
            }
            ClusterEvent::MemberReachable(member) => {
                self.members.insert(member.node.clone(), member.clone());
                self.unreachable.remove(&member.node);
            }
            ClusterEvent::LeaderChanged(leader) => self.leader.clone_from(leader),
            ClusterEvent::SelfUp(_) => {}
        }
    }
}

/// Where a new stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opening {
    /// Send the snapshot first (its id: the position).
    pub snapshot: bool,
    /// Why a resume fell back to the snapshot (a comment line for humans), if it did.
    pub fallback: Option<String>,
    /// The events to send before the live ones.
    pub replay: Vec<Recorded>,
    /// The sequence the stream is at once it has sent `replay` (the snapshot's position).
    pub position: u64,
}

/// A `Last-Event-ID` the journal refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResumeError {
    /// An id of this incarnation that no event has yet.
    #[error(
        "`Last-Event-ID` {id} is beyond the last event of this node ({last}): it was not sent by this stream"
    )]
    Ahead {
        /// The id given.
        id: EventId,
        /// The last event's id.
        last: EventId,
    },
}

/// The events after a position were overwritten before they were sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FellBehind {
    /// The oldest sequence the ring still holds.
    pub oldest: u64,
}

/// This node's recorded events and the membership they lead to.
#[derive(Debug, Clone)]
pub(crate) struct Journal {
    incarnation: u64,
    self_node: Address,
    capacity: usize,
    ring: VecDeque<Recorded>,
    last: u64,
    state: Membership,
}

impl Journal {
    /// A journal that starts from `view`, keeping at most `capacity` events (at least 1).
    #[must_use]
    pub(crate) fn new(self_node: &UniqueAddress, view: &ClusterView, capacity: usize) -> Self {
        Self {
            incarnation: self_node.incarnation,
            self_node: self_node.address.clone(),
            capacity: capacity.max(1),
            ring: VecDeque::new(),
            last: 0,
            state: Membership::of(view),
        }
    }

    /// Records `event` (folding it into the membership); its sequence, or `None` when it is
    /// not a domain event (`SelfUp`).
    pub(crate) fn record(&mut self, event: &ClusterEvent) -> Option<u64> {
        self.state.apply(event);
        let (name, data) = event_data(event)?;
        self.last += 1;
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        self.ring.push_back(Recorded {
            sequence: self.last,
            event: name,
            data: Arc::from(data.to_string()),
        });
        Some(self.last)
    }

    /// The sequence of the last recorded event (0: none yet).
    #[must_use]
    pub(crate) fn last(&self) -> u64 {
        self.last
    }

    /// The id of `sequence` in this incarnation.
    #[must_use]
    pub(crate) fn id(&self, sequence: u64) -> EventId {
        EventId {
            incarnation: self.incarnation,
            sequence,
        }
    }

    /// The membership as of the last recorded event.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn state(&self) -> &Membership {
        &self.state
    }

    /// Every event after `sequence`, or [`FellBehind`] when some of them are no longer kept.
    pub(crate) fn since(&self, sequence: u64) -> Result<Vec<Recorded>, FellBehind> {
        let oldest = self.ring.front().map_or(self.last + 1, |r| r.sequence);
        if sequence + 1 < oldest {
            return Err(FellBehind { oldest });
        }
        Ok(self
            .ring
            .iter()
            .filter(|r| r.sequence > sequence)
            .cloned()
            .collect())
    }

    /// Where a stream starts: after `resume` when given, else now (with the snapshot first
    /// when `snapshot`).
    pub(crate) fn open(
        &self,
        resume: Option<EventId>,
        snapshot: bool,
    ) -> Result<Opening, ResumeError> {
        let now = |fallback: Option<String>, snapshot: bool| Opening {
            snapshot,
            fallback,
            replay: Vec::new(),
            position: self.last,
        };
        let Some(id) = resume else {
            return Ok(now(None, snapshot));
        };
        if id.incarnation != self.incarnation {
            return Ok(now(
                Some(format!(
                    "Last-Event-ID {id} is of another incarnation of this node (now {}): current state first",
                    self.incarnation
                )),
                true,
            ));
        }
        if id.sequence > self.last {
            return Err(ResumeError::Ahead {
                id,
                last: self.id(self.last),
            });
        }
        match self.since(id.sequence) {
            Ok(replay) => Ok(Opening {
                snapshot: false,
                fallback: None,
                replay,
                position: self.last,
            }),
            Err(FellBehind { oldest }) => Ok(now(
                Some(format!(
                    "Last-Event-ID {id} has fallen out of the last {} events kept (the oldest is {}): current state first",
                    self.capacity,
                    self.id(oldest)
                )),
                true,
            )),
        }
    }

    /// The `CurrentClusterState` data as of the last event: members, unreachable members
    /// (with their observers as `observed_by` names them now), leader, this node.
    #[must_use]
    pub(crate) fn snapshot(&self, observed_by: &[(UniqueAddress, Vec<UniqueAddress>)]) -> Value {
        let unreachable: Vec<Value> = self
            .state
            .unreachable
            .iter()
            .map(|node| {
                let observers: Vec<String> = observed_by
                    .iter()
                    .find(|(subject, _)| subject == node)
                    .map(|(_, o)| o.iter().map(|o| o.address.to_string()).collect())
                    .unwrap_or_default();
                json!({ "node": node.address.to_string(), "observedBy": observers })
            })
            .collect();
        json!({
            "type": SNAPSHOT,
            "selfNode": self.self_node.to_string(),
            "members": self.state.members.values().map(member_json).collect::<Vec<_>>(),
            "unreachable": unreachable,
            "leader": self.state.leader.as_ref().map(ToString::to_string),
        })
    }
}

#[cfg(test)]
mod tests;
