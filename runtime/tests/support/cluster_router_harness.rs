//! The cluster router tests' harness: a simulated cluster (paused clock, seeded network), a
//! worker that reports every job it handles — with the node it ran on and where the message came
//! from — and waits on router events.
//!
//! Include with `#[path = "support/cluster_router_harness.rs"] mod harness;`.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use troupe::Address;
use troupe::cluster_router::{ClusterRouter, ClusterRouterEvent, ClusterRouterOptions};
use troupe::remoting::RemoteMessage;
use troupe::routing::RoutingStrategy;
use troupe::testkit::{SimCluster, sim_address};
use troupe::{Actor, ActorError, ActorRef, Context, Props, Subscription};

/// How long (virtual time) a test waits for anything.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

/// The routed message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) key: String,
}

impl RemoteMessage for Job {
    const MANIFEST: &'static str = "test.cluster_router.Job";
}

impl Job {
    pub(crate) fn new(id: u64) -> Self {
        Self {
            id,
            key: format!("key-{id}"),
        }
    }

    pub(crate) fn keyed(id: u64, key: &str) -> Self {
        Self {
            id,
            key: key.to_owned(),
        }
    }
}

/// One job as a worker handled it.
#[derive(Debug, Clone)]
pub(crate) struct Handled {
    /// The index of the node whose worker handled it.
    pub(crate) node: usize,
    pub(crate) id: u64,
    pub(crate) key: String,
    /// The transport-verified origin (`None`: told on the worker's own node, not via remoting).
    pub(crate) origin: Option<Address>,
}

/// A worker at `/user/worker`: optionally waits for a permit before each job (so its mailbox
/// fills while the test holds the permits back), then reports the job.
pub(crate) struct Worker {
    node: usize,
    handled: mpsc::UnboundedSender<Handled>,
    gate: Option<Arc<Semaphore>>,
}

impl Actor for Worker {
    type Msg = Job;

    async fn handle(&mut self, job: Job, ctx: &mut Context<Self>) -> Result<(), ActorError> {
        if let Some(gate) = &self.gate {
            gate.acquire().await?.forget();
        }
        let _ = self.handled.send(Handled {
            node: self.node,
            id: job.id,
            key: job.key,
            origin: ctx.origin().cloned(),
        });
        Ok(())
    }
}

/// Start one node per entry of `roles` and wait until all are up.
pub(crate) async fn cluster(seed: u64, roles: &[&[&str]]) -> SimCluster {
    let mut sim = SimCluster::new(seed);
    for node_roles in roles {
        sim.start_node(node_roles);
    }
    sim.wait_all_up(roles.len(), LIMIT).await;
    for node in sim.nodes() {
        node.cluster.remoting().register::<Job>();
    }
    sim
}

/// Start one more node with `roles` and wait until every live node sees it up.
pub(crate) async fn add_node(sim: &mut SimCluster, roles: &[&str]) -> usize {
    let index = sim.start_node(roles);
    sim.node(index).cluster.remoting().register::<Job>();
    let count = sim.live().count();
    sim.wait_all_up(count, LIMIT).await;
    index
}

/// Spawn a worker on node `index`; `gate` holds it before each job.
pub(crate) fn spawn_worker(
    sim: &SimCluster,
    index: usize,
    handled: &mpsc::UnboundedSender<Handled>,
    gate: Option<Arc<Semaphore>>,
) -> ActorRef<Job> {
    let handled = handled.clone();
    sim.node(index)
        .system
        .spawn(
            "worker",
            Props::new(move || Worker {
                node: index,
                handled: handled.clone(),
                gate: gate.clone(),
            }),
        )
        .expect("spawn worker")
}

/// Options for a router on node `index` over `/user/worker`.
pub(crate) fn options(
    sim: &SimCluster,
    index: usize,
    strategy: RoutingStrategy,
) -> ClusterRouterOptions<Job> {
    ClusterRouterOptions::new(&sim.node(index).cluster, strategy, "/user/worker")
        .with_seed(sim.seed())
}

/// Spawn a router built from `options` on node `index` as `/user/router`.
pub(crate) fn spawn_router(
    sim: &SimCluster,
    index: usize,
    options: ClusterRouterOptions<Job>,
) -> ActorRef<Job> {
    sim.node(index)
        .system
        .spawn(
            "router",
            ClusterRouter::factory(options).expect("valid options"),
        )
        .expect("spawn router")
}

/// The next `n` handled jobs, sorted by job id.
pub(crate) async fn handled(rx: &mut mpsc::UnboundedReceiver<Handled>, n: usize) -> Vec<Handled> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let next = tokio::time::timeout(LIMIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} jobs handled", all.len()))
            .expect("workers gone");
        all.push(next);
    }
    all.sort_by_key(|h| h.id);
    all
}

/// The node index of each handled job, in job id order.
pub(crate) fn nodes_of(handled: &[Handled]) -> Vec<usize> {
    handled.iter().map(|h| h.node).collect()
}

/// Nothing more was handled after `settle` of virtual time.
pub(crate) async fn assert_quiet(rx: &mut mpsc::UnboundedReceiver<Handled>, settle: Duration) {
    tokio::time::sleep(settle).await;
    if let Ok(extra) = rx.try_recv() {
        panic!("unexpected job handled: {extra:?}");
    }
}

/// Wait for the next router event matching `predicate`.
pub(crate) async fn wait_event(
    events: &mut Subscription<ClusterRouterEvent>,
    what: &str,
    mut predicate: impl FnMut(&ClusterRouterEvent) -> bool,
) -> ClusterRouterEvent {
    tokio::time::timeout(LIMIT, async {
        loop {
            let event = events.recv().await.expect("event stream gone");
            if predicate(&event) {
                return event;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Wait until the router's routee set is exactly the nodes `indices`.
pub(crate) async fn wait_routees(events: &mut Subscription<ClusterRouterEvent>, indices: &[usize]) {
    let mut expected: Vec<Address> = indices.iter().map(|&i| sim_address(i)).collect();
    expected.sort();
    wait_event(events, &format!("routee set {indices:?}"), |event| {
        matches!(event, ClusterRouterEvent::RouteeSetChanged { routees, .. } if *routees == expected)
    })
    .await;
}

/// Wait until the router has received a depth sample of `depth` from node `index`.
pub(crate) async fn wait_depth(
    events: &mut Subscription<ClusterRouterEvent>,
    index: usize,
    depth: usize,
) {
    let node = sim_address(index);
    wait_event(events, &format!("depth {depth} from node {index}"), |event| {
        matches!(event, ClusterRouterEvent::DepthSample(sample) if sample.node == node && sample.depth == depth)
    })
    .await;
}
