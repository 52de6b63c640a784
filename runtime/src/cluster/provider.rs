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

    /// This node has left the cluster for good.
    pub fn mark_terminated(&self) {
        self.shared.lock().terminated = true;
    }

    /// This node's remoting (providers that talk to peers use its channels).
    #[must_use]
    pub fn remoting(&self) -> &Arc<Remoting> {
        &self.remoting
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
