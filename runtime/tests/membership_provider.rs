//! The membership provider seam: a provider other than gossip (here a scripted one, standing in
//! for Kubernetes-Lease or etcd membership) produces the same views, events and subscriptions.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use troupe::ActorSystem;
use troupe::cluster::{
    Cluster, ClusterError, ClusterNotification, ClusterView, Member, MemberStatus,
    MembershipControl, MembershipProvider, ViewSink,
};
use troupe::transport::SimNetwork;
use troupe::{Address, UniqueAddress};

fn node(port: u16) -> UniqueAddress {
    UniqueAddress {
        address: Address::new("scripted", "10.1.0.1", port),
        incarnation: u64::from(port),
    }
}

fn member(port: u16, status: MemberStatus) -> Member {
    Member {
        node: node(port),
        status,
        roles: BTreeSet::new(),
    }
}

/// A provider whose views are pushed by the test.
#[derive(Clone, Default)]
struct Scripted {
    sink: Arc<Mutex<Option<ViewSink>>>,
    stopped: Arc<Notify>,
}

impl MembershipProvider for Scripted {
    fn start(
        self: Box<Self>,
        _system: &ActorSystem,
        sink: ViewSink,
    ) -> Result<Arc<dyn MembershipControl>, ClusterError> {
        *self.sink.lock() = Some(sink);
        Ok(Arc::new(*self))
    }
}

impl MembershipControl for Scripted {
    fn join(&self, _via: Address) {}
    fn leave(&self) {}
    fn down(&self, _node: Address) {}
    fn leave_member(&self, _node: Address) {}
    fn shutdown(&self) {
        self.stopped.notify_waiters();
    }
    fn terminated(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.stopped.notified())
    }
}

impl Scripted {
    fn publish(&self, members: Vec<Member>, unreachable: &[u16]) {
        let leader = members
            .iter()
            .find(|m| m.status == MemberStatus::Up && !unreachable.contains(&m.node.address.port))
            .map(|m| m.node.address.clone());
        let view = ClusterView {
            self_node: Some(node(1)),
            members,
            unreachable: unreachable.iter().map(|&p| node(p)).collect(),
            observed_by: Vec::new(),
            leader,
            converged: true,
        };
        self.sink.lock().as_ref().expect("started").publish(view);
    }
}

#[tokio::test(start_paused = true)]
async fn another_provider_yields_the_same_views_and_ordered_events() {
    let system = ActorSystem::new("scripted").unwrap();
    let network = SimNetwork::new(1);
    let provider = Scripted::default();
    let cluster = Cluster::builder(&system)
        .with_provider(Box::new(provider.clone()))
        .with_inbound_capacity(16)
        .start_on(|inbound| Arc::new(network.join(node(1), inbound)))
        .unwrap();

    provider.publish(
        vec![
            member(1, MemberStatus::Up),
            member(2, MemberStatus::Joining),
        ],
        &[],
    );
    let mut subscription = cluster.subscribe();
    let Some(ClusterNotification::CurrentState(state)) = subscription.recv().await else {
        panic!("the current state comes first")
    };
    assert_eq!(state.members.len(), 2);

    provider.publish(
        vec![member(1, MemberStatus::Up), member(2, MemberStatus::Up)],
        &[],
    );
    provider.publish(
        vec![member(1, MemberStatus::Up), member(2, MemberStatus::Up)],
        &[2],
    );
    provider.publish(vec![member(1, MemberStatus::Up)], &[]);
    let mut kinds = Vec::new();
    while let Some(ClusterNotification::Event(event)) = subscription.try_recv() {
        kinds.push(event.kind());
    }
    assert_eq!(kinds, ["MemberUp", "MemberUnreachable", "MemberRemoved"]);
    assert_eq!(cluster.up_members().len(), 1);
    assert_eq!(cluster.leader(), Some(node(1).address));
    assert!(matches!(
        cluster.view().members.as_slice(),
        [m] if m.node == node(1)
    ));
}
