//! Coordination latency on loopback: lease acquire / renew / release and directory claim /
//! lookup (p50, p99) on the in-memory backends, etcd and PostgreSQL; and the time from a
//! holder's death to the next holder's acquire with the default lease settings.
//!
//! ```text
//! cargo bench -p troupe-coordination --bench coordination -- [--iterations N] [--no-handover]
//! ```
//!
//! Needs etcd (`TROUPE_TEST_ETCD_ENDPOINTS`, default `http://127.0.0.1:2379`) and PostgreSQL
//! (`TROUPE_TEST_DATABASE_URL`, default `postgres://troupe:troupe@127.0.0.1:5432/postgres`,
//! the one `scripts/test` exports); each run uses a fresh key prefix and schema (the schema is dropped at the end).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use troupe::directory::{Directory, InMemoryDirectory};
use troupe::lease::{InMemoryLeaseArbiter, Lease, LeaseProvider, LeaseSettings};
use troupe_coordination::etcd::{self, EtcdDirectory, EtcdLeases};
use troupe_coordination::postgres::PgCoordination;

const HELP: &str = "\
coordination bench: lease and directory latency on in-memory, etcd and PostgreSQL

Usage: cargo bench -p troupe-coordination --bench coordination -- [OPTIONS]

Options:
  --iterations N   operations measured per row (default 300; in-memory runs 10x)
  --no-handover    skip the holder-death-to-next-acquire measurement (about 20 s)
  -h, --help       this text

Environment:
  TROUPE_TEST_ETCD_ENDPOINTS  etcd endpoints, comma separated (default http://127.0.0.1:2379)
  TROUPE_TEST_DATABASE_URL    PostgreSQL URL, read as the tests read it (default
                              postgres://troupe:troupe@127.0.0.1:5432/postgres, the one
                              scripts/test exports)
";

/// The PostgreSQL URL without `TROUPE_TEST_DATABASE_URL`: the one `scripts/test` exports.
const DEFAULT_DATABASE_URL: &str = "postgres://troupe:troupe@127.0.0.1:5432/postgres";

struct Args {
    iterations: usize,
    handover: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        iterations: 300,
        handover: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--iterations" => {
                let value = it.next().ok_or("--iterations needs a number")?;
                args.iterations =
                    value.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("--iterations: {value:?} is not a positive number")
                    })?;
            }
            "--no-handover" => args.handover = false,
            "--bench" => {} // passed by `cargo bench`
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}\n\n{HELP}")),
        }
    }
    Ok(args)
}

struct Row {
    backend: &'static str,
    operation: &'static str,
    samples: Vec<Duration>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

async fn timed<T>(samples: &mut Vec<Duration>, fut: impl Future<Output = T>) -> T {
    let start = Instant::now();
    let value = fut.await;
    samples.push(start.elapsed());
    value
}

/// Acquire, renew and release of fresh lease names; `renew` renews a held handle once.
async fn lease_rows<L, R, F>(
    backend: &'static str,
    n: usize,
    make: impl Fn(&str) -> Arc<L>,
    renew: R,
) -> Vec<Row>
where
    L: Lease,
    R: Fn(Arc<L>) -> Option<F>,
    F: Future<Output = bool>,
{
    let (mut acquire, mut renewal, mut release) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let lease = make(&format!("bench-{i}"));
        let token = timed(&mut acquire, lease.acquire(Box::new(|_| {}))).await;
        assert!(
            matches!(token, Ok(Some(_))),
            "{backend}: acquire {i}: {token:?}"
        );
        if let Some(fut) = renew(Arc::clone(&lease)) {
            let renewed = timed(&mut renewal, fut).await;
            assert!(renewed, "{backend}: renew {i}");
        }
        let released = timed(&mut release, lease.release()).await;
        assert!(released.is_ok(), "{backend}: release {i}: {released:?}");
    }
    let mut rows = vec![Row {
        backend,
        operation: "lease acquire",
        samples: acquire,
    }];
    if !renewal.is_empty() {
        rows.push(Row {
            backend,
            operation: "lease renew",
            samples: renewal,
        });
    }
    rows.push(Row {
        backend,
        operation: "lease release",
        samples: release,
    });
    rows
}

async fn directory_rows(backend: &'static str, n: usize, directory: &dyn Directory) -> Vec<Row> {
    let (mut claim, mut lookup) = (Vec::new(), Vec::new());
    for i in 0..n {
        let actor = format!("actor-{i}");
        let outcome = timed(&mut claim, directory.claim(&actor, "bench-host")).await;
        assert!(
            outcome.as_ref().is_ok_and(|o| o.won()),
            "{backend}: claim {i}: {outcome:?}"
        );
    }
    for i in 0..n {
        let actor = format!("actor-{i}");
        let found = timed(&mut lookup, directory.lookup(&actor)).await;
        assert!(
            found.as_ref().is_ok_and(|c| c.is_some()),
            "{backend}: lookup {i}: {found:?}"
        );
    }
    vec![
        Row {
            backend,
            operation: "directory claim",
            samples: claim,
        },
        Row {
            backend,
            operation: "directory lookup",
            samples: lookup,
        },
    ]
}

/// A holder acquires, renews for a while, and dies (its handle dropped: no release, no more
/// renewals); a successor asks every 100 ms. Answers death → successor's grant.
async fn handover(
    backend: &'static str,
    provider: Arc<dyn LeaseProvider>,
) -> (&'static str, Duration) {
    let settings = LeaseSettings::default();
    let holder = provider.lease("handover", "holder", &settings).unwrap();
    holder
        .acquire(Box::new(|_| {}))
        .await
        .unwrap()
        .expect("granted");
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    drop(holder);
    let died = Instant::now();
    let successor = provider.lease("handover", "successor", &settings).unwrap();
    loop {
        if let Ok(Some(_)) = successor.acquire(Box::new(|_| {})).await {
            return (backend, died.elapsed());
        }
        assert!(
            died.elapsed() < Duration::from_secs(60),
            "{backend}: no handover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let n = args.iterations;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let settings = LeaseSettings::default();

    let endpoints: Vec<String> = std::env::var("TROUPE_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect();
    let client = etcd::connect(&endpoints)
        .await
        .unwrap_or_else(|e| panic!("etcd at {endpoints:?}: {e}"));
    let prefix = format!("/troupe-bench/{stamp}-{}/", std::process::id());
    let etcd_leases = EtcdLeases::new(client.clone(), &prefix).unwrap();
    let etcd_directory = EtcdDirectory::new(client, &prefix).unwrap();

    let url = std::env::var("TROUPE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let schema = format!("troupe_bench_{stamp}_{}", std::process::id());
    let pg = PgCoordination::connect(&url, &schema)
        .await
        .unwrap_or_else(|e| panic!("postgres at {url} (set TROUPE_TEST_DATABASE_URL): {e}"));
    let pg_leases = pg.leases();

    let arbiter = InMemoryLeaseArbiter::new(settings);
    let memory_directory = InMemoryDirectory::new();

    let mut rows = Vec::new();
    rows.extend(
        lease_rows(
            "in-memory",
            n * 10,
            |name| arbiter.lease_with(name, "bench", &settings),
            |_| None::<std::future::Ready<bool>>,
        )
        .await,
    );
    rows.extend(directory_rows("in-memory", n * 10, &memory_directory).await);
    rows.extend(
        lease_rows(
            "etcd",
            n,
            |name| etcd_leases.handle(name, "bench", &settings).unwrap(),
            |lease| Some(async move { lease.renew_now().await.unwrap_or(false) }),
        )
        .await,
    );
    rows.extend(directory_rows("etcd", n, &etcd_directory).await);
    rows.extend(
        lease_rows(
            "postgres",
            n,
            |name| pg_leases.handle(name, "bench", &settings).unwrap(),
            |lease| Some(async move { lease.renew_now().await.unwrap_or(false) }),
        )
        .await,
    );
    rows.extend(directory_rows("postgres", n, &pg.directory()).await);

    println!(
        "{:<10} {:<18} {:>6} {:>10} {:>10}",
        "backend", "operation", "n", "p50 ms", "p99 ms"
    );
    for row in &mut rows {
        row.samples.sort();
        println!(
            "{:<10} {:<18} {:>6} {:>10} {:>10}",
            row.backend,
            row.operation,
            row.samples.len(),
            ms(percentile(&row.samples, 50.0)),
            ms(percentile(&row.samples, 99.0)),
        );
    }

    if args.handover {
        println!();
        println!(
            "holder death -> next holder's acquire, default settings (ttl {:?}, renew every {:?}; successor asks every 100 ms; the singleton asks every {:?} by default, which adds up to that):",
            settings.ttl(),
            settings.renew_interval(),
            troupe::singleton::DEFAULT_ACQUIRE_RETRY_INTERVAL
        );
        let results = tokio::join!(
            handover("in-memory", Arc::new(arbiter.clone())),
            handover("etcd", Arc::new(etcd_leases.clone())),
            handover("postgres", Arc::new(pg_leases.clone())),
        );
        for (backend, took) in [results.0, results.1, results.2] {
            println!("{backend:<10} {:>8.2} s", took.as_secs_f64());
        }
    }

    let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(pg.pool())
        .await;
}
