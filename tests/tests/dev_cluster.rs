//! The README's first command as a user runs it: `troupe-dev` (the built binary) starts the
//! control plane on SQLite and three agents running the demo; the API shows the cluster, the
//! singleton, the router and dead letters; an agent downed through the API fences (exit 3) and
//! the launcher starts it again as a fresh incarnation that rejoins; Ctrl-C stops every process
//! and exits 0.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use troupe_e2e::{binary, free_port};

/// From start until the API shows everything (three agents join, the scheduler runs, the
/// first dead letter comes after four ticks).
const UP_WITHIN: Duration = Duration::from_secs(40);
/// From Ctrl-C until the launcher has exited.
const STOPPED_WITHIN: Duration = Duration::from_secs(25);

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The processes whose parent is `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
        let after_comm = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let ppid = after_comm.split_whitespace().nth(1);
        if ppid == Some(pid.to_string().as_str()) {
            children.push(child);
        }
    }
    children
}

async fn get(client: &reqwest::Client, url: &str) -> serde_json::Value {
    match client.get(url).send().await {
        Ok(response) if response.status().is_success() => response.json().await.unwrap_or_default(),
        _ => serde_json::Value::Null,
    }
}

#[derive(Debug, Default)]
struct Seen {
    members_up: usize,
    singleton_host: Option<String>,
    router_events: usize,
    routees: usize,
    dead_letters: usize,
}

impl Seen {
    fn complete(&self) -> bool {
        self.members_up == 3
            && self.singleton_host.is_some()
            && self.router_events > 0
            && self.routees == 3
            && self.dead_letters > 0
    }
}

async fn look(client: &reqwest::Client, base: &str) -> Seen {
    let members = get(client, &format!("{base}/members")).await;
    let singletons = get(client, &format!("{base}/singletons")).await;
    let router_events = get(client, &format!("{base}/events?category=router")).await;
    let routers = get(client, &format!("{base}/routers")).await;
    let dead_letters = get(client, &format!("{base}/dead-letters")).await;
    let count = |v: &serde_json::Value| v.as_array().map_or(0, Vec::len);
    Seen {
        members_up: members["members"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["status"] == "up").count()),
        singleton_host: singletons[0]["host"].as_str().map(str::to_owned),
        router_events: count(&router_events["events"]),
        routees: count(&routers[0]["routees"]),
        dead_letters: count(&dead_letters["dead_letters"]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_cluster_shows_the_demo_in_the_api_and_ctrl_c_stops_every_process() {
    // The launcher finds the server and the agent beside itself.
    let _ = (binary("troupe-server"), binary("troupe-agent"));
    let port = free_port();
    let dir =
        TempDir(std::env::temp_dir().join(format!("troupe-dev-e2e-{}-{port}", std::process::id())));
    let mut launcher = Command::new(binary("troupe-dev"))
        .args(["--port", &port.to_string(), "--data-dir"])
        .arg(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start troupe-dev");
    let pid = launcher.id().expect("launcher pid");
    let (banner_tx, mut banner) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdout = launcher.stdout.take().expect("piped stdout");
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            println!("troupe-dev> {line}");
            let _ = banner_tx.send(line);
        }
    });

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}/api/v1/clusters/demo");
    let deadline = tokio::time::Instant::now() + UP_WITHIN;
    let seen = loop {
        let seen = look(&client, &base).await;
        if seen.complete() {
            break seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "within {UP_WITHIN:?} the API shows {seen:?}; logs in {}",
            dir.0.join("logs").display()
        );
        assert!(
            launcher.try_wait().unwrap().is_none(),
            "the launcher exited early"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!("the API shows {seen:?}");

    let mut printed = Vec::new();
    while let Ok(line) = banner.try_recv() {
        printed.push(line);
    }
    let printed = printed.join("\n");
    for url in [
        format!("http://127.0.0.1:{port}/\n"),
        format!("http://127.0.0.1:{port}/api/v1\n"),
        format!("http://127.0.0.1:{port}/api/v1/docs\n"),
    ] {
        assert!(
            printed.contains(&url),
            "the banner names {url:?}: {printed}"
        );
    }

    // The dashboard's URL answers (`/` leads to the dashboard's pages).
    let dashboard = client
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .expect("open the dashboard");
    assert!(
        dashboard.status().is_success(),
        "the dashboard answers: {}",
        dashboard.status()
    );
    assert!(
        dashboard
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html")),
        "the dashboard is a page"
    );

    // Each agent serves Prometheus metrics; the demo's worker depth is one series per router.
    let metrics_url = printed
        .split_whitespace()
        .find(|word| word.ends_with("/metrics") && !word.contains(&format!(":{port}/")))
        .expect("the banner names an agent's metrics URL")
        .to_owned();
    let metrics = client
        .get(&metrics_url)
        .send()
        .await
        .expect("scrape an agent")
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"troupe_agent_router_mailbox_depth{router="/user/compute-router"}"#),
        "{metrics_url} exports the router's depth: {metrics}"
    );

    // Down agent-2 through the API: it fences and exits 3, and the launcher starts it again
    // as a fresh incarnation, which rejoins.
    let token = printed
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Admin token"))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the banner names the admin token")
        .to_owned();
    let agent_2 = printed
        .lines()
        .find(|l| l.contains("agent-2"))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("127.0.0.1:")))
        .expect("the banner names agent-2's address")
        .to_owned();
    let downed = client
        .put(format!("{base}/members/{agent_2}"))
        .bearer_auth(&token)
        .form(&[("operation", "Down")])
        .send()
        .await
        .expect("queue the down");
    assert_eq!(downed.status(), 202);
    let deadline = tokio::time::Instant::now() + UP_WITHIN;
    loop {
        let nodes = get(&client, &format!("{base}/nodes")).await;
        let incarnations: Vec<&serde_json::Value> = nodes
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["node"] == agent_2.as_str())
            .collect();
        let fenced = incarnations.iter().any(|n| n["health"] == "fenced");
        let back = incarnations.iter().any(|n| n["health"] == "ready");
        let members = look(&client, &base).await.members_up;
        if fenced && back && incarnations.len() >= 2 && members == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "agent-2 ({agent_2}) fenced and back as a new incarnation: {incarnations:#?}, {members} up"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut said = Vec::new();
    while let Ok(line) = banner.try_recv() {
        said.push(line);
    }
    assert!(
        said.iter()
            .any(|l| l.contains("agent-2 was fenced (exit code 3)")),
        "the launcher says it restarts the fenced agent: {said:#?}"
    );

    let children = children_of(pid);
    assert_eq!(
        children.len(),
        4,
        "the server and three agents run under the launcher: {children:?}"
    );
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let status = tokio::time::timeout(STOPPED_WITHIN, launcher.wait())
        .await
        .unwrap_or_else(|_| panic!("the launcher exits within {STOPPED_WITHIN:?} of Ctrl-C"))
        .expect("wait for the launcher");
    assert!(status.success(), "a clean stop exits 0, got {status}");
    let left: Vec<u32> = children
        .iter()
        .copied()
        .filter(|child| std::path::Path::new(&format!("/proc/{child}")).exists())
        .collect();
    assert!(left.is_empty(), "every child has exited: {left:?} remain");
    // The agents left gracefully: each one's log says so, and none was killed.
    for agent in 1..=3 {
        let log = std::fs::read_to_string(dir.0.join(format!("logs/agent-{agent}.log")))
            .expect("agent log");
        assert!(
            log.contains("shutting down: draining, then leaving the cluster")
                && log.contains("left the cluster"),
            "agent-{agent} left gracefully: {log}"
        );
    }
}
