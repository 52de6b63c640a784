//! [`ClusterRouterEvent`]: what cluster routers publish on the system event stream for the
//! control plane — routee set changes, depth samples and messages they could not route.
//!
//! Subscribe with `system.event_stream().subscribe::<ClusterRouterEvent>()`. Events are
//! published by the router's node; a message that reached a routee node without an actor at
//! the routee path is a plain [`crate::DeadLetter`] on *that* node, not a router event.

use std::time::SystemTime;

use tokio::time::Instant;

use crate::Address;
use crate::dead_letter::DeadLetterReason;
use crate::path::ActorPath;
use crate::routing::RoutingStrategy;

/// One event of one cluster router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRouterEvent {
    /// A router started (and again after a restart).
    Started {
        /// The router.
        router: ActorPath,
        /// Its strategy.
        strategy: RoutingStrategy,
        /// The role routees must carry, if any.
        role: Option<String>,
        /// The routee path on each node.
        routee_path: String,
    },
    /// The routee set was derived anew and differs from the previous one (the first set, when
    /// the router starts, counts as a change from the empty set).
    RouteeSetChanged {
        /// The router.
        router: ActorPath,
        /// Its strategy.
        strategy: RoutingStrategy,
        /// The routee path on each node.
        routee_path: String,
        /// The nodes now routed to, address-ordered.
        routees: Vec<Address>,
        /// Nodes that joined the set.
        added: Vec<Address>,
        /// Nodes that left it.
        removed: Vec<Address>,
    },
    /// A depth agent reported a routee's mailbox depth to a smallest-mailbox router.
    DepthSample(DepthSample),
    /// The router could not hand a message on; it is also a [`crate::DeadLetter`].
    DeadLettered {
        /// The router.
        router: ActorPath,
        /// The Rust type name of the message.
        message_type: &'static str,
        /// The node it was meant for, when one had been chosen.
        routee: Option<Address>,
        /// Why (`NoRoutees` for an empty routee set).
        reason: DeadLetterReason,
    },
}

/// One mailbox depth reading as a smallest-mailbox router received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepthSample {
    /// The router that asked.
    pub router: ActorPath,
    /// The node that answered (the address its transport verified).
    pub node: Address,
    /// The routee path on that node.
    pub path: String,
    /// The routee's mailbox depth.
    pub depth: usize,
    /// When the reading arrived, on the runtime's clock (what the stale window is measured on).
    pub at: Instant,
    /// When the reading arrived, as wall-clock time (for reports).
    pub wall_clock: SystemTime,
}
