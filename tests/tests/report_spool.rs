//! Reports survive a stop, with the real `troupe-agent` and `troupe-server` binaries (issue 14,
//! "reports lost on stop"): an agent stopped while the control plane is away keeps retrying
//! within `--flush-timeout-ms`, leaves what it could not deliver in its `--report-spool-dir`,
//! and the next start of the same node delivers it first, once, as the old incarnation's
//! history, without touching the new incarnation's current state.
//!
//! # What a SIGKILL loses
//! The spool is written from the moment the node drains (SIGTERM) or is fenced: every batch is
//! appended and fsynced before it is sent. So a SIGKILL after the SIGTERM loses only what was
//! reported after the last append (at most one `--report-interval-ms` of events; a kill in the
//! middle of an append leaves a torn last line, which the next start skips and counts as a lost
//! batch). A SIGKILL *without* a SIGTERM before it finds nothing spooled: whatever the
//! in-memory buffer held undelivered is lost, uncounted by anyone, because the agent spools
//! only on its way out (spooling every batch while the server is merely slow would fsync at
//! the report rate for the rare case of a kill).

use std::path::{Path, PathBuf};
use std::time::Duration;

use troupe_e2e::control_plane::{INGEST_TOKEN, Server};
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e report spool secret, long enough";
const SYSTEM: &str = "spool";
/// How long the stopping agent retries the away server.
const FLUSH_TIMEOUT: Duration = Duration::from_millis(3_000);
/// Upper bound for anything the test waits on.
const WAIT: Duration = Duration::from_secs(60);

/// A spool directory, removed at the end of the test.
struct SpoolDir(PathBuf);

impl SpoolDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "troupe-e2e-spool-{name}-{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }

    /// The spool file of the node at `127.0.0.1:port` (`<system>@<host>%3A<port>.jsonl`).
    fn file(&self, port: u16) -> PathBuf {
        self.0.join(format!("{SYSTEM}@127.0.0.1%3A{port}.jsonl"))
    }
}

impl Drop for SpoolDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One node of the test: its address, management port and spool, across its restarts.
struct Node {
    port: u16,
    management: u16,
    server_url: String,
    spool: SpoolDir,
    extra: Vec<String>,
}

impl Node {
    fn new(name: &str, server_port: u16) -> Self {
        Self {
            port: free_port(),
            management: free_port(),
            server_url: format!("http://127.0.0.1:{server_port}"),
            spool: SpoolDir::new(name),
            extra: Vec::new(),
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn args(&self, flush_timeout: Duration) -> Vec<String> {
        let node = self.address();
        let mut args: Vec<String> = [
            "--system",
            SYSTEM,
            "--bind",
            &node,
            "--seed",
            &format!("troupe://{SYSTEM}@{node}"),
            "--secret",
            SECRET,
            "--control-plane",
            &self.server_url,
            "--ingest-token",
            INGEST_TOKEN,
            "--report-interval-ms",
            "100",
            "--flush-timeout-ms",
            &flush_timeout.as_millis().to_string(),
            "--leave-timeout-ms",
            "5000",
            "--report-spool-dir",
            self.spool.0.to_str().expect("utf-8 path"),
            "--events-json",
            "--management-bind",
            &format!("127.0.0.1:{}", self.management),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(self.extra.iter().cloned());
        args
    }

    /// Start an incarnation of this node and wait until it is up and ready; the process and
    /// its incarnation.
    async fn start(&self, flush_timeout: Duration) -> (Process, u64) {
        let mut process =
            Process::start_capturing_stderr(&binary("troupe-agent"), &self.args(flush_timeout));
        let started = process
            .wait_for(WAIT, "AgentStarted", |l| l["event"] == "AgentStarted")
            .await;
        let incarnation = started["incarnation"].as_u64().expect("incarnation");
        process
            .wait_for(WAIT, "its own MemberUp (it is alone)", |l| {
                l["event"] == "MemberUp"
            })
            .await;
        self.wait_ready().await;
        (process, incarnation)
    }

    async fn wait_ready(&self) {
        let url = format!("http://127.0.0.1:{}/_troupe/health/ready", self.management);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(response) = reqwest::get(&url).await
                && response.status().is_success()
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the agent never got ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn metrics(&self) -> String {
        reqwest::get(format!("http://127.0.0.1:{}/metrics", self.management))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }
}

/// Wait until `process` has logged a line containing `needle` (its stderr is read by a task,
/// which may lag behind the process's exit); the line.
async fn logged(process: &Process, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = process
            .stderr_lines()
            .into_iter()
            .find(|line| line.contains(needle))
        {
            return line;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never logged {needle:?}: {}",
            process.stderr_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A u64 on the wire: a JSON string (the protocol's `u64_string`) or a number.
fn wire_u64(value: &serde_json::Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

/// The batches of a spool file (its loss record line, if any, left out); only whole lines.
fn spooled_batches(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    whole
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON line"))
        .filter(|value| value.get("identity").is_some())
        .collect()
}

/// `(kind, at_ms)` of every event of `batches` that the server lists under `/events` (dead
/// letters have their own endpoint), sorted.
fn spooled_events(batches: &[serde_json::Value]) -> Vec<(String, i64)> {
    let mut events: Vec<(String, i64)> = batches
        .iter()
        .flat_map(|batch| batch["events"].as_array().cloned().unwrap_or_default())
        .filter(|event| event["kind"] != "DeadLetter")
        .map(|event| {
            (
                event["kind"].as_str().expect("kind").to_owned(),
                event["at_ms"].as_i64().expect("at_ms"),
            )
        })
        .collect();
    events.sort();
    events
}

/// Every event the server stored for the cluster (one page: a one-node cluster has few).
async fn stored_events(server: &Server) -> Vec<serde_json::Value> {
    server
        .get(&format!("clusters/{SYSTEM}/events?limit=1000"))
        .await["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn of_incarnation(events: &[serde_json::Value], incarnation: u64) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|e| wire_u64(&e["incarnation"]) == Some(incarnation))
        .cloned()
        .collect()
}

fn kinds_and_times(events: &[serde_json::Value]) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = events
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().expect("kind").to_owned(),
                e["at_ms"].as_i64().expect("at_ms"),
            )
        })
        .collect();
    out.sort();
    out
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Whether `batches` report the agent's health turning `health`.
fn has_health(batches: &[serde_json::Value], health: &str) -> bool {
    batches.iter().any(|batch| {
        batch["events"].as_array().is_some_and(|events| {
            events
                .iter()
                .any(|e| e["kind"] == "AgentHealthChanged" && e["health"] == health)
        })
    })
}

/// The second incarnation of `node` has started against a running `server`: wait until the
/// spooled events of `old` are stored, check they are stored exactly once, before anything of
/// `new`, and that the current state is `new`'s; that `new` counted `lost` batches given up
/// (a torn last line); and that the spool is gone.
async fn check_replay(
    server: &Server,
    node: &Node,
    (old, new): (u64, u64),
    spooled: &[(String, i64)],
    spooled_batch_count: usize,
    lost: u64,
) {
    server
        .wait_for(
            &format!("clusters/{SYSTEM}/events?limit=1000"),
            WAIT,
            "every spooled event of the old incarnation is stored",
            |page| {
                let events = page["events"].as_array().cloned().unwrap_or_default();
                of_incarnation(&events, old).len() >= spooled.len()
            },
        )
        .await;
    // Let the new incarnation report a few more batches: a replay sent twice would show now.
    let first = server
        .nodes(SYSTEM)
        .await
        .iter()
        .find(|n| wire_u64(&n["incarnation"]) == Some(new))
        .and_then(|n| n["last_sequence"].as_i64())
        .unwrap_or(0);
    server
        .wait_for(
            &format!("clusters/{SYSTEM}/nodes"),
            WAIT,
            "the new incarnation reports on",
            |nodes| {
                nodes.as_array().is_some_and(|nodes| {
                    nodes.iter().any(|n| {
                        wire_u64(&n["incarnation"]) == Some(new)
                            && n["last_sequence"].as_i64().unwrap_or(0) >= first + 5
                            && n["health"] == "ready"
                    })
                })
            },
        )
        .await;
    let events = stored_events(server).await;
    let old_events = of_incarnation(&events, old);
    assert_eq!(
        kinds_and_times(&old_events),
        spooled,
        "the spooled events are stored exactly once, as the old incarnation's"
    );
    // Delivered before the new incarnation's own reports: storage order is id order.
    let new_events = of_incarnation(&events, new);
    assert!(!new_events.is_empty(), "the new incarnation reported");
    let last_old = old_events.iter().filter_map(|e| e["id"].as_i64()).max();
    let first_new = new_events.iter().filter_map(|e| e["id"].as_i64()).min();
    assert!(
        last_old < first_new,
        "the replay is stored before the new incarnation's reports: {last_old:?} vs {first_new:?}"
    );

    // The current state is the new incarnation's: its member row is up, its agent ready; the
    // old one is history, and no longer shown ready.
    let members = server.get(&format!("clusters/{SYSTEM}/members")).await;
    let member = members["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["node"] == node.address().as_str()))
        .unwrap_or_else(|| panic!("the node is a member: {members:#}"))
        .clone();
    assert_eq!(wire_u64(&member["node_uid"]), Some(new), "{member:#}");
    assert_eq!(member["status"], "up", "{member:#}");
    let nodes = server.nodes(SYSTEM).await;
    let health_of = |incarnation| {
        nodes
            .iter()
            .find(|n| wire_u64(&n["incarnation"]) == Some(incarnation))
            .map(|n| n["reported_health"].clone())
    };
    assert_eq!(health_of(new), Some("ready".into()), "{nodes:#?}");
    let old_health = health_of(old).expect("the old incarnation is listed");
    assert_ne!(old_health, "ready", "{nodes:#?}");
    assert_ne!(old_health, "starting", "{nodes:#?}");

    // The new incarnation counted the replay, and the spool is gone.
    let text = node.metrics().await;
    assert_eq!(
        metric(&text, "troupe_agent_reporter_spool_replayed_batches_total"),
        Some(spooled_batch_count as f64),
        "{text}"
    );
    assert_eq!(
        metric(&text, "troupe_agent_reporter_spool_batches"),
        Some(0.0)
    );
    assert_eq!(
        metric(&text, "troupe_agent_reporter_spool_lost_batches_total"),
        Some(lost as f64)
    );
    assert!(
        !node.spool.file(node.port).exists(),
        "the spool file is removed once delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_while_the_server_is_away_is_retried_spooled_and_replayed_once_by_the_next_start()
{
    let server_port = free_port();
    let node = Node::new("term", server_port);

    // The control plane is away for the whole first run.
    let (mut first, old) = node.start(FLUSH_TIMEOUT).await;
    let stopped_at = tokio::time::Instant::now();
    first.signal("TERM");
    let status = first.wait(FLUSH_TIMEOUT + WAIT).await;
    let took = stopped_at.elapsed();
    assert!(status.success(), "exits 0 after a SIGTERM: {status:?}");
    // It kept retrying until the flush timeout, not one attempt; and stopped then.
    assert!(
        took >= FLUSH_TIMEOUT,
        "stopped after {took:?}, before the flush timeout of {FLUSH_TIMEOUT:?}"
    );
    assert!(
        took < FLUSH_TIMEOUT + Duration::from_secs(15),
        "stopped only after {took:?}"
    );
    logged(
        &first,
        "not delivered within --flush-timeout-ms are spooled; the next start of this node delivers them",
    )
    .await;

    let path = node.spool.file(node.port);
    let batches = spooled_batches(&path);
    assert!(!batches.is_empty(), "{} holds batches", path.display());
    for batch in &batches {
        assert_eq!(
            wire_u64(&batch["identity"]["incarnation"]),
            Some(old),
            "{batch:#}"
        );
    }
    let spooled = spooled_events(&batches);
    let kinds: Vec<&str> = spooled.iter().map(|(k, _)| k.as_str()).collect();
    assert!(kinds.contains(&"MemberUp"), "{kinds:?}");
    assert!(kinds.contains(&"MemberLeft"), "{kinds:?}");
    assert!(has_health(&batches, "draining"), "{batches:#?}");

    // The control plane comes back, and the same node starts again.
    let server = Server::start_on(server_port, &[]).await;
    let (mut second, new) = node.start(FLUSH_TIMEOUT).await;
    assert_ne!(old, new);
    check_replay(&server, &node, (old, new), &spooled, batches.len(), 0).await;
    second.kill().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_after_the_spool_was_written_loses_nothing_it_held() {
    let server_port = free_port();
    let node = Node::new("kill", server_port);
    // A flush timeout far longer than the test: only the SIGKILL ends the first run.
    let long = Duration::from_secs(600);
    let (mut first, old) = node.start(long).await;
    first.signal("TERM");
    // From the SIGTERM on every batch is fsynced to the spool before it is sent: wait until
    // the node's own leave is there, then kill it in the middle of its retries.
    let path = node.spool.file(node.port);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let batches = spooled_batches(&path);
        let kinds = spooled_events(&batches);
        if kinds.iter().any(|(k, _)| k == "MemberLeft") && has_health(&batches, "draining") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stopping agent never spooled its leave: {batches:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        first.try_wait().is_none(),
        "still retrying when killed (flush timeout {long:?})"
    );
    first.kill().await;
    // What the killed process left, as it left it.
    let mut batches = spooled_batches(&path);
    // A kill in the middle of an append leaves a torn last line: one batch lost, counted (a
    // line that lost only its newline is whole, and kept).
    let text = std::fs::read_to_string(&path).expect("the spool file");
    let tail = &text[text.rfind('\n').map_or(0, |end| end + 1)..];
    let mut torn = 0;
    if !tail.is_empty() {
        match serde_json::from_str::<serde_json::Value>(tail) {
            Ok(batch) if batch.get("identity").is_some() => batches.push(batch),
            _ => torn = 1,
        }
    }
    let spooled = spooled_events(&batches);
    for batch in &batches {
        assert_eq!(wire_u64(&batch["identity"]["incarnation"]), Some(old));
    }

    let server = Server::start_on(server_port, &[]).await;
    let (mut second, new) = node.start(FLUSH_TIMEOUT).await;
    assert_ne!(old, new);
    check_replay(&server, &node, (old, new), &spooled, batches.len(), torn).await;
    second.kill().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_spool_file_is_logged_once_what_it_could_read_is_delivered_and_the_rest_counted()
{
    let server_port = free_port();
    let node = Node::new("damaged", server_port);
    let flush = Duration::from_millis(1_000);
    // A real spool, left by a stop while the control plane is away.
    let (mut first, old) = node.start(flush).await;
    first.signal("TERM");
    assert!(first.wait(flush + WAIT).await.success());
    let path = node.spool.file(node.port);
    let batches = spooled_batches(&path);
    assert!(!batches.is_empty(), "{} holds batches", path.display());
    let spooled = spooled_events(&batches);

    // A disk or a hand damaged it: a garbage line after the header, and a torn last line.
    let text = std::fs::read_to_string(&path).expect("the spool file");
    let (header, rest) = text.split_once('\n').expect("a header line");
    assert_eq!(header, "{\"troupe_report_spool\":1}");
    std::fs::write(
        &path,
        format!("{header}\n\u{1}garbage, not a batch\n{rest}{{\"version\":1,\"identity\":{{\"clu"),
    )
    .expect("damage the spool file");

    let server = Server::start_on(server_port, &[]).await;
    let (mut second, new) = node.start(FLUSH_TIMEOUT).await;
    // One WARN, naming the file and what was wrong.
    let warned: Vec<String> = second
        .stderr_lines()
        .into_iter()
        .filter(|line| line.contains("the report spool file is damaged"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:#?}");
    let warning = &warned[0];
    for expected in [
        "WARN",
        path.file_name().unwrap().to_str().unwrap(),
        "1 line(s) neither a report batch nor a loss record (line 2), removed",
        "the last line is torn (a write cut short), removed",
    ] {
        assert!(warning.contains(expected), "{expected:?} not in {warning}");
    }
    // Every readable batch is delivered once; the two bad lines are counted as lost batches.
    check_replay(&server, &node, (old, new), &spooled, batches.len(), 2).await;
    let nodes = server.nodes(SYSTEM).await;
    let reported = nodes
        .iter()
        .find(|n| wire_u64(&n["incarnation"]) == Some(new))
        .map(|n| n["dropped"]["spool_batches"].clone());
    assert_eq!(reported, Some(2.into()), "{nodes:#?}");
    second.kill().await;
    server.stop().await;
}

/// Wait until the agent at `node` has reported to `server` as incarnation `incarnation`.
async fn wait_reported(server: &Server, node: &Node, incarnation: u64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let nodes = server.nodes(SYSTEM).await;
        if nodes.iter().any(|n| {
            n["node"].as_str() == Some(node.address().as_str())
                && wire_u64(&n["incarnation"]) == Some(incarnation)
        }) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} (incarnation {incarnation}) never reported: {nodes:#?}",
            node.address()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pid the spool directory's lock file holds.
fn lock_holder(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("troupe-agent.lock"))
        .expect("the lock file")
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_spool_dir_is_refused_until_the_first_is_gone() {
    let server = Server::start().await;
    let first = Node::new("lock", server.port);
    // Another node (its own address and management port) on the same directory.
    let mut second = Node::new("lock-second", server.port);
    second.spool = SpoolDir(first.spool.0.clone());
    let dir = first.spool.0.display().to_string();

    let (mut running, incarnation) = first.start(FLUSH_TIMEOUT).await;
    let pid = running.id().expect("the first agent runs");
    assert_eq!(lock_holder(&first.spool.0), pid.to_string());

    // Refused at start, before it binds anything: exit 1, naming the directory, the lock
    // file and the pid that holds it.
    let refused_at = tokio::time::Instant::now();
    let mut refused =
        Process::start_capturing_stderr(&binary("troupe-agent"), &second.args(FLUSH_TIMEOUT));
    let status = refused.wait(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(1), "{status:?}");
    let error = logged(&refused, "error:").await;
    for expected in [
        dir.as_str(),
        "is in use by another troupe-agent",
        &format!("pid {pid} holds"),
        "troupe-agent.lock",
        "one agent per spool directory",
    ] {
        assert!(error.contains(expected), "{expected:?} not in {error}");
    }
    assert!(
        refused_at.elapsed() < Duration::from_secs(10),
        "refused only after {:?}",
        refused_at.elapsed()
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", second.management)).is_err(),
        "the refused agent left nothing listening"
    );

    // The first agent is untouched: still ready, still reporting, still the lock's holder.
    first.wait_ready().await;
    wait_reported(&server, &first, incarnation).await;
    assert!(running.try_wait().is_none(), "the first agent still runs");
    assert_eq!(lock_holder(&first.spool.0), pid.to_string());

    // A SIGKILL frees the directory (the lock dies with the process): the second starts.
    running.kill().await;
    let (mut second_running, second_incarnation) = second.start(FLUSH_TIMEOUT).await;
    let second_pid = second_running.id().expect("the second agent runs");
    assert_eq!(lock_holder(&first.spool.0), second_pid.to_string());
    wait_reported(&server, &second, second_incarnation).await;

    // So does a graceful exit: the first node starts again once the second has left.
    let status = second_running.terminate(FLUSH_TIMEOUT + WAIT).await;
    assert!(status.success(), "exits 0 after a SIGTERM: {status:?}");
    let (mut again, _) = first.start(FLUSH_TIMEOUT).await;
    assert_eq!(
        lock_holder(&first.spool.0),
        again.id().expect("runs").to_string()
    );
    again.kill().await;
    server.stop().await;
}
