//! Cluster router figures, printed as tables:
//!
//! 1. the routing decision per message for each strategy — the router's hot path without the
//!    send: pick up a newer table if one was published (a watch check), then scan the table;
//! 2. end-to-end routed throughput across 3 nodes over real TCP on 127.0.0.1 (one of them the
//!    router's own node, through the loopback);
//! 3. a skewed-cost workload (1 job in 1000 is 100x slower) at a steady rate: completion time
//!    percentiles under round-robin and smallest-mailbox.
//!
//! Run: `cargo bench -p troupe --bench cluster_router` (`TROUPE_BENCH_DECISIONS`, default
//! 200,000 per run, best of `TROUPE_BENCH_DECISION_ROUNDS`, default 200; `TROUPE_BENCH_MESSAGES`, default 300,000; `TROUPE_BENCH_SKEWED`, default
//! 12,000 jobs at 1,000 jobs/s; `TROUPE_BENCH_DECISION_ONLY=1` stops after the first table).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use troupe::Address;
use troupe::cluster::{Cluster, MemberStatus, MembershipOptions};
use troupe::cluster_router::{
    ClusterMailboxDepthAgent, ClusterRouter, ClusterRouterEvent, ClusterRouterOptions,
    RoutingTable, ServingDepths,
};
use troupe::remoting::RemoteMessage;
use troupe::routing::{RoutingLogic, RoutingStrategy};
use troupe::transport::{ClusterSecret, TcpTransportOptions};
use troupe::{Actor, ActorError, ActorRef, ActorSystem, Context, Props};

#[derive(Serialize, Deserialize)]
enum Bench {
    /// A 64-byte payload that costs nothing to handle.
    Payload(Vec<u8>),
    /// A job that takes `cost_us` to handle; `sent_us` is when it was sent (since `EPOCH`).
    Timed { sent_us: u64, cost_us: u64 },
}

impl RemoteMessage for Bench {
    const MANIFEST: &'static str = "bench.ClusterRouterJob";
}

/// Every node runs in this process: the workers count into these.
static PROCESSED: AtomicU64 = AtomicU64::new(0);
static PER_NODE: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
static COMPLETIONS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn since_epoch() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

struct Worker {
    node: usize,
}

impl Actor for Worker {
    type Msg = Bench;

    async fn handle(&mut self, msg: Bench, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        if let Bench::Timed { sent_us, cost_us } = msg {
            tokio::time::sleep(Duration::from_micros(cost_us)).await;
            let took = since_epoch().saturating_sub(sent_us);
            COMPLETIONS.lock().expect("completions").push(took);
        }
        PROCESSED.fetch_add(1, Ordering::Relaxed);
        PER_NODE[self.node].fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---- 1. the decision -------------------------------------------------------------------------

fn addresses(n: usize) -> Vec<Address> {
    let mut all: Vec<Address> = (0..n)
        .map(|i| Address::new("bench", &format!("10.0.{}.{}", i / 250, i % 250 + 1), 2552))
        .collect();
    all.sort();
    all
}

/// Nanoseconds per decision over one run of `decisions`, as the router decides: smallest-mailbox
/// counts its sends into its estimates (and a new reading arrives every 16,384 decisions). With
/// `full_scan`, smallest-mailbox instead reads fresh depths, none of them 0, on every decision:
/// the worst case, every routee scanned every time.
fn decision_cost(
    strategy: RoutingStrategy,
    routees: usize,
    decisions: usize,
    full_scan: bool,
) -> f64 {
    let depths = (0..routees).map(|i| Some(i % 11 + 1)).collect();
    let table = RoutingTable::new(addresses(routees), "/user/worker").with_depths(depths);
    let keys: Vec<String> = (0..1024).map(|k| format!("user-{k}")).collect();
    let (_publish, mut updates) = watch::channel(Arc::new(table));
    let mut current = Arc::clone(&updates.borrow_and_update());
    let mut estimates = current.estimates();
    let mut logic = RoutingLogic::new(strategy, 1);
    let start = Instant::now();
    for i in 0..decisions {
        // The router's per-message check for a newer table.
        if updates.has_changed().unwrap_or(false) {
            current = Arc::clone(&updates.borrow_and_update());
        }
        let key =
            (strategy == RoutingStrategy::ConsistentHashing).then(|| keys[i & 1023].as_bytes());
        if full_scan {
            black_box(current.select(&mut logic, black_box(key)));
        } else {
            black_box(current.select_and_count(&mut logic, black_box(key), &mut estimates));
            if i & 0x3fff == 0 {
                // A new reading now and then, as the refresh tick brings them.
                estimates = current.estimates();
            }
        }
    }
    start.elapsed().as_nanos() as f64 / decisions as f64
}

/// The best of `rounds` runs per row (the five strategies, then smallest-mailbox's worst case),
/// interleaved so that load from the rest of the machine spreads over all of them alike. Runs
/// are short (a few milliseconds) so that the best ones fit between preemptions on a busy
/// machine.
fn decision_costs(routees: usize, decisions: usize, rounds: usize) -> [f64; 6] {
    let mut best = [f64::MAX; 6];
    for _ in 0..rounds {
        for (i, strategy) in RoutingStrategy::ALL.into_iter().enumerate() {
            best[i] = best[i].min(decision_cost(strategy, routees, decisions, false));
        }
        best[5] = best[5].min(decision_cost(
            RoutingStrategy::SmallestMailbox,
            routees,
            decisions,
            true,
        ));
    }
    best
}

// ---- 2 and 3: three nodes over TCP -----------------------------------------------------------

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

async fn three_nodes() -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut seed = None;
    for index in 0..3 {
        let system = ActorSystem::new("bench").expect("system");
        let config = TcpTransportOptions::new(
            "bench",
            "127.0.0.1:0".parse().expect("address"),
            ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
        )
        .with_send_queue_capacity(64 * 1024);
        let settings = MembershipOptions::default().with_seeds(seed.iter().cloned());
        let cluster = Cluster::builder(&system)
            .with_membership(settings)
            .with_self_seed_if_none()
            .with_inbound_capacity(64 * 1024)
            .bind_tcp(config)
            .await
            .expect("cluster");
        seed.get_or_insert_with(|| cluster.self_address().clone());
        cluster.remoting().register::<Bench>();
        system
            .spawn("worker", Props::new(move || Worker { node: index }))
            .expect("worker");
        nodes.push(Node { system, cluster });
    }
    for node in &nodes {
        node.cluster
            .wait_for_view(|v| {
                v.converged
                    && v.members
                        .iter()
                        .filter(|m| m.status == MemberStatus::Up)
                        .count()
                        == 3
            })
            .await;
    }
    nodes
}

/// A router on node 0, once it routes over all three nodes (and, for smallest-mailbox, has a
/// reading from each).
async fn router(
    nodes: &[Node],
    name: &str,
    strategy: RoutingStrategy,
    refresh: Duration,
) -> ActorRef<Bench> {
    let mut events = nodes[0]
        .system
        .event_stream()
        .subscribe::<ClusterRouterEvent>();
    let options = ClusterRouterOptions::new(&nodes[0].cluster, strategy, "/user/worker")
        .with_mailbox_depth_refresh(refresh)
        .with_seed(7);
    let router = nodes[0]
        .system
        .spawn(name, ClusterRouter::factory(options).expect("options"))
        .expect("router");
    let mut routees = 0;
    let mut sampled = std::collections::BTreeSet::new();
    while routees < 3 || (strategy == RoutingStrategy::SmallestMailbox && sampled.len() < 3) {
        match events.recv().await.expect("events") {
            ClusterRouterEvent::RouteeSetChanged { routees: set, .. } => routees = set.len(),
            ClusterRouterEvent::DepthSample(sample) => {
                sampled.insert(sample.node);
            }
            ClusterRouterEvent::Started { .. } | ClusterRouterEvent::DeadLettered { .. } => {}
        }
    }
    router
}

/// Routed messages per second, with at most `window` in flight.
async fn throughput(router: &ActorRef<Bench>, messages: u64, window: u64) -> f64 {
    let base = PROCESSED.load(Ordering::Relaxed);
    let done = || PROCESSED.load(Ordering::Relaxed) - base;
    let start = Instant::now();
    let mut sent = 0;
    while sent < messages {
        if sent - done() >= window {
            tokio::time::sleep(Duration::from_micros(200)).await;
            continue;
        }
        router.tell(Bench::Payload(vec![7; 64]));
        sent += 1;
    }
    while done() < messages {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    messages as f64 / start.elapsed().as_secs_f64()
}

/// Whether job `i` is one of the slow ones (about 1 in 1000, the same jobs in every run).
fn is_slow(i: u64) -> bool {
    let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) % 1_000 == 0
}

struct Skewed {
    p50: Duration,
    p99: Duration,
    max: Duration,
    slow: usize,
}

/// Send `jobs` at `per_second` (in bursts every 10 ms); 1 ms each, 100 ms for the slow ones.
async fn skewed(router: &ActorRef<Bench>, jobs: u64, per_second: u64) -> Skewed {
    COMPLETIONS.lock().expect("completions").clear();
    let per_burst = per_second / 100;
    let mut ticker = tokio::time::interval(Duration::from_millis(10));
    let mut slow = 0;
    let mut i = 0;
    while i < jobs {
        ticker.tick().await;
        for _ in 0..per_burst.min(jobs - i) {
            let cost_us = if is_slow(i) {
                slow += 1;
                100_000
            } else {
                1_000
            };
            router.tell(Bench::Timed {
                sent_us: since_epoch(),
                cost_us,
            });
            i += 1;
        }
    }
    while COMPLETIONS.lock().expect("completions").len() < jobs as usize {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut completions = std::mem::take(&mut *COMPLETIONS.lock().expect("completions"));
    completions.sort_unstable();
    let at = |q: f64| {
        Duration::from_micros(
            completions[((completions.len() as f64 * q) as usize).min(completions.len() - 1)],
        )
    };
    Skewed {
        p50: at(0.50),
        p99: at(0.99),
        max: at(1.0),
        slow,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let decisions = env_count("TROUPE_BENCH_DECISIONS", 200_000);
    let rounds = env_count("TROUPE_BENCH_DECISION_ROUNDS", 200);
    let messages = env_count("TROUPE_BENCH_MESSAGES", 300_000) as u64;
    let skewed_jobs = env_count("TROUPE_BENCH_SKEWED", 12_000) as u64;

    println!(
        "## Routing decision per message (watch check + table scan; best of {rounds} interleaved runs of {decisions})"
    );
    println!("| strategy | 3 routees | 16 routees | vs round-robin (3 / 16) |");
    println!("|---|---:|---:|---:|");
    let three = decision_costs(3, decisions, rounds);
    let sixteen = decision_costs(16, decisions, rounds);
    let rows = RoutingStrategy::ALL
        .iter()
        .map(|s| s.name().to_owned())
        .chain(["smallest-mailbox, worst case (every routee scanned)".to_owned()]);
    for (i, row) in rows.enumerate() {
        println!(
            "| {row} | {:.2} ns | {:.2} ns | {:.2}x / {:.2}x |",
            three[i],
            sixteen[i],
            three[i] / three[0],
            sixteen[i] / sixteen[0]
        );
    }
    if std::env::var("TROUPE_BENCH_DECISION_ONLY").is_ok() {
        return;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let nodes = three_nodes().await;
        let serving: Vec<ServingDepths> = nodes[1..]
            .iter()
            .map(|n| ClusterMailboxDepthAgent::serve(&n.cluster).expect("serve"))
            .collect();

        println!();
        println!("## Routed throughput, 3 nodes over TCP on 127.0.0.1 (router on node 0; 64-byte payload; ≤ 10,000 in flight; median of 3 × {messages})");
        println!("| strategy | msgs/s | share of node 0 (the router's) / 1 / 2 |");
        println!("|---|---:|---:|");
        for (name, strategy) in [
            ("rr", RoutingStrategy::RoundRobin),
            ("sm", RoutingStrategy::SmallestMailbox),
        ] {
            let router = router(&nodes, name, strategy, Duration::from_millis(200)).await;
            throughput(&router, 10_000, 10_000).await;
            let before: Vec<u64> = PER_NODE.iter().map(|n| n.load(Ordering::Relaxed)).collect();
            let mut runs = Vec::new();
            for _ in 0..3 {
                runs.push(throughput(&router, messages, 10_000).await);
            }
            runs.sort_by(f64::total_cmp);
            let shares: Vec<String> = PER_NODE
                .iter()
                .zip(&before)
                .map(|(n, before)| {
                    let share = (n.load(Ordering::Relaxed) - before) as f64 / (3 * messages) as f64;
                    format!("{:.0}%", share * 100.0)
                })
                .collect();
            println!("| {strategy} | {:.0} | {} |", runs[1], shares.join(" / "));
            router.stop();
            router.terminated().await;
        }

        println!();
        println!("## Skewed cost: {skewed_jobs} jobs at 1,000/s over 3 nodes, 1 ms each, 1 in 1000 takes 100 ms (completion = send → handled)");
        println!("| strategy | depth refresh | p50 | p99 | max | slow jobs |");
        println!("|---|---:|---:|---:|---:|---:|");
        for (name, strategy, refresh) in [
            ("skew-rr", RoutingStrategy::RoundRobin, Duration::from_millis(200)),
            ("skew-sm-10", RoutingStrategy::SmallestMailbox, Duration::from_millis(10)),
            ("skew-sm-200", RoutingStrategy::SmallestMailbox, Duration::from_millis(200)),
        ] {
            let router = router(&nodes, name, strategy, refresh).await;
            let result = skewed(&router, skewed_jobs, 1_000).await;
            let refresh = if strategy == RoutingStrategy::SmallestMailbox {
                format!("{} ms", refresh.as_millis())
            } else {
                "—".to_owned()
            };
            println!(
                "| {strategy} | {refresh} | {} | {} | {} | {} |",
                ms(result.p50),
                ms(result.p99),
                ms(result.max),
                result.slow
            );
            router.stop();
            router.terminated().await;
        }

        for serving in serving {
            serving.stop();
        }
        for node in nodes {
            node.cluster.shutdown();
            node.system.shutdown().await;
        }
    });
}
