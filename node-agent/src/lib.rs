//! The Troupe node agent: the host process an application pod runs around the runtime — it
//! binds the transport, joins the cluster, reports what happens, and leaves cleanly on SIGTERM.
//! It serves probes and Prometheus metrics on its management listener (`management.rs`).
//! With `--demo` it also runs the demo workload (`demo.rs`): a singleton job scheduler, compute
//! workers behind a cluster router, and the occasional dead letter.

pub mod demo;
pub mod health;
pub mod management;
pub mod metrics;
pub mod reporter;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::sync::mpsc;
use troupe::Address;
use troupe::cluster::{Cluster, ClusterEvent, ClusterNotification, Member, MembershipSettings};
use troupe::transport::{ClusterSecret, TcpTransport, TcpTransportConfig};
use troupe::{ActorSystem, SystemError};

/// Command line and environment of `troupe-agent`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "troupe-agent",
    version,
    about = "Run a Troupe node: join the cluster and host actors."
)]
pub struct AgentConfig {
    /// Cluster (actor system) name; every node of a cluster uses the same one.
    #[arg(long, env = "TROUPE_SYSTEM", default_value = "troupe")]
    pub system: String,
    /// Address to listen on for other nodes.
    #[arg(long, env = "TROUPE_BIND", default_value = "127.0.0.1:2552")]
    pub bind: SocketAddr,
    /// Host name or IP other nodes use to reach this one (default: the bind IP).
    #[arg(long, env = "TROUPE_ADVERTISED_HOST")]
    pub advertised_host: Option<String>,
    /// Address of the management listener: health probes (`/_troupe/health`,
    /// `/_troupe/health/ready`) and Prometheus `/metrics`. Internal only; in Kubernetes bind
    /// `0.0.0.0:8558` so the kubelet can probe it. Port 0 picks a free port (logged at start).
    #[arg(long, env = "TROUPE_MANAGEMENT_BIND", default_value = "127.0.0.1:8558")]
    pub management_bind: SocketAddr,
    /// On shutdown, stay live but not ready this many milliseconds before leaving the cluster,
    /// so load balancers stop sending first (like a preStop sleep).
    #[arg(long, env = "TROUPE_DRAIN_DELAY_MS", default_value_t = 0)]
    pub drain_delay_ms: u64,
    /// Seed node addresses (`troupe://<system>@<host>:<port>`), comma-separated; the first
    /// may form a new cluster.
    #[arg(long = "seed", env = "TROUPE_SEEDS", value_delimiter = ',')]
    pub seeds: Vec<Address>,
    /// This node's roles, comma-separated.
    #[arg(long = "role", env = "TROUPE_ROLES", value_delimiter = ',')]
    pub roles: Vec<String>,
    /// Shared cluster secret (at least 16 bytes); every node needs the same one.
    #[arg(long, env = "TROUPE_CLUSTER_SECRET", hide_env_values = true)]
    pub secret: String,
    /// Down a member that stays unreachable this many milliseconds (0 = never).
    #[arg(long, env = "TROUPE_DOWN_AFTER_MS", default_value_t = 5_000)]
    pub down_after_ms: u64,
    /// Print each cluster event as one JSON line on stdout.
    #[arg(long, env = "TROUPE_EVENTS_JSON", default_value_t = false)]
    pub events_json: bool,
    /// Base URL of the control plane to report to (e.g. http://127.0.0.1:8080); unset: no
    /// reporting.
    #[arg(long, env = "TROUPE_CONTROL_PLANE_URL")]
    pub control_plane: Option<String>,
    /// Bearer token for the control plane's ingest endpoint.
    #[arg(
        long,
        env = "TROUPE_INGEST_TOKEN",
        hide_env_values = true,
        default_value = ""
    )]
    pub ingest_token: String,
    /// The machine this agent runs on, shown by the control plane (Kubernetes: the
    /// downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Milliseconds between report batches.
    #[arg(long, env = "TROUPE_REPORT_INTERVAL_MS", default_value_t = 500)]
    pub report_interval_ms: u64,
    /// Run the demo workload: a singleton job scheduler sending jobs through a cluster router
    /// to a compute worker on every node, with an occasional dead letter. Start it on every
    /// node of the cluster.
    #[arg(long, env = "TROUPE_DEMO", default_value_t = false)]
    pub demo: bool,
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
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
    /// The demo workload could not start.
    #[error(transparent)]
    Demo(#[from] demo::DemoError),
}

/// A running node.
#[derive(Debug)]
pub struct Agent {
    system: ActorSystem,
    cluster: Cluster,
    reporter: Option<reporter::ReporterHandle>,
    health: health::Health,
    metrics: Arc<metrics::AgentMetrics>,
    management: management::ManagementServer,
    drain_delay: Duration,
    demo: Option<demo::Demo>,
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

impl Agent {
    /// Bind the transport and start joining the cluster.
    pub async fn start(config: AgentConfig) -> Result<Self, AgentError> {
        // Bind the management listener first: a taken port fails the start before the node
        // joins anything.
        let management_listener = tokio::net::TcpListener::bind(config.management_bind)
            .await
            .map_err(|error| AgentError::Management {
                addr: config.management_bind,
                error,
            })?;
        let system = ActorSystem::new(&config.system)?;
        let secret = ClusterSecret::new(config.secret.as_bytes())
            .map_err(|e| AgentError::Secret(e.to_string()))?;
        let host = config
            .advertised_host
            .clone()
            .unwrap_or_else(|| config.bind.ip().to_string());
        let (inbound_tx, inbound_rx) = mpsc::channel(4_096);
        let transport_config = TcpTransportConfig::new(&config.system, config.bind, secret)
            .with_advertised_host(&host)
            .with_incarnation(rand::random());
        let transport = TcpTransport::bind(transport_config, inbound_tx)
            .await
            .map_err(|e| AgentError::Transport(e.to_string()))?;
        let settings = MembershipSettings {
            seeds: config.seeds.clone(),
            roles: config.roles.iter().cloned().collect::<BTreeSet<_>>(),
            down_after: (config.down_after_ms > 0)
                .then(|| Duration::from_millis(config.down_after_ms)),
            ..MembershipSettings::default()
        };
        let cluster_transport = Arc::clone(&transport);
        let cluster = Cluster::start(&system, transport, inbound_rx, settings, None)
            .map_err(|e| AgentError::Cluster(e.to_string()))?;
        let management_url = match management_listener.local_addr() {
            Ok(addr) => format!("http://{addr}"),
            Err(error) => {
                return Err(AgentError::Management {
                    addr: config.management_bind,
                    error,
                });
            }
        };
        if config.events_json {
            // The first line: where this agent's probes and metrics are (port 0 picks one).
            println!(
                "{}",
                serde_json::json!({
                    "event": "AgentStarted",
                    "node": cluster.self_address().to_string(),
                    "management": management_url,
                })
            );
            let mut events = cluster.subscribe();
            tokio::spawn(async move {
                while let Some(notification) = events.recv().await {
                    if let ClusterNotification::Event(event) = notification {
                        println!("{}", event_json(&event));
                    }
                }
            });
        }
        let reporter = config.control_plane.as_deref().map(|url| {
            let identity = troupe_protocol::AgentIdentity {
                cluster: config.system.clone(),
                node: cluster.self_address().host_port(),
                incarnation: cluster.self_node().incarnation,
                meta: troupe_protocol::AgentMeta {
                    node: config.node_name.clone(),
                },
            };
            let shipper = reporter::shipper::Shipper::new(url, &config.ingest_token, identity);
            let settings = reporter::ReporterSettings {
                flush_interval: Duration::from_millis(config.report_interval_ms.max(10)),
                ..reporter::ReporterSettings::default()
            };
            reporter::start(&system, &cluster, shipper, settings)
        });
        let health = health::Health::new();
        if let Some(reporter) = &reporter {
            // The reporter tells the control plane every change the probes see, in order.
            reporter.health(troupe_protocol::AgentHealth::Starting, None);
            let reporter = reporter.clone();
            health.on_transition(move |transition| {
                if let Some(reported) = transition.to.reported() {
                    reporter.health(reported, transition.reason.clone());
                }
                true
            });
        }
        let metrics = Arc::new(metrics::AgentMetrics::new());
        metrics.count_dead_letters(&system);
        metrics.watch_transport(cluster_transport);
        metrics.count_runtime_events(&system, &cluster);
        let management = management::ManagementServer::serve(
            management_listener,
            management::Sources {
                system: system.clone(),
                cluster: cluster.clone(),
                health: health.clone(),
                metrics: Arc::clone(&metrics),
                reporter: reporter.clone(),
            },
        )
        .map_err(|error| AgentError::Management {
            addr: config.management_bind,
            error,
        })?;
        // Ready once this node is an Up member.
        let joined = health.clone();
        let watched = cluster.clone();
        tokio::spawn(async move {
            watched
                .wait_for_view(|v| {
                    v.self_member()
                        .is_some_and(|m| m.status == troupe::cluster::MemberStatus::Up)
                })
                .await;
            joined.joined();
        });
        // After the reporter, so that it sees the demo router and singleton start.
        let demo = config.demo.then(|| demo::start(&cluster)).transpose()?;
        if demo.is_some() {
            // The demo worker's depth on /metrics: as this node's routee of the demo router,
            // and alone (so the per-path series and dashboards have something to show).
            metrics.watch_depth(demo::WORKER_PATH, Some(demo::ROUTER_PATH));
            metrics.watch_depth(demo::WORKER_PATH, None);
        }
        tracing::info!(node = %cluster.self_node(), management = %management_url, "agent started");
        Ok(Self {
            system,
            cluster,
            reporter,
            health,
            metrics,
            management,
            drain_delay: Duration::from_millis(config.drain_delay_ms),
            demo,
        })
    }

    /// The reporter, when a control plane is configured.
    #[must_use]
    pub fn reporter(&self) -> Option<&reporter::ReporterHandle> {
        self.reporter.as_ref()
    }

    /// The health the probes report; membership providers fence through it.
    #[must_use]
    pub fn health(&self) -> &health::Health {
        &self.health
    }

    /// The management listener's address (`/metrics`, `/_troupe/health`).
    #[must_use]
    pub fn management_addr(&self) -> SocketAddr {
        self.management.local_addr()
    }

    /// The agent's metrics.
    #[must_use]
    pub fn metrics(&self) -> &Arc<metrics::AgentMetrics> {
        &self.metrics
    }

    /// Watch the mailbox depth of the actor at `path`: exported on `/metrics` (alone, or
    /// summed into `router`'s series when it is a routee) and sampled by the reporter.
    pub fn watch_depth(&self, path: &str, router: Option<&str>) {
        self.metrics.watch_depth(path, router);
        if let Some(reporter) = &self.reporter {
            reporter.watch_depth(path);
        }
    }

    /// The demo workload, when started with `--demo`.
    #[must_use]
    pub fn demo(&self) -> Option<&demo::Demo> {
        self.demo.as_ref()
    }

    /// The cluster handle.
    #[must_use]
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The actor system.
    #[must_use]
    pub fn system(&self) -> &ActorSystem {
        &self.system
    }

    /// Shut down in order: stop-begin (probes: live, not ready; responses close their
    /// connections), wait the drain delay, leave the cluster (waiting at most `grace` to be
    /// removed), stop every actor, flush the reporter, and close the management listener last.
    pub async fn shutdown(self, grace: Duration) {
        self.health.drain("shutting down");
        if !self.drain_delay.is_zero() {
            tokio::time::sleep(self.drain_delay).await;
        }
        self.cluster.leave();
        let _ = tokio::time::timeout(grace, self.cluster.terminated()).await;
        self.system.shutdown().await;
        if let Some(reporter) = &self.reporter {
            let _ = tokio::time::timeout(grace, reporter.stop()).await;
        }
        self.health.stopped();
        self.management.stop().await;
    }
}
