//! A PostgreSQL restart under load: the server recovers by itself (no server restart), every
//! batch it acknowledged is stored exactly once, and batches it refused meanwhile were refused
//! with 503 and a message saying the store is unavailable — and stored when the agent retried.
//!
//! The test runs its own PostgreSQL (initdb + pg_ctl from `/usr/lib/postgresql/*/bin`, or
//! `TROUPE_TEST_PG_BINDIR`) in a temp dir on a free port, as the `postgres` user when run as
//! root, so restarting it disturbs nobody else.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use troupe_protocol::IngestAck;
use troupe_server::testing::{BatchBuilder, HttpClient};
use troupe_server::{App, Config, store::Store};

const TOKEN: &str = "restart-test-token";
const PER_BATCH: i64 = 20;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn pg_bindir() -> PathBuf {
    if let Ok(dir) = std::env::var("TROUPE_TEST_PG_BINDIR") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("pg_ctl").exists())
        .collect();
    found.sort();
    found.pop().expect(
        "this test runs a private PostgreSQL: install the postgresql server package \
         (initdb, pg_ctl under /usr/lib/postgresql/*/bin) or set TROUPE_TEST_PG_BINDIR",
    )
}

/// A PostgreSQL of the test's own; stopped and deleted on drop.
struct PrivatePostgres {
    bindir: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    fn command(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}{}\nserver log:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn start() -> Self {
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let dir = std::env::temp_dir().join(format!(
            "troupe-pg-restart-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        if as_postgres {
            // initdb refuses to run as root: the cluster belongs to the postgres user.
            let status = Command::new("chown")
                .args(["postgres:", &dir.display().to_string()])
                .status()
                .unwrap();
            assert!(status.success(), "chown the data dir to postgres");
        }
        let postgres = Self {
            bindir: pg_bindir(),
            dir,
            port: free_port(),
            as_postgres,
        };
        postgres.run(
            "initdb",
            &[
                "-D",
                &postgres.data(),
                "-U",
                "troupe",
                "--auth=trust",
                "--no-sync",
                "--no-locale",
                "-E",
                "UTF8",
            ],
        );
        postgres.pg_start();
        postgres
    }

    fn pg_start(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-t",
                "20",
                "-o",
                &options,
                "start",
            ],
        );
    }

    fn pg_stop(&self, mode: &str) {
        self.run("pg_ctl", &["-D", &self.data(), "-m", mode, "-w", "stop"]);
    }

    fn url(&self) -> String {
        format!("postgres://troupe@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-D", &self.data(), "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn batch(sequence: u64) -> Vec<u8> {
    let mut batch = BatchBuilder::new("app", "a:1", sequence).sent_at(1);
    for i in 0..PER_BATCH {
        batch = batch.dead_letter(sequence as i64 * 1000 + i, "/user/x", "T");
    }
    serde_json::to_vec(&batch.build()).unwrap()
}

#[derive(Debug, Default)]
struct Log {
    /// (sequence, duplicate, when) of each acknowledgement.
    acks: Vec<(u64, bool, Instant)>,
    /// (sequence, status, body) of each refused attempt.
    refusals: Vec<(u64, u16, String)>,
    /// Attempts that got no HTTP answer at all.
    transport_errors: u64,
}

/// An agent's discipline: send each sequence until it is acknowledged, then the next.
fn push(addr: std::net::SocketAddr, log: Arc<Mutex<Log>>, stop: Arc<AtomicBool>) {
    let mut client = HttpClient::new(addr);
    let mut sequence = 1;
    while !stop.load(Ordering::Relaxed) {
        let body = batch(sequence);
        loop {
            match client.request("POST", "/api/v1/ingest", Some(TOKEN), &body) {
                Ok(response) if response.status == 200 => {
                    let ack: IngestAck = serde_json::from_str(&response.body).unwrap();
                    assert_eq!(ack.sequence, sequence);
                    log.lock()
                        .unwrap()
                        .acks
                        .push((sequence, ack.duplicate, Instant::now()));
                    break;
                }
                Ok(response) => {
                    log.lock()
                        .unwrap()
                        .refusals
                        .push((sequence, response.status, response.body));
                }
                Err(_) => {
                    log.lock().unwrap().transport_errors += 1;
                    client = HttpClient::new(addr);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        sequence += 1;
    }
}

fn acks_since(log: &Mutex<Log>, since: Instant) -> usize {
    log.lock()
        .unwrap()
        .acks
        .iter()
        .filter(|(_, _, at)| *at > since)
        .count()
}

fn wait_until(what: &str, bound: Duration, condition: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < bound, "not within {bound:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
    started.elapsed()
}

#[test]
fn a_postgres_restart_under_load_recovers_without_a_server_restart_and_loses_no_acknowledged_batch()
{
    let test_started = Instant::now();
    let postgres = PrivatePostgres::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.database_url = Some(postgres.url());
    config.ingest_token = Some(TOKEN.to_owned());
    config.retention_days = 0;
    config.workers = Some(2);
    config.db_max_connections = 4;
    // Requests wait this long for the database before they are answered 503.
    config.db_acquire_timeout_ms = 300;
    config.otlp.sdk_disabled = true;
    let app = runtime.block_on(App::build(config)).expect("server starts");
    let addr = app.local_addr();
    let shutdown = app.shutdown_trigger();
    let server = runtime.spawn(app.run());

    let log = Arc::new(Mutex::new(Log::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let pusher = std::thread::spawn({
        let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
        move || push(addr, log, stop)
    });

    // Load is flowing.
    wait_until(
        "10 batches before the restart",
        Duration::from_secs(10),
        || log.lock().unwrap().acks.len() >= 10,
    );
    // Restart PostgreSQL (fast shutdown: open transactions are aborted), with the database away
    // for a second and a half while the agent keeps sending.
    let outage_started = Instant::now();
    postgres.pg_stop("fast");
    std::thread::sleep(Duration::from_millis(1_500));
    postgres.pg_start();
    let back = Instant::now();
    eprintln!("postgres away for {:?}", back - outage_started);

    // The same server recovers by itself: acknowledgements resume within a bound.
    let recovered_after = wait_until(
        "ingest acknowledged again after the restart",
        Duration::from_secs(10),
        || acks_since(&log, back) >= 1,
    );
    wait_until(
        "10 batches after the restart",
        Duration::from_secs(10),
        || acks_since(&log, back) >= 10,
    );
    stop.store(true, Ordering::Relaxed);
    pusher.join().expect("pusher");
    eprintln!("first acknowledgement {recovered_after:?} after postgres was back");

    let log = Arc::into_inner(log).unwrap().into_inner().unwrap();
    // Batches refused during the outage: 503 with a message that says what happened.
    assert!(
        !log.refusals.is_empty(),
        "the outage was longer than the acquire timeout: some batches must have been refused"
    );
    for (sequence, status, body) in &log.refusals {
        assert_eq!(
            *status, 503,
            "batch {sequence} refused with {status}: {body}"
        );
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        let message = body["error"].as_str().unwrap();
        assert!(
            message.contains("store is unavailable") && message.contains("retry"),
            "{message}"
        );
    }
    assert_eq!(log.transport_errors, 0, "the server itself never went away");
    // Every sequence was acknowledged, in order, as new exactly once (a refused batch may have
    // been committed just as the connection died: its retry is then a duplicate).
    let last = log.acks.last().unwrap().0;
    let sequences: Vec<u64> = log.acks.iter().map(|(s, _, _)| *s).collect();
    assert_eq!(sequences, (1..=last).collect::<Vec<_>>());
    for (sequence, _, _) in &log.refusals {
        assert!(
            sequences.contains(sequence),
            "refused {sequence} stored on retry"
        );
    }

    // Stored exactly once each.
    let totals = runtime.block_on(async {
        let store = Store::connect_postgres(&postgres.url(), 1).await.unwrap();
        let totals = store.totals().await.unwrap();
        store.close().await;
        totals
    });
    assert_eq!(totals.batches, last as i64);
    assert_eq!(totals.dead_letters, last as i64 * PER_BATCH);
    eprintln!(
        "{last} batches acknowledged and stored once; {} refusals (all 503) during the outage; \
         test took {:?}",
        log.refusals.len(),
        test_started.elapsed()
    );

    shutdown.shutdown();
    runtime
        .block_on(server)
        .expect("server task")
        .expect("clean shutdown");
    let dir = postgres.dir.clone();
    drop(postgres);
    assert!(!dir.exists(), "the private PostgreSQL is cleaned up");
}
