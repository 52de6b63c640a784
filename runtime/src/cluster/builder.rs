//! [`ClusterBuilder`]: how a node joins a cluster — which membership (gossip by default, or any
//! [`MembershipProvider`]) over which transport — with the transport's inbound channel owned
//! by the builder, so callers never wire a channel or pass positional test knobs.
//!
//! ```no_run
//! use troupe::ActorSystem;
//! use troupe::cluster::{Cluster, MembershipOptions};
//! use troupe::transport::{ClusterSecret, TcpTransportOptions};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let system = ActorSystem::new("demo")?;
//! let secret = ClusterSecret::new("a shared secret, 16 bytes or more")?;
//! let cluster = Cluster::builder(&system)
//!     .with_membership(
//!         MembershipOptions::default().with_seeds(["troupe://demo@127.0.0.1:2551".parse()?]),
//!     )
//!     .bind_tcp(TcpTransportOptions::new("demo", "127.0.0.1:2551".parse()?, secret))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Validation
//! Everything is checked when the cluster starts (`bind_tcp` or `start_on`), before a socket
//! is bound or a daemon spawned: the membership settings, then the transport's configuration.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Cluster;
use super::daemon::GossipMembership;
use super::error::ClusterError;
use super::membership::MembershipOptions;
use super::provider::MembershipProvider;
use super::wire::CLUSTER_CHANNEL;
use crate::remoting::Remoting;
use crate::system::ActorSystem;
use crate::transport::{InboundFrame, TcpTransport, TcpTransportOptions, Transport};

/// How many inbound frames may wait for remoting before the transport's readers wait too,
/// unless told otherwise.
pub const DEFAULT_INBOUND_CAPACITY: usize = 4_096;

/// Which membership the node runs.
enum Membership {
    Gossip(MembershipOptions),
    Provider(Box<dyn MembershipProvider>),
}

/// Builds a [`Cluster`]: consuming `#[must_use]` setters, validated once at start.
///
/// | setting | default |
/// |---|---|
/// | membership | gossip with `MembershipOptions::default()` |
/// | `with_provider` | none (gossip) |
/// | `with_self_seed_if_none` | off: the seeds are the settings' |
/// | `with_inbound_capacity` | [`DEFAULT_INBOUND_CAPACITY`] frames |
#[must_use]
pub struct ClusterBuilder {
    system: ActorSystem,
    membership: Membership,
    inbound_capacity: usize,
    self_seed: bool,
    rng_seed: Option<u64>,
}

impl std::fmt::Debug for ClusterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let membership = match &self.membership {
            Membership::Gossip(settings) => format!("gossip {settings:?}"),
            Membership::Provider(_) => "provider".to_owned(),
        };
        f.debug_struct("ClusterBuilder")
            .field("system", &self.system.name())
            .field("membership", &membership)
            .field("inbound_capacity", &self.inbound_capacity)
            .finish_non_exhaustive()
    }
}

impl ClusterBuilder {
    pub(super) fn new(system: &ActorSystem) -> Self {
        Self {
            system: system.clone(),
            membership: Membership::Gossip(MembershipOptions::default()),
            inbound_capacity: DEFAULT_INBOUND_CAPACITY,
            self_seed: false,
            rng_seed: None,
        }
    }

    /// Gossip membership with these settings (seeds, roles, timings).
    pub fn with_membership(mut self, settings: MembershipOptions) -> Self {
        self.membership = Membership::Gossip(settings);
        self
    }

    /// Membership from `provider` (Kubernetes Leases, etcd, …) instead of gossip.
    pub fn with_provider(mut self, provider: Box<dyn MembershipProvider>) -> Self {
        self.membership = Membership::Provider(provider);
        self
    }

    /// When the gossip settings name no seed, seed this node with its own address as the
    /// transport bound it: it forms a new cluster. For the first node of a cluster whose port
    /// is chosen at bind (port 0), which cannot name itself in the settings beforehand.
    pub fn with_self_seed_if_none(mut self) -> Self {
        self.self_seed = true;
        self
    }

    /// How many inbound frames may wait for remoting (at least 1).
    pub fn with_inbound_capacity(mut self, frames: usize) -> Self {
        self.inbound_capacity = frames;
        self
    }

    /// Replay gossip's random choices exactly from `seed`. Test machinery: only with the
    /// `test-util` feature.
    #[cfg(feature = "test-util")]
    pub fn with_rng_seed(mut self, seed: u64) -> Self {
        self.rng_seed = Some(seed);
        self
    }

    /// Bind a TCP transport with `config` and start the cluster over it.
    ///
    /// # Errors
    /// [`ClusterError::Settings`] for membership settings that cannot work,
    /// [`ClusterError::Transport`] when the transport's configuration is refused or its address
    /// cannot be bound, [`ClusterError::Spawn`] / [`ClusterError::Provider`] when membership
    /// cannot start.
    pub async fn bind_tcp(self, config: TcpTransportOptions) -> Result<Cluster, ClusterError> {
        let inbound = self.check()?;
        let (tx, rx) = mpsc::channel(inbound);
        let transport = TcpTransport::bind(config, tx)
            .await
            .map_err(|e| ClusterError::Transport(Box::new(e)))?;
        self.start(
            Arc::clone(&transport) as Arc<dyn Transport>,
            rx,
            Some(transport),
        )
    }

    /// Start the cluster over the transport that `connect` makes from the inbound sender the
    /// builder owns (a simulated network's `join`, or a transport of your own).
    ///
    /// # Errors
    /// As [`Self::bind_tcp`], without the transport's own errors.
    pub fn start_on<T: Transport>(
        self,
        connect: impl FnOnce(mpsc::Sender<InboundFrame>) -> Arc<T>,
    ) -> Result<Cluster, ClusterError> {
        let inbound = self.check()?;
        let (tx, rx) = mpsc::channel(inbound);
        let transport = connect(tx);
        self.start(transport, rx, None)
    }

    /// Validate before anything is bound or spawned; the inbound capacity to use.
    fn check(&self) -> Result<usize, ClusterError> {
        if let Membership::Gossip(settings) = &self.membership {
            settings.validate()?;
        }
        if self.inbound_capacity == 0 {
            return Err(ClusterError::Settings(super::OptionsError {
                field: "inbound_capacity",
                value: "0".to_owned(),
                allowed: "at least 1 frame",
            }));
        }
        Ok(self.inbound_capacity)
    }

    fn start(
        self,
        transport: Arc<dyn Transport>,
        inbound: mpsc::Receiver<InboundFrame>,
        tcp: Option<Arc<TcpTransport>>,
    ) -> Result<Cluster, ClusterError> {
        let remoting = Remoting::start(&self.system, transport, inbound);
        let provider: Box<dyn MembershipProvider> = match self.membership {
            Membership::Gossip(mut settings) => {
                if self.self_seed && settings.seeds().is_empty() {
                    settings = settings.with_seeds([remoting.local().address.clone()]);
                }
                let (cluster_frames, cluster_inbound) = mpsc::unbounded_channel();
                remoting
                    .register_channel(CLUSTER_CHANNEL, cluster_frames)
                    .map_err(|taken| ClusterError::Provider(Box::new(taken)))?;
                Box::new(GossipMembership::new(
                    settings,
                    self.rng_seed,
                    cluster_inbound,
                ))
            }
            Membership::Provider(provider) => provider,
        };
        Cluster::start_with_provider(&self.system, remoting, provider, tcp)
    }
}
