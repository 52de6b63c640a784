//! Virtual actors over real TCP on 127.0.0.1: three nodes in one process, each with its own
//! `TcpTransport`, `Cluster` and host, sharing one in-memory directory (each node through its
//! own connection, which a kill cuts).

#[path = "support/virtual_harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use troupe::cluster::{Cluster, MemberStatus, MembershipOptions};
use troupe::directory::{Directory, InMemoryDirectory};
use troupe::transport::{ClusterSecret, TcpTransportOptions};
use troupe::virtual_actor::{VirtualActorOptions, VirtualActorType, VirtualActors};
use troupe::{ActorSystem, Address};

use harness::{Cart, CartMsg, Life, Severable};

const WAIT: Duration = Duration::from_secs(30);

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    directory: Severable,
    carts: VirtualActorType<CartMsg>,
}

impl Node {
    fn address(&self) -> &Address {
        self.cluster.self_address()
    }

    /// Kill it as a crash does: its directory connection and its sockets go first, so nothing
    /// it does while stopping (releasing its claims) reaches anyone.
    async fn kill(&self) {
        self.directory.cut();
        if let Some(tcp) = self.cluster.tcp_transport() {
            tcp.shutdown().await;
        }
        self.cluster.shutdown();
        self.system.shutdown().await;
    }
}

async fn three_nodes(
    directory: &Arc<InMemoryDirectory>,
    lives: &mpsc::UnboundedSender<Life>,
) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for _ in 0..3 {
        let system = ActorSystem::new("virtual-tcp").unwrap();
        let config = TcpTransportOptions::new(
            "virtual-tcp",
            "127.0.0.1:0".parse().unwrap(),
            ClusterSecret::new("a shared secret of enough length").unwrap(),
        )
        .with_incarnation(rand::random());
        let settings = MembershipOptions::default()
            .with_down_after(Some(Duration::from_secs(1)))
            .with_seeds(
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
        let connection = Severable::new(Arc::clone(directory) as Arc<dyn Directory>);
        let carts = VirtualActors::get(&cluster)
            .start(
                "cart",
                Cart::factory(cluster.self_address().clone(), lives.clone()),
                VirtualActorOptions::new(Arc::new(connection.clone())),
            )
            .unwrap();
        nodes.push(Node {
            system,
            cluster,
            directory: connection,
            carts,
        });
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
    for node in &nodes {
        hosts_see(node, 3).await;
    }
    nodes
}

/// Wait until `node`'s host has `count` members in its view.
async fn hosts_see(node: &Node, count: usize) {
    tokio::time::timeout(WAIT, async {
        loop {
            if node
                .carts
                .status()
                .await
                .is_some_and(|s| s.members.len() == count)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{}'s host sees {count} members", node.address()));
}

async fn node_of(node: &Node, key: &str) -> String {
    node.carts
        .get(key)
        .unwrap()
        .ask(|reply| CartMsg::Node { reply })
        .timeout(WAIT)
        .await
        .unwrap_or_else(|e| panic!("ask {key} from {}: {e}", node.address()))
}

/// The keys each node's host runs.
async fn active(nodes: &[&Node]) -> BTreeMap<String, Vec<String>> {
    let mut owners: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in nodes {
        for key in node.carts.status().await.unwrap().active {
            owners
                .entry(key)
                .or_default()
                .push(node.address().to_string());
        }
    }
    owners
}

/// Grouped so `cargo nextest run -p troupe virtual_actor` selects these tests.
mod virtual_actor {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_key_is_active_on_exactly_one_node_and_messages_from_every_node_reach_it() {
        let directory = Arc::new(InMemoryDirectory::new());
        let (tx, mut lives) = mpsc::unbounded_channel();
        let nodes = three_nodes(&directory, &tx).await;
        let keys: Vec<String> = (0..12).map(|k| format!("cart-{k}")).collect();
        for (i, node) in nodes.iter().enumerate() {
            for key in &keys {
                node.carts.get(key).unwrap().tell(CartMsg::Add {
                    from: i as u64,
                    amount: 1,
                });
            }
        }
        let mut hosts = BTreeMap::new();
        for key in &keys {
            let host = node_of(&nodes[0], key).await;
            for node in &nodes[1..] {
                assert_eq!(
                    node_of(node, key).await,
                    host,
                    "{key}: every node reaches one host"
                );
            }
            // Each node's tells arrive in order behind the asks that follow them; all three are in.
            let mut senders = nodes[2]
                .carts
                .get(key)
                .unwrap()
                .ask(|reply| CartMsg::Senders { reply })
                .timeout(WAIT)
                .await
                .unwrap();
            senders.sort_unstable();
            assert_eq!(senders, vec![0, 1, 2], "{key}: a tell from every node");
            let claim = directory
                .lookup(&format!("virtual/cart/{key}"))
                .await
                .unwrap()
                .expect("claimed");
            assert!(
                claim.host.starts_with(&host),
                "{key}: claim {claim:?} names {host}"
            );
            hosts.insert(key.clone(), host);
        }
        let owners = active(&nodes.iter().collect::<Vec<_>>()).await;
        for key in &keys {
            assert_eq!(
                owners.get(key),
                Some(&vec![hosts[key].clone()]),
                "{key}: one activation"
            );
        }
        let mut started = BTreeMap::new();
        while let Ok(life) = lives.try_recv() {
            if let Life::Started { key, .. } = life {
                *started.entry(key).or_insert(0) += 1;
            }
        }
        assert!(
            started.values().all(|n| *n == 1),
            "activations started once each: {started:?}"
        );
        assert_eq!(started.len(), keys.len());
        let spread: std::collections::BTreeSet<_> = hosts.values().collect();
        assert!(
            spread.len() >= 2,
            "activation-count placement spreads keys: {hosts:?}"
        );
        for node in &nodes {
            node.system.shutdown().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn killing_the_node_that_hosts_a_key_reactivates_it_on_a_survivor() {
        let directory = Arc::new(InMemoryDirectory::new());
        let (tx, _lives) = mpsc::unbounded_channel();
        let nodes = three_nodes(&directory, &tx).await;
        let key = "cart-k";
        nodes[0]
            .carts
            .get(key)
            .unwrap()
            .tell(CartMsg::Add { from: 0, amount: 5 });
        let host = node_of(&nodes[1], key).await;
        let (victim, survivors): (Vec<&Node>, Vec<&Node>) =
            nodes.iter().partition(|n| n.address().to_string() == host);
        assert_eq!(victim.len(), 1, "{host} is one of the nodes");
        victim[0].kill().await;
        for survivor in &survivors {
            hosts_see(survivor, 2).await;
        }
        // Until a survivor has evicted the dead host's claim, a message for the key is a dead
        // letter (its owner is not a member) and the ask fails fast; then it reactivates.
        let started = tokio::time::Instant::now();
        let new_host = loop {
            let attempt = survivors[0]
                .carts
                .get(key)
                .unwrap()
                .ask(|reply| CartMsg::Node { reply })
                .timeout(Duration::from_secs(2))
                .await;
            match attempt {
                Ok(node) => break node,
                Err(error) => {
                    assert!(
                        started.elapsed() < WAIT,
                        "no reactivation within {WAIT:?}: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        assert_ne!(new_host, host, "reactivated elsewhere");
        assert!(
            survivors
                .iter()
                .any(|s| s.address().to_string() == new_host)
        );
        for (i, survivor) in survivors.iter().enumerate() {
            survivor.carts.get(key).unwrap().tell(CartMsg::Add {
                from: 10 + i as u64,
                amount: 1,
            });
            assert_eq!(node_of(survivor, key).await, new_host);
        }
        let mut senders = survivors[1]
            .carts
            .get(key)
            .unwrap()
            .ask(|reply| CartMsg::Senders { reply })
            .timeout(WAIT)
            .await
            .unwrap();
        senders.sort_unstable();
        assert_eq!(
            senders,
            vec![10, 11],
            "a fresh activation, reached from both survivors"
        );
        let owners = active(&survivors).await;
        assert_eq!(owners.get(key), Some(&vec![new_host.clone()]));
        let claim = directory
            .lookup(&format!("virtual/cart/{key}"))
            .await
            .unwrap()
            .unwrap();
        assert!(claim.host.starts_with(&new_host), "{claim:?}");
        for survivor in survivors {
            survivor.system.shutdown().await;
        }
    }
}
