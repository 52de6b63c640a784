//! Who is reporting: enough for the server to tell agents and their restarts apart, and
//! clusters of the same name apart.
//!
//! # Cluster identity
//! Two clusters may share a name (a node started with the wrong secret forms its own cluster of
//! that name). The agent therefore also sends [`AgentIdentity::cluster_identity`]: a keyed hash
//! of the cluster secret (never the secret), the same for every node holding that secret and
//! unrelated for any other. The server keys clusters on `(name, identity)` and addresses each by
//! its [`cluster_key`]: the name alone for a cluster reported without an identity (agents
//! before this field), `name~<first 16 hex digits of the identity>` otherwise.

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
    /// The cluster's identity: `HMAC-SHA256(secret, CLUSTER_IDENTITY_LABEL ‖ cluster name)` as
    /// 64 lowercase hex digits (see the module docs). Absent from agents that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 64, max_length = 64, pattern = "^[0-9a-f]{64}$")
    )]
    pub cluster_identity: Option<String>,
}

/// The domain-separation label of [`AgentIdentity::cluster_identity`]'s hash, so that it never
/// equals a tag the secret makes for anything else (the transport handshake).
pub const CLUSTER_IDENTITY_LABEL: &[u8] = b"troupe control-plane cluster identity v1";

/// How many hex digits of the identity a [`cluster_key`] shows (64 bits).
pub const CLUSTER_KEY_FINGERPRINT: usize = 16;

/// What separates the name from the identity's fingerprint in a [`cluster_key`]; a cluster
/// name may not contain it (the runtime allows ASCII letters, digits, `-` and `_`).
pub const CLUSTER_KEY_SEPARATOR: char = '~';

/// How the control plane addresses the cluster `name` with `identity`: the name alone without
/// an identity, `name~<first 16 hex digits>` with one.
#[must_use]
pub fn cluster_key(name: &str, identity: Option<&str>) -> String {
    match identity {
        None | Some("") => name.to_owned(),
        Some(identity) => {
            let fingerprint = identity.get(..CLUSTER_KEY_FINGERPRINT).unwrap_or(identity);
            format!("{name}{CLUSTER_KEY_SEPARATOR}{fingerprint}")
        }
    }
}

/// Whether `identity` has the form of a cluster identity (64 lowercase hex digits).
#[must_use]
pub fn valid_cluster_identity(identity: &str) -> bool {
    identity.len() == 64
        && identity
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl AgentIdentity {
    /// This agent's cluster's [`cluster_key`].
    #[must_use]
    pub fn cluster_key(&self) -> String {
        cluster_key(&self.cluster, self.cluster_identity.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_without_identity_is_keyed_by_its_name_and_one_with_an_identity_by_both() {
        assert_eq!(cluster_key("shop", None), "shop");
        assert_eq!(cluster_key("shop", Some("")), "shop");
        let identity = "0123456789abcdef".repeat(4);
        assert_eq!(
            cluster_key("shop", Some(&identity)),
            "shop~0123456789abcdef"
        );
        assert!(valid_cluster_identity(&identity));
        assert!(!valid_cluster_identity(&identity.to_uppercase()));
        assert!(!valid_cluster_identity(&identity[1..]));
        assert!(!valid_cluster_identity("secret"));
    }
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
