//! A rolling restart of real processes, as Kubernetes runs one: the example shop
//! (`node-agent/examples/shop.rs`) on `shops` nodes and one client node that sends a steady
//! stream of asks through the cluster router and through the singleton's proxy, while every
//! shop node is restarted in turn — SIGTERM after which the node drains (`--drain-delay-ms`, the
//! preStop stand-in: not ready, still serving), leaves and exits 0, or SIGKILL — and a fresh
//! incarnation is started at the same address and waited for (readiness probe) before the next.
//!
//! What comes back ([`Report`]): the client's own totals (every ask it sent ends as an answer
//! or as an ask error — timeout, undeliverable, no reply — so a loss is never silent), the
//! singleton instances' start and stop records (`--instance-log`), and for each restart whether
//! it stopped the singleton's host and on which node the next instance started.
//!
//! Used by `tests/tests/rolling_restart.rs` (a short run, asserting 0 lost on SIGTERM) and by
//! the bench `cargo run --release -p troupe-e2e --example rolling_restart` (≥ 100 000 asks).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::{Process, example, free_port};

const SECRET: &str = "rolling restart secret, long enough";
const WAIT: Duration = Duration::from_secs(60);

/// How each node is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM; the node drains this long (its `--drain-delay-ms`), leaves and exits 0.
    Term {
        /// The drain delay, milliseconds.
        drain_ms: u64,
    },
    /// SIGKILL: no drain, no leave; its peers down it after `--down-after-ms`.
    Kill,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Shop nodes (hosting the routees and the singleton).
    pub shops: usize,
    /// Asks per second through the router, and as many through the singleton's proxy.
    pub rate: u32,
    /// How the nodes are stopped.
    pub stop: Stop,
    /// Steady load before the first restart and after the last.
    pub settle: Duration,
    /// Between one node being ready again and the next one's stop.
    pub gap: Duration,
    /// How long an ask may take before it counts as lost, milliseconds.
    pub ask_timeout_ms: u64,
    /// The nodes' `--down-after-ms` (how soon a killed node is downed).
    pub down_after_ms: u64,
}

/// One restart.
#[derive(Debug, Clone)]
pub struct Restart {
    /// `host:port` of the restarted node.
    pub node: String,
    /// Whether it hosted the singleton when it was stopped.
    pub hosted_singleton: bool,
    /// The exit code of the stopped process (`None`: killed by a signal).
    pub exit_code: Option<i32>,
    /// From the stop signal to the process's exit.
    pub stopping: Duration,
    /// From the stop signal to the new incarnation being ready.
    pub until_ready: Duration,
    /// Where the singleton's next instance started after this stop, if it moved.
    pub singleton_moved_to: Option<String>,
}

/// One singleton instance's lifetime, from its own records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `host:port` of its node.
    pub host: String,
    /// Its node's incarnation.
    pub incarnation: String,
    /// Its `start` record, microseconds since the epoch.
    pub start_us: u128,
    /// Its `stop` record, if it wrote one.
    pub stop_us: Option<u128>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// The client's `LoadTotals` line.
    pub totals: Value,
    /// Every restart, in order.
    pub restarts: Vec<Restart>,
    /// Every singleton instance, by start time.
    pub instances: Vec<Instance>,
    /// The whole run, load start to totals.
    pub elapsed: Duration,
}

impl Report {
    /// Asks sent on `path` (`router` or `singleton`).
    #[must_use]
    pub fn sent(&self, path: &str) -> u64 {
        self.totals[path]["sent"].as_u64().unwrap_or(0)
    }

    /// Asks answered on `path`.
    #[must_use]
    pub fn ok(&self, path: &str) -> u64 {
        self.totals[path]["ok"].as_u64().unwrap_or(0)
    }

    /// Asks that ended in an error on `path` (timeout, undeliverable, no reply).
    #[must_use]
    pub fn failed(&self, path: &str) -> u64 {
        ["timeout", "undeliverable", "no_reply"]
            .iter()
            .map(|k| self.totals[path][k].as_u64().unwrap_or(0))
            .sum()
    }

    /// Asks on `path` that neither were answered nor ended in an error: silent losses.
    #[must_use]
    pub fn silent(&self, path: &str) -> u64 {
        self.sent(path)
            .saturating_sub(self.ok(path) + self.failed(path))
    }

    /// The longest time two instances were both alive (zero when they never overlapped).
    #[must_use]
    pub fn max_overlap(&self) -> Duration {
        overlap(&self.instances)
    }

    /// A table of the figures, for people.
    #[must_use]
    pub fn table(&self, title: &str) -> String {
        let mut out = format!("{title}\n");
        out += "| path | sent | answered | timeout | undeliverable | no reply | silent |\n";
        out += "|---|---:|---:|---:|---:|---:|---:|\n";
        for path in ["router", "singleton"] {
            let get = |k: &str| self.totals[path][k].as_u64().unwrap_or(0);
            out += &format!(
                "| {path} | {} | {} | {} | {} | {} | {} |\n",
                self.sent(path),
                self.ok(path),
                get("timeout"),
                get("undeliverable"),
                get("no_reply"),
                self.silent(path),
            );
        }
        out += "\n| restarted | hosted singleton | exit | stopping | until ready | singleton moved to |\n";
        out += "|---|---|---:|---:|---:|---|\n";
        for r in &self.restarts {
            out += &format!(
                "| {} | {} | {} | {:.2} s | {:.2} s | {} |\n",
                r.node,
                if r.hosted_singleton { "yes" } else { "no" },
                r.exit_code
                    .map_or_else(|| "signal".to_owned(), |c| c.to_string()),
                r.stopping.as_secs_f64(),
                r.until_ready.as_secs_f64(),
                r.singleton_moved_to.as_deref().unwrap_or("-"),
            );
        }
        out += &format!(
            "\nsingleton instances: {}; longest overlap of two: {:.3} s; run {:.1} s; duplicate order numbers: {}\n",
            self.instances.len(),
            self.max_overlap().as_secs_f64(),
            self.elapsed.as_secs_f64(),
            self.totals["duplicate_numbers"],
        );
        out
    }
}

/// The longest time any two of `instances` were alive together.
#[must_use]
pub fn overlap(instances: &[Instance]) -> Duration {
    let now = now_us();
    let mut longest = 0u128;
    for (i, a) in instances.iter().enumerate() {
        for b in &instances[i + 1..] {
            let start = a.start_us.max(b.start_us);
            let end = a.stop_us.unwrap_or(now).min(b.stop_us.unwrap_or(now));
            longest = longest.max(end.saturating_sub(start));
        }
    }
    Duration::from_micros(u64::try_from(longest).unwrap_or(u64::MAX))
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or_default()
}

/// The instance records in `path`, paired into lifetimes, by start time.
///
/// # Panics
/// When a record is not JSON.
#[must_use]
pub fn instances(path: &std::path::Path) -> Vec<Instance> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut instances: Vec<Instance> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let record: Value = serde_json::from_str(line).expect("an instance record is JSON");
        let host = record["host"].as_str().unwrap_or("").to_owned();
        let incarnation = record["incarnation"].as_str().unwrap_or("").to_owned();
        let at: u128 = record["at_us"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if record["event"] == "start" {
            instances.push(Instance {
                host,
                incarnation,
                start_us: at,
                stop_us: None,
            });
        } else if let Some(open) = instances
            .iter_mut()
            .rev()
            .find(|i| i.host == host && i.incarnation == incarnation && i.stop_us.is_none())
        {
            open.stop_us = Some(at);
        }
    }
    instances.sort_by_key(|i| i.start_us);
    instances
}

/// A scratch directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory under the system's temporary directory.
    ///
    /// # Panics
    /// When it cannot be created.
    #[must_use]
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "troupe-{tag}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Node {
    port: u16,
    management: u16,
    process: Process,
}

fn node_args(plan: &Plan, port: u16, management: u16, seeds: &[u16], role: &str) -> Vec<String> {
    let seeds = seeds
        .iter()
        .map(|p| format!("troupe://rolling@127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let drain = match plan.stop {
        Stop::Term { drain_ms } => drain_ms,
        Stop::Kill => 0,
    };
    [
        "--system",
        "rolling",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &seeds,
        "--secret",
        SECRET,
        "--role",
        role,
        "--management-bind",
        &format!("127.0.0.1:{management}"),
        "--drain-delay-ms",
        &drain.to_string(),
        "--down-after-ms",
        &plan.down_after_ms.to_string(),
        "--events-json",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

async fn ready(management: u16) -> bool {
    reqwest::get(format!(
        "http://127.0.0.1:{management}/_troupe/health/ready"
    ))
    .await
    .is_ok_and(|r| r.status().as_u16() == 200)
}

async fn wait_ready(node: &Node) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !ready(node.management).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 127.0.0.1:{} never became ready",
            node.port
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The instances in `log`, those of killed processes (which write no stop record) ended when
/// they were killed.
fn lifetimes(log: &std::path::Path, killed: &[(String, u128)]) -> Vec<Instance> {
    let mut all = instances(log);
    for instance in &mut all {
        if instance.stop_us.is_none()
            && let Some((_, at)) = killed
                .iter()
                .find(|(host, at)| *host == instance.host && *at > instance.start_us)
        {
            instance.stop_us = Some(*at);
        }
    }
    all
}

/// The node hosting the singleton now: the host of the last instance still alive.
fn current_host(log: &std::path::Path, killed: &[(String, u128)]) -> Option<String> {
    lifetimes(log, killed)
        .into_iter()
        .rev()
        .find(|i| i.stop_us.is_none())
        .map(|i| i.host)
}

/// Run `plan`: start the nodes, load them, restart every shop node in turn, collect the totals.
///
/// # Panics
/// When a process does not start, become ready or stop in time, or the client prints no totals.
pub async fn run(plan: &Plan) -> Report {
    let shop = example("troupe-agent", "shop");
    let dir = TempDir::new("rolling");
    let log = dir.0.join("instances.jsonl");
    let ports: Vec<u16> = (0..=plan.shops).map(|_| free_port()).collect();
    let seeds = &ports[..plan.shops.min(3)];
    let start_shop = |port: u16, management: u16| {
        let mut args = node_args(plan, port, management, seeds, "shop");
        args.extend(["--instance-log".to_owned(), log.display().to_string()]);
        Process::start(&shop, &args)
    };
    let mut shops: Vec<Node> = Vec::new();
    for port in &ports[..plan.shops] {
        let management = free_port();
        shops.push(Node {
            port: *port,
            management,
            process: start_shop(*port, management),
        });
    }
    for node in &shops {
        wait_ready(node).await;
    }
    // The client sends for as long as the restarts take (estimated, generously), then waits for
    // the last answers and prints its totals; the test checks the restarts ended first.
    let per_restart = match plan.stop {
        Stop::Term { drain_ms } => Duration::from_millis(drain_ms) + Duration::from_secs(6),
        Stop::Kill => Duration::from_millis(plan.down_after_ms) + Duration::from_secs(8),
    } + plan.gap;
    let load_for = plan.settle * 2 + per_restart * u32::try_from(plan.shops).unwrap_or(1);
    let client_port = ports[plan.shops];
    let mut args = node_args(plan, client_port, free_port(), seeds, "client");
    args.extend([
        "--load-rate".to_owned(),
        plan.rate.to_string(),
        "--load-seconds".to_owned(),
        load_for.as_secs().to_string(),
        "--ask-timeout-ms".to_owned(),
        plan.ask_timeout_ms.to_string(),
    ]);
    let began = Instant::now();
    let mut client = Process::start(&shop, &args);
    client
        .wait_for(WAIT, "the first LoadTick", |l| l["event"] == "LoadTick")
        .await;
    tokio::time::sleep(plan.settle).await;

    let mut restarts = Vec::new();
    let mut killed: Vec<(String, u128)> = Vec::new();
    for node in &mut shops {
        let address = format!("127.0.0.1:{}", node.port);
        let hosted_singleton = current_host(&log, &killed).as_deref() == Some(address.as_str());
        let before = instances(&log).len();
        let stopped_at = Instant::now();
        let status = match plan.stop {
            Stop::Term { drain_ms } => {
                node.process
                    .terminate(Duration::from_millis(drain_ms) + WAIT)
                    .await
            }
            Stop::Kill => {
                killed.push((address.clone(), now_us()));
                node.process.kill().await;
                node.process.wait(WAIT).await
            }
        };
        let stopping = stopped_at.elapsed();
        node.process = start_shop(node.port, node.management);
        wait_ready(node).await;
        let until_ready = stopped_at.elapsed();
        // Where the next instance started: the first one after this stop on another node.
        let singleton_moved_to = if hosted_singleton {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let moved = instances(&log)
                    .into_iter()
                    .skip(before)
                    .find(|i| i.host != address)
                    .map(|i| i.host);
                if moved.is_some() || tokio::time::Instant::now() > deadline {
                    break moved;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            None
        };
        restarts.push(Restart {
            node: address,
            hosted_singleton,
            exit_code: status.code(),
            stopping,
            until_ready,
            singleton_moved_to,
        });
        tokio::time::sleep(plan.gap).await;
    }
    let restarts_done = began.elapsed();
    assert!(
        restarts_done < load_for,
        "the load ended before the restarts did ({restarts_done:?}, load {load_for:?}): raise the load time"
    );
    let totals = client
        .wait_for(
            load_for + Duration::from_millis(plan.ask_timeout_ms) + WAIT,
            "LoadTotals",
            |l| l["event"] == "LoadTotals",
        )
        .await;
    let elapsed = began.elapsed();
    let _ = client.terminate(WAIT).await;
    for node in &mut shops {
        let _ = node.process.terminate(WAIT).await;
    }
    Report {
        totals,
        restarts,
        instances: lifetimes(&log, &killed),
        elapsed,
    }
}
