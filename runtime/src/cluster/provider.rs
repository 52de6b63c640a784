//! The membership provider seam: whatever decides who is in the cluster — gossip (built in),
//! Kubernetes Leases or etcd leases — publishes [`ClusterView`]s through a [`ViewSink`], and
//! the cluster turns consecutive views into the same events, views and subscriptions.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Shared;
use super::error::ClusterError;
use super::events::ClusterView;
use super::member::MemberStatus;
use crate::Address;
use crate::remoting::Remoting;
use crate::system::ActorSystem;

/// Where a provider publishes each new view of the cluster.
#[derive(Clone)]
pub struct ViewSink {
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) system: ActorSystem,
    pub(crate) remoting: Arc<Remoting>,
}

impl std::fmt::Debug for ViewSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewSink")
            .field("node", self.remoting.local())
            .finish()
    }
}

impl ViewSink {
    /// Publish `view`: subscribers get the difference to the previous view as events; members
    /// that disappeared are forgotten by remoting (their watches fire `Terminated`) and the
    /// transport.
    pub fn publish(&self, view: ClusterView) {
        let mut shared = self.shared.lock();
        if shared.view == view {
            return;
        }
        let removed: Vec<Address> = shared
            .view
            .members
            .iter()
            .filter(|m| !view.members.iter().any(|n| n.node == m.node))
            .map(|m| m.node.address.clone())
            .collect();
        shared.publish(view, &self.system);
        drop(shared);
        for address in removed {
            self.remoting.node_removed(&address);
            if address != self.remoting.local().address {
                self.remoting.transport().disconnect(&address);
            }
        }
    }

    /// This node has left the cluster for good, in the way `departure` says. The first call
    /// counts; later ones change nothing (a shutdown after a fence is still a fence).
    pub fn depart(&self, departure: Departure) {
        let mut shared = self.shared.lock();
        shared.terminated = true;
        if shared.departure.borrow().is_none() {
            match &departure {
                Departure::Fenced { reason } => {
                    tracing::error!(node = %self.remoting.local(), %reason, "fenced: this node lost its place in the cluster and must restart with a fresh incarnation");
                }
                Departure::Left => {
                    tracing::info!(node = %self.remoting.local(), "left the cluster")
                }
                Departure::Stopped => {
                    tracing::info!(node = %self.remoting.local(), "stopped taking part in the cluster");
                }
            }
            shared.departure.send_replace(Some(departure));
        }
    }

    /// This node's remoting (providers that talk to peers use its channels).
    #[must_use]
    pub fn remoting(&self) -> &Arc<Remoting> {
        &self.remoting
    }
}

/// How this node's membership ended: what [`Cluster::departed`](super::Cluster::departed)
/// resolves to. A host process turns it into its exit: `Left` and `Stopped` are clean,
/// `Fenced` means this identity is forfeit (peers may already have taken over what it hosted)
/// and the process must restart as a fresh incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Departure {
    /// It left gracefully: its own `leave`, or a leave another member asked of it.
    Left,
    /// It lost its place without leaving: downed or removed by the others, its membership
    /// token (a Kubernetes Lease, an etcd key) deleted, or not renewed in time.
    Fenced {
        /// What happened, for logs and the control plane.
        reason: String,
    },
    /// It stopped taking part without leaving (`shutdown`); peers will find it unreachable.
    Stopped,
}

impl Departure {
    /// The departure of a node whose own last status in the cluster was `status` (`None`:
    /// it never became a member) and that had (`true`) or had not asked to leave.
    #[must_use]
    pub fn after(status: Option<MemberStatus>, asked_to_leave: bool) -> Self {
        match status {
            _ if asked_to_leave => Self::Left,
            None | Some(MemberStatus::Leaving | MemberStatus::Exiting) => Self::Left,
            Some(MemberStatus::Down) => Self::Fenced {
                reason: "downed by the cluster".to_owned(),
            },
            Some(status) => Self::Fenced {
                reason: format!("removed from the cluster while {status}"),
            },
        }
    }

    /// Whether this identity is forfeit (the process should exit non-zero and restart).
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Fenced { .. })
    }
}

/// What the `Cluster` handle asks of a running provider.
pub trait MembershipControl: Send + Sync + 'static {
    /// Join the cluster `via` belongs to.
    fn join(&self, via: Address);
    /// Leave gracefully.
    fn leave(&self);
    /// Declare the member at `node` down.
    fn down(&self, node: Address);
    /// Make the member at `node` leave gracefully.
    fn leave_member(&self, node: Address);
    /// Stop taking part at once (no graceful leave).
    fn shutdown(&self);
    /// Resolves when the provider has stopped.
    fn terminated(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A source of membership for one node.
pub trait MembershipProvider: Send + 'static {
    /// Start producing views into `sink`.
    fn start(
        self: Box<Self>,
        system: &ActorSystem,
        sink: ViewSink,
    ) -> Result<Arc<dyn MembershipControl>, ClusterError>;
}
