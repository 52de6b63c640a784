//! Cluster-singleton events: election, hand-over, instance lifecycle, lease, held messages.
//!
//! Every event names its singleton (`singleton`, the manager's type name) and the role it is
//! restricted to, so several singletons of one cluster keep separate histories.

use serde::{Deserialize, Serialize};

/// `SingletonHostElected`: this node's manager computed a (new) host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SingletonHostElected {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The elected host's address.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub host: String,
    /// The host before, if one was known.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub previous_host: Option<String>,
}

/// `SingletonHandOverStarted`: the new host asked the eligible peers to stop their instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HandOverStarted {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The node taking over (the reporting node).
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub new_host: String,
    /// The peers it waits for.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub peers: Vec<String>,
}

/// `SingletonHandOverCompleted`: every peer acknowledged; the new instance may start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HandOverCompleted {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The node taking over.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub new_host: String,
    /// From the first request to the last acknowledgment.
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub duration_ms: u64,
}

/// `SingletonHandOverTimedOut`: `hand_over_timeout` passed; the node hosts anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HandOverTimedOut {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The node taking over.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub new_host: String,
    /// The peers that never acknowledged.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub silent_peers: Vec<String>,
    /// From the first request until it gave up waiting.
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub duration_ms: u64,
}

/// `SingletonStarted`, `SingletonStopped`, `SingletonRestarted`: the instance on the
/// reporting node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SingletonInstance {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The node running (or having run) the instance.
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub host: String,
    /// For a restart: the backoff before the respawn.
    #[serde(default, with = "crate::wire::option_u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::wire::schema::U64Input>))]
    pub backoff_ms: Option<u64>,
    /// Why it stopped or restarted, when known; longer than 1024 bytes, it is stored
    /// shortened to 1024 and marked.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `LeaseAcquired`, `LeaseLost`, `LeaseReleased`: the singleton's lease on the reporting node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseChange {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// The lease's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub lease: String,
    /// Who holds it after the change (`None` once released or lost).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub holder: Option<String>,
    /// Why it was lost, when known; longer than 1024 bytes, it is stored shortened to 1024
    /// and marked.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `SingletonMessagesHeld`, `SingletonMessagesFlushed`, `SingletonMessagesDeadLettered`:
/// messages a manager without an instance held, later flushed in send order, or gave up on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SingletonMessages {
    /// The singleton's name.
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub singleton: String,
    /// The role hosts must carry, if any.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 128))]
    pub role: Option<String>,
    /// How many messages.
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub count: u64,
}
