//! Who is reporting: enough for the server to tell agents and their restarts apart.

use serde::{Deserialize, Serialize};

/// The identity every report carries. `(cluster, node, incarnation)` names one agent process;
/// together with the batch sequence it makes ingest idempotent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentIdentity {
    /// The cluster (actor system) name; not empty.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 64))]
    pub cluster: String,
    /// The node's advertised address, `host:port`; not empty.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 256))]
    pub node: String,
    /// A fresh number per process start, so a restarted agent is a new incarnation.
    #[serde(with = "crate::wire::u64_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::wire::schema::U64Input))]
    pub incarnation: u64,
    /// Where the agent runs.
    #[serde(default)]
    pub meta: AgentMeta,
}

/// Facts about where an agent runs, for operators; none of them identify the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentMeta {
    /// The machine the agent runs on (Kubernetes `spec.nodeName`), when known.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_length = 256))]
    pub node: Option<String>,
}
