//! Why a cluster could not start.

use super::membership::OptionsError;
use crate::system::SpawnError;

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A settings value cannot work.
    #[error("invalid cluster settings: {0}")]
    Settings(#[from] OptionsError),
    /// The daemon could not be spawned (a cluster already runs in this system?).
    #[error("cannot start the cluster daemon: {0}")]
    Spawn(#[from] SpawnError),
    /// The transport could not start (its configuration was refused, or its address could not
    /// be bound); the source says why.
    #[error("cannot start the cluster's transport")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A membership provider could not start; the source says why.
    #[error("membership provider failed to start")]
    Provider(#[source] Box<dyn std::error::Error + Send + Sync>),
}
