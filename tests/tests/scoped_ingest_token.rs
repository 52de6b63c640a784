//! Issue 14, "an ingest token for one cluster cannot write another's history", with the real
//! binaries: a `troupe-server` with `--cluster-ingest-token shop=…`, a real `shop` agent and a
//! real `billing` agent that both hold the shop token. The shop agent's reports are stored;
//! the billing agent keeps running and reporting, and nothing of `billing` is ever stored,
//! while the global token still admits it.

use std::time::Duration;

use troupe_e2e::control_plane::{INGEST_TOKEN, Server};
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e scoped ingest token secret, long enough";
const SHOP_TOKEN: &str = "e2e-shop-scoped-token";
const WAIT: Duration = Duration::from_secs(60);

fn start_agent(server: &Server, system: &str, port: u16, token: &str) -> Process {
    let args: Vec<String> = [
        "--system",
        system,
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &format!("troupe://{system}@127.0.0.1:{port}"),
        "--secret",
        SECRET,
        "--control-plane",
        &server.url,
        "--ingest-token",
        token,
        "--report-interval-ms",
        "100",
        // A refused batch is retried on shutdown until this runs out.
        "--flush-timeout-ms",
        "3000",
        "--management-bind",
        &format!("127.0.0.1:{}", free_port()),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    Process::start_capturing_stderr(&binary("troupe-agent"), &args)
}

async fn status_of(server: &Server, path: &str) -> u16 {
    reqwest::get(format!("{}/api/v1/{path}", server.url))
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_agent_holding_another_clusters_scoped_token_writes_nothing() {
    let scoped = format!("shop={SHOP_TOKEN}");
    let server = Server::start_with(&["--cluster-ingest-token", &scoped]).await;
    let (shop_port, billing_port) = (free_port(), free_port());
    let mut shop = start_agent(&server, "shop", shop_port, SHOP_TOKEN);
    let mut billing = start_agent(&server, "billing", billing_port, SHOP_TOKEN);

    // The shop agent reports through its token, many times over.
    let shop_node = format!("127.0.0.1:{shop_port}");
    server
        .wait_for(
            "clusters/shop/nodes",
            WAIT,
            "the shop agent has sent ten batches",
            |nodes| {
                nodes.as_array().is_some_and(|nodes| {
                    nodes.iter().any(|n| {
                        n["node"] == shop_node.as_str()
                            && n["last_sequence"].as_i64().unwrap_or(0) >= 10
                    })
                })
            },
        )
        .await;
    // Meanwhile the billing agent, started at the same time with the same token, ran and
    // tried to report (the server's refusal is in its log): none of it was stored.
    assert!(billing.try_wait().is_none(), "the billing agent still runs");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !billing
        .stderr_lines()
        .iter()
        .any(|line| line.contains("403") || line.contains("scoped to cluster"))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the billing agent never logged the refusal: {}",
            billing.stderr_lines().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status_of(&server, "clusters/billing").await, 404);
    let clusters = server.get("clusters").await;
    let names: Vec<&str> = clusters
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["shop"], "{clusters:#}");
    let shop_members = server.get("clusters/shop/members").await;
    let billing_node = format!("127.0.0.1:{billing_port}");
    assert!(
        !shop_members.to_string().contains(&billing_node),
        "the billing node is nowhere in shop: {shop_members:#}"
    );

    // The same agent with the global token is stored: the refusal was the token's scope.
    billing.terminate(Duration::from_secs(30)).await;
    let mut billing = start_agent(&server, "billing", free_port(), INGEST_TOKEN);
    server
        .wait_for(
            "clusters/billing/nodes",
            WAIT,
            "billing reports with the global token",
            |nodes| nodes.as_array().is_some_and(|n| !n.is_empty()),
        )
        .await;
    billing.terminate(Duration::from_secs(30)).await;
    shop.terminate(Duration::from_secs(30)).await;
    server.stop().await;
}
