//! Dashboard render benchmark: the real `troupe-server` binary (a child process, as deployed)
//! on PostgreSQL, history ingested through `POST /api/v1/ingest` (so the rows, indexes,
//! current-state tables and rollups are what production has), then every dashboard page and
//! its main filter variants fetched over HTTP, with the round-trip latency per page.
//!
//! ```text
//! cargo bench -p troupe-server --bench dashboard                       # 10 M events, 200 runs
//! cargo bench -p troupe-server --bench dashboard -- --events 1000000 --runs 50
//! ```
//!
//! Needs PostgreSQL (`TROUPE_TEST_DATABASE_URL`, as the tests). Uses the database
//! `troupe_bench_dashboard`, dropped at the start (a leftover of an interrupted run) and at
//! the end.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use troupe_protocol::{
    AgentHealth, DeadLetterEvent, EventBody, HandOverCompleted, HandOverStarted, HealthChange,
    LeaderChange, LeaseChange, MemberStatus, RouteesChange, RouterStarted, RoutingStrategy,
    SingletonInstance,
};
use troupe_server::testing::{BatchBuilder, HttpClient, TestDatabase, admin_database_url};

#[derive(Debug, Parser)]
#[command(about = "Dashboard page render latency with a large stored history")]
struct Args {
    /// Events ingested before measuring (dead letters included), spread over `--days`.
    #[arg(long, default_value_t = 10_000_000)]
    events: u64,
    /// Events per ingested batch.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
    /// Days of history the events are spread over (ending now).
    #[arg(long, default_value_t = 7)]
    days: i64,
    /// Concurrent ingest connections while filling.
    #[arg(long, default_value_t = 4)]
    senders: usize,
    /// Fetches of each page (one after another, one keep-alive connection).
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Stop fetching a page after this many seconds even if `--runs` are not done (a slow
    /// page then has fewer samples; the table says how many).
    #[arg(long, default_value_t = 30)]
    page_seconds: u64,
    /// Keep the database at the end (for `EXPLAIN ANALYZE` of the page queries).
    #[arg(long)]
    keep: bool,
    /// Measure the pages on the database a `--keep` run left, without filling it again (the
    /// current state and the last hour of depth ticks are still sent).
    #[arg(long)]
    reuse: bool,
    /// The render target per page, at p99, in milliseconds.
    #[arg(long, default_value_t = 100.0)]
    target_ms: f64,
    /// Ignored (cargo bench passes it).
    #[arg(long)]
    bench: bool,
}

const DATABASE: &str = "troupe_bench_dashboard";
const TOKEN: &str = "bench";

/// The clusters, their nodes, and the share of batches each gets (out of 20).
const CLUSTERS: &[(&str, &str, usize, u64)] = &[
    ("prod", "10.0.0", 8, 18),
    ("staging", "10.1.0", 3, 1),
    ("edge", "10.2.0", 2, 1),
];
const SINGLETONS: &[&str] = &["Scheduler", "Coordinator", "Billing", "Reaper"];
const ROUTERS: &[&str] = &["/user/workers", "/user/orders", "/user/billing"];
const MESSAGE_TYPES: &[&str] = &[
    "demo::ComputeJob",
    "demo::Heartbeat",
    "orders::PlaceOrder",
    "orders::CancelOrder",
    "billing::Charge",
];
const REASONS: &[&str] = &["recipient mailbox full", "recipient stopped", "no routees"];

fn node(prefix: &str, i: usize) -> String {
    format!("{prefix}.{}:2552", i + 1)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Which cluster and node sends batch `b`.
fn sender_of(b: u64) -> (&'static str, String, usize) {
    let slot = b % 20;
    let mut from = 0;
    for (cluster, prefix, nodes, share) in CLUSTERS {
        if slot < from + share {
            let i = ((b / 20) as usize + slot as usize) % nodes;
            return (cluster, node(prefix, i), *nodes);
        }
        from += share;
    }
    unreachable!("shares add up to 20")
}

fn member_event(kind: u64, address: String, peer: String) -> EventBody {
    use troupe_protocol::{MemberChange, MemberInfo};
    let change = |status, previous, observers: Vec<String>| MemberChange {
        member: MemberInfo {
            address: address.clone(),
            uid: 1,
            status,
            roles: vec!["compute".into()],
        },
        previous_status: previous,
        observers,
    };
    match kind % 9 {
        0 => EventBody::MemberJoined(change(MemberStatus::Joining, None, vec![])),
        1 => EventBody::MemberUp(change(
            MemberStatus::Up,
            Some(MemberStatus::Joining),
            vec![],
        )),
        2 => EventBody::MemberUnreachable(change(MemberStatus::Up, None, vec![peer])),
        3 => EventBody::MemberReachable(change(MemberStatus::Up, None, vec![])),
        4 => EventBody::LeaderChanged(LeaderChange {
            leader: Some(address.clone()),
        }),
        5 => EventBody::MemberLeft(change(
            MemberStatus::Leaving,
            Some(MemberStatus::Up),
            vec![],
        )),
        6 => EventBody::MemberExited(change(
            MemberStatus::Exiting,
            Some(MemberStatus::Leaving),
            vec![],
        )),
        7 => EventBody::MemberRemoved(change(
            MemberStatus::Removed,
            Some(MemberStatus::Exiting),
            vec![],
        )),
        _ => EventBody::MemberUp(change(
            MemberStatus::Up,
            Some(MemberStatus::Joining),
            vec![],
        )),
    }
}

fn singleton_event(kind: u64, singleton: &str, host: String, peer: String) -> EventBody {
    let singleton = singleton.to_owned();
    match kind % 6 {
        0 => EventBody::SingletonHandOverStarted(HandOverStarted {
            singleton,
            role: None,
            new_host: host,
            peers: vec![peer],
        }),
        1 => EventBody::SingletonHandOverCompleted(HandOverCompleted {
            singleton,
            role: None,
            new_host: host,
            duration_ms: 740,
        }),
        2 => EventBody::SingletonStarted(SingletonInstance {
            singleton,
            role: None,
            host,
            backoff_ms: None,
            reason: None,
        }),
        3 => EventBody::SingletonStopped(SingletonInstance {
            singleton,
            role: None,
            host,
            backoff_ms: None,
            reason: Some("handing over".into()),
        }),
        4 => EventBody::LeaseAcquired(LeaseChange {
            singleton,
            role: None,
            lease: format!("lease-{}", host),
            holder: Some(host),
            reason: None,
        }),
        _ => EventBody::LeaseReleased(LeaseChange {
            singleton,
            role: None,
            lease: format!("lease-{}", host),
            holder: None,
            reason: None,
        }),
    }
}

fn routees(router: &str, prefix: &str, nodes: usize, shift: u64) -> Vec<String> {
    (0..4)
        .map(|r| {
            format!(
                "akka://troupe@{}{router}/w{r}",
                node(prefix, (r + shift as usize) % nodes)
            )
        })
        .collect()
}

fn depth_samples(seed: u64) -> Vec<(String, Option<String>, u32)> {
    (0..16u64)
        .map(|w| {
            let router = ROUTERS[(w % 3) as usize];
            if w < 12 {
                (
                    format!("{router}/w{w}"),
                    Some(router.to_owned()),
                    ((seed + w * 7) % 60) as u32,
                )
            } else {
                (format!("/user/actor-{w}"), None, ((seed + w) % 10) as u32)
            }
        })
        .collect()
}

fn with_depth(builder: BatchBuilder, at_ms: i64, seed: u64) -> BatchBuilder {
    let samples = depth_samples(seed);
    let refs: Vec<(&str, Option<&str>, u32)> = samples
        .iter()
        .map(|(p, r, d)| (p.as_str(), r.as_deref(), *d))
        .collect();
    builder.depth_tick(at_ms, &refs)
}

/// History batch `b` of `total`: `batch` events in the batch's slice of the history window.
fn history_batch(b: u64, total: u64, batch: u64, start_ms: i64, span_ms: i64) -> (String, Vec<u8>) {
    let (cluster, address, nodes) = sender_of(b);
    let prefix = &address[..address.rfind('.').unwrap()];
    let slice = span_ms / total as i64;
    let at0 = start_ms + b as i64 * slice;
    let mut builder = BatchBuilder::new(cluster, &address, b + 1).sent_at(now_ms());
    for i in 0..batch {
        let at = at0 + (i as i64 * slice) / batch as i64;
        let k = b * batch + i;
        let peer = node(prefix, (k as usize + 1) % nodes);
        let subject = node(prefix, (k as usize / 20) % nodes);
        let body = match i % 20 {
            0..=8 => EventBody::DeadLetter(DeadLetterEvent {
                recipient: format!("/user/worker-{}", (k * 7) % 50),
                sender: if k % 3 == 0 {
                    None
                } else {
                    Some("/user/scheduler".into())
                },
                message_type: MESSAGE_TYPES[(k / 20 % 5) as usize].into(),
                reason: REASONS[(k / 20 % 3) as usize].into(),
            }),
            9..=12 => member_event(k / 20, subject, peer),
            13..=16 => singleton_event(
                k / 20,
                SINGLETONS[(k / 20 % SINGLETONS.len() as u64) as usize],
                subject,
                peer,
            ),
            17..=18 => {
                let router = ROUTERS[(k / 20 % 3) as usize];
                EventBody::RouteesChanged(RouteesChange {
                    router: router.into(),
                    strategy: RoutingStrategy::RoundRobin,
                    routees: routees(router, prefix, nodes, k / 20),
                })
            }
            _ => EventBody::AgentHealthChanged(HealthChange {
                health: if k / 20 % 4 == 0 {
                    AgentHealth::Draining
                } else {
                    AgentHealth::Ready
                },
                reason: None,
            }),
        };
        builder = builder.event(at, body);
    }
    let builder = with_depth(builder, at0 + slice - 1, b);
    (
        cluster.to_owned(),
        serde_json::to_vec(&builder.build()).unwrap(),
    )
}

/// The batches that leave each cluster in a sane current state: every member up, a leader,
/// singletons and routers running, agents ready; plus one depth tick a second per agent for
/// the last hour (what the routers and node pages chart).
fn current_state_batches(now: i64, first_sequence: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut sequence = first_sequence;
    for (cluster, prefix, nodes, _) in CLUSTERS {
        for n in 0..*nodes {
            let address = node(prefix, n);
            // An hour of depth ticks, 600 per batch.
            let mut tick = now - 3_600_000;
            while tick < now {
                let mut builder = BatchBuilder::new(cluster, &address, sequence).sent_at(now_ms());
                sequence += 1;
                for _ in 0..600 {
                    if tick >= now {
                        break;
                    }
                    builder = with_depth(builder, tick, (tick / 1000) as u64 + n as u64);
                    tick += 1000;
                }
                out.push(serde_json::to_vec(&builder.build()).unwrap());
            }
            let at = now - 500;
            let mut builder = BatchBuilder::new(cluster, &address, sequence)
                .sent_at(now_ms())
                .member(
                    at,
                    EventBody::MemberUp,
                    &address,
                    MemberStatus::Up,
                    &["compute"],
                )
                .event(
                    at + 1,
                    EventBody::AgentHealthChanged(HealthChange {
                        health: AgentHealth::Ready,
                        reason: None,
                    }),
                );
            sequence += 1;
            if n == 0 {
                builder = builder.event(
                    at + 2,
                    EventBody::LeaderChanged(LeaderChange {
                        leader: Some(address.clone()),
                    }),
                );
                for (s, singleton) in SINGLETONS.iter().enumerate() {
                    let host = node(prefix, s % nodes);
                    builder = builder.event(
                        at + 3,
                        EventBody::SingletonStarted(SingletonInstance {
                            singleton: (*singleton).to_owned(),
                            role: None,
                            host,
                            backoff_ms: None,
                            reason: None,
                        }),
                    );
                }
                for router in ROUTERS {
                    builder = builder
                        .event(
                            at + 4,
                            EventBody::RouterStarted(RouterStarted {
                                router: (*router).to_owned(),
                                strategy: RoutingStrategy::RoundRobin,
                                role: None,
                                routee_path: format!("{router}/w"),
                            }),
                        )
                        .event(
                            at + 5,
                            EventBody::RouteesChanged(RouteesChange {
                                router: (*router).to_owned(),
                                strategy: RoutingStrategy::RoundRobin,
                                routees: routees(router, prefix, *nodes, 0),
                            }),
                        );
                }
            }
            out.push(serde_json::to_vec(&builder.build()).unwrap());
        }
    }
    out
}

fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The server binary, as deployed (2 CPUs here, so 2 actix workers; default pool size).
fn start_server(database_url: &str, addr: SocketAddr) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_troupe-server"))
        .args([
            "--listen",
            &addr.to_string(),
            "--database-url",
            database_url,
        ])
        .args(["--ingest-token", TOKEN, "--max-body-bytes", "67108864"])
        .env("RUST_LOG", "warn")
        .env("OTEL_SDK_DISABLED", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start troupe-server");
    // Migrations run before it listens; a new index on a large history takes a while.
    let deadline = Instant::now() + Duration::from_secs(900);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "troupe-server did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let args = Args::parse();
    assert!(args.batch > 0 && args.events >= args.batch && args.runs > 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (db, url) = if args.reuse {
        let admin = admin_database_url();
        let (base, _) = admin.rsplit_once('/').expect("a database URL");
        (None, format!("{base}/{DATABASE}"))
    } else {
        let db = rt.block_on(TestDatabase::recreate(DATABASE));
        let url = db.url().to_owned();
        (Some(db), url)
    };
    let addr = free_port();
    let mut server = start_server(&url, addr);

    // --- history through the ingest API ---
    let now = now_ms();
    // From half an hour inside the retention window (7 days by default) to a minute ago.
    let start_ms = now - args.days * 86_400_000 + 1_800_000;
    let span_ms = now - 60_000 - start_ms;
    let total = if args.reuse {
        0
    } else {
        args.events / args.batch
    };
    let next = Arc::new(AtomicU64::new(0));
    let fill_started = Instant::now();
    let senders: Vec<_> = (0..args.senders)
        .map(|_| {
            let next = next.clone();
            let batch = args.batch;
            std::thread::spawn(move || {
                let mut client = HttpClient::new(addr);
                loop {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    if b >= total {
                        break;
                    }
                    let (_, body) = history_batch(b, total, batch, start_ms, span_ms);
                    let reply = client
                        .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
                        .expect("ingest");
                    assert_eq!(reply.status, 200, "{}", reply.body);
                    if b % 1000 == 999 {
                        eprintln!(
                            "ingested {} / {} batches ({:.0} s)",
                            b + 1,
                            total,
                            fill_started.elapsed().as_secs_f64()
                        );
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    let mut client = HttpClient::new(addr);
    // Sequences above any history batch's, also when re-using a database.
    let first_sequence = 1_000_000_000 + (now_ms() / 1000) as u64;
    for body in current_state_batches(now_ms(), first_sequence) {
        let reply = client
            .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
            .expect("ingest");
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let fill_time = fill_started.elapsed();

    // What autovacuum does after a bulk load, done now so the run does not depend on when
    // it wakes up.
    let (events, dead_letters, ticks, db_size) = rt.block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::query("VACUUM ANALYZE").execute(&pool).await.unwrap();
        let count = |table: &'static str| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {table}"))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        let events = count("events").await;
        let dead_letters = count("dead_letters").await;
        let ticks = count("depth_ticks").await;
        let size: String =
            sqlx::query_scalar("SELECT pg_size_pretty(pg_database_size(current_database()))")
                .fetch_one(&pool)
                .await
                .unwrap();
        pool.close().await;
        (events, dead_letters, ticks, size)
    });

    // --- pages ---
    let pages: Vec<(&str, &str)> = vec![
        ("overview (every cluster)", "/ui/"),
        ("overview, prod", "/ui/?cluster=prod"),
        ("overview, edge", "/ui/?cluster=edge"),
        ("timeline, last hour", "/ui/timeline?cluster=prod"),
        ("timeline, 24 h", "/ui/timeline?cluster=prod&range=24h"),
        ("timeline, 7 d", "/ui/timeline?cluster=prod&range=7d"),
        (
            "timeline, kind membership, 7 d",
            "/ui/timeline?cluster=prod&range=7d&kind=membership",
        ),
        (
            "timeline, kind LeaderChanged, 7 d",
            "/ui/timeline?cluster=prod&range=7d&kind=LeaderChanged",
        ),
        (
            "timeline, reported by node, 1 h",
            "/ui/timeline?cluster=prod&node=10.0.0.3:2552",
        ),
        (
            "timeline, reported by node, 24 h",
            "/ui/timeline?cluster=prod&range=24h&node=10.0.0.3:2552",
        ),
        (
            "timeline, reported by node, 7 d",
            "/ui/timeline?cluster=prod&range=7d&node=10.0.0.3:2552",
        ),
        (
            "timeline, subject Scheduler, 7 d",
            "/ui/timeline?cluster=prod&range=7d&subject=Scheduler",
        ),
        (
            "timeline, kind + node, 7 d",
            "/ui/timeline?cluster=prod&range=7d&kind=singleton&node=10.0.0.5:2552",
        ),
        ("singletons", "/ui/singletons?cluster=prod"),
        ("routers and mailboxes", "/ui/routers?cluster=prod"),
        ("dead letters, last hour", "/ui/dead-letters?cluster=prod"),
        (
            "dead letters, 7 d",
            "/ui/dead-letters?cluster=prod&range=7d",
        ),
        (
            "dead letters, recipient",
            "/ui/dead-letters?cluster=prod&recipient=/user/worker-7",
        ),
        (
            "dead letters, recipient, 7 d",
            "/ui/dead-letters?cluster=prod&range=7d&recipient=/user/worker-7",
        ),
        (
            "dead letters, message type, 7 d",
            "/ui/dead-letters?cluster=prod&range=7d&message_type=billing::Charge",
        ),
        (
            "dead letters, text search",
            "/ui/dead-letters?cluster=prod&q=cancelorder",
        ),
        (
            "dead letters, text search, 7 d",
            "/ui/dead-letters?cluster=prod&range=7d&q=cancelorder",
        ),
        (
            "dead letters, search without match, 7 d",
            "/ui/dead-letters?cluster=prod&range=7d&q=no-such-thing",
        ),
        ("node detail", "/ui/node?cluster=prod&node=10.0.0.3:2552"),
        (
            "node detail, small cluster",
            "/ui/node?cluster=edge&node=10.2.0.1:2552",
        ),
    ];
    let mut rows = Vec::new();
    for (name, path) in &pages {
        // One warm-up fetch (also checks the page renders).
        let reply = client.request("GET", path, None, b"").unwrap();
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let bytes = reply.body.len();
        let mut times = Vec::with_capacity(args.runs);
        let page_started = Instant::now();
        for _ in 0..args.runs {
            if page_started.elapsed() > Duration::from_secs(args.page_seconds) {
                break;
            }
            let started = Instant::now();
            let reply = client.request("GET", path, None, b"").unwrap();
            times.push(started.elapsed());
            assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        }
        times.sort();
        eprintln!(
            "{name}: {} fetches, p99 {:.1} ms",
            times.len(),
            ms(percentile(&times, 0.99))
        );
        rows.push((
            *name,
            *path,
            bytes,
            times.len(),
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            *times.last().unwrap(),
        ));
    }

    server.kill().ok();
    server.wait().ok();

    println!();
    println!(
        "troupe-server dashboard render benchmark ({} cores; server binary, PostgreSQL and client on this machine)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!(
        "stored: {events} events + {dead_letters} dead letters = {} (ingested in {:.0} s through the API), {ticks} depth ticks; database {db_size}",
        events + dead_letters,
        fill_time.as_secs_f64()
    );
    println!();
    println!(
        "| page (over HTTP) | bytes | fetches | p50 ms | p99 ms | max ms | p99 < {} ms |",
        args.target_ms
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    let mut missed = 0;
    for (name, path, bytes, fetches, p50, p99, max) in &rows {
        let pass = ms(*p99) < args.target_ms;
        if !pass {
            missed += 1;
        }
        println!(
            "| {name} `{path}` | {bytes} | {fetches} | {:.1} | {:.1} | {:.1} | {} |",
            ms(*p50),
            ms(*p99),
            ms(*max),
            if pass { "PASS" } else { "MISS" }
        );
    }
    println!();
    println!(
        "{} of {} pages within the target; a live (SSE-triggered) refresh fetches the same URL.",
        rows.len() - missed,
        rows.len()
    );
    match db {
        Some(db) if args.keep => std::mem::forget(db),
        Some(db) => drop(db),
        None if args.keep => {}
        None => rt.block_on(async {
            use sqlx::{Connection, Executor};
            let mut admin = sqlx::PgConnection::connect(&admin_database_url())
                .await
                .unwrap();
            admin
                .execute(format!("DROP DATABASE IF EXISTS \"{DATABASE}\" WITH (FORCE)").as_str())
                .await
                .unwrap();
        }),
    }
}
