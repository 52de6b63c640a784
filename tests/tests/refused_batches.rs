//! A real agent whose batches the real server refuses as bad input (a role over its length
//! limit: every batch carrying its own membership events is a 400) drops those batches,
//! counts them on its `/metrics` and in its next report, and goes on reporting.

use std::time::Duration;

use troupe_e2e::control_plane::{INGEST_TOKEN, Server};
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e refused batches secret, long enough";
const WAIT: Duration = Duration::from_secs(60);

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drops_a_refused_batch_counts_it_and_goes_on_reporting() {
    let server = Server::start().await;
    let port = free_port();
    let management = free_port();
    let node = format!("127.0.0.1:{port}");
    // 200 bytes: over the 128-byte role limit, so every batch with this node's MemberUp is
    // refused; heartbeats and health changes are not.
    let role = "r".repeat(200);
    let args: Vec<String> = [
        "--system",
        "refused",
        "--bind",
        &node,
        "--seed",
        &format!("troupe://refused@{node}"),
        "--secret",
        SECRET,
        "--role",
        &role,
        "--control-plane",
        &server.url,
        "--ingest-token",
        INGEST_TOKEN,
        "--report-interval-ms",
        "100",
        "--management-bind",
        &format!("127.0.0.1:{management}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut agent = Process::start_capturing_stderr(&binary("troupe-agent"), &args);

    // The server hears from the agent (heartbeats, health changes) although its membership
    // batches were refused; the refused items arrive as dropped membership events.
    let nodes = server
        .wait_for(
            "clusters/refused/nodes",
            WAIT,
            "the agent reports, with its refused membership events counted as dropped",
            |nodes| {
                nodes.as_array().is_some_and(|nodes| {
                    nodes.iter().any(|n| {
                        n["node"] == node.as_str()
                            && n["dropped"]["membership"].as_i64().unwrap_or(0) >= 1
                    })
                })
            },
        )
        .await;
    let first_sequence = nodes[0]["last_sequence"].as_i64().unwrap();

    // Its /metrics count the refusals.
    let client = reqwest::Client::new();
    let metrics_url = format!("http://127.0.0.1:{management}/metrics");
    let text = client
        .get(&metrics_url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = metric(&text, "troupe_agent_reporter_batches_refused_total").unwrap_or(0.0);
    assert!(refused >= 1.0, "refused batches on /metrics: {text}");
    let dropped = metric(
        &text,
        r#"troupe_agent_reporter_dropped_total{kind="membership"}"#,
    )
    .unwrap_or(0.0);
    assert!(dropped >= 1.0, "{text}");

    // And it goes on reporting: later sequences keep arriving.
    server
        .wait_for(
            "clusters/refused/nodes",
            Duration::from_secs(20),
            "later batches are stored",
            |nodes| {
                nodes[0]["last_sequence"]
                    .as_i64()
                    .is_some_and(|s| s >= first_sequence + 3)
            },
        )
        .await;
    // The refusal named the field and the limit, and the agent logged it.
    let logged = agent.stderr_lines().join("\n");
    assert!(
        logged.contains("refused a report batch as bad input")
            && logged.contains("is 200 bytes long; the limit is 128 bytes"),
        "{logged}"
    );
    agent.kill().await;
    server.stop().await;
}
