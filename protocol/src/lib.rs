//! Wire types shared by Troupe node agents and the control-plane server: serde only, no I/O.

use serde::{Deserialize, Serialize};

/// The version of the agent ↔ server wire format; bumped on incompatible changes.
pub const PROTOCOL_VERSION: u32 = 1;

/// Who is reporting: enough for the server to tell agents and their restarts apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentIdentity {
    /// The cluster (actor system) name.
    pub cluster: String,
    /// The node's advertised address, `host:port`.
    pub node: String,
    /// A fresh number per process start, so a restarted agent is a new incarnation.
    pub incarnation: u64,
    /// The machine the agent runs on (Kubernetes `spec.nodeName`), when known.
    pub host: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips_through_json_with_stable_field_names() {
        let identity = AgentIdentity {
            cluster: "app".into(),
            node: "127.0.0.1:2552".into(),
            incarnation: 7,
            host: None,
        };
        let json = serde_json::to_string(&identity).unwrap();
        assert_eq!(json, r#"{"cluster":"app","node":"127.0.0.1:2552","incarnation":7,"host":null}"#);
        assert_eq!(serde_json::from_str::<AgentIdentity>(&json).unwrap(), identity);
    }
}
