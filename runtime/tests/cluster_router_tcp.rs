//! The cluster router over real TCP on 127.0.0.1: three nodes in one process, each with its own
//! `TcpTransport` and `Cluster`, a worker on every node and a router on the first.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe::Address;
use troupe::cluster::{Cluster, MemberStatus, MembershipOptions};
use troupe::cluster_router::{
    ClusterMailboxDepthAgent, ClusterRouter, ClusterRouterEvent, ClusterRouterOptions,
};
use troupe::remoting::RemoteMessage;
use troupe::routing::RoutingStrategy;
use troupe::transport::{ClusterSecret, TcpTransportOptions};
use troupe::{Actor, ActorError, ActorSystem, Context, Props};

const WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize, Deserialize)]
struct Job(u64);

impl RemoteMessage for Job {
    const MANIFEST: &'static str = "test.cluster_router_tcp.Job";
}

/// Reports `(its node, job, origin)` for every job.
struct Worker {
    node: Address,
    handled: mpsc::UnboundedSender<(Address, u64, Option<Address>)>,
}

impl Actor for Worker {
    type Msg = Job;

    async fn handle(&mut self, job: Job, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        let _ = self
            .handled
            .send((self.node.clone(), job.0, ctx.origin().cloned()));
        Ok(())
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

async fn three_nodes(
    handled: &mpsc::UnboundedSender<(Address, u64, Option<Address>)>,
) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for _ in 0..3 {
        let system = ActorSystem::new("router-tcp").unwrap();
        let config = TcpTransportOptions::new(
            "router-tcp",
            "127.0.0.1:0".parse().unwrap(),
            ClusterSecret::new("a shared secret of enough length").unwrap(),
        )
        .with_incarnation(rand::random());
        let settings = MembershipOptions::default().with_seeds(
            nodes
                .first()
                .map(|first| first.cluster.self_address().clone()),
        );
        let cluster = Cluster::builder(&system)
            .with_membership(settings)
            .with_self_seed_if_none()
            .with_inbound_capacity(1024)
            .bind_tcp(config)
            .await
            .unwrap();
        cluster.remoting().register::<Job>();
        let node = cluster.self_address().clone();
        let handled = handled.clone();
        system
            .spawn(
                "worker",
                Props::new(move || Worker {
                    node: node.clone(),
                    handled: handled.clone(),
                }),
            )
            .unwrap();
        nodes.push(Node { system, cluster });
    }
    for node in &nodes {
        tokio::time::timeout(
            WAIT,
            node.cluster.wait_for_view(|v| {
                v.converged
                    && v.members
                        .iter()
                        .filter(|m| m.status == MemberStatus::Up)
                        .count()
                        == 3
            }),
        )
        .await
        .expect("three nodes up");
    }
    nodes
}

/// Grouped so `cargo nextest run -p troupe cluster_router` selects these tests.
mod cluster_router {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn smallest_mailbox_routes_over_tcp_with_depths_from_every_node() {
        let (tx, mut handled) = mpsc::unbounded_channel();
        let nodes = three_nodes(&tx).await;
        let _serving: Vec<_> = nodes[1..]
            .iter()
            .map(|n| ClusterMailboxDepthAgent::serve(&n.cluster).unwrap())
            .collect();
        let mut events = nodes[0]
            .system
            .event_stream()
            .subscribe::<ClusterRouterEvent>();
        let options = ClusterRouterOptions::new(
            &nodes[0].cluster,
            RoutingStrategy::SmallestMailbox,
            "/user/worker",
        )
        .with_mailbox_depth_refresh(Duration::from_millis(50));
        let router = nodes[0]
            .system
            .spawn("router", ClusterRouter::factory(options).unwrap())
            .unwrap();
        let all: BTreeSet<Address> = nodes
            .iter()
            .map(|n| n.cluster.self_address().clone())
            .collect();
        let mut sampled = BTreeSet::new();
        tokio::time::timeout(WAIT, async {
            while sampled != all {
                if let Some(ClusterRouterEvent::DepthSample(sample)) = events.recv().await {
                    sampled.insert(sample.node);
                }
            }
        })
        .await
        .expect("a depth sample from every node, its own included");

        for id in 0..300 {
            router.tell(Job(id));
        }
        let mut per_node: BTreeMap<Address, usize> = BTreeMap::new();
        let mut ids = BTreeSet::new();
        for _ in 0..300 {
            let (node, id, origin) = tokio::time::timeout(WAIT, handled.recv())
                .await
                .expect("every job handled")
                .unwrap();
            assert_eq!(origin.as_ref(), Some(nodes[0].cluster.self_address()));
            *per_node.entry(node).or_default() += 1;
            ids.insert(id);
        }
        assert_eq!(ids.len(), 300, "each job exactly once");
        // Idle workers report similar depths: the router's own sends spread the load.
        assert_eq!(per_node.len(), 3, "{per_node:?}");
        assert!(per_node.values().all(|&n| n >= 50), "{per_node:?}");
    }
}
