//! Cluster singleton figures over real TCP on 127.0.0.1, default membership settings (gossip
//! every 200 ms, heartbeat 500 ms, `down_after` 5 s):
//!
//! - graceful leave of the host → the new instance handles its first message (3 nodes; a proxy on
//!   a third node pings every millisecond throughout);
//! - hard kill of the host (transport and daemon stopped, no leave) → the new instance, 5 nodes;
//! - proxy tell throughput to a singleton on another node against plain remote tell to an actor
//!   there (64-byte payload, windows of 10 000 messages, each closed by an ask through the same
//!   path, so both are measured with the same flow control).
//!
//! Run: `cargo bench -p troupe --bench singleton` (`TROUPE_BENCH_LEAVES`, default 10;
//! `TROUPE_BENCH_KILLS`, default 3; `TROUPE_BENCH_MESSAGES`, default 300 000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use troupe::Address;
use troupe::cluster::{Cluster, ClusterEvent, MemberStatus, MembershipOptions};
use troupe::remoting::RemoteMessage;
use troupe::singleton::ClusterSingleton;
use troupe::singleton::{SingletonKey, SingletonProxy, StartSingletonOptions};
use troupe::transport::{ClusterSecret, TcpTransport, TcpTransportOptions};
use troupe::{Actor, ActorError, ActorRef, ActorSystem, Context, Props, ReplyTo};

#[derive(Serialize, Deserialize)]
enum Bench {
    Payload(#[serde(with = "serde_bytes_64")] [u8; 64]),
    Count { reply: ReplyTo<u64> },
}

mod serde_bytes_64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 64], D::Error> {
        let bytes = <&[u8]>::deserialize(d)?;
        bytes.try_into().map_err(serde::de::Error::custom)
    }
}

impl RemoteMessage for Bench {
    const MANIFEST: &'static str = "bench.singleton.Bench";
}

/// What instances report: (node, started?) at an instant.
type Reports = mpsc::UnboundedSender<(usize, Report, Instant)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    Started,
    FirstMessage,
}

struct Counter {
    node: usize,
    reports: Option<Reports>,
    received: u64,
}

impl Actor for Counter {
    type Msg = Bench;

    async fn pre_start(&mut self, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        if let Some(reports) = &self.reports {
            let _ = reports.send((self.node, Report::Started, Instant::now()));
        }
        Ok(())
    }

    async fn handle(&mut self, msg: Bench, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            Bench::Payload(_) => {
                self.received += 1;
                if self.received == 1
                    && let Some(reports) = &self.reports
                {
                    let _ = reports.send((self.node, Report::FirstMessage, Instant::now()));
                }
            }
            Bench::Count { reply } => reply.send(self.received),
        }
        Ok(())
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    transport: Arc<TcpTransport>,
}

async fn node(seed: Option<&Address>) -> Node {
    let system = ActorSystem::new("bench").expect("system");
    let config = TcpTransportOptions::new(
        "bench",
        "127.0.0.1:0".parse().expect("address"),
        ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
    )
    .with_incarnation(rand::random())
    .with_send_queue_capacity(64 * 1024);
    let settings = MembershipOptions::default().with_seeds(seed.into_iter().cloned());
    let cluster = Cluster::builder(&system)
        .with_membership(settings)
        .with_self_seed_if_none()
        .with_inbound_capacity(64 * 1024)
        .bind_tcp(config)
        .await
        .expect("cluster");
    let transport = Arc::clone(cluster.tcp_transport().expect("bound over TCP"));
    cluster.remoting().register::<Bench>();
    Node {
        system,
        cluster,
        transport,
    }
}

async fn cluster_of(n: usize) -> Vec<Node> {
    let first = node(None).await;
    let seed = first.cluster.self_address().clone();
    let mut nodes = vec![first];
    for _ in 1..n {
        nodes.push(node(Some(&seed)).await);
    }
    for node in &nodes {
        tokio::time::timeout(
            Duration::from_secs(30),
            node.cluster.wait_for_view(|v| {
                v.converged
                    && v.members
                        .iter()
                        .filter(|m| m.status == MemberStatus::Up)
                        .count()
                        == n
            }),
        )
        .await
        .expect("cluster formed");
    }
    // Address order: the first is the host.
    nodes.sort_by(|a, b| a.cluster.self_address().cmp(b.cluster.self_address()));
    nodes
}

fn key() -> SingletonKey<Bench> {
    SingletonKey::of("bench-singleton", None)
}

fn start(node: &Node, index: usize, reports: Option<Reports>) -> SingletonProxy<Bench> {
    let props = Props::new(move || Counter {
        node: index,
        reports: reports.clone(),
        received: 0,
    });
    ClusterSingleton::get(&node.cluster)
        .start(&key(), StartSingletonOptions::new(props))
        .expect("start")
}

async fn shut_down(nodes: Vec<Node>) {
    for node in nodes {
        node.cluster.shutdown();
        node.transport.shutdown().await;
        node.system.shutdown().await;
    }
}

async fn next_report(
    rx: &mut mpsc::UnboundedReceiver<(usize, Report, Instant)>,
    want: impl Fn(usize, Report) -> bool,
) -> Instant {
    loop {
        let (node, report, at) = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("report in time")
            .expect("reports open");
        if want(node, report) {
            return at;
        }
    }
}

/// Graceful leave of the host: until the new host's view saw the leave, until the new instance
/// started, and until it handled a message.
async fn graceful_leave() -> (Duration, Duration, Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let nodes = cluster_of(3).await;
    let proxies: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| start(n, i, Some(tx.clone())))
        .collect();
    next_report(&mut rx, |node, r| node == 0 && r == Report::Started).await;
    let pinger = proxies[2].clone();
    let pings = tokio::spawn(async move {
        loop {
            pinger.tell(Bench::Payload([1; 64]));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    next_report(&mut rx, |node, r| node == 0 && r == Report::FirstMessage).await;
    let mut events = nodes[1].cluster.subscribe();
    let leaver = nodes[0].cluster.self_address().clone();
    let learned = tokio::spawn(async move {
        events
            .wait_for(|e| matches!(e, ClusterEvent::MemberLeft(m) if *m.address() == leaver))
            .await;
        Instant::now()
    });
    let left = Instant::now();
    nodes[0].cluster.leave();
    let started = next_report(&mut rx, |node, r| node == 1 && r == Report::Started).await;
    let accepted = next_report(&mut rx, |node, r| node == 1 && r == Report::FirstMessage).await;
    let learned = learned.await.expect("the new host saw the leave");
    pings.abort();
    shut_down(nodes).await;
    (learned - left, started - left, accepted - left)
}

/// Hard kill of the host of a 5-node cluster with default settings: until the new instance.
async fn hard_kill() -> Duration {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let nodes = cluster_of(5).await;
    for (i, n) in nodes.iter().enumerate() {
        start(n, i, Some(tx.clone()));
    }
    next_report(&mut rx, |node, r| node == 0 && r == Report::Started).await;
    let killed = Instant::now();
    nodes[0].transport.shutdown().await;
    nodes[0].cluster.shutdown();
    let started = next_report(&mut rx, |node, r| node == 1 && r == Report::Started).await;
    shut_down(nodes).await;
    started - killed
}

async fn count(target: &ActorRef<Bench>) -> u64 {
    target
        .ask(|reply| Bench::Count { reply })
        .timeout(Duration::from_secs(30))
        .await
        .expect("count")
}

/// Messages per second through `send`, closing every window of 10 000 with `counted`.
async fn throughput<S, C, F>(messages: u64, send: S, counted: C) -> f64
where
    S: Fn(Bench),
    C: Fn() -> F,
    F: std::future::Future<Output = u64>,
{
    const WINDOW: u64 = 10_000;
    let base = counted().await;
    let start = Instant::now();
    let mut sent = 0;
    while sent < messages {
        for _ in 0..WINDOW.min(messages - sent) {
            send(Bench::Payload([7; 64]));
            sent += 1;
        }
        while counted().await - base < sent {}
    }
    messages as f64 / start.elapsed().as_secs_f64()
}

/// (plain remote tell, proxy tell to the singleton) in messages per second.
async fn tell_throughput(messages: u64) -> (f64, f64) {
    let nodes = cluster_of(2).await;
    // The host is nodes[0]; nodes[1] sends.
    let host_proxy = start(&nodes[0], 0, None);
    let proxy = ClusterSingleton::get(&nodes[1].cluster)
        .proxy(&key())
        .expect("proxy");
    nodes[0]
        .system
        .spawn(
            "sink",
            Props::new(|| Counter {
                node: 0,
                reports: None,
                received: 0,
            }),
        )
        .expect("sink");
    let sink: ActorRef<Bench> = nodes[1]
        .cluster
        .remoting()
        .actor_ref(&format!("{}/user/sink", nodes[0].cluster.self_address()))
        .expect("ref");
    // Warm up both paths: connection, handshake, host elected.
    count(&sink).await;
    let warm = proxy
        .ask(|reply| Bench::Count { reply })
        .timeout(Duration::from_secs(30))
        .await
        .expect("the singleton answers");
    let _ = warm;
    // Alternate the two, three rounds each, and take each one's median round.
    let (mut plain, mut through_proxy) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        plain.push(throughput(messages, |m| sink.tell(m), || count(&sink)).await);
        through_proxy.push(
            throughput(
                messages,
                |m| proxy.tell(m),
                || async {
                    proxy
                        .ask(|reply| Bench::Count { reply })
                        .timeout(Duration::from_secs(30))
                        .await
                        .expect("count")
                },
            )
            .await,
        );
    }
    plain.sort_by(f64::total_cmp);
    through_proxy.sort_by(f64::total_cmp);
    let (plain, through_proxy) = (plain[1], through_proxy[1]);
    drop(host_proxy);
    shut_down(nodes).await;
    (plain, through_proxy)
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn stats(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len().max(1) as u32;
    (samples[0], mean, samples[samples.len() - 1])
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let leaves = env_count("TROUPE_BENCH_LEAVES", 10);
    let kills = env_count("TROUPE_BENCH_KILLS", 3);
    let messages = env_count("TROUPE_BENCH_MESSAGES", 300_000) as u64;
    runtime.block_on(async {
        let mut learning = Vec::new();
        let mut spawned = Vec::new();
        let mut accepting = Vec::new();
        for _ in 0..leaves {
            let (learned, started, accepted) = graceful_leave().await;
            learning.push(learned);
            spawned.push(started);
            accepting.push(accepted);
        }
        let mut killed = Vec::new();
        for _ in 0..kills {
            killed.push(hard_kill().await);
        }
        let (plain, through_proxy) = tell_throughput(messages).await;
        let (l_min, l_mean, l_max) = stats(&mut learning);
        let (s_min, s_mean, s_max) = stats(&mut spawned);
        let (a_min, a_mean, a_max) = stats(&mut accepting);
        let (k_min, k_mean, k_max) = stats(&mut killed);
        println!("cluster singleton over TCP on 127.0.0.1 (default membership settings: gossip 200 ms, down_after 5 s)");
        println!();
        println!("| measurement | min | mean | max | target |");
        println!("|---|---|---|---|---|");
        println!(
            "| graceful leave → the new host's view has it leaving (gossip; {leaves} runs, 3 nodes) | {l_min:.1?} | {l_mean:.1?} | {l_max:.1?} | |"
        );
        println!(
            "| graceful leave → new instance started | {s_min:.1?} | {s_mean:.1?} | {s_max:.1?} | |"
        );
        println!(
            "| graceful leave → new instance handles a message | {a_min:.1?} | {a_mean:.1?} | {a_max:.1?} | < 100 ms + gossip interval (300 ms) |"
        );
        println!(
            "| hard kill → new instance ({kills} runs, 5 nodes, defaults) | {k_min:.2?} | {k_mean:.2?} | {k_max:.2?} | ≤ 10 s |"
        );
        println!();
        println!(
            "| tell throughput, 64-byte payload, {messages} messages (median of 3 alternating rounds) | messages/s |"
        );
        println!("|---|---|");
        println!("| plain remote tell | {plain:.0} |");
        println!(
            "| proxy tell to the remote singleton | {through_proxy:.0} ({:.1}% of plain; target ≥ 90%) |",
            through_proxy / plain * 100.0
        );
    });
}
