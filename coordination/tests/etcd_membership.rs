//! Membership on etcd (`EtcdMembership` behind `ClusterBuilder::with_provider`): nodes find each
//! other through the watched prefix, a crashed node ages out after its TTL, a leaving node
//! disappears at once without being fenced, and a node whose key is deleted is fenced — it
//! drops out of its own view and never re-registers.

#[path = "support/services.rs"]
mod services;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use troupe::ActorSystem;
use troupe::cluster::Cluster;
use troupe::lease::LeaseSettings;
use troupe::transport::SimNetwork;
use troupe::{Address, UniqueAddress};
use troupe_coordination::etcd_membership::{EtcdMembership, MembershipHealth};

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    health: watch::Receiver<MembershipHealth>,
    node: UniqueAddress,
}

fn settings() -> LeaseSettings {
    LeaseSettings::new(Duration::from_secs(2), Duration::from_millis(500)).unwrap()
}

async fn start(network: &SimNetwork, prefix: &str, port: u16) -> Node {
    let node = UniqueAddress {
        address: Address::new("etcd-members", "10.2.0.1", port),
        incarnation: u64::from(port) * 7,
    };
    let system = ActorSystem::new("etcd-members").unwrap();
    let provider = EtcdMembership::new(
        services::etcd_client().await,
        prefix,
        &["worker"],
        settings(),
    )
    .unwrap();
    let health = provider.health();
    let cluster = Cluster::builder(&system)
        .with_provider(Box::new(provider))
        .with_inbound_capacity(64)
        .start_on(|inbound| Arc::new(network.join(node.clone(), inbound)))
        .unwrap();
    Node {
        system,
        cluster,
        health,
        node,
    }
}

fn up(node: &Node) -> Vec<u16> {
    node.cluster
        .up_members()
        .iter()
        .map(|m| m.node.address.port)
        .collect()
}

async fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_age_out_leave_and_a_deleted_key_fences_its_node() {
    let prefix = services::etcd_prefix("members");
    let network = SimNetwork::new(5);
    let mut nodes = Vec::new();
    for port in [1, 2, 3, 4] {
        nodes.push(start(&network, &prefix, port).await);
    }
    for node in &nodes {
        // The membership view and the health watch are updated by separate tasks: wait for both.
        wait_for("all four up everywhere", Duration::from_secs(10), || {
            up(node) == [1, 2, 3, 4] && *node.health.borrow() == MembershipHealth::Up
        })
        .await;
        assert_eq!(node.cluster.leader(), Some(nodes[0].node.address.clone()));
        assert_eq!(*node.health.borrow(), MembershipHealth::Up);
        assert!(
            node.cluster.up_members()[0].roles.contains("worker"),
            "roles travel with the record"
        );
    }

    // A crash (no leave): the others age node 4 out once its key expires, not before.
    nodes[3].cluster.shutdown();
    let crashed = Instant::now();
    wait_for("node 4 aged out", Duration::from_secs(8), || {
        up(&nodes[0]) == [1, 2, 3]
    })
    .await;
    let aged = crashed.elapsed();
    assert!(
        aged >= settings().ttl() - settings().renew_interval(),
        "aged out after {aged:?}, before its ttl could pass"
    );

    // A graceful leave: gone at once, and not fenced.
    nodes[2].cluster.leave();
    let took = wait_for("node 3 gone", Duration::from_secs(5), || {
        up(&nodes[0]) == [1, 2]
    })
    .await;
    assert!(
        took < settings().ttl(),
        "a leave revokes at once ({took:?})"
    );
    assert_eq!(*nodes[2].health.borrow(), MembershipHealth::Left);
    assert_eq!(
        nodes[2].cluster.departure(),
        Some(troupe::cluster::Departure::Left)
    );

    // Node 2's key is deleted (as `down` from a peer does): it is fenced, leaves its own view,
    // and never re-registers.
    nodes[0].cluster.down(nodes[1].node.address.clone());
    let mut health = nodes[1].health.clone();
    tokio::time::timeout(
        Duration::from_secs(5),
        health.wait_for(|h| matches!(h, MembershipHealth::Fenced(_))),
    )
    .await
    .expect("fenced in time")
    .unwrap();
    assert!(
        nodes[1].cluster.departure().is_some_and(|d| d.is_fenced()),
        "{:?}",
        nodes[1].cluster.departure()
    );
    wait_for("node 2 out of its own view", Duration::from_secs(5), || {
        !up(&nodes[1]).contains(&2)
    })
    .await;
    wait_for(
        "node 2 out of node 1's view",
        Duration::from_secs(5),
        || up(&nodes[0]) == [1],
    )
    .await;
    tokio::time::sleep(settings().renew_interval() * 3).await;
    assert_eq!(up(&nodes[0]), [1], "a fenced node does not come back");

    for node in nodes {
        node.cluster.shutdown();
        node.system.shutdown().await;
    }
}
