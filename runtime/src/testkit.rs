//! A multi-node test harness: N complete nodes (actor system, remoting, cluster daemon) in one
//! process over a [`SimNetwork`] that can delay, drop, partition (asymmetrically too) and kill,
//! with every random choice derived from one seed.
//!
//! Run it on a single-threaded runtime with a paused clock
//! (`#[tokio::test(start_paused = true)]`): the network, the daemons' tick timers and the
//! failure detectors then all run on virtual time, so a minute of cluster life takes
//! milliseconds and a failing seed replays exactly. Print [`SimCluster::seed`] when a scenario
//! fails.
//!
//! ```no_run
//! # async fn example() {
//! use std::time::Duration;
//! use troupe::testkit::SimCluster;
//!
//! let mut sim = SimCluster::new(42);
//! for _ in 0..3 {
//!     sim.start_node(&[]);
//! }
//! sim.wait_all_up(3, Duration::from_secs(30)).await;
//! sim.kill(2);
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{Cluster, ClusterView, MemberStatus, MembershipOptions};
use crate::system::ActorSystem;
use crate::transport::SimNetwork;
use crate::{Address, UniqueAddress};

/// One simulated node.
#[derive(Debug, Clone)]
pub struct SimNode {
    /// Its actor system.
    pub system: ActorSystem,
    /// Its cluster handle.
    pub cluster: Cluster,
    /// Its identity.
    pub node: UniqueAddress,
    /// False once killed.
    pub alive: bool,
}

/// N nodes over one simulated network, driven by one seed.
pub struct SimCluster {
    seed: u64,
    rng: SmallRng,
    network: SimNetwork,
    settings: MembershipOptions,
    nodes: Vec<SimNode>,
}

impl fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimCluster")
            .field("seed", &self.seed)
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

/// The address of simulated node `index`.
#[must_use]
pub fn sim_address(index: usize) -> Address {
    Address::new(
        "sim",
        &format!("10.0.{}.{}", index / 250, index % 250 + 1),
        2552,
    )
}

impl SimCluster {
    /// A harness whose network, incarnations and gossip choices derive from `seed`. Node 0 is
    /// the first seed node. Must run inside a tokio runtime.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self::with_settings(seed, MembershipOptions::default())
    }

    /// Like [`SimCluster::new`] with these membership settings (seeds and roles are set per
    /// node).
    #[must_use]
    pub fn with_settings(seed: u64, settings: MembershipOptions) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let network = SimNetwork::new(rng.random());
        Self {
            seed,
            rng,
            network,
            settings,
            nodes: Vec::new(),
        }
    }

    /// The seed everything derives from.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The simulated network (partition, block, heal, link settings, trace).
    #[must_use]
    pub fn network(&self) -> &SimNetwork {
        &self.network
    }

    /// The nodes, in start order.
    #[must_use]
    pub fn nodes(&self) -> &[SimNode] {
        &self.nodes
    }

    /// Node `index`.
    #[must_use]
    pub fn node(&self, index: usize) -> &SimNode {
        &self.nodes[index]
    }

    /// Start a new node with `roles`; returns its index.
    pub fn start_node(&mut self, roles: &[&str]) -> usize {
        let index = self.nodes.len();
        let node = self.boot(index, roles);
        self.nodes.push(node);
        index
    }

    /// Start a fresh process (a new incarnation) at node `index`'s address.
    pub fn restart_node(&mut self, index: usize, roles: &[&str]) {
        self.kill(index);
        self.nodes[index] = self.boot(index, roles);
    }

    fn boot(&mut self, index: usize, roles: &[&str]) -> SimNode {
        let node = UniqueAddress {
            address: sim_address(index),
            incarnation: self.rng.random(),
        };
        let system = ActorSystem::new("sim").expect("valid system name");
        let settings = self
            .settings
            .clone()
            .with_seeds([sim_address(0)])
            .with_roles(roles.iter().copied());
        let cluster = Cluster::builder(&system)
            .with_membership(settings)
            .with_inbound_capacity(16_384)
            .with_rng_seed(self.rng.random())
            .start_on(|inbound| std::sync::Arc::new(self.network.join(node.clone(), inbound)))
            .expect("valid cluster settings");
        SimNode {
            system,
            cluster,
            node,
            alive: true,
        }
    }

    /// Kill node `index`: it stops sending and receiving at once, like a SIGKILL.
    pub fn kill(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        if node.alive {
            node.alive = false;
            self.network.kill(&node.node.address);
            node.cluster.shutdown();
        }
    }

    /// Cut every link between the two sides, both ways.
    pub fn partition(&self, side_a: &[usize], side_b: &[usize]) {
        let a: Vec<Address> = side_a.iter().map(|&i| sim_address(i)).collect();
        let b: Vec<Address> = side_b.iter().map(|&i| sim_address(i)).collect();
        self.network.partition(&a, &b);
    }

    /// Cut the link from `from` to `to` only.
    pub fn block(&self, from: usize, to: usize) {
        self.network.block(&sim_address(from), &sim_address(to));
    }

    /// Restore every link.
    pub fn heal(&self) {
        self.network.heal();
    }

    /// The indices of live nodes.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].alive)
    }

    /// Node `index`'s current view.
    #[must_use]
    pub fn view(&self, index: usize) -> ClusterView {
        self.nodes[index].cluster.view()
    }

    /// Advance virtual time until `condition` holds, checking every 10 ms of virtual time.
    ///
    /// On the paused clock this is not a sleep-and-poll: each step is a deterministic advance
    /// of the simulation's clock, which is what lets the timers, the network and the failure
    /// detectors make progress at all.
    ///
    /// # Panics
    /// With the seed in the message, when `limit` passes first.
    pub async fn wait_until(
        &self,
        limit: Duration,
        mut condition: impl FnMut(&Self) -> bool,
    ) -> Duration {
        let start = tokio::time::Instant::now();
        loop {
            if condition(self) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < limit,
                "seed {}: condition not reached within {limit:?}; views: {:#?}",
                self.seed,
                self.live().map(|i| self.view(i)).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Run the simulation for `duration` of virtual time.
    pub async fn run_for(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }

    /// Wait until every live node sees exactly `count` members, all up, converged and
    /// reachable.
    pub async fn wait_all_up(&self, count: usize, limit: Duration) -> Duration {
        self.wait_until(limit, |sim| {
            sim.live().count() == count
                && sim.live().all(|i| {
                    let view = sim.view(i);
                    view.converged
                        && view.unreachable.is_empty()
                        && view.members.len() == count
                        && view.members.iter().all(|m| m.status == MemberStatus::Up)
                })
        })
        .await
    }
}
