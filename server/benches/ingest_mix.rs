//! Ingest benchmark with the mix a real cluster sends: simulated agents → troupe-server (in
//! this process, real HTTP) → PostgreSQL, beside the raw COPY floor of the same schema measured
//! in the same run. Every phase is bounded in time.
//!
//! ```text
//! cargo bench -p troupe-server --bench ingest_mix                 # 8 and 64 agents, 20 s each
//! cargo bench -p troupe-server --bench ingest_mix -- --quick      # smoke run, a few seconds
//! cargo bench -p troupe-server --bench ingest_mix -- --help
//! ```
//!
//! The mix (per 20 events of a batch): 3 membership events about the cluster's members
//! (`MemberUp`, `MemberUnreachable`, `MemberReachable`), 2 singleton events (`SingletonStarted`,
//! `LeaseAcquired`) on 4 singletons, 1 `RouteesChanged` on 3 routers, 1 `AgentHealthChanged`,
//! 13 dead letters: 35% state events, every one of which updates a current-state row. Every
//! agent adds a depth tick (16 samples) to its next batch once a second has passed since its
//! last one. Event times are the send time, so the cross-agent ordering rules compare real
//! times.
//!
//! Needs PostgreSQL (`TROUPE_TEST_DATABASE_URL`, as the tests); makes a database per agent
//! count and drops it at the end of that run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use sqlx::postgres::PgPoolCopyExt;
use troupe_protocol::{
    AgentHealth, DeadLetterEvent, DepthSample, DepthTick, Event, EventBody, HealthChange,
    LeaseChange, MemberChange, MemberInfo, MemberStatus, RouteesChange, RoutingStrategy,
    SingletonInstance,
};
use troupe_server::testing::{BatchBuilder, HttpClient, TestDatabase};
use troupe_server::{App, Config};

#[derive(Debug, Parser)]
#[command(about = "Ingest with a realistic mix of state events, beside the raw COPY floor")]
struct Args {
    /// Simulated agent counts, one run each (one thread and connection per agent).
    #[arg(long, value_delimiter = ',', default_value = "8,64")]
    agents: Vec<usize>,
    /// Events per batch.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Seconds of ingest per run.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seconds of the raw COPY floor per run.
    #[arg(long, default_value_t = 8)]
    copy_seconds: u64,
    /// Connections for the raw COPY floor.
    #[arg(long, default_value_t = 4)]
    copy_connections: usize,
    /// Actix workers of the server.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Database connections of the server.
    #[arg(long, default_value_t = 10)]
    db_connections: u32,
    /// A smoke run: 2 s of ingest and 1 s of COPY per run.
    #[arg(long)]
    quick: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long)]
    bench: bool,
}

const TOKEN: &str = "bench";
const CLUSTER: &str = "mix";
/// Of every 20 events, this many are state events (the rest dead letters).
const STATE_PER_20: usize = 7;

fn node(agent: usize) -> String {
    format!("10.1.{}.{}:2552", agent / 250, agent % 250 + 1)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The body of event `i` of a batch from `agent` in a cluster of `agents` members.
fn body(agent: usize, agents: usize, i: usize) -> EventBody {
    let member = |status| MemberChange {
        member: MemberInfo {
            address: node((agent + i) % agents),
            uid: 1,
            status,
            roles: vec!["compute".into()],
        },
        previous_status: None,
        observers: vec![],
    };
    let singleton = format!("singleton-{}", (i / 20) % 4);
    match i % 20 {
        0 => EventBody::MemberUp(member(MemberStatus::Up)),
        1 => EventBody::MemberUnreachable(member(MemberStatus::Up)),
        2 => EventBody::MemberReachable(member(MemberStatus::Up)),
        3 => EventBody::SingletonStarted(SingletonInstance {
            singleton,
            role: None,
            host: node(agent),
            backoff_ms: None,
            reason: None,
        }),
        4 => EventBody::LeaseAcquired(LeaseChange {
            singleton: singleton.clone(),
            role: None,
            lease: format!("{singleton}-lease"),
            holder: Some(node(agent)),
            reason: None,
        }),
        5 => EventBody::RouteesChanged(RouteesChange {
            router: format!("/user/router-{}", (i / 20) % 3),
            strategy: RoutingStrategy::SmallestMailbox,
            routees: (0..4)
                .map(|k| format!("{}/user/worker-{k}", node(agent)))
                .collect(),
        }),
        6 => EventBody::AgentHealthChanged(HealthChange {
            health: AgentHealth::Ready,
            reason: None,
        }),
        _ => EventBody::DeadLetter(DeadLetterEvent {
            recipient: format!("/user/worker-{}", i % 50),
            sender: Some("/user/scheduler".into()),
            message_type: "demo::ComputeJob".into(),
            reason: "recipient mailbox full".into(),
        }),
    }
}

fn depth_tick(at_ms: i64, sequence: u64) -> DepthTick {
    DepthTick {
        at_ms,
        samples: (0..16)
            .map(|w| DepthSample {
                path: format!("/user/worker-{w}"),
                router: Some(format!("/user/router-{}", w % 3)),
                depth: ((sequence as usize + w) % 40) as u32,
            })
            .collect(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// One run's figures.
struct RunResult {
    agents: usize,
    copy_rate: f64,
    events_rate: f64,
    state_rate: f64,
    ticks_rate: f64,
    p50: Duration,
    p99: Duration,
    batches: usize,
    retries: u64,
    members: i64,
}

/// The raw COPY floor: CSV rows of the same mix (35% into `events`, 65% into `dead_letters`)
/// from `connections` connections for `seconds`; rows per second.
async fn copy_floor(
    pool: &sqlx::PgPool,
    cluster_id: i64,
    agent_ids: &[i64],
    connections: usize,
    seconds: u64,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let pool = pool.clone();
        let agent = agent_ids[c % agent_ids.len()];
        tasks.push(tokio::spawn(async move {
            let chunk = 20_000;
            let mut sent = 0u64;
            while Instant::now() < deadline {
                let at = now_ms();
                let mut dead_letters = String::with_capacity(chunk * 100);
                let mut events = String::with_capacity(chunk * 60);
                for i in 0..chunk {
                    if i % 20 < STATE_PER_20 {
                        events.push_str(&format!(
                            "{cluster_id},{agent},{},MemberUp,10.1.0.{}:2552,\"{{\"\"kind\"\":\"\"MemberUp\"\",\"\"member\"\":{{\"\"address\"\":\"\"10.1.0.1:2552\"\",\"\"uid\"\":\"\"1\"\",\"\"status\"\":\"\"up\"\",\"\"roles\"\":[\"\"compute\"\"]}},\"\"previous_status\"\":null,\"\"observers\"\":[]}}\"\n",
                            at + i as i64,
                            i % 8 + 1
                        ));
                    } else {
                        dead_letters.push_str(&format!(
                            "{cluster_id},{agent},{},/user/worker-{},/user/scheduler,demo::ComputeJob,recipient mailbox full\n",
                            at + i as i64,
                            i % 50
                        ));
                    }
                }
                let mut copy = pool
                    .copy_in_raw("COPY dead_letters (cluster_id, agent_id, at_ms, recipient, sender, message_type, reason) FROM STDIN WITH (FORMAT csv)")
                    .await
                    .unwrap();
                copy.send(dead_letters.into_bytes()).await.unwrap();
                copy.finish().await.unwrap();
                let mut copy = pool
                    .copy_in_raw("COPY events (cluster_id, agent_id, at_ms, kind, subject, detail) FROM STDIN WITH (FORMAT csv)")
                    .await
                    .unwrap();
                copy.send(events.into_bytes()).await.unwrap();
                copy.finish().await.unwrap();
                sent += chunk as u64;
            }
            sent
        }));
    }
    let mut rows = 0;
    for task in tasks {
        rows += task.await.unwrap();
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

fn run(args: &Args, agents: usize, seconds: u64, copy_seconds: u64) -> RunResult {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let db = rt.block_on(TestDatabase::create());
    let store = rt.block_on(db.store()).expect("store");
    let pool = store.postgres_pool().unwrap().clone();

    // --- the server, in this process ---
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.database_url = Some(db.url().to_owned());
    config.ingest_token = Some(TOKEN.to_owned());
    config.retention_days = 0;
    config.workers = Some(args.workers);
    config.db_max_connections = args.db_connections;
    config.max_body_bytes = 64 * 1024 * 1024;
    let server_thread = std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let app = App::build(config).await.expect("server starts");
            addr_tx
                .send((app.local_addr(), app.shutdown_trigger()))
                .unwrap();
            app.run().await.expect("server runs");
        });
    });
    let (addr, shutdown) = addr_rx.recv().unwrap();

    // One batch per agent so the cluster and agents exist (the COPY floor needs their ids).
    let mut client = HttpClient::new(addr);
    for agent in 0..agents {
        let body = serde_json::to_vec(
            &BatchBuilder::new(CLUSTER, &node(agent), 1)
                .sent_at(now_ms())
                .build(),
        )
        .unwrap();
        let reply = client
            .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
            .unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let (cluster_id, agent_ids): (i64, Vec<i64>) = rt.block_on(async {
        let cluster: i64 = sqlx::query_scalar("SELECT id FROM clusters WHERE name = $1")
            .bind(CLUSTER)
            .fetch_one(&pool)
            .await
            .unwrap();
        let agents: Vec<i64> = sqlx::query_scalar("SELECT id FROM agents ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
        (cluster, agents)
    });

    let copy_rate = rt.block_on(copy_floor(
        &pool,
        cluster_id,
        &agent_ids,
        args.copy_connections,
        copy_seconds,
    ));

    // --- ingest through the server, bounded in time ---
    let stop = Arc::new(AtomicBool::new(false));
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..agents)
        .map(|agent| {
            let stop = stop.clone();
            let retries = retries.clone();
            let batch = args.batch;
            std::thread::spawn(move || {
                let mut events: Vec<Event> = (0..batch)
                    .map(|i| Event {
                        at_ms: 0,
                        body: body(agent, agents, i),
                    })
                    .collect();
                let mut client = HttpClient::new(addr);
                let mut latencies = Vec::new();
                let (mut sequence, mut state, mut ticks) = (1u64, 0u64, 0u64);
                // Agents start their ticks spread over the first second.
                let mut last_tick =
                    Instant::now() - Duration::from_millis((agent as u64 * 37) % 1000);
                while !stop.load(Ordering::Relaxed) {
                    sequence += 1;
                    let at = now_ms();
                    for (i, event) in events.iter_mut().enumerate() {
                        event.at_ms = at - (batch - i) as i64;
                    }
                    let depth_samples = if last_tick.elapsed() >= Duration::from_secs(1) {
                        last_tick = Instant::now();
                        ticks += 1;
                        vec![depth_tick(at, sequence)]
                    } else {
                        vec![]
                    };
                    let report = troupe_protocol::ReportBatch {
                        version: troupe_protocol::PROTOCOL_VERSION,
                        identity: troupe_protocol::AgentIdentity {
                            cluster: CLUSTER.into(),
                            node: node(agent),
                            incarnation: 1,
                            meta: Default::default(),
                            cluster_identity: None,
                        },
                        sequence,
                        sent_at_ms: at,
                        events: std::mem::take(&mut events),
                        depth_samples,
                        dropped: Default::default(),
                    };
                    let body = serde_json::to_vec(&report).unwrap();
                    events = report.events;
                    let sent = Instant::now();
                    loop {
                        let reply = client
                            .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
                            .expect("ingest request");
                        if reply.status == 503 {
                            retries.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        assert_eq!(reply.status, 200, "{}", reply.body);
                        break;
                    }
                    latencies.push(sent.elapsed());
                    state += (batch / 20 * STATE_PER_20 + (batch % 20).min(STATE_PER_20)) as u64;
                }
                (latencies, state, ticks)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut latencies, mut state, mut ticks) = (Vec::new(), 0u64, 0u64);
    for thread in threads {
        let (l, s, t) = thread.join().unwrap();
        latencies.extend(l);
        state += s;
        ticks += t;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let events = latencies.len() as f64 * args.batch as f64;

    // The current state the mix made: one member row per agent, all up.
    let members: i64 = rt.block_on(async {
        sqlx::query_scalar("SELECT COUNT(*) FROM members WHERE cluster_id = $1 AND status = 'up'")
            .bind(cluster_id)
            .fetch_one(&pool)
            .await
            .unwrap()
    });

    shutdown.shutdown();
    server_thread.join().unwrap();
    rt.block_on(store.close());
    drop(db);
    RunResult {
        agents,
        copy_rate,
        events_rate: events / elapsed,
        state_rate: state as f64 / elapsed,
        ticks_rate: ticks as f64 / elapsed,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        batches: latencies.len(),
        retries: retries.load(Ordering::Relaxed),
        members,
    }
}

fn main() {
    let args = Args::parse();
    let (seconds, copy_seconds) = if args.quick {
        (2, 1)
    } else {
        (args.seconds, args.copy_seconds)
    };
    let results: Vec<RunResult> = args
        .agents
        .iter()
        .map(|&agents| {
            eprintln!(
                "ingest_mix: {agents} agents, {copy_seconds} s COPY floor, {seconds} s ingest"
            );
            run(&args, agents, seconds, copy_seconds)
        })
        .collect();

    println!();
    println!(
        "troupe-server ingest, realistic mix ({} cores; PostgreSQL on loopback; server, load and database on one machine)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "batches of {} events: {}% state events (membership, singleton, router, health), the rest dead letters; a depth tick per agent per second; {} s ingest, {} s COPY per run",
        args.batch,
        STATE_PER_20 * 5,
        seconds,
        copy_seconds
    );
    println!();
    println!(
        "| agents | COPY floor rows/s | ingest events/s | state events/s | depth ticks/s | ingest / floor | batch p50 ms | batch p99 ms | batches | 503 retries | members up |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.3} | {} | {} | {} | {} | {} |",
            r.agents,
            r.copy_rate,
            r.events_rate,
            r.state_rate,
            r.ticks_rate,
            r.events_rate / r.copy_rate,
            ms(r.p50),
            ms(r.p99),
            r.batches,
            r.retries,
            r.members
        );
    }
}
