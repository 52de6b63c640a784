//! Ingest benchmark: simulated agents → troupe-server (in this process) → PostgreSQL, all on
//! this machine; against a raw COPY floor for the same schema; then query latency with the
//! history tables filled to `--fill` rows each.
//!
//! ```text
//! cargo bench -p troupe-server --bench ingest                     # defaults below
//! cargo bench -p troupe-server --bench ingest -- --events 500000 --fill 1000000
//! ```
//!
//! Needs PostgreSQL (`TROUPE_TEST_DATABASE_URL`, as the tests); makes and drops its own
//! database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use sqlx::postgres::PgPoolCopyExt;
use troupe_protocol::{
    DeadLetterEvent, Event, EventBody, HandOverCompleted, MemberChange, MemberInfo, MemberStatus,
};
use troupe_server::testing::{BatchBuilder, HttpClient, TestDatabase};
use troupe_server::{App, Config};

#[derive(Debug, Parser)]
struct Args {
    /// Simulated agents (one thread and connection each).
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Events per batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Events to ingest in the measured run.
    #[arg(long, default_value_t = 2_000_000)]
    events: u64,
    /// Rows put into `events` and into `dead_letters` before measuring (history size).
    #[arg(long, default_value_t = 10_000_000)]
    fill: i64,
    /// Rows for the raw COPY floor.
    #[arg(long, default_value_t = 1_000_000)]
    copy_rows: usize,
    /// Connections for the raw COPY floor.
    #[arg(long, default_value_t = 4)]
    copy_connections: usize,
    /// Runs of each query.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long)]
    bench: bool,
}

const TOKEN: &str = "bench";
const CLUSTER: &str = "bench";
/// One batch in ten events is not a dead letter: membership, hand-over.
const STATE_EVENT_EVERY: usize = 10;

fn node(agent: usize) -> String {
    format!("10.0.0.{}:2552", agent + 1)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The events of one batch, serialised once per agent and reused (only the envelope changes).
fn events_json(agent: usize, batch: usize, at_ms: i64) -> String {
    let events: Vec<Event> = (0..batch)
        .map(|i| {
            let body = if i % STATE_EVENT_EVERY == 0 {
                if i % (STATE_EVENT_EVERY * 2) == 0 {
                    EventBody::MemberUp(MemberChange {
                        member: MemberInfo {
                            address: node((agent + i) % 8),
                            uid: 1,
                            status: MemberStatus::Up,
                            roles: vec!["compute".into()],
                        },
                        previous_status: None,
                        observers: vec![],
                    })
                } else {
                    EventBody::SingletonHandOverCompleted(HandOverCompleted {
                        singleton: "Scheduler".into(),
                        role: None,
                        new_host: node(agent),
                        duration_ms: 740,
                    })
                }
            } else {
                EventBody::DeadLetter(DeadLetterEvent {
                    recipient: format!("/user/worker-{}", i % 50),
                    sender: Some("/user/scheduler".into()),
                    message_type: "demo::ComputeJob".into(),
                    reason: "recipient mailbox full".into(),
                })
            };
            Event {
                at_ms: at_ms + i as i64,
                body,
            }
        })
        .collect();
    serde_json::to_string(&events).unwrap()
}

fn batch_body(agent: usize, sequence: u64, events_json: &str) -> Vec<u8> {
    let samples: Vec<String> = (0..16)
        .map(|w| {
            format!(
                r#"{{"path":"/user/worker-{w}","router":"/user/workers","depth":{}}}"#,
                (sequence as usize + w) % 40
            )
        })
        .collect();
    format!(
        r#"{{"version":1,"identity":{{"cluster":"{CLUSTER}","node":"{}","incarnation":1,"meta":{{"node":"bench"}}}},"sequence":{sequence},"sent_at_ms":{},"events":{events_json},"depth_samples":[{{"at_ms":{},"samples":[{}]}}],"dropped":{{}}}}"#,
        node(agent),
        now_ms(),
        now_ms(),
        samples.join(",")
    )
    .into_bytes()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let args = Args::parse();
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
    config.workers = Some(2);
    config.db_max_connections = 10;
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

    // One batch per agent so the cluster and agents exist.
    let mut client = HttpClient::new(addr);
    for agent in 0..args.agents {
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
        let agents: Vec<i64> = sqlx::query_scalar("SELECT id FROM agents ORDER BY node")
            .fetch_all(&pool)
            .await
            .unwrap();
        (cluster, agents)
    });

    // --- history: `fill` rows in each table, spread over the last 7 days ---
    let fill_started = Instant::now();
    let week_ago = now_ms() - 7 * 86_400_000;
    let step = (7 * 86_400_000 - 3_600_000) / args.fill.max(1);
    rt.block_on(async {
        let chunk = 1_000_000i64;
        let mut done = 0i64;
        while done < args.fill {
            let n = chunk.min(args.fill - done);
            sqlx::query(
                "INSERT INTO events (cluster_id, agent_id, at_ms, kind, subject, detail)
                 SELECT $1, ($2::bigint[])[1 + g % 8], $3 + g * $4,
                   (ARRAY['MemberUp','MemberLeft','MemberUnreachable','MemberReachable',
                          'LeaderChanged','SingletonHandOverStarted','SingletonHandOverCompleted',
                          'SingletonStarted','SingletonStopped','RouteesChanged'])[1 + g % 10],
                   '10.0.0.' || (1 + g % 8) || ':2552',
                   '{\"kind\":\"MemberUp\",\"member\":{\"address\":\"10.0.0.1:2552\",\"uid\":1,\"status\":\"up\",\"roles\":[]},\"previous_status\":null,\"observers\":[]}'
                 FROM generate_series($5::bigint, $6::bigint) g",
            )
            .bind(cluster_id)
            .bind(&agent_ids)
            .bind(week_ago)
            .bind(step)
            .bind(done)
            .bind(done + n - 1)
            .execute(&pool)
            .await
            .unwrap();
            sqlx::query(
                "INSERT INTO dead_letters (cluster_id, agent_id, at_ms, recipient, sender, message_type, reason)
                 SELECT $1, ($2::bigint[])[1 + g % 8], $3 + g * $4,
                   '/user/worker-' || (g % 50), '/user/scheduler', 'demo::ComputeJob', 'recipient mailbox full'
                 FROM generate_series($5::bigint, $6::bigint) g",
            )
            .bind(cluster_id)
            .bind(&agent_ids)
            .bind(week_ago)
            .bind(step)
            .bind(done)
            .bind(done + n - 1)
            .execute(&pool)
            .await
            .unwrap();
            done += n;
        }
        // The per-minute rollup ingest keeps, for the filled dead letters.
        sqlx::query(
            "INSERT INTO dead_letter_minutes (cluster_id, agent_id, minute_ms, recipient, message_type, count)
             SELECT cluster_id, agent_id, (at_ms / 60000) * 60000, recipient, message_type, COUNT(*)
             FROM dead_letters GROUP BY 1, 2, 3, 4, 5",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("VACUUM ANALYZE").execute(&pool).await.unwrap();
    });
    let fill_time = fill_started.elapsed();

    // --- raw COPY floor: the same mix (9 dead letters : 1 event) straight into the tables ---
    let copy_started = Instant::now();
    let per_connection = args.copy_rows / args.copy_connections;
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..args.copy_connections {
            let pool = pool.clone();
            let agent = agent_ids[c % agent_ids.len()];
            tasks.push(tokio::spawn(async move {
                let at = now_ms();
                let chunk = 50_000;
                let mut sent = 0;
                while sent < per_connection {
                    let n = chunk.min(per_connection - sent);
                    let mut dead_letters = String::with_capacity(n * 120);
                    let mut events = String::with_capacity(n * 30);
                    for i in 0..n {
                        if i % STATE_EVENT_EVERY == 0 {
                            events.push_str(&format!(
                                "{cluster_id},{agent},{},SingletonHandOverCompleted,Scheduler,\"{{\"\"kind\"\":\"\"SingletonHandOverCompleted\"\",\"\"singleton\"\":\"\"Scheduler\"\",\"\"role\"\":null,\"\"new_host\"\":\"\"10.0.0.1:2552\"\",\"\"duration_ms\"\":740}}\"\n",
                                at + i as i64
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
                    sent += n;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    let copy_time = copy_started.elapsed();
    let copy_rate = (per_connection * args.copy_connections) as f64 / copy_time.as_secs_f64();

    // --- what decoding a batch costs the server (one core) ---
    let sample = batch_body(0, 2, &events_json(0, args.batch, now_ms()));
    let decode_started = Instant::now();
    let decode_runs = 200;
    for _ in 0..decode_runs {
        let batch: troupe_protocol::ReportBatch = serde_json::from_slice(&sample).unwrap();
        std::hint::black_box(batch);
    }
    let decode_per_event = decode_started.elapsed() / (decode_runs * args.batch as u32);

    // --- ingest through the server ---
    let batches_total = args.events.div_ceil(args.batch as u64);
    let next_batch = Arc::new(AtomicU64::new(0));
    let ingest_started = Instant::now();
    let agents: Vec<_> = (0..args.agents)
        .map(|agent| {
            let next_batch = next_batch.clone();
            let batch = args.batch;
            std::thread::spawn(move || {
                let events = events_json(agent, batch, now_ms());
                let mut client = HttpClient::new(addr);
                let mut latencies = Vec::new();
                let mut sequence = 1;
                while next_batch.fetch_add(1, Ordering::Relaxed) < batches_total {
                    sequence += 1;
                    let body = batch_body(agent, sequence, &events);
                    let started = Instant::now();
                    let reply = client
                        .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
                        .expect("ingest request");
                    assert_eq!(reply.status, 200, "{}", reply.body);
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies: Vec<Duration> = agents.into_iter().flat_map(|a| a.join().unwrap()).collect();
    let ingest_time = ingest_started.elapsed();
    latencies.sort();
    let ingested = latencies.len() as u64 * args.batch as u64;
    let ingest_rate = ingested as f64 / ingest_time.as_secs_f64();

    // --- queries through the API ---
    let stored = rt.block_on(store.totals()).unwrap();
    let hour_ago = now_ms() - 3_600_000;
    let yesterday = now_ms() - 86_400_000;
    // A page starting half-way through the filled week.
    let mid_cursor = format!("{}.{}", week_ago + 7 * 86_400_000 / 2, i64::MAX);
    let queries: Vec<(&str, String)> = vec![
        ("latest 100 events", "/api/v1/clusters/bench/events".into()),
        (
            "events, one kind",
            "/api/v1/clusters/bench/events?kind=SingletonStarted".into(),
        ),
        (
            "events, two kinds",
            "/api/v1/clusters/bench/events?kind=SingletonStarted&kind=LeaderChanged".into(),
        ),
        (
            "events, one node",
            "/api/v1/clusters/bench/events?node=10.0.0.3:2552".into(),
        ),
        (
            "events, 1 h window a day ago",
            format!(
                "/api/v1/clusters/bench/events?since={yesterday}&until={}",
                yesterday + 3_600_000
            ),
        ),
        (
            "events, page deep in history",
            format!("/api/v1/clusters/bench/events?cursor={mid_cursor}"),
        ),
        (
            "events, kind + node + window",
            format!(
                "/api/v1/clusters/bench/events?kind=MemberLeft&node=10.0.0.2:2552&since={yesterday}&until={}",
                yesterday + 3_600_000
            ),
        ),
        (
            "dead letters, one recipient",
            "/api/v1/clusters/bench/dead-letters?recipient=/user/worker-7".into(),
        ),
        (
            "dead letters per minute, last hour",
            format!("/api/v1/clusters/bench/dead-letters/per-minute?since={hour_ago}"),
        ),
        ("members", "/api/v1/clusters/bench/members".into()),
        (
            "singleton with history",
            "/api/v1/clusters/bench/singletons/Scheduler".into(),
        ),
    ];
    let mut client = HttpClient::new(addr);
    let mut query_rows = Vec::new();
    for (name, path) in &queries {
        let mut times = Vec::with_capacity(args.queries);
        for _ in 0..args.queries {
            let started = Instant::now();
            let reply = client.request("GET", path, None, b"").unwrap();
            times.push(started.elapsed());
            assert!(
                reply.status == 200 || reply.status == 404,
                "{path}: {} {}",
                reply.status,
                reply.body
            );
        }
        times.sort();
        query_rows.push((
            *name,
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            *times.last().unwrap(),
        ));
    }

    shutdown.shutdown();
    server_thread.join().unwrap();
    rt.block_on(store.close());

    println!();
    println!(
        "troupe-server ingest benchmark ({} cores, PostgreSQL on loopback, server and load in one process)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| measure | value |");
    println!("|---|---:|");
    println!(
        "| history before the run (events + dead letters) | {} + {} rows (filled in {:.0} s) |",
        args.fill,
        args.fill,
        fill_time.as_secs_f64()
    );
    println!(
        "| raw COPY floor, CSV, {} connections, 9:1 dead letters:events | {:.0} rows/s |",
        args.copy_connections, copy_rate
    );
    println!(
        "| server ingest, {} agents, {} events/batch + 16 depth samples | {:.0} events/s |",
        args.agents, args.batch, ingest_rate
    );
    println!("| ingest / COPY floor | {:.2} |", ingest_rate / copy_rate);
    println!(
        "| JSON decode of a batch, per event (one core) | {:.2} µs |",
        decode_per_event.as_secs_f64() * 1e6
    );
    println!(
        "| events ingested | {ingested} in {:.1} s |",
        ingest_time.as_secs_f64()
    );
    println!(
        "| batch latency p50 / p99 | {} / {} ms |",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99))
    );
    println!(
        "| stored after the run: events / dead letters / depth ticks | {} / {} / {} |",
        stored.events, stored.dead_letters, stored.depth_ticks
    );
    println!();
    println!(
        "| query (through the API, {} runs each) | p50 ms | p99 ms | max ms |",
        args.queries
    );
    println!("|---|---:|---:|---:|");
    for (name, p50, p99, max) in query_rows {
        println!("| {name} | {} | {} | {} |", ms(p50), ms(p99), ms(max));
    }
    drop(db);
}
