//! The control plane and three agents as real processes on 127.0.0.1: the agents report, the
//! management API shows the cluster as they see it, and a member operation queued through the
//! API is carried out by the cluster.

use std::time::Duration;

use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e control plane secret, long enough";
const WAIT: Duration = Duration::from_secs(60);

struct Server {
    process: Process,
    base: String,
    _dir: TempDir,
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start_server() -> Server {
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("troupe-e2e-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<String> = [
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--sqlite-path",
        dir.join("control-plane.sqlite").to_str().unwrap(),
        "--ingest-token",
        "ingest-secret",
        "--admin-token",
        "admin-secret",
        "--enable-member-operations",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut process = Process::start(&binary("troupe-server"), &args);
    let base = format!("http://127.0.0.1:{port}/api/v1");
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(response) = client.get(format!("{base}/clusters")).send().await
            && response.status().is_success()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server did not answer"
        );
        // Drain its stdout so it never blocks (it logs to stderr).
        let _ = process.lines.try_recv();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Server {
        process,
        base,
        _dir: TempDir(dir),
    }
}

fn agent_args(port: u16, seed: u16, control_plane: &str) -> Vec<String> {
    [
        "--system",
        "e2e",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &format!("troupe://e2e@127.0.0.1:{seed}"),
        "--secret",
        SECRET,
        "--control-plane",
        control_plane,
        "--ingest-token",
        "ingest-secret",
        "--report-interval-ms",
        "100",
        "--events-json",
        // Three agents share this machine: each gets a free management port.
        "--management-bind",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

async fn members(client: &reqwest::Client, base: &str) -> Vec<serde_json::Value> {
    let Ok(response) = client
        .get(format!("{base}/clusters/e2e/members"))
        .send()
        .await
    else {
        return Vec::new();
    };
    if !response.status().is_success() {
        return Vec::new();
    }
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    body["members"].as_array().cloned().unwrap_or_default()
}

async fn wait_members(
    client: &reqwest::Client,
    base: &str,
    what: &str,
    mut ok: impl FnMut(&[serde_json::Value]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let members = members(client, base).await;
        if ok(&members) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: members {members:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_shows_the_reported_cluster_and_a_queued_down_is_carried_out() {
    let server = start_server().await;
    let control_plane = server.base.trim_end_matches("/api/v1").to_owned();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let agent = binary("troupe-agent");
    let mut agents: Vec<Process> = ports
        .iter()
        .map(|&p| Process::start(&agent, &agent_args(p, ports[0], &control_plane)))
        .collect();
    let client = reqwest::Client::new();
    wait_members(&client, &server.base, "three members up", |m| {
        m.iter().filter(|m| m["status"] == "up").count() == 3
    })
    .await;

    let target = format!("127.0.0.1:{}", ports[2]);
    let unauthorized = client
        .put(format!("{}/clusters/e2e/members/{target}", server.base))
        .form(&[("operation", "Down")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        unauthorized.status(),
        401,
        "a mutation without the admin token is refused"
    );
    let queued = client
        .put(format!("{}/clusters/e2e/members/{target}", server.base))
        .bearer_auth("admin-secret")
        .form(&[("operation", "Down")])
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202, "{:?}", queued.text().await);
    agents[0]
        // A peer may see the member go straight from up to removed when the gossip that
        // carries the removal is the first it hears of the down.
        .wait_for(WAIT, "MemberDown or MemberRemoved of the target", |l| {
            (l["event"] == "MemberDown" || l["event"] == "MemberRemoved")
                && l["member"]["address"] == format!("troupe://e2e@{target}")
        })
        .await;
    wait_members(
        &client,
        &server.base,
        "the downed member gone from the API",
        |m| {
            m.iter().filter(|m| m["status"] == "up").count() == 2
                && !m.iter().any(|m| m["node"] == target.as_str())
        },
    )
    .await;
    for agent in &mut agents {
        agent.kill().await;
    }
    drop(server.process);
}
