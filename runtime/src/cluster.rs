//! Cluster membership: who is in the cluster, in which state, who leads — the same views and
//! events whichever provider produces them (gossip today; Kubernetes and etcd leases later).
//!
//! # Supervision tree
//! ```text
//! /system/cluster
//! └── core        ClusterDaemon: runs the gossip membership state machine, owns the tick
//!                 timers and the inbound-frame pump; stopping it stops both
//! ```
//!
//! # Views and events
//! [`Cluster::members`], [`Cluster::up_members`], [`Cluster::leader`] read this node's current
//! view without a message. [`Cluster::subscribe`] returns the current view first and then every
//! change, exactly once and in order: each batch of events is the difference between two
//! consecutive views, computed and delivered under the same lock that takes the snapshot.

mod builder;
mod daemon;
mod error;
mod events;
mod failure_detector;
mod gossip;
mod member;
mod membership;
mod provider;
mod reachability;
mod vector_clock;
mod wire;

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc;

pub use builder::{ClusterBuilder, DEFAULT_INBOUND_CAPACITY};
pub use daemon::GossipMembership;
pub use error::ClusterError;
pub use events::{ClusterEvent, ClusterView};
pub use failure_detector::FailureDetectorOptions;
pub use member::{Member, MemberStatus};
pub use membership::{Downing, MembershipOptions, OptionsError};
pub use provider::{Departure, MembershipControl, MembershipProvider, ViewSink};

pub(crate) use events::diff;

use crate::actor_ref::ActorRef;
use crate::extension::Extensions;
use crate::remoting::Remoting;
use crate::system::ActorSystem;
use crate::transport::{TcpTransport, Transport};
use crate::{Address, UniqueAddress};

/// What a cluster subscriber receives: the view at subscription time, then each change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterNotification {
    /// The view when the subscription started (always first).
    CurrentState(ClusterView),
    /// One change.
    Event(ClusterEvent),
}

/// A subscription to cluster events; dropping it unsubscribes.
#[derive(Debug)]
pub struct ClusterSubscription {
    rx: mpsc::UnboundedReceiver<ClusterNotification>,
}

impl ClusterSubscription {
    /// The next notification; `None` after the cluster handle and daemon are gone.
    pub async fn recv(&mut self) -> Option<ClusterNotification> {
        self.rx.recv().await
    }

    /// The next notification if one is waiting.
    pub fn try_recv(&mut self) -> Option<ClusterNotification> {
        self.rx.try_recv().ok()
    }

    /// Wait for the next event (skipping the initial state) matching `predicate`.
    pub async fn wait_for(
        &mut self,
        mut predicate: impl FnMut(&ClusterEvent) -> bool,
    ) -> Option<ClusterEvent> {
        loop {
            match self.recv().await? {
                ClusterNotification::Event(event) if predicate(&event) => return Some(event),
                _ => {}
            }
        }
    }
}

type Subscriber = Box<dyn Fn(&ClusterNotification) -> bool + Send + Sync>;

pub(crate) struct Shared {
    view: ClusterView,
    subscribers: Vec<Subscriber>,
    terminated: bool,
    /// How this node left, once it has (set once, by the provider).
    departure: tokio::sync::watch::Sender<Option<Departure>>,
    /// Every new view, including changes no event names (such as convergence).
    views: tokio::sync::watch::Sender<ClusterView>,
}

impl Shared {
    /// Replace the view and deliver the difference to every subscriber.
    pub(crate) fn publish(&mut self, new: ClusterView, system: &ActorSystem) -> Vec<ClusterEvent> {
        let events = diff(&self.view, &new);
        self.views.send_replace(new.clone());
        self.view = new;
        for event in &events {
            let notification = ClusterNotification::Event(event.clone());
            self.subscribers.retain(|deliver| deliver(&notification));
            system.event_stream().publish(event.clone());
        }
        events
    }
}

/// A handle to this node's cluster membership. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    system: ActorSystem,
    me: UniqueAddress,
    shared: Arc<Mutex<Shared>>,
    control: Arc<dyn MembershipControl>,
    transport: Arc<dyn Transport>,
    /// The same transport when the builder bound it over TCP (for its counters).
    tcp: Option<Arc<TcpTransport>>,
    remoting: Arc<Remoting>,
    /// The layers built over this cluster (the singleton registry), each installed once.
    extensions: Extensions,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("self", &self.inner.me)
            .finish()
    }
}

impl Cluster {
    /// Build this node's cluster on `system`: choose the membership, then bind a transport
    /// (see [`ClusterBuilder`]).
    pub fn builder(system: &ActorSystem) -> ClusterBuilder {
        ClusterBuilder::new(system)
    }

    /// Start membership from any provider (gossip, Kubernetes Leases, etcd) over `remoting`.
    fn start_with_provider(
        system: &ActorSystem,
        remoting: Arc<Remoting>,
        provider: Box<dyn MembershipProvider>,
        tcp: Option<Arc<TcpTransport>>,
    ) -> Result<Self, ClusterError> {
        let me = remoting.local().clone();
        let shared = Arc::new(Mutex::new(Shared {
            view: ClusterView {
                self_node: Some(me.clone()),
                ..ClusterView::default()
            },
            subscribers: Vec::new(),
            terminated: false,
            departure: tokio::sync::watch::channel(None).0,
            views: tokio::sync::watch::channel(ClusterView::default()).0,
        }));
        let sink = ViewSink {
            shared: Arc::clone(&shared),
            system: system.clone(),
            remoting: Arc::clone(&remoting),
        };
        let control = provider.start(system, sink)?;
        Ok(Self {
            inner: Arc::new(Inner {
                system: system.clone(),
                me,
                shared,
                control,
                transport: Arc::clone(remoting.transport()),
                tcp,
                remoting,
                extensions: Extensions::default(),
            }),
        })
    }

    /// This node's address and incarnation.
    #[must_use]
    pub fn self_node(&self) -> &UniqueAddress {
        &self.inner.me
    }

    /// This node's address.
    #[must_use]
    pub fn self_address(&self) -> &Address {
        &self.inner.me.address
    }

    /// The actor system the cluster runs in.
    #[must_use]
    pub fn system(&self) -> &ActorSystem {
        &self.inner.system
    }

    /// Remote messaging on this node: register message types, make refs to remote actors.
    #[must_use]
    pub fn remoting(&self) -> &Arc<Remoting> {
        &self.inner.remoting
    }

    /// The transport to the other nodes.
    #[must_use]
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.transport
    }

    /// The TCP transport, when the cluster was started with [`ClusterBuilder::bind_tcp`]: its
    /// counters ([`TcpTransport::stats`]) and bound socket address.
    #[must_use]
    pub fn tcp_transport(&self) -> Option<&Arc<TcpTransport>> {
        self.inner.tcp.as_ref()
    }

    /// The layers built over this cluster, each installed once.
    pub(crate) fn extensions(&self) -> &Extensions {
        &self.inner.extensions
    }

    /// The current view.
    #[must_use]
    pub fn view(&self) -> ClusterView {
        self.inner.shared.lock().view.clone()
    }

    /// All members (not removed), address-ordered.
    #[must_use]
    pub fn members(&self) -> Vec<Member> {
        self.inner.shared.lock().view.members.clone()
    }

    /// Up members this node considers reachable, address-ordered.
    #[must_use]
    pub fn up_members(&self) -> Vec<Member> {
        self.inner.shared.lock().view.up_members()
    }

    /// The first address-sorted up member.
    #[must_use]
    pub fn leader(&self) -> Option<Address> {
        self.inner.shared.lock().view.leader.clone()
    }

    /// This node's member entry, once it has joined.
    #[must_use]
    pub fn self_member(&self) -> Option<Member> {
        self.inner.shared.lock().view.self_member().cloned()
    }

    /// Whether this node's gossip has converged.
    #[must_use]
    pub fn is_converged(&self) -> bool {
        self.inner.shared.lock().view.converged
    }

    /// Whether this node has left the cluster for good (removed or downed).
    #[must_use]
    pub fn is_terminated(&self) -> bool {
        self.inner.shared.lock().terminated
    }

    /// Wait until this node's view satisfies `condition` (checked now and on every new view,
    /// including changes no event names, such as convergence).
    pub async fn wait_for_view(
        &self,
        mut condition: impl FnMut(&ClusterView) -> bool,
    ) -> ClusterView {
        let mut views = self.inner.shared.lock().views.subscribe();
        loop {
            {
                let view = self.view();
                if condition(&view) {
                    return view;
                }
            }
            if views.changed().await.is_err() {
                return self.view();
            }
        }
    }

    /// How this node left the cluster, once it has (see [`Departure`]).
    #[must_use]
    pub fn departure(&self) -> Option<Departure> {
        self.inner.shared.lock().departure.borrow().clone()
    }

    /// Wait until this node has left the cluster, and say how: gracefully, stopped, or
    /// fenced (downed, removed, its membership token lost). A host process turns a fence
    /// into a non-zero exit so that it restarts with a fresh incarnation.
    pub async fn departed(&self) -> Departure {
        let mut departure = self.inner.shared.lock().departure.subscribe();
        match departure.wait_for(Option::is_some).await {
            Ok(departure) => departure.clone().unwrap_or(Departure::Stopped),
            Err(_) => Departure::Stopped,
        }
    }

    /// The current view first, then every change, exactly once and in order.
    #[must_use]
    pub fn subscribe(&self) -> ClusterSubscription {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut shared = self.inner.shared.lock();
        let _ = tx.send(ClusterNotification::CurrentState(shared.view.clone()));
        shared.subscribers.push(Box::new(move |notification| {
            tx.send(notification.clone()).is_ok()
        }));
        ClusterSubscription { rx }
    }

    /// Subscribe an actor: it receives `M::from(notification)`, the current view first. The
    /// subscription ends when the actor terminates.
    pub fn subscribe_actor<M>(&self, actor: &ActorRef<M>)
    where
        M: From<ClusterNotification> + Send + 'static,
    {
        let actor = actor.clone();
        let mut shared = self.inner.shared.lock();
        actor.tell(M::from(ClusterNotification::CurrentState(
            shared.view.clone(),
        )));
        shared.subscribers.push(Box::new(move |notification| {
            actor.tell(M::from(notification.clone()));
            !actor.is_terminated()
        }));
    }

    /// Join the cluster that the node at `address` belongs to (instead of, or after, seeds).
    pub fn join(&self, address: Address) {
        self.inner.control.join(address);
    }

    /// Leave the cluster gracefully.
    pub fn leave(&self) {
        self.inner.control.leave();
    }

    /// Make the member at `address` leave gracefully (this node, or another: Akka's
    /// `leave(address)`).
    pub fn leave_member(&self, address: Address) {
        if address == self.inner.me.address {
            self.inner.control.leave();
        } else {
            self.inner.control.leave_member(address);
        }
    }

    /// Declare the member at `address` down.
    pub fn down(&self, address: Address) {
        self.inner.control.down(address);
    }

    /// Stop taking part at once (no leave; peers will find this node unreachable).
    pub fn shutdown(&self) {
        self.inner.control.shutdown();
    }

    /// Wait until the membership provider has stopped (after leaving, being downed, or
    /// `shutdown`).
    pub async fn terminated(&self) {
        self.inner.control.terminated().await;
    }
}
