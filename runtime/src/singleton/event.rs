//! What a singleton manager tells the control plane: [`SingletonEvent`]s on the system event
//! stream (`system.event_stream().subscribe::<SingletonEvent>()`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::Address;
use crate::dead_letter::DeadLetterReason;
use crate::lease::FencingToken;

/// One step in the life of a singleton, as this node's manager saw it. Every variant names the
/// singleton (`type_name`) and the node whose manager published it (`node`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SingletonEvent {
    /// This node's view elects a (new) host — possibly another node, or none.
    HostElected {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// The elected host.
        host: Option<Address>,
    },
    /// This node is about to host and asked its peers to step down.
    HandOverStarted {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// The peers asked.
        peers: Vec<Address>,
    },
    /// Every asked peer acknowledged (or left): nobody else hosts.
    HandOverCompleted {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// How long the round took.
        waited: Duration,
    },
    /// The hand-over timeout passed with peers still silent; this node hosts anyway, without
    /// proof that nobody else does.
    HandOverTimedOut {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// The peers that never acknowledged.
        silent_peers: Vec<Address>,
    },
    /// The instance was spawned on this node.
    InstanceStarted {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
    },
    /// The instance on this node terminated.
    InstanceStopped {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// Why it stopped.
        reason: StopReason,
    },
    /// The instance was spawned again after it died unexpectedly.
    InstanceRestarted {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
    },
    /// This node acquired the singleton's lease.
    LeaseAcquired {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// The grant's fencing token.
        token: FencingToken,
    },
    /// This node lost the singleton's lease (revoked, or renewal failed).
    LeaseLost {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// The lost grant's fencing token.
        token: FencingToken,
    },
    /// This node released the singleton's lease.
    LeaseReleased {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
    },
    /// Messages started waiting for an instance on this node.
    MessagesHeld {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
    },
    /// Held messages were delivered to the new instance, in send order.
    MessagesFlushed {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// How many.
        count: usize,
    },
    /// Messages for the singleton went to dead letters on this node.
    MessagesDeadLettered {
        /// The singleton.
        type_name: Arc<str>,
        /// This node.
        node: Address,
        /// How many.
        count: usize,
        /// Why.
        reason: DeadLetterCause,
    },
}

impl SingletonEvent {
    /// The singleton the event is about.
    #[must_use]
    pub fn type_name(&self) -> &str {
        match self {
            Self::HostElected { type_name, .. }
            | Self::HandOverStarted { type_name, .. }
            | Self::HandOverCompleted { type_name, .. }
            | Self::HandOverTimedOut { type_name, .. }
            | Self::InstanceStarted { type_name, .. }
            | Self::InstanceStopped { type_name, .. }
            | Self::InstanceRestarted { type_name, .. }
            | Self::LeaseAcquired { type_name, .. }
            | Self::LeaseLost { type_name, .. }
            | Self::LeaseReleased { type_name, .. }
            | Self::MessagesHeld { type_name, .. }
            | Self::MessagesFlushed { type_name, .. }
            | Self::MessagesDeadLettered { type_name, .. } => type_name,
        }
    }

    /// The node whose manager published it.
    #[must_use]
    pub fn node(&self) -> &Address {
        match self {
            Self::HostElected { node, .. }
            | Self::HandOverStarted { node, .. }
            | Self::HandOverCompleted { node, .. }
            | Self::HandOverTimedOut { node, .. }
            | Self::InstanceStarted { node, .. }
            | Self::InstanceStopped { node, .. }
            | Self::InstanceRestarted { node, .. }
            | Self::LeaseAcquired { node, .. }
            | Self::LeaseLost { node, .. }
            | Self::LeaseReleased { node, .. }
            | Self::MessagesHeld { node, .. }
            | Self::MessagesFlushed { node, .. }
            | Self::MessagesDeadLettered { node, .. } => node,
        }
    }

    /// The variant's name (`HandOverTimedOut`), as the control plane files it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::HostElected { .. } => "HostElected",
            Self::HandOverStarted { .. } => "HandOverStarted",
            Self::HandOverCompleted { .. } => "HandOverCompleted",
            Self::HandOverTimedOut { .. } => "HandOverTimedOut",
            Self::InstanceStarted { .. } => "InstanceStarted",
            Self::InstanceStopped { .. } => "InstanceStopped",
            Self::InstanceRestarted { .. } => "InstanceRestarted",
            Self::LeaseAcquired { .. } => "LeaseAcquired",
            Self::LeaseLost { .. } => "LeaseLost",
            Self::LeaseReleased { .. } => "LeaseReleased",
            Self::MessagesHeld { .. } => "MessagesHeld",
            Self::MessagesFlushed { .. } => "MessagesFlushed",
            Self::MessagesDeadLettered { .. } => "MessagesDeadLettered",
        }
    }
}

/// Why an instance stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// This node's view elects another host.
    HostMoved,
    /// A peer sorting before this node asked it to step down.
    HandedOver,
    /// The lease was lost; the instance was stopped before re-acquiring.
    LeaseLost,
    /// `ClusterSingleton::get(&cluster).stop(..)` stopped this node's manager.
    ManagerStopped,
    /// The instance stopped on its own (`stop_self`, or its supervisor gave up).
    Unexpected,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HostMoved => "host moved",
            Self::HandedOver => "handed over",
            Self::LeaseLost => "lease lost",
            Self::ManagerStopped => "manager stopped",
            Self::Unexpected => "stopped unexpectedly",
        })
    }
}

/// Why singleton messages became dead letters on a manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterCause {
    /// The hold buffer was full.
    HoldFull,
    /// A message was held for the maximum time and no instance spawned.
    HoldExpired,
    /// This manager opted out of hosting (`restart_on_termination(false)` after its instance
    /// stopped), or is being stopped: it has no prospect of hosting.
    NotHosting,
    /// This node runs no manager (only a proxy), yet was routed a message as the host.
    NoManager,
    /// The message could not be decoded.
    Undecodable,
}

impl From<DeadLetterCause> for DeadLetterReason {
    fn from(cause: DeadLetterCause) -> Self {
        match cause {
            DeadLetterCause::HoldFull => Self::HoldFull,
            DeadLetterCause::HoldExpired => Self::HoldExpired,
            DeadLetterCause::NotHosting => Self::NotHosting,
            DeadLetterCause::NoManager => Self::NoManager,
            DeadLetterCause::Undecodable => Self::Undecodable,
        }
    }
}

impl fmt::Display for DeadLetterCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HoldFull => "hold buffer full",
            Self::HoldExpired => "held too long without an instance",
            Self::NotHosting => "manager does not host",
            Self::NoManager => "no manager on the elected host",
            Self::Undecodable => "undecodable",
        })
    }
}
