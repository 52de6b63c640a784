//! Cluster-router events: which routees a router sends to, and how it picks among them.

use serde::{Deserialize, Serialize};

/// How a router picks a routee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RoutingStrategy {
    /// Each routee in turn.
    RoundRobin,
    /// A random routee.
    Random,
    /// Rendezvous hashing on the message key.
    ConsistentHashing,
    /// The routee with the smallest known mailbox.
    SmallestMailbox,
    /// Every routee.
    Broadcast,
}

impl RoutingStrategy {
    /// The wire name (`smallest-mailbox`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::Random => "random",
            Self::ConsistentHashing => "consistent-hashing",
            Self::SmallestMailbox => "smallest-mailbox",
            Self::Broadcast => "broadcast",
        }
    }
}

/// `RouterStarted`: a router began on the reporting node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RouterStarted {
    /// The router's actor path.
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub router: String,
    /// Its strategy.
    pub strategy: RoutingStrategy,
    /// The role routees must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The path of the routee actor on each member.
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub routee_path: String,
}

/// `RouteesChanged`: the router re-derived its routee set after a membership change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RouteesChange {
    /// The router's actor path.
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub router: String,
    /// Its strategy.
    pub strategy: RoutingStrategy,
    /// The full routee set after the change, address-ordered (full actor paths).
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub routees: Vec<String>,
}
