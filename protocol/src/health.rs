//! Agent health: the host lifecycle that the probes report (seed 003).

use serde::{Deserialize, Serialize};

/// Where an agent is in its life as a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum AgentHealth {
    /// Started, not yet ready: probes answer 503.
    Starting,
    /// Serving.
    Ready,
    /// Shutting down: live, not ready.
    Draining,
    /// Fenced after losing its membership lease: liveness answers 503 `fatal`.
    Fenced,
}

impl AgentHealth {
    /// Every health state.
    pub const ALL: [Self; 4] = [Self::Starting, Self::Ready, Self::Draining, Self::Fenced];

    /// The wire name (`draining`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Fenced => "fenced",
        }
    }

    /// The state with wire name `name`, if there is one.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// `AgentHealthChanged`: the reporting agent moved to `health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthChange {
    /// The new state.
    pub health: AgentHealth,
    /// Why, when there is more to say (`lease renewal got 404`); longer than 1024 bytes, it
    /// is stored shortened to 1024 and marked.
    #[serde(default)]
    pub reason: Option<String>,
}
