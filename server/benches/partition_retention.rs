//! Retention beside ingest on PostgreSQL (issue 16): the ingest rate and batch latency of
//! simulated agents alone, while retention detaches and drops an expired day's partitions,
//! and while the row-by-row `DELETE` retention ran before partitioning ages out a day of the
//! same size. Every phase is bounded in time.
//!
//! ```text
//! cargo bench -p troupe-server --bench partition_retention               # 15 s per phase
//! cargo bench -p troupe-server --bench partition_retention -- --quick    # smoke run
//! cargo bench -p troupe-server --bench partition_retention -- --help
//! ```
//!
//! The database holds two expired days of `--rows` dead letters (a fifth as many events and a
//! fiftieth as many depth ticks) each. Agents ingest through [`Store::ingest`] (in this
//! process, no HTTP) batches of `--batch` events dated now: 70% dead letters, 30% member
//! events (state rows), and a depth tick. Each phase lasts `--seconds`; the retention of a
//! phase starts 2 s in. The `DELETE` phase runs the statements of the retention before
//! partitioning (chunks of 5,000 rows per table, one after another until none is left) on
//! the same partitioned tables, stopping at the end of the phase if not done.
//!
//! Needs PostgreSQL (`TROUPE_TEST_DATABASE_URL`, as the tests); uses the database
//! `troupe_bench_partitions`, made afresh and dropped at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::sync::Mutex;
use troupe_protocol::{EventBody, MemberStatus};
use troupe_server::store::{PARTITIONED_TABLES, Store, partition_name};
use troupe_server::testing::{BatchBuilder, TestDatabase};

#[derive(Debug, Parser)]
#[command(about = "Ingest beside retention: dropping a day's partition vs deleting its rows")]
struct Args {
    /// Simulated agents (one task each, one batch in flight each).
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Events per batch.
    #[arg(long, default_value_t = 200)]
    batch: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Dead letters in each expired day (plus a fifth as many events, a fiftieth depth ticks).
    #[arg(long, default_value_t = 300_000)]
    rows: i64,
    /// A smoke run: 4 s phases, 20,000 rows a day.
    #[arg(long)]
    quick: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long)]
    bench: bool,
}

const DAY_MS: i64 = 86_400_000;
const CLUSTER: &str = "retention";
/// Rows per table and statement, as the server's retention.
const CHUNK: i64 = 5_000;

/// The retention statements before partitioning ($1 cutoff, $2 chunk, $3 cluster).
const DELETE_RETENTION: [&str; 3] = [
    "DELETE FROM events WHERE id IN
        (SELECT id FROM events WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    "DELETE FROM dead_letters WHERE id IN
        (SELECT id FROM dead_letters WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
    "DELETE FROM depth_ticks WHERE id IN
        (SELECT id FROM depth_ticks WHERE cluster_id = $3 AND at_ms < $1 LIMIT $2)",
];

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn today() -> i64 {
    let now = now_ms();
    now - now.rem_euclid(DAY_MS)
}

#[derive(Debug, Clone, Copy)]
enum Retention {
    None,
    /// Detach and drop the partitions of the day starting at this time.
    Drop(i64),
    /// Delete the rows of the day starting at this time, row by row.
    Delete(i64),
}

/// One batch: when it started (from the phase start) and how long it took.
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Duration,
    took: Duration,
}

#[derive(Debug)]
struct Figures {
    events_per_s: f64,
    all: Vec<Duration>,
    during: Vec<Duration>,
    retention_took: Option<Duration>,
    retention_done: bool,
    rows_aged_out: i64,
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn batch(agent: usize, sequence: u64, events: usize) -> troupe_protocol::ReportBatch {
    let node = format!("10.2.0.{}:2552", agent + 1);
    let mut b = BatchBuilder::new(CLUSTER, &node, sequence);
    let at = now_ms();
    let state = events * 3 / 10;
    for i in 0..events - state {
        b = b.dead_letter(at, &format!("/user/worker-{}", i % 20), "app::Job");
    }
    for i in 0..state {
        let member = format!("10.3.{agent}.{}:2552", i % 16);
        b = b.member(at, EventBody::MemberUp, &member, MemberStatus::Up, &[]);
    }
    b.depth_tick(
        at,
        &[("/user/worker-0", None, 3), ("/user/worker-1", None, 1)],
    )
    .build()
}

/// Rows in the day starting at `day` across the history tables.
async fn rows_of_day(store: &Store, day: i64) -> i64 {
    let pool = store.postgres_pool().expect("postgres");
    let mut total = 0;
    for table in PARTITIONED_TABLES {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {table} WHERE at_ms >= $1 AND at_ms < $2"
        ))
        .bind(day)
        .bind(day + DAY_MS)
        .fetch_one(pool)
        .await
        .expect("count");
        total += n;
    }
    total
}

async fn fill_day(store: &Store, cluster: i64, agent: i64, day: i64, rows: i64) {
    let pool = store.postgres_pool().expect("postgres");
    let statements = [
        (
            "INSERT INTO dead_letters (cluster_id, agent_id, at_ms, recipient, sender, message_type,
                reason)
             SELECT $1, $2, $3 + (g * 7919) % 86400000, '/user/worker-' || (g % 50), NULL,
                'app::Job', 'no recipient' FROM generate_series(1, $4) g",
            rows,
        ),
        (
            "INSERT INTO events (cluster_id, agent_id, at_ms, kind, subject, detail)
             SELECT $1, $2, $3 + (g * 7919) % 86400000, 'member-up', '10.9.0.' || (g % 200),
                '{\"member\":{\"address\":\"10.9.0.1:2552\",\"status\":\"up\"}}'
             FROM generate_series(1, $4) g",
            rows / 5,
        ),
        (
            "INSERT INTO depth_ticks (cluster_id, agent_id, at_ms, samples)
             SELECT $1, $2, $3 + (g * 7919) % 86400000,
                '[{\"path\":\"/user/worker-0\",\"depth\":3}]' FROM generate_series(1, $4) g",
            rows / 50,
        ),
    ];
    for (sql, n) in statements {
        sqlx::query(sql)
            .bind(cluster)
            .bind(agent)
            .bind(day)
            .bind(n)
            .execute(pool)
            .await
            .expect("fill");
    }
}

async fn run_retention(
    store: &Store,
    cluster: i64,
    retention: Retention,
    stop: &AtomicBool,
) -> (bool, i64) {
    match retention {
        Retention::None => (true, 0),
        Retention::Drop(day) => {
            let rows = rows_of_day(store, day).await;
            let dropped = store
                .drop_expired_partitions(day + DAY_MS)
                .await
                .expect("drop");
            assert!(
                dropped.contains(&partition_name("events", day)),
                "{dropped:?}"
            );
            (true, rows)
        }
        Retention::Delete(day) => {
            let pool = store.postgres_pool().expect("postgres");
            let mut deleted = 0;
            loop {
                let mut this_round = 0;
                for statement in DELETE_RETENTION {
                    this_round += sqlx::query(statement)
                        .bind(day + DAY_MS)
                        .bind(CHUNK)
                        .bind(cluster)
                        .execute(pool)
                        .await
                        .expect("delete")
                        .rows_affected() as i64;
                }
                deleted += this_round;
                if this_round == 0 {
                    return (true, deleted);
                }
                if stop.load(Ordering::Relaxed) {
                    return (false, deleted);
                }
                tokio::task::yield_now().await;
            }
        }
    }
}

async fn phase(
    store: &Store,
    args: &Args,
    cluster: i64,
    sequences: &Arc<Mutex<Vec<u64>>>,
    retention: Retention,
) -> Figures {
    let started = Instant::now();
    let window = Duration::from_secs(args.seconds);
    let stop = Arc::new(AtomicBool::new(false));
    let mut agents = Vec::new();
    for agent in 0..args.agents {
        let store = store.clone();
        let sequences = sequences.clone();
        let events = args.batch;
        agents.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut stored = 0u64;
            while started.elapsed() < window {
                let sequence = {
                    let mut s = sequences.lock().await;
                    s[agent] += 1;
                    s[agent]
                };
                let b = batch(agent, sequence, events);
                let start = started.elapsed();
                let t = Instant::now();
                let outcome = store.ingest(&b, now_ms()).await.expect("ingest");
                samples.push(Sample {
                    start,
                    took: t.elapsed(),
                });
                stored += outcome.stored_events as u64;
            }
            (samples, stored)
        }));
    }
    let retention_task = {
        let store = store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let from = started.elapsed();
            let (done, rows) = run_retention(&store, cluster, retention, &stop).await;
            (from, started.elapsed(), done, rows)
        })
    };
    let mut samples = Vec::new();
    let mut stored = 0;
    for agent in agents {
        let (s, n) = agent.await.expect("agent");
        samples.extend(s);
        stored += n;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (from, to, done, rows) = retention_task.await.expect("retention");
    let mut all: Vec<Duration> = samples.iter().map(|s| s.took).collect();
    all.sort();
    let mut during: Vec<Duration> = samples
        .iter()
        .filter(|s| s.start + s.took >= from && s.start <= to)
        .map(|s| s.took)
        .collect();
    during.sort();
    Figures {
        events_per_s: stored as f64 / elapsed.as_secs_f64(),
        all,
        during,
        retention_took: (!matches!(retention, Retention::None)).then(|| to - from),
        retention_done: done,
        rows_aged_out: rows,
    }
}

fn main() {
    let mut args = Args::parse();
    if args.quick {
        args.seconds = 4;
        args.rows = 20_000;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let db = TestDatabase::recreate("troupe_bench_partitions").await;
    let store = Store::connect_postgres(db.url(), args.agents as u32 + 4)
        .await
        .expect("store");
    store
        .ingest(&batch(0, 1, 1), now_ms())
        .await
        .expect("first batch");
    let cluster = store.cluster(CLUSTER).await.unwrap().expect("cluster").id;
    let agent = store.agents(cluster).await.unwrap()[0].id;
    let sequences = Arc::new(Mutex::new(vec![1u64; args.agents]));
    let (dropped_day, deleted_day) = (today() - 20 * DAY_MS, today() - 19 * DAY_MS);
    store
        .make_partitions(dropped_day)
        .await
        .expect("partitions");
    let filling = Instant::now();
    for day in [dropped_day, deleted_day] {
        fill_day(&store, cluster, agent, day, args.rows).await;
    }
    sqlx::query("ANALYZE")
        .execute(store.postgres_pool().unwrap())
        .await
        .unwrap();
    eprintln!(
        "filled two expired days of {} rows each in {:.1} s",
        rows_of_day(&store, dropped_day).await,
        filling.elapsed().as_secs_f64()
    );

    let phases = [
        ("ingest alone", Retention::None),
        (
            "ingest + drop of a day's partitions",
            Retention::Drop(dropped_day),
        ),
        (
            "ingest + row-by-row DELETE of a day",
            Retention::Delete(deleted_day),
        ),
    ];
    println!(
        "\n{} agents, batches of {} events, {} s per phase, expired day: {} rows\n",
        args.agents,
        args.batch,
        args.seconds,
        args.rows + args.rows / 5 + args.rows / 50
    );
    println!(
        "| phase | retention took | rows aged out | ingest events/s | batch p50 ms | batch p99 ms | batch max ms | batches during retention | their p99 ms | their max ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (label, retention) in phases {
        let f = phase(&store, &args, cluster, &sequences, retention).await;
        let took = match f.retention_took {
            None => "—".to_owned(),
            Some(t) if f.retention_done => format!("{:.0} ms", t.as_secs_f64() * 1000.0),
            Some(t) => format!("> {:.0} ms (stopped)", t.as_secs_f64() * 1000.0),
        };
        let during = if f.retention_took.is_some() {
            (
                f.during.len().to_string(),
                format!("{:.0}", percentile(&f.during, 0.99)),
                format!("{:.0}", percentile(&f.during, 1.0)),
            )
        } else {
            ("—".to_owned(), "—".to_owned(), "—".to_owned())
        };
        println!(
            "| {label} | {took} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} |",
            f.rows_aged_out,
            f.events_per_s,
            percentile(&f.all, 0.5),
            percentile(&f.all, 0.99),
            percentile(&f.all, 1.0),
            during.0,
            during.1,
            during.2,
        );
    }
    let left = rows_of_day(&store, deleted_day).await;
    if left > 0 {
        println!("\nthe row-by-row DELETE left {left} rows of its day at the end of its phase");
    }
    store.close().await;
}
