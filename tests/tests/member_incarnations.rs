//! Quick restarts at the same `host:port` with the real `troupe-agent` and `troupe-server`
//! binaries (issue 14, items 5 and 6): after every round — a SIGTERM or a SIGKILL followed at
//! once by a new process on the same port — the API shows what every agent counts: the same
//! number of members up, the restarted member as its new incarnation, and no member
//! unreachable once no agent finds one unreachable.

use std::time::Duration;

use troupe_e2e::control_plane::{INGEST_TOKEN, Server};
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e incarnation secret, long enough";
const SYSTEM: &str = "restarts";
/// Four agents: a seed and three others, one of which restarts each round.
const AGENTS: usize = 4;
const ROUNDS: usize = 4;
/// How long the agents may take to agree after a restart, and the API to follow them.
const SETTLE: Duration = Duration::from_secs(60);

struct Agent {
    process: Process,
    port: u16,
    management: u16,
    incarnation: u64,
}

impl Agent {
    async fn start(server: &Server, port: u16, seed: u16) -> Self {
        let management = free_port();
        let args: Vec<String> = [
            "--system",
            SYSTEM,
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--seed",
            &format!("troupe://{SYSTEM}@127.0.0.1:{seed}"),
            "--secret",
            SECRET,
            "--control-plane",
            &server.url,
            "--ingest-token",
            INGEST_TOKEN,
            "--report-interval-ms",
            "100",
            "--events-json",
            "--management-bind",
            &format!("127.0.0.1:{management}"),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut process = Process::start(&binary("troupe-agent"), &args);
        let started = process
            .wait_for(SETTLE, "AgentStarted", |l| l["event"] == "AgentStarted")
            .await;
        let incarnation = started["incarnation"].as_u64().expect("incarnation");
        Self {
            process,
            port,
            management,
            incarnation,
        }
    }

    /// `(members up, unreachable members)` as this agent's `/metrics` counts them.
    async fn counts(&mut self) -> Option<(u64, u64)> {
        self.process.drain();
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", self.management))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let value = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| v as u64)
        };
        Some((
            value("troupe_agent_members{status=\"up\"}")?,
            value("troupe_agent_unreachable_members ")?,
        ))
    }
}

/// What the API says: `(members up, unreachable count, uid of the member at `address`)`.
async fn api_view(server: &Server, address: &str) -> (u64, u64, Option<String>) {
    let members = server.get(&format!("clusters/{SYSTEM}/members")).await;
    let list = members["members"].as_array().cloned().unwrap_or_default();
    let up = list.iter().filter(|m| m["status"] == "up").count() as u64;
    let unreachable = members["unreachable"].as_array().map_or(0, Vec::len) as u64
        + list.iter().filter(|m| m["reachable"] == false).count() as u64;
    let uid = list
        .iter()
        .find(|m| m["node"] == address)
        .and_then(|m| m["node_uid"].as_str().map(str::to_owned));
    (up, unreachable, uid)
}

/// Waits until every agent counts `AGENTS` up and none unreachable.
async fn agents_agree(agents: &mut [Agent], round: usize) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let mut counts = Vec::new();
        for agent in agents.iter_mut() {
            counts.push(agent.counts().await);
        }
        if counts.iter().all(|c| *c == Some((AGENTS as u64, 0))) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "round {round}: the agents never agreed on {AGENTS} up, 0 unreachable: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_quick_restarts_at_the_same_address_the_api_shows_what_every_agent_counts() {
    let server = Server::start().await;
    let ports: Vec<u16> = (0..AGENTS).map(|_| free_port()).collect();
    let mut agents = Vec::new();
    for &port in &ports {
        agents.push(Agent::start(&server, port, ports[0]).await);
    }
    agents_agree(&mut agents, 0).await;

    for round in 1..=ROUNDS {
        let victim = 1 + round % (AGENTS - 1);
        let port = agents[victim].port;
        let old = agents[victim].incarnation;
        if round % 2 == 0 {
            agents[victim].process.kill().await;
        } else {
            let status = agents[victim].process.terminate(SETTLE).await;
            assert!(status.success(), "round {round}: left cleanly: {status}");
        }
        // At once, on the same port: the old incarnation's removal and the new one's join
        // are reported within milliseconds of each other.
        agents[victim] = Agent::start(&server, port, ports[0]).await;
        let new = agents[victim].incarnation;
        assert_ne!(old, new, "a restart is a new incarnation");
        agents_agree(&mut agents, round).await;

        let address = format!("127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let view = api_view(&server, &address).await;
            if view == (AGENTS as u64, 0, Some(new.to_string())) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: every agent counts {AGENTS} up and 0 unreachable, the API \
                 (up, unreachable, uid of {address}) says {view:?}; want uid {new} \
                 (old {old}); members {:#}",
                server
                    .get(&format!("clusters/{SYSTEM}/members?include_removed=true"))
                    .await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for agent in &mut agents {
        agent.process.kill().await;
    }
    server.stop().await;
}
