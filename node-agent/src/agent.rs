//! The running node and the builder an application embeds it with.
//!
//! [`Agent::builder`] takes the node's settings (an [`AgentConfig`]: the `troupe-agent` flags,
//! parsed or built in code), and optionally a membership provider, a lease provider for
//! singletons, a directory and the application's own actors; [`AgentBuilder::start`] binds the
//! transport and the management listener, joins the cluster, starts reporting and the
//! application's actors. [`Agent::run`] then serves until SIGTERM/SIGINT or until the node
//! loses its place, and answers how it ended ([`Exit`], whose code the process exits with).
//!
//! ```no_run
//! use troupe_agent::{Agent, AgentConfig};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = AgentConfig::new("shop", "127.0.0.1:2552".parse()?, "a shared secret, 16 bytes+");
//! let agent = Agent::builder(config)
//!     .with_actors(|ctx| {
//!         // spawn the application's actors, start its singletons with ctx.start_singleton(..)
//!         let _ = ctx.cluster();
//!         Ok(())
//!     })
//!     .start()
//!     .await?;
//! let exit = agent.run().await; // SIGTERM: drain, leave, stop, flush
//! std::process::exit(exit.code());
//! # }
//! ```
//!
//! # Supervision tree (per node)
//! ```text
//! actor system <system>
//! ├── /system/cluster-core          gossip membership (or a provider's task)
//! ├── /system/cluster/singleton/…   singleton managers (the application's, the demo's)
//! └── /user/…                       the application's actors
//! tasks: reporter (reporter.rs), management listener (management.rs), directory eviction
//!        (eviction.rs), the lifecycle shell (below: signals, departure, timers)
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use troupe::cluster::{
    Cluster, ClusterError, ClusterNotification, MemberStatus, MembershipProvider,
};
use troupe::directory::Directory;
use troupe::lease::{LeaseProvider, LeaseSettings};
use troupe::singleton::{SingletonKey, SingletonProxy, StartSingletonOptions};
use troupe::transport::{ClusterSecret, TcpTransportOptions};
use troupe::{Actor, ActorSystem};

use crate::backends::{self, MembershipChoice, SingletonLeases};
use crate::config::{AgentConfig, MembershipKind};
use crate::lifecycle::{self, Action, Event, Exit, Phase};
use crate::{AgentError, demo, event_json, eviction, health, management, metrics, reporter};

/// What an application's start-up code may fail with.
pub type AppError = Box<dyn std::error::Error + Send + Sync>;

type StartActors = Box<dyn FnOnce(&AgentContext) -> Result<(), AppError> + Send>;

/// What the application's actors are started with: the cluster, and the agent's singleton
/// leases and directory.
#[derive(Debug)]
pub struct AgentContext {
    cluster: Cluster,
    singleton_leases: Option<SingletonLeases>,
    directory: Option<Arc<dyn Directory>>,
    metrics: Arc<metrics::AgentMetrics>,
    reporter: Option<reporter::ReporterHandle>,
}

impl AgentContext {
    /// This node's cluster.
    #[must_use]
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The actor system.
    #[must_use]
    pub fn system(&self) -> &ActorSystem {
        self.cluster.system()
    }

    /// Start singleton `key` on this node (take part in hosting it), guarded by the agent's
    /// singleton lease when it has one (`--singleton-lease`): the lease is named after the
    /// cluster and the singleton, owned by this incarnation, and retried every
    /// `--singleton-lease-retry-ms`. Call it on every node that may host the singleton.
    ///
    /// # Errors
    /// When the lease provider refuses the lease's name or settings, or the singleton cannot
    /// start (bad options, a name that cannot name an actor).
    pub fn start_singleton<A>(
        &self,
        key: &SingletonKey<A::Msg>,
        options: StartSingletonOptions<A>,
    ) -> Result<SingletonProxy<A::Msg>, AppError>
    where
        A: Actor,
        A::Msg: troupe::remoting::RemoteMessage,
    {
        let options = match &self.singleton_leases {
            None => options,
            Some(leases) => {
                let name = backends::singleton_lease_name(
                    &self.cluster.self_address().system,
                    key.type_name(),
                );
                let owner = self.cluster.self_node().to_string();
                let lease = leases.provider.lease(&name, &owner, &leases.settings)?;
                options
                    .with_lease(lease)
                    .with_acquire_retry_interval(leases.retry_interval)
            }
        };
        Ok(troupe::singleton::ClusterSingleton::get(&self.cluster).start(key, options)?)
    }

    /// The directory (`--directory`, or the builder's), when there is one.
    #[must_use]
    pub fn directory(&self) -> Option<&Arc<dyn Directory>> {
        self.directory.as_ref()
    }

    /// This node's name in the directory: its unique address (`troupe://sys@host:port#uid`),
    /// so a restarted process never owns what its previous incarnation claimed.
    #[must_use]
    pub fn directory_host(&self) -> String {
        eviction::directory_host(self.cluster.self_node())
    }

    /// Watch the mailbox depth of the actor at `path` (on `/metrics` and in the reports).
    pub fn watch_depth(&self, path: &str, router: Option<&str>) {
        self.metrics.watch_depth(path, router);
        if let Some(reporter) = &self.reporter {
            reporter.watch_depth(path);
        }
    }
}

/// Builds an [`Agent`]: the node settings, then what replaces the command line's choices.
pub struct AgentBuilder {
    config: AgentConfig,
    membership: Option<Box<dyn MembershipProvider>>,
    singleton_leases: Option<(Arc<dyn LeaseProvider>, LeaseSettings)>,
    directory: Option<Arc<dyn Directory>>,
    actors: Vec<StartActors>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("config", &self.config)
            .field("membership", &self.membership.as_ref().map(|_| "provider"))
            .field("singleton_leases", &self.singleton_leases)
            .field("directory", &self.directory)
            .field("actors", &self.actors.len())
            .finish()
    }
}

impl AgentBuilder {
    /// Use this membership provider instead of `--membership` (for example a
    /// `troupe_kubernetes::KubeMembership` built with the application's own client).
    #[must_use]
    pub fn with_membership(mut self, provider: impl MembershipProvider) -> Self {
        self.membership = Some(Box::new(provider));
        self
    }

    /// Guard singletons started through [`AgentContext::start_singleton`] with leases from
    /// `provider` (instead of `--singleton-lease`).
    #[must_use]
    pub fn with_singleton_leases(
        mut self,
        provider: Arc<dyn LeaseProvider>,
        settings: LeaseSettings,
    ) -> Self {
        self.singleton_leases = Some((provider, settings));
        self
    }

    /// Use this directory (instead of `--directory`): the leader evicts the claims of every
    /// member that is removed or fences.
    #[must_use]
    pub fn with_directory(mut self, directory: Arc<dyn Directory>) -> Self {
        self.directory = Some(directory);
        self
    }

    /// Start the application's actors once the node is bound and reporting (before it is up:
    /// singletons and routers follow membership by themselves). Called once per `start`, in
    /// the order given; an error fails the start.
    #[must_use]
    pub fn with_actors(
        mut self,
        start: impl FnOnce(&AgentContext) -> Result<(), AppError> + Send + 'static,
    ) -> Self {
        self.actors.push(Box::new(start));
        self
    }

    /// Check the settings, connect the backends, bind, join, and start everything.
    ///
    /// # Errors
    /// Contradictory settings (naming the flags), an unreachable backend, a port taken, or an
    /// application start-up error.
    pub async fn start(self) -> Result<Agent, AgentError> {
        let Self {
            config,
            membership,
            singleton_leases,
            directory,
            actors,
        } = self;
        config.check(membership.is_some())?;
        // A bad CA file fails the start, before the node joins anything.
        let report_client = match &config.control_plane {
            Some(_) => Some(reporter::shipper::client(
                config.control_plane_ca.as_deref(),
            )?),
            None => None,
        };
        let report_spool = config.report_spool();
        // Held until this agent is dropped (after its last flush), and by the kernel only as
        // long as the process lives: a second agent on the same directory is refused here.
        let spool_lock = match &report_spool {
            Some(spool) => Some(reporter::spool_file::prepare(&spool.dir)?),
            None => None,
        };
        // Bind the management listener first: a taken port fails the start before the node
        // joins anything.
        let management_listener = tokio::net::TcpListener::bind(config.management_bind)
            .await
            .map_err(|error| AgentError::Management {
                addr: config.management_bind,
                error,
            })?;
        let mut connected = backends::connect(&config, membership.is_none()).await?;
        let membership_choice = match membership {
            Some(provider) => MembershipChoice::Provider(provider),
            None => connected
                .membership
                .take()
                .expect("connect builds the membership when asked"),
        };
        if let Some((provider, settings)) = singleton_leases {
            connected.singleton_leases = Some(SingletonLeases {
                provider,
                settings,
                retry_interval: Duration::from_millis(config.singleton_lease_retry_ms),
                description: "the application's lease provider".to_owned(),
            });
        }
        if let Some(directory) = directory {
            connected.directory = Some(directory);
        }
        let system = ActorSystem::new(&config.system)?;
        let secret = ClusterSecret::new(config.secret.as_bytes())
            .map_err(|e| AgentError::Secret(e.to_string()))?;
        let host = config
            .advertised_host
            .clone()
            .unwrap_or_else(|| config.bind.ip().to_string());
        let transport_config = TcpTransportOptions::new(&config.system, config.bind, secret)
            .with_advertised_host(&host)
            .with_incarnation(config.incarnation.unwrap_or_else(rand::random));
        let gossip = matches!(membership_choice, MembershipChoice::Gossip(_));
        let builder = match membership_choice {
            MembershipChoice::Gossip(settings) => {
                Cluster::builder(&system).with_membership(settings)
            }
            MembershipChoice::Provider(provider) => {
                Cluster::builder(&system).with_provider(provider)
            }
        };
        let cluster = builder
            .bind_tcp(transport_config)
            .await
            .map_err(|e| match e {
                ClusterError::Transport(source) => AgentError::Transport(source.to_string()),
                other => AgentError::Cluster(other.to_string()),
            })?;
        let cluster_transport = Arc::clone(cluster.tcp_transport().expect("bound over TCP"));
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
                    "incarnation": cluster.self_node().incarnation,
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
        let reporter = config
            .control_plane
            .as_deref()
            .zip(report_client)
            .map(|(url, client)| {
                let identity = troupe_protocol::AgentIdentity {
                    cluster: config.system.clone(),
                    node: cluster.self_address().host_port(),
                    incarnation: cluster.self_node().incarnation,
                    meta: troupe_protocol::AgentMeta {
                        node: config.node_name.clone(),
                    },
                    // Never the secret: a keyed hash of it, so that the server keeps a cluster
                    // of the same name with another secret apart.
                    cluster_identity: Some(crate::cluster_identity::derive(
                        &config.system,
                        config.secret.as_bytes(),
                    )),
                };
                let shipper = reporter::shipper::Shipper::with_client(
                    client,
                    url,
                    &config.ingest_token,
                    identity,
                );
                let settings = reporter::ReporterSettings {
                    flush_interval: Duration::from_millis(config.report_interval_ms.max(10)),
                    spool: report_spool,
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
                operations_token: config.management_token.clone().filter(|t| !t.is_empty()),
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
            let view = watched
                .wait_for_view(|v| {
                    v.self_member()
                        .is_some_and(|m| m.status == MemberStatus::Up)
                        || watched.departure().is_some()
                })
                .await;
            if view
                .self_member()
                .is_some_and(|m| m.status == MemberStatus::Up)
            {
                joined.joined();
            }
        });
        match &connected.singleton_leases {
            Some(leases) => tracing::info!(
                leases = %leases.description,
                ttl = ?leases.settings.ttl(),
                "singletons acquire a lease before they run"
            ),
            None if gossip => tracing::warn!(
                "--singleton-lease none: singletons run without a lease. Under a network \
                 partition both sides may run a singleton: for about --down-after-ms ({} ms) \
                 with --downing keep-majority (the minority side then downs itself and fences), \
                 for as long as the partition lasts with --downing auto-down. Choose \
                 --singleton-lease etcd|postgres|control-plane|kubernetes to rule it out",
                config.down_after_ms
            ),
            None => tracing::warn!(
                membership = %config.membership,
                "--singleton-lease none: singletons run without a lease; a member cut off from \
                 the others keeps its singleton until its membership lease expires \
                 (--membership-ttl-ms), while the others may already run another"
            ),
        }
        let evictor = connected
            .directory
            .as_ref()
            .map(|directory| eviction::start(&cluster, Arc::clone(directory), reporter.clone()));
        let context = AgentContext {
            cluster: cluster.clone(),
            singleton_leases: connected.singleton_leases,
            directory: connected.directory,
            metrics: Arc::clone(&metrics),
            reporter: reporter.clone(),
        };
        // After the reporter, so that it sees the application's routers and singletons start.
        let demo = if config.demo {
            let demo = demo::start_in(&context)?;
            // The demo worker's depth on /metrics: as this node's routee of the demo router,
            // and alone (so the per-path series and dashboards have something to show).
            metrics.watch_depth(demo::WORKER_PATH, Some(demo::ROUTER_PATH));
            metrics.watch_depth(demo::WORKER_PATH, None);
            Some(demo)
        } else {
            None
        };
        for start in actors {
            start(&context).map_err(|e| AgentError::Application(e.to_string()))?;
        }
        tracing::info!(
            node = %cluster.self_node(),
            incarnation = cluster.self_node().incarnation,
            management = %management_url,
            membership = %if gossip { MembershipKind::Gossip.to_string() } else { config.membership.to_string() },
            "agent started"
        );
        Ok(Agent {
            system,
            cluster,
            reporter,
            health,
            metrics,
            management,
            drain_delay: config.drain_delay(),
            leave_timeout: config.leave_timeout(),
            flush_timeout: config.flush_timeout(),
            demo,
            context,
            _evictor: evictor,
            _spool_lock: spool_lock,
        })
    }
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
    leave_timeout: Duration,
    flush_timeout: Duration,
    demo: Option<demo::Demo>,
    context: AgentContext,
    _evictor: Option<eviction::Evictor>,
    _spool_lock: Option<reporter::spool_file::SpoolLock>,
}

impl Agent {
    /// A builder for a node with `config`'s settings.
    #[must_use]
    pub fn builder(config: AgentConfig) -> AgentBuilder {
        AgentBuilder {
            config,
            membership: None,
            singleton_leases: None,
            directory: None,
            actors: Vec::new(),
        }
    }

    /// Start a node exactly as the command line says (`troupe-agent`'s own start).
    ///
    /// # Errors
    /// See [`AgentBuilder::start`].
    pub async fn start(config: AgentConfig) -> Result<Self, AgentError> {
        Self::builder(config).start().await
    }

    /// The reporter, when a control plane is configured.
    #[must_use]
    pub fn reporter(&self) -> Option<&reporter::ReporterHandle> {
        self.reporter.as_ref()
    }

    /// The health the probes report.
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
        self.context.watch_depth(path, router);
    }

    /// The demo workload, when started with `--demo`.
    #[must_use]
    pub fn demo(&self) -> Option<&demo::Demo> {
        self.demo.as_ref()
    }

    /// What the application's actors were started with.
    #[must_use]
    pub fn context(&self) -> &AgentContext {
        &self.context
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

    /// Serve until SIGTERM or SIGINT (then drain, leave, stop and flush) or until this node
    /// loses its place in the cluster (then fence, stop and flush); answers how it ended.
    pub async fn run(self) -> Exit {
        self.run_until(shutdown_signal()).await
    }

    /// Shut down gracefully now: drain (for the drain delay), leave, stop every actor, flush.
    pub async fn shutdown(self) -> Exit {
        self.run_until(std::future::ready(())).await
    }

    /// Serve until `stop` resolves (then shut down gracefully) or until this node loses its
    /// place; answers how it ended. See `lifecycle.rs` for every way out.
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Exit {
        let mut stop = pin!(stop);
        let departed = self.cluster.clone();
        let mut departed = pin!(departed.departed());
        let (mut stop_pending, mut departure_pending) = (true, true);
        let mut drain_at: Option<tokio::time::Instant> = None;
        let mut leave_deadline: Option<tokio::time::Instant> = None;
        let mut stopping: Option<tokio::task::JoinHandle<()>> = None;
        let mut flushing: Option<tokio::task::JoinHandle<bool>> = None;
        let mut phase = Phase::Running;
        let far = || tokio::time::Instant::now() + Duration::from_secs(86_400);
        loop {
            let event = tokio::select! {
                () = &mut stop, if stop_pending => {
                    stop_pending = false;
                    tracing::info!("shutting down: draining, then leaving the cluster");
                    Event::Terminate
                }
                departure = &mut departed, if departure_pending => {
                    departure_pending = false;
                    Event::Departed(departure)
                }
                () = tokio::time::sleep_until(drain_at.unwrap_or_else(far)), if drain_at.is_some() => {
                    drain_at = None;
                    Event::DrainElapsed
                }
                () = tokio::time::sleep_until(leave_deadline.unwrap_or_else(far)), if leave_deadline.is_some() => {
                    leave_deadline = None;
                    Event::LeaveTimedOut
                }
                _ = async { stopping.as_mut().expect("guarded").await }, if stopping.is_some() => {
                    stopping = None;
                    Event::ActorsStopped
                }
                flushed = async { flushing.as_mut().expect("guarded").await }, if flushing.is_some() => {
                    flushing = None;
                    if flushed.unwrap_or(false) { Event::Flushed } else { Event::FlushTimedOut }
                }
            };
            let (next, actions) = lifecycle::step(phase, event);
            phase = next;
            for action in actions {
                match action {
                    Action::Drain => {
                        self.health.drain("shutting down");
                        // After the health change, so the draining report is the first the
                        // spool holds.
                        if let Some(reporter) = &self.reporter {
                            reporter.shutting_down();
                        }
                    }
                    Action::StartDrainDelay => {
                        drain_at = Some(tokio::time::Instant::now() + self.drain_delay);
                    }
                    Action::Leave => {
                        self.cluster.leave();
                        leave_deadline = Some(tokio::time::Instant::now() + self.leave_timeout);
                    }
                    Action::Fence(reason) => {
                        self.health.fence(&reason);
                        if let Some(reporter) = &self.reporter {
                            reporter.shutting_down();
                        }
                    }
                    Action::StopActors => {
                        leave_deadline = None;
                        let system = self.system.clone();
                        stopping = Some(tokio::spawn(async move { system.shutdown().await }));
                    }
                    Action::Flush => {
                        let reporter = self.reporter.clone();
                        let limit = self.flush_timeout;
                        flushing = Some(tokio::spawn(async move {
                            match reporter {
                                // The reporter keeps to the limit itself and then makes the
                                // spool durable; the margin only guards against a stuck disk.
                                Some(reporter) => tokio::time::timeout(
                                    limit + Duration::from_secs(5),
                                    reporter.stop_within(limit),
                                )
                                .await
                                .unwrap_or(false),
                                None => true,
                            }
                        }));
                    }
                    Action::WarnLeaveTimedOut => tracing::warn!(
                        timeout = ?self.leave_timeout,
                        "the cluster did not confirm the leave within --leave-timeout-ms; stopping anyway (peers will find this node unreachable)"
                    ),
                    Action::Exit(exit) => {
                        if exit == Exit::Left {
                            self.health.stopped();
                        } else {
                            tracing::error!(
                                code = exit.code(),
                                ?exit,
                                "exiting fenced: restart this process, it rejoins as a fresh incarnation"
                            );
                        }
                        self.management.stop().await;
                        return exit;
                    }
                }
            }
        }
    }
}

async fn shutdown_signal() {
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    match terminate {
        Ok(mut terminate) => {
            tokio::select! {
                biased;
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the agent");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
