//! Directory events: what happened to the claims of the actor directory.

use serde::{Deserialize, Serialize};

/// `DirectoryHostEvicted`: the reporting node (the leader) released every directory claim of a
/// member that was removed or fenced. Reported once per released set: a second evictor
/// releases nothing and reports nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostEviction {
    /// The evicted member as the directory names it: its unique address
    /// (`troupe://system@host:port#incarnation`).
    #[cfg_attr(feature = "openapi", schema(max_length = 512))]
    pub host: String,
    /// The member's status before it was removed (`exiting`, `down`, `up` for a fence).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 32))]
    pub previous_status: Option<String>,
    /// The actor ids whose claims were released, sorted.
    #[cfg_attr(feature = "openapi", schema(max_length = 1024))]
    pub actors: Vec<String>,
}
