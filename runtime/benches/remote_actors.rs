//! Actor-level remote figures on loopback, one process: remote tell throughput between two
//! actor systems (64-byte payload), remote ask round trip p50/p99, and the time for 5 nodes to
//! form a converged cluster. The transport-only figures and the bare-TCP floor are printed by
//! `cargo bench -p troupe --bench transport`.
//!
//! Run: `cargo bench -p troupe --bench remote_actors` (`TROUPE_BENCH_MESSAGES`, default
//! 1,000,000; `TROUPE_BENCH_ASKS`, default 20,000). The two-process figures start copies of
//! this binary as the other node (`TROUPE_BENCH_ROLE=sink|node`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use troupe::cluster::{Cluster, MemberStatus, MembershipOptions};
use troupe::remoting::{RemoteMessage, Remoting};
use troupe::transport::{ClusterSecret, TcpTransport, TcpTransportOptions};
use troupe::{Actor, ActorError, ActorRef, ActorSystem, Context, Props, ReplyTo};

#[derive(Serialize, Deserialize)]
enum Bench {
    Payload(#[serde(with = "serde_bytes_64")] [u8; 64]),
    Echo { reply: ReplyTo<u64> },
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
    const MANIFEST: &'static str = "bench.Bench";
}

struct Sink {
    expected: u64,
    received: u64,
    done: Option<oneshot::Sender<()>>,
}

impl Actor for Sink {
    type Msg = Bench;

    async fn handle(&mut self, msg: Bench, _ctx: &mut Context<Self>) -> Result<(), ActorError> {
        match msg {
            Bench::Payload(_) => {
                self.received += 1;
                if self.received == self.expected
                    && let Some(done) = self.done.take()
                {
                    let _ = done.send(());
                }
            }
            Bench::Echo { reply } => reply.send(self.received),
        }
        Ok(())
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn node(name: &str) -> (ActorSystem, Arc<Remoting>) {
    let system = ActorSystem::new(name).expect("system");
    let (tx, rx) = mpsc::channel(64 * 1024);
    let config = TcpTransportOptions::new(
        "bench",
        "127.0.0.1:0".parse().expect("address"),
        ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
    )
    .with_send_queue_capacity(64 * 1024);
    let transport = TcpTransport::bind(config, tx).await.expect("bind");
    let remoting = Remoting::start(&system, transport, rx);
    remoting.register::<Bench>();
    (system, remoting)
}

async fn remote_tell(messages: u64) -> f64 {
    let (_a, a_remoting) = node("bench").await;
    let (b, b_remoting) = node("bench").await;
    let (done_tx, done_rx) = oneshot::channel();
    let mut done = Some(done_tx);
    b.spawn(
        "sink",
        Props::new(move || Sink {
            expected: messages + 1,
            received: 0,
            done: done.take(),
        }),
    )
    .expect("spawn");
    let path = format!("{}/user/sink", b_remoting.local().address);
    let sink: ActorRef<Bench> = a_remoting.actor_ref(&path).expect("ref");
    // Warm up: connect and handshake outside the measurement.
    sink.tell(Bench::Payload([7; 64]));
    sink.ask(|reply| Bench::Echo { reply })
        .timeout(Duration::from_secs(10))
        .await
        .expect("warm-up");
    let start = Instant::now();
    for _ in 0..messages {
        let mut message = Bench::Payload([7; 64]);
        // The transport's queue is the backpressure: a refused message comes back; retry.
        while let Err(refused) = sink.try_tell(message) {
            message = refused.into_inner();
            tokio::task::yield_now().await;
        }
    }
    done_rx.await.expect("all delivered");
    messages as f64 / start.elapsed().as_secs_f64()
}

async fn remote_ask(asks: usize) -> (Duration, Duration) {
    let (_a, a_remoting) = node("bench").await;
    let (b, b_remoting) = node("bench").await;
    b.spawn(
        "sink",
        Props::new(|| Sink {
            expected: u64::MAX,
            received: 0,
            done: None,
        }),
    )
    .expect("spawn");
    let path = format!("{}/user/sink", b_remoting.local().address);
    let sink: ActorRef<Bench> = a_remoting.actor_ref(&path).expect("ref");
    for _ in 0..100 {
        sink.ask(|reply| Bench::Echo { reply })
            .timeout(Duration::from_secs(10))
            .await
            .expect("warm-up");
    }
    let mut samples = Vec::with_capacity(asks);
    for _ in 0..asks {
        let start = Instant::now();
        sink.ask(|reply| Bench::Echo { reply })
            .timeout(Duration::from_secs(10))
            .await
            .expect("ask");
        samples.push(start.elapsed());
    }
    samples.sort();
    (samples[asks / 2], samples[asks * 99 / 100])
}

async fn converge(nodes: usize) -> Duration {
    let start = Instant::now();
    let mut clusters = Vec::new();
    let mut seed = None;
    for _ in 0..nodes {
        let system = ActorSystem::new("bench").expect("system");
        let config = TcpTransportOptions::new(
            "bench",
            "127.0.0.1:0".parse().expect("address"),
            ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
        );
        let settings = MembershipOptions::default().with_seeds(seed.iter().cloned());
        let cluster = Cluster::builder(&system)
            .with_membership(settings)
            .with_self_seed_if_none()
            .bind_tcp(config)
            .await
            .expect("cluster");
        seed.get_or_insert_with(|| cluster.self_address().clone());
        clusters.push((system.clone(), cluster));
    }
    for (_, cluster) in &clusters {
        cluster
            .wait_for_view(|v| {
                v.converged
                    && v.members
                        .iter()
                        .filter(|m| m.status == MemberStatus::Up)
                        .count()
                        == nodes
            })
            .await;
    }
    let elapsed = start.elapsed();
    for (system, cluster) in clusters {
        cluster.shutdown();
        system.shutdown().await;
    }
    elapsed
}

/// Child process: a node with a sink that prints `ready <address>` and then `done` after
/// `TROUPE_BENCH_MESSAGES` payloads.
async fn run_sink_process(messages: u64) {
    let (system, remoting) = node("bench").await;
    let (done_tx, done_rx) = oneshot::channel();
    let mut done = Some(done_tx);
    system
        .spawn(
            "sink",
            Props::new(move || Sink {
                expected: messages,
                received: 0,
                done: done.take(),
            }),
        )
        .expect("spawn");
    println!("ready {}", remoting.local().address);
    done_rx.await.expect("all delivered");
    println!("done");
}

/// Child process: a cluster node joining `TROUPE_BENCH_SEED`; runs until killed.
async fn run_node_process() {
    let seed: troupe::Address = std::env::var("TROUPE_BENCH_SEED")
        .expect("seed")
        .parse()
        .expect("seed address");
    let system = ActorSystem::new("bench").expect("system");
    let config = TcpTransportOptions::new(
        "bench",
        "127.0.0.1:0".parse().expect("address"),
        ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
    )
    .with_incarnation(rand::random());
    let settings = MembershipOptions::default().with_seeds([seed]);
    let cluster = Cluster::builder(&system)
        .with_membership(settings)
        .bind_tcp(config)
        .await
        .expect("cluster");
    println!("ready {}", cluster.self_address());
    std::future::pending::<()>().await;
}

fn child(
    role: &str,
    envs: &[(&str, String)],
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) {
    use std::io::BufRead;
    let mut command = std::process::Command::new(std::env::current_exe().expect("own path"));
    command
        .env("TROUPE_BENCH_ROLE", role)
        .stdout(std::process::Stdio::piped());
    for (key, value) in envs {
        command.env(key, value);
    }
    let mut process = command.spawn().expect("start child process");
    let lines = std::io::BufReader::new(process.stdout.take().expect("stdout")).lines();
    (process, lines)
}

fn read_ready(lines: &mut std::io::Lines<std::io::BufReader<std::process::ChildStdout>>) -> String {
    loop {
        let line = lines.next().expect("child output").expect("read line");
        if let Some(address) = line.strip_prefix("ready ") {
            return address.to_owned();
        }
    }
}

/// Remote tells from this process to a sink in another process.
async fn remote_tell_two_processes(messages: u64) -> f64 {
    let (mut process, mut lines) = child(
        "sink",
        &[("TROUPE_BENCH_MESSAGES", (messages + 1).to_string())],
    );
    let address = read_ready(&mut lines);
    let (_a, a_remoting) = node("bench").await;
    let sink: ActorRef<Bench> = a_remoting
        .actor_ref(&format!("{address}/user/sink"))
        .expect("ref");
    sink.tell(Bench::Payload([7; 64]));
    sink.ask(|reply| Bench::Echo { reply })
        .timeout(Duration::from_secs(10))
        .await
        .expect("warm-up");
    let start = Instant::now();
    for _ in 0..messages {
        let mut message = Bench::Payload([7; 64]);
        while let Err(refused) = sink.try_tell(message) {
            message = refused.into_inner();
            tokio::task::yield_now().await;
        }
    }
    let done = tokio::task::spawn_blocking(move || lines.any(|l| l.is_ok_and(|l| l == "done")));
    assert!(done.await.expect("reader"), "sink process finished");
    let rate = messages as f64 / start.elapsed().as_secs_f64();
    let _ = process.wait();
    rate
}

/// SIGKILL one of three node processes; time until this node reports it unreachable and removed
/// (default settings: heartbeat 500 ms, acceptable pause 1 s, threshold 8, down_after 5 s).
async fn sigkill_detection() -> (Duration, Duration) {
    let system = ActorSystem::new("bench").expect("system");
    let config = TcpTransportOptions::new(
        "bench",
        "127.0.0.1:0".parse().expect("address"),
        ClusterSecret::new("benchmark-cluster-secret").expect("secret"),
    );
    let cluster = Cluster::builder(&system)
        .with_self_seed_if_none()
        .bind_tcp(config)
        .await
        .expect("cluster");
    let seed = cluster.self_address().clone();
    let mut children: Vec<_> = (0..2)
        .map(|_| child("node", &[("TROUPE_BENCH_SEED", seed.to_string())]))
        .collect();
    let victim: troupe::Address = read_ready(&mut children[1].1).parse().expect("address");
    cluster
        .wait_for_view(|v| {
            v.converged
                && v.members
                    .iter()
                    .filter(|m| m.status == MemberStatus::Up)
                    .count()
                    == 3
        })
        .await;
    let killed = Instant::now();
    children[1].0.kill().expect("SIGKILL");
    cluster
        .wait_for_view(|v| v.unreachable.iter().any(|n| n.address == victim))
        .await;
    let unreachable = killed.elapsed();
    cluster
        .wait_for_view(|v| v.converged && !v.members.iter().any(|m| m.node.address == victim))
        .await;
    let removed = killed.elapsed();
    for (mut process, _) in children {
        let _ = process.kill();
        let _ = process.wait();
    }
    cluster.shutdown();
    (unreachable, removed)
}

fn main() {
    let messages = env_count("TROUPE_BENCH_MESSAGES", 1_000_000) as u64;
    if let Ok(role) = std::env::var("TROUPE_BENCH_ROLE") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            match role.as_str() {
                "sink" => run_sink_process(messages).await,
                _ => run_node_process().await,
            }
        });
        return;
    }
    let asks = env_count("TROUPE_BENCH_ASKS", 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut tells: Vec<f64> = Vec::new();
        for _ in 0..3 {
            tells.push(remote_tell(messages).await);
        }
        tells.sort_by(f64::total_cmp);
        let mut two_process: Vec<f64> = Vec::new();
        for _ in 0..3 {
            two_process.push(remote_tell_two_processes(messages).await);
        }
        two_process.sort_by(f64::total_cmp);
        let (p50, p99) = remote_ask(asks).await;
        let mut convergence = Vec::new();
        for _ in 0..3 {
            convergence.push(converge(5).await);
        }
        convergence.sort();
        let (unreachable, removed) = sigkill_detection().await;
        println!("Troupe remoting on loopback, one process, 2 tokio workers (median of 3 where noted)");
        println!("| figure | value | target |");
        println!("|---|---:|---|");
        println!("| remote tell, 64-byte payload, actor → actor (median of 3) | {:.0} msgs/s | ≥ 1,000,000 |", tells[1]);
        println!("| remote tell, 64-byte payload, two processes (median of 3) | {:.0} msgs/s | ≥ 1,000,000 |", two_process[1]);
        println!("| remote ask round trip p50 | {:.1} µs | < 60 µs |", p50.as_secs_f64() * 1e6);
        println!("| remote ask round trip p99 | {:.1} µs | |", p99.as_secs_f64() * 1e6);
        println!("| 5 nodes start → all up and converged (median of 3) | {:.2} s | |", convergence[1].as_secs_f64());
        println!("| SIGKILL of 1 of 3 node processes → MemberUnreachable (defaults) | {:.2} s | ≤ 3 s |", unreachable.as_secs_f64());
        println!("| SIGKILL → MemberRemoved (defaults, down_after 5 s) | {:.2} s | |", removed.as_secs_f64());
    });
}
