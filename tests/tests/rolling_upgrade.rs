//! A rolling upgrade across protocol versions with real processes: three `troupe-agent`s of
//! this build (protocol 2) are replaced one at a time (SIGTERM, then the new build at the same
//! address) by `troupe-agent-next`, the same agent built with the `wire-next` feature: it
//! speaks protocols 2 and 3, and sends a heartbeat field this build does not know. At every
//! step every running member stays up, none is downed, mixed pairs speak 2 and next pairs 3,
//! and the current build skips the field it does not know while the next build reads it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e rolling upgrade secret, long enough";
const WAIT: Duration = Duration::from_secs(20);

/// The next build (`scripts/test` builds it before the tests; built here when missing).
fn next_binary() -> PathBuf {
    let path = binary("troupe-agent").with_file_name("troupe-agent-next");
    if path.exists() {
        return path;
    }
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "troupe-agent",
            "--bin",
            "troupe-agent-next",
            "--features",
            "wire-next",
        ])
        .status()
        .expect("run cargo build");
    assert!(status.success(), "building troupe-agent-next failed");
    path
}

fn address(port: u16) -> String {
    format!("troupe://e2e@127.0.0.1:{port}")
}

fn args(port: u16, seed: u16) -> Vec<String> {
    [
        "--system",
        "e2e",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &address(seed),
        "--secret",
        SECRET,
        "--events-json",
        "--management-bind",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

struct Node {
    process: Process,
    management: String,
    incarnation: serde_json::Value,
}

async fn start(program: &PathBuf, port: u16, seed: u16) -> Node {
    let mut process = Process::start(program, &args(port, seed));
    let started = process
        .wait_for(WAIT, "AgentStarted", |l| l["event"] == "AgentStarted")
        .await;
    let up = process
        .wait_for(WAIT, "SelfUp", |l| l["event"] == "SelfUp")
        .await;
    Node {
        process,
        management: started["management"].as_str().unwrap().to_owned(),
        incarnation: up["member"]["incarnation"].clone(),
    }
}

async fn metrics(node: &Node) -> String {
    reqwest::get(format!("{}/metrics", node.management))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics text")
}

fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `node`'s /metrics satisfies `check`, or fails naming `what`.
async fn wait_metrics(node: &Node, what: &str, check: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = metrics(node).await;
        if check(&body) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every node counts `n` up and none unreachable.
async fn converged(nodes: &[Node], n: usize) {
    for node in nodes {
        wait_metrics(node, &format!("{n} up, 0 unreachable"), |b| {
            value(b, "troupe_agent_members{status=\"up\"}") == n as f64
                && value(b, "troupe_agent_unreachable_members") == 0.0
        })
        .await;
    }
}

const V2: &str = "troupe_agent_transport_handshakes_established_total{protocol_version=\"2\"}";
const V3: &str = "troupe_agent_transport_handshakes_established_total{protocol_version=\"3\"}";
const READ: &str = "troupe_agent_wire_extension_records_total{outcome=\"read\"}";
const SKIPPED: &str = "troupe_agent_wire_extension_records_total{outcome=\"skipped\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_upgraded_one_node_at_a_time_to_the_next_protocol_version() {
    let next = next_binary();
    let current = binary("troupe-agent");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes = Vec::new();
    for &port in &ports {
        nodes.push(start(&current, port, ports[0]).await);
    }
    converged(&nodes, 3).await;
    let body = metrics(&nodes[0]).await;
    assert!(
        value(
            &body,
            "troupe_agent_transport_protocol_version{bound=\"highest\"}"
        ) == 2.0
    );
    assert_eq!(value(&body, V3), 0.0);
    let mut stopped = Vec::new();

    // Upgrade the last node, then the middle one, then the first (joining via a running one).
    for (step, i) in [2usize, 1, 0].into_iter().enumerate() {
        stopped.push(nodes[i].incarnation.clone());
        let status = nodes[i].process.terminate(WAIT).await;
        assert!(status.success(), "a graceful leave exits 0, got {status}");
        let seed = if i == 0 { ports[1] } else { ports[0] };
        nodes[i] = start(&next, ports[i], seed).await;
        converged(&nodes, 3).await;
        let upgraded = step + 1;
        eprintln!("step {upgraded}: node {i} runs the next build");

        if upgraded == 2 {
            // Mixed: nodes 1 and 2 are next, node 0 is current.
            wait_metrics(
                &nodes[1],
                "a next node speaks 3 with a next peer and 2 with a current one",
                |b| value(b, V3) > 0.0 && value(b, V2) > 0.0,
            )
            .await;
            wait_metrics(
                &nodes[1],
                "a next node reads the added heartbeat field",
                |b| value(b, READ) > 0.0 && value(b, SKIPPED) == 0.0,
            )
            .await;
            wait_metrics(
                &nodes[0],
                "the current node skips the field it does not know",
                |b| value(b, SKIPPED) > 0.0 && value(b, READ) == 0.0 && value(b, V3) == 0.0,
            )
            .await;
        }
    }

    // All next: the cluster speaks 3; nobody still running was ever downed.
    for node in &nodes {
        let b = metrics(node).await;
        assert_eq!(
            value(
                &b,
                "troupe_agent_transport_protocol_version{bound=\"highest\"}"
            ),
            3.0
        );
        assert!(value(&b, V3) > 0.0, "{b}");
    }
    for node in &mut nodes {
        node.process.drain();
        let running: Vec<_> = node
            .process
            .seen
            .iter()
            .filter(|l| {
                l["event"] == "MemberDown" && !stopped.contains(&l["member"]["incarnation"])
            })
            .collect();
        assert!(running.is_empty(), "running members downed: {running:#?}");
    }
    for node in &mut nodes {
        node.process.kill().await;
    }
}
