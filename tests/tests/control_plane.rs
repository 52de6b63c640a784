//! The control plane and three agents as real processes on 127.0.0.1: the agents report, the
//! management API shows the cluster as they see it, a member operation queued through the API
//! is carried out by the cluster, and with the demo workload a singleton hand-over and a router's
//! routee change reach the API.

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

async fn get_json(client: &reqwest::Client, url: &str) -> serde_json::Value {
    match client.get(url).send().await {
        Ok(response) if response.status().is_success() => response.json().await.unwrap_or_default(),
        _ => serde_json::Value::Null,
    }
}

/// Poll `url` until `ok` accepts its JSON; returns that JSON.
async fn wait_json(
    client: &reqwest::Client,
    url: &str,
    what: &str,
    mut ok: impl FnMut(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let body = get_json(client, url).await;
        if ok(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {url} answered {body:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_singleton_hand_over_and_a_routee_change_reach_the_api() {
    let server = start_server().await;
    let control_plane = server.base.trim_end_matches("/api/v1").to_owned();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let agent = binary("troupe-agent");
    let mut agents: Vec<Process> = ports
        .iter()
        .map(|&p| {
            let mut args = agent_args(p, ports[0], &control_plane);
            args.push("--demo".to_owned());
            Process::start(&agent, &args)
        })
        .collect();
    let client = reqwest::Client::new();
    let cluster = format!("{}/clusters/e2e", server.base);
    let routee = |port: u16| format!("troupe://e2e@127.0.0.1:{port}/user/worker");

    // Everything up: the singleton has a host, the router routes to all three workers.
    let singletons = wait_json(
        &client,
        &format!("{cluster}/singletons"),
        "a singleton host",
        |s| s[0]["host"].is_string(),
    )
    .await;
    let old_host = singletons[0]["host"].as_str().unwrap().to_owned();
    wait_json(
        &client,
        &format!("{cluster}/routers"),
        "three routees",
        |r| {
            r[0]["path"] == "/user/compute-router"
                && r[0]["strategy"] == "smallest-mailbox"
                && r[0]["routee_path"] == "/user/worker"
                && r[0]["routees"]
                    .as_array()
                    .is_some_and(|routees| routees.len() == 3)
        },
    )
    .await;

    // Each node reports its own worker's mailbox depth under the router: wait for all three
    // while all three are up (a node's first depth report can come after the API shows its
    // routee, later still when other tests share the machine or the process).
    let depth_series = |depth: &serde_json::Value| -> Vec<String> {
        depth["series"]
            .as_array()
            .map(|series| {
                series
                    .iter()
                    .filter_map(|s| s["node"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let depth_url = format!("{cluster}/routers/depth?router=/user/compute-router");
    wait_json(&client, &depth_url, "a depth series per node", |depth| {
        depth_series(depth).len() == 3
    })
    .await;

    // The host leaves (SIGTERM): the singleton moves with a hand-over, the routers drop its
    // worker, and the API shows both.
    let leaving = ports
        .iter()
        .position(|p| old_host == format!("127.0.0.1:{p}"))
        .expect("the host is one of the agents");
    let status = agents[leaving].terminate(WAIT).await;
    assert!(status.success(), "the host left cleanly: {status}");

    let detail = wait_json(
        &client,
        &format!("{cluster}/singletons/job-scheduler"),
        "the singleton on a new host after a completed hand-over",
        |d| {
            let host = d["singleton"]["host"].as_str();
            let handed_over = d["history"].as_array().is_some_and(|history| {
                history.iter().any(|e| {
                    e["kind"] == "SingletonHandOverCompleted"
                        && e["detail"]["new_host"].as_str() == host
                })
            });
            host.is_some_and(|h| h != old_host) && handed_over
        },
    )
    .await;
    let history = detail["history"].as_array().unwrap();
    assert!(
        history
            .iter()
            .any(|e| e["kind"] == "SingletonStopped" && e["detail"]["host"] == old_host.as_str()),
        "the old host reported its instance stopping: {history:#?}"
    );
    let mut survivors: Vec<String> = ports
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leaving)
        .map(|(_, p)| routee(*p))
        .collect();
    survivors.sort_unstable();
    wait_json(
        &client,
        &format!("{cluster}/routers"),
        "the routers without the departed worker",
        |r| {
            r[0]["routees"].as_array().is_some_and(|routees| {
                let mut routees: Vec<&str> = routees.iter().filter_map(|v| v.as_str()).collect();
                routees.sort_unstable();
                routees == survivors
            })
        },
    )
    .await;
    let changes = get_json(
        &client,
        &format!("{cluster}/events?kind=RouteesChanged&subject=/user/compute-router"),
    )
    .await;
    assert!(
        changes["events"]
            .as_array()
            .is_some_and(|events| events.iter().any(|e| e["detail"]["routees"]
                .as_array()
                .is_some_and(|r| r.len() == 2))),
        "the routee change is in the event history: {changes:#}"
    );
    // The departed node's series stays in the history beside the survivors'.
    let depth = get_json(&client, &depth_url).await;
    assert_eq!(
        depth_series(&depth).len(),
        3,
        "a depth series per node, the departed one's too: {depth:#}"
    );

    for agent in &mut agents {
        agent.kill().await;
    }
    drop(server.process);
}
