//! The Troupe node agent: the host process an application pod runs around the runtime — it
//! binds the transport, joins the cluster through the membership it was given (gossip,
//! Kubernetes Leases, etcd), guards singletons with a lease, reports what happens, and ends in
//! one of two ways: a graceful leave (exit 0) or a fence (exit 3) — see `lifecycle.rs`.
//! It serves probes and Prometheus metrics on its management listener (`management.rs`), and
//! exports its own logs and traces over OTLP as the server does (`telemetry.rs`).
//! Applications embed it with [`Agent::builder`] (`agent.rs`); `troupe-agent` is the same
//! builder driven by the command line (`config.rs`). With `--demo` it also runs the demo
//! workload (`demo.rs`): a singleton job scheduler, compute workers behind a cluster router,
//! and the occasional dead letter.

pub mod agent;
pub mod backends;
pub mod cluster_identity;
pub mod config;
pub mod demo;
pub mod eviction;
pub mod health;
pub mod lifecycle;
pub mod management;
pub mod metrics;
pub mod reporter;
pub mod telemetry;

use std::net::SocketAddr;

use troupe::SystemError;
use troupe::cluster::{ClusterEvent, Member};

pub use agent::{Agent, AgentBuilder, AgentContext, AppError};
pub use config::{AgentConfig, ConfigError};
pub use lifecycle::Exit;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The settings contradict each other or cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A membership, lease or directory backend could not be reached or set up.
    #[error(transparent)]
    Backend(#[from] backends::BackendError),
    /// The actor system could not be created.
    #[error(transparent)]
    System(#[from] SystemError),
    /// The secret is unusable.
    #[error("cluster secret: {0}")]
    Secret(String),
    /// The transport could not bind.
    #[error("transport: {0}")]
    Transport(String),
    /// The cluster could not start.
    #[error("cluster: {0}")]
    Cluster(String),
    /// The management listener could not bind.
    #[error(
        "management listener on {addr}: {error}; choose another address with --management-bind \
         (TROUPE_MANAGEMENT_BIND), port 0 for any free port"
    )]
    Management {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        error: std::io::Error,
    },
    /// The control plane's CA file (`--control-plane-ca`) is unusable.
    #[error(transparent)]
    Reporter(#[from] reporter::shipper::ShipperError),
    /// The report spool directory (`--report-spool-dir`) is unusable.
    #[error(transparent)]
    Spool(#[from] reporter::spool_file::SpoolDirError),
    /// The demo workload could not start.
    #[error(transparent)]
    Demo(#[from] demo::DemoError),
    /// The application's own start-up failed.
    #[error("application: {0}")]
    Application(String),
}

fn member_json(member: &Member) -> serde_json::Value {
    serde_json::json!({
        "address": member.address().to_string(),
        "incarnation": member.node.incarnation,
        "status": member.status.name(),
        "roles": member.roles,
    })
}

/// One cluster event as the JSON line the agent prints.
#[must_use]
pub fn event_json(event: &ClusterEvent) -> serde_json::Value {
    let mut value = match event {
        ClusterEvent::MemberJoined(m)
        | ClusterEvent::MemberWeaklyUp(m)
        | ClusterEvent::MemberUp(m)
        | ClusterEvent::MemberLeft(m)
        | ClusterEvent::MemberExited(m)
        | ClusterEvent::MemberDown(m)
        | ClusterEvent::MemberUnreachable(m)
        | ClusterEvent::MemberReachable(m)
        | ClusterEvent::SelfUp(m) => serde_json::json!({ "member": member_json(m) }),
        ClusterEvent::MemberRemoved { member, previous } => {
            serde_json::json!({ "member": member_json(member), "previous": previous.name() })
        }
        ClusterEvent::LeaderChanged(leader) => {
            serde_json::json!({ "leader": leader.as_ref().map(ToString::to_string) })
        }
    };
    value["event"] = serde_json::Value::from(event.kind());
    value
}
