//! The event envelope and the closed set of event kinds.
//!
//! One list below defines every kind: the serde tag of [`EventBody`], the fieldless
//! [`EventKind`] used in filters, and each kind's [`EventCategory`]; they cannot drift apart.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::dead_letter::DeadLetterEvent;
use crate::directory::HostEviction;
use crate::health::HealthChange;
use crate::membership::{LeaderChange, MemberChange};
use crate::router::{RouteesChange, RouterStarted};
use crate::singleton::{
    HandOverCompleted, HandOverStarted, HandOverTimedOut, LeaseChange, SingletonHostElected,
    SingletonInstance, SingletonMessages,
};

/// One thing that happened on the reporting node, and when.
///
/// On the wire the body's fields sit beside `at_ms`:
/// `{"at_ms":1700000000000,"kind":"MemberUp","member":{…},"previous_status":null,"observers":[]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    /// When it happened on the reporting node (Unix epoch milliseconds).
    #[cfg_attr(feature = "openapi", schema(minimum = -9223372036854775808i64, maximum = 9223372036854775807i64))]
    #[serde(deserialize_with = "crate::wire::i64_number::deserialize")]
    pub at_ms: i64,
    /// What happened.
    #[serde(flatten)]
    pub body: EventBody,
}

/// The concern an event belongs to; agents count drops per category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventCategory {
    /// Members and the leader.
    Membership,
    /// Cluster singletons, their hand-overs and leases.
    Singleton,
    /// Cluster routers and their routees.
    Router,
    /// Undeliverable messages.
    DeadLetter,
    /// The agent's own health.
    Health,
}

impl EventCategory {
    /// Every category.
    pub const ALL: [Self; 5] = [
        Self::Membership,
        Self::Singleton,
        Self::Router,
        Self::DeadLetter,
        Self::Health,
    ];

    /// The name used in APIs (`dead-letter`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Membership => "membership",
            Self::Singleton => "singleton",
            Self::Router => "router",
            Self::DeadLetter => "dead-letter",
            Self::Health => "health",
        }
    }
}

/// A `kind` string that names no event kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEventKind(pub String);

impl fmt::Display for UnknownEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown event kind `{}`; known kinds: ", self.0)?;
        for (i, kind) in EventKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownEventKind {}

macro_rules! event_kinds {
    ($( $(#[$doc:meta])* $kind:ident($payload:ty) => $category:ident, )*) => {
        /// What happened: one variant per event kind, tagged by `kind` on the wire.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(tag = "kind", rename_all = "PascalCase")]
        pub enum EventBody {
            $( $(#[$doc])* $kind($payload), )*
        }

        /// The kind of an event, without its payload: what filters and storage use.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventKind {
            $( $(#[$doc])* $kind, )*
        }

        impl EventKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [EventKind] = &[ $( EventKind::$kind, )* ];

            /// The wire name, equal to the serde tag (`MemberUp`).
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self { $( Self::$kind => stringify!($kind), )* }
            }

            /// The concern this kind belongs to.
            #[must_use]
            pub fn category(self) -> EventCategory {
                match self { $( Self::$kind => EventCategory::$category, )* }
            }
        }

        impl EventBody {
            /// This event's kind.
            #[must_use]
            pub fn kind(&self) -> EventKind {
                match self { $( Self::$kind(_) => EventKind::$kind, )* }
            }
        }
    };
}

event_kinds! {
    /// A member asked to join.
    MemberJoined(MemberChange) => Membership,
    /// A member was admitted while convergence was blocked.
    MemberWeaklyUp(MemberChange) => Membership,
    /// A member is up.
    MemberUp(MemberChange) => Membership,
    /// A member is leaving.
    MemberLeft(MemberChange) => Membership,
    /// A member has left and is about to be removed.
    MemberExited(MemberChange) => Membership,
    /// A member was declared down.
    MemberDown(MemberChange) => Membership,
    /// A member is gone (`previous_status` says what it was).
    MemberRemoved(MemberChange) => Membership,
    /// Some observer can no longer reach the member.
    MemberUnreachable(MemberChange) => Membership,
    /// Every observer reaches the member again.
    MemberReachable(MemberChange) => Membership,
    /// The leader changed.
    LeaderChanged(LeaderChange) => Membership,
    /// The reporting node became up.
    SelfUp(MemberChange) => Membership,
    /// A manager computed a new singleton host.
    SingletonHostElected(SingletonHostElected) => Singleton,
    /// The new host asked its peers to hand the singleton over.
    SingletonHandOverStarted(HandOverStarted) => Singleton,
    /// Every peer acknowledged the hand-over.
    SingletonHandOverCompleted(HandOverCompleted) => Singleton,
    /// The hand-over timed out; the node hosts anyway.
    SingletonHandOverTimedOut(HandOverTimedOut) => Singleton,
    /// The singleton instance started on the reporting node.
    SingletonStarted(SingletonInstance) => Singleton,
    /// The singleton instance stopped on the reporting node.
    SingletonStopped(SingletonInstance) => Singleton,
    /// The singleton instance died unexpectedly and is respawned.
    SingletonRestarted(SingletonInstance) => Singleton,
    /// The singleton's lease was acquired.
    LeaseAcquired(LeaseChange) => Singleton,
    /// The singleton's lease was lost.
    LeaseLost(LeaseChange) => Singleton,
    /// The singleton's lease was released.
    LeaseReleased(LeaseChange) => Singleton,
    /// A manager without an instance began holding messages.
    SingletonMessagesHeld(SingletonMessages) => Singleton,
    /// Held messages were flushed to the instance in send order.
    SingletonMessagesFlushed(SingletonMessages) => Singleton,
    /// Held messages went to dead letters (too many or held too long).
    SingletonMessagesDeadLettered(SingletonMessages) => Singleton,
    /// A cluster router started.
    RouterStarted(RouterStarted) => Router,
    /// A router's routee set changed.
    RouteesChanged(RouteesChange) => Router,
    /// A message could not be delivered.
    DeadLetter(DeadLetterEvent) => DeadLetter,
    /// The reporting agent's health changed.
    AgentHealthChanged(HealthChange) => Health,
    /// The leader released the directory claims of a removed or fenced member.
    DirectoryHostEvicted(HostEviction) => Membership,
}

impl EventBody {
    /// What the event is about, for indexing and filters: the member address, the leader,
    /// the singleton name, the router path or the dead letter's recipient. `None` for the
    /// reporting agent's own health, and for a leader change to nobody.
    #[must_use]
    pub fn subject(&self) -> Option<&str> {
        match self {
            Self::MemberJoined(c)
            | Self::MemberWeaklyUp(c)
            | Self::MemberUp(c)
            | Self::MemberLeft(c)
            | Self::MemberExited(c)
            | Self::MemberDown(c)
            | Self::MemberRemoved(c)
            | Self::MemberUnreachable(c)
            | Self::MemberReachable(c)
            | Self::SelfUp(c) => Some(&c.member.address),
            Self::LeaderChanged(c) => c.leader.as_deref(),
            Self::SingletonHostElected(e) => Some(&e.singleton),
            Self::SingletonHandOverStarted(e) => Some(&e.singleton),
            Self::SingletonHandOverCompleted(e) => Some(&e.singleton),
            Self::SingletonHandOverTimedOut(e) => Some(&e.singleton),
            Self::SingletonStarted(e) | Self::SingletonStopped(e) | Self::SingletonRestarted(e) => {
                Some(&e.singleton)
            }
            Self::LeaseAcquired(e) | Self::LeaseLost(e) | Self::LeaseReleased(e) => {
                Some(&e.singleton)
            }
            Self::SingletonMessagesHeld(e)
            | Self::SingletonMessagesFlushed(e)
            | Self::SingletonMessagesDeadLettered(e) => Some(&e.singleton),
            Self::RouterStarted(e) => Some(&e.router),
            Self::RouteesChanged(e) => Some(&e.router),
            Self::DeadLetter(e) => Some(&e.recipient),
            Self::AgentHealthChanged(_) => None,
            Self::DirectoryHostEvicted(e) => Some(&e.host),
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = UnknownEventKind;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| UnknownEventKind(name.to_owned()))
    }
}
