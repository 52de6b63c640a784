//! Every way a node can lose its place takes one path, with the real `troupe-agent` and
//! `troupe-server` binaries: health fenced (liveness and readiness answer 503 `fatal`), the
//! control plane told (the agent's health `fenced` with the reason), the actors stopped, the
//! reports flushed, exit code 3 — and a graceful leave (SIGTERM, the control plane's `Leave`)
//! exits 0. One test per path: downed through the control plane, removed while frozen (and
//! fenced by keep-majority when it wakes), a Kubernetes Lease deleted (404), a Kubernetes renewal
//! deadline missed, an etcd key deleted.
//!
//! The agent under test reports through a [`Relay`] the test pauses before the fence: its last
//! report waits there, so the test reads its probes while it is fenced but not yet gone, then
//! lets the report through and sees the process exit.

use std::time::Duration;

use troupe_e2e::control_plane::{INGEST_TOKEN, Server};
use troupe_e2e::relay::Relay;
use troupe_e2e::{Process, binary, free_port};
use troupe_kubernetes::standin::{Fault, StandIn};

const SECRET: &str = "e2e fencing secret, long enough";
const WAIT: Duration = Duration::from_secs(30);

/// One `troupe-agent` process of the test.
struct Agent {
    process: Process,
    port: u16,
    management: u16,
    incarnation: u64,
    relay: Relay,
}

impl Agent {
    /// Start an agent of cluster `system` on a free port, reporting through its own relay to
    /// `server`, with `extra` flags.
    async fn start(server: &Server, system: &str, extra: &[String]) -> Self {
        Self::start_at(server, system, free_port(), extra).await
    }

    /// Like [`Agent::start`], on `port`.
    async fn start_at(server: &Server, system: &str, port: u16, extra: &[String]) -> Self {
        let management = free_port();
        let relay = Relay::start(([127, 0, 0, 1], server.port).into()).await;
        let mut args: Vec<String> = [
            "--system",
            system,
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--secret",
            SECRET,
            "--control-plane",
            &format!("http://{}", relay.addr()),
            "--ingest-token",
            INGEST_TOKEN,
            "--report-interval-ms",
            "100",
            "--flush-timeout-ms",
            "20000",
            "--events-json",
            "--management-bind",
            &format!("127.0.0.1:{management}"),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend_from_slice(extra);
        let mut process = Process::start_capturing_stderr(&binary("troupe-agent"), &args);
        let started = process
            .wait_for(WAIT, "AgentStarted", |l| l["event"] == "AgentStarted")
            .await;
        let incarnation = started["incarnation"].as_u64().expect("incarnation");
        Self {
            process,
            port,
            management,
            incarnation,
            relay,
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn probe(&self, path: &str) -> Option<(u16, serde_json::Value)> {
        let response = reqwest::get(format!("http://127.0.0.1:{}{path}", self.management))
            .await
            .ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.ok()?))
    }

    async fn wait_ready(&self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.probe("/_troupe/health/ready").await.map(|(s, _)| s) != Some(200) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "agent on {} never ready: {:?}",
                self.port,
                self.process.stderr_lines()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn logged(&self, text: &str) -> bool {
        self.process.stderr_lines().iter().any(|l| l.contains(text))
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The agent is fenced: both probes 503 `fatal` (while its last report waits in the paused
/// relay), then the report goes through, the process exits 3, and the control plane shows the
/// incarnation `fenced` with a reason containing `reason`.
async fn assert_fenced(agent: &mut Agent, server: &Server, system: &str, reasons: &[&str]) {
    let names_reason = |r: &serde_json::Value| {
        r.as_str()
            .is_some_and(|r| reasons.iter().any(|reason| r.contains(reason)))
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    let live = loop {
        if let Some((503, body)) = agent.probe("/_troupe/health").await
            && body["status"] == "fatal"
        {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "liveness never answered 503 fatal; agent log: {:#?}",
            agent.process.stderr_lines()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(live["state"], "fenced", "{live}");
    assert!(
        names_reason(&live["reason"]),
        "liveness names the reason ({reasons:?}): {live}"
    );
    let (ready, body) = agent
        .probe("/_troupe/health/ready")
        .await
        .expect("readiness answers");
    assert_eq!(
        (ready, body["status"].as_str()),
        (503, Some("fatal")),
        "{body}"
    );
    agent.relay.resume();
    let status = agent.process.wait(WAIT).await;
    assert_eq!(
        status.code(),
        Some(3),
        "a fenced agent exits 3; log: {:#?}",
        agent.process.stderr_lines()
    );
    let incarnation = agent.incarnation.to_string();
    let address = agent.address();
    server
        .wait_for(
            &format!("clusters/{system}/nodes"),
            WAIT,
            "the control plane shows the incarnation fenced",
            |nodes| {
                nodes.as_array().is_some_and(|nodes| {
                    nodes.iter().any(|n| {
                        n["node"] == address.as_str()
                            && n["incarnation"] == incarnation.as_str()
                            && n["health"] == "fenced"
                    })
                })
            },
        )
        .await;
    let events = server
        .get(&format!(
            "clusters/{system}/events?kind=AgentHealthChanged&limit=500"
        ))
        .await;
    let fenced = events["events"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["node"] == address.as_str() && e["detail"]["health"] == "fenced")
        .unwrap_or_else(|| panic!("a fenced health event from {address}: {events:#}"));
    assert!(
        names_reason(&fenced["detail"]["reason"]),
        "the control plane has the reason ({reasons:?}): {fenced:#}"
    );
    assert!(
        agent.logged("exiting fenced"),
        "{:#?}",
        agent.process.stderr_lines()
    );
}

/// Start `n` gossip agents of `system` (the first is the seed) and wait until each is ready.
async fn gossip_cluster(server: &Server, system: &str, n: usize, extra: &[&str]) -> Vec<Agent> {
    let seed_port = free_port();
    let mut agents = Vec::new();
    for i in 0..n {
        let mut flags = args(&[
            "--seed",
            &format!("troupe://{system}@127.0.0.1:{seed_port}"),
        ]);
        flags.extend(args(extra));
        // The seed listens on the port the others were given.
        let port = if i == 0 { seed_port } else { free_port() };
        let agent = Agent::start_at(server, system, port, &flags).await;
        agents.push(agent);
    }
    for agent in &agents {
        agent.wait_ready().await;
    }
    agents
}

async fn members_up(server: &Server, system: &str, count: usize, without: &str) {
    server
        .wait_for(
            &format!("clusters/{system}/members"),
            WAIT,
            &format!("{count} members up, {without} not among them"),
            |body| {
                let members = body["members"].as_array().cloned().unwrap_or_default();
                members.iter().filter(|m| m["status"] == "up").count() == count
                    && !members.iter().any(|m| m["node"] == without)
            },
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_downed_through_the_control_plane_fences_answers_fatal_and_exits_3() {
    let server = Server::start().await;
    let mut agents = gossip_cluster(&server, "downed", 3, &[]).await;
    let mut target = agents.remove(2);
    target.relay.pause();
    server.operate("downed", &target.address(), "Down").await;
    // A second Down of the same address queued while it is fenced: the fenced agent must not
    // be the one handed it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let address = target.address();
    // It learns it was downed from the gossip that marks it down, or, when the leader's
    // removal overtakes that gossip, from a view that no longer has it: both fence it.
    assert_fenced(
        &mut target,
        &server,
        "downed",
        &["downed by the cluster", "removed from the cluster"],
    )
    .await;
    server.operate("downed", &address, "Down").await;
    members_up(&server, "downed", 2, &address).await;
    assert!(
        !target.logged("carrying out a member operation"),
        "the downed agent carried out no operation: {:#?}",
        target.process.stderr_lines()
    );
    for agent in &mut agents {
        agent.kill().await;
    }
    server.stop().await;
}

impl Agent {
    async fn kill(&mut self) {
        self.process.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_while_frozen_fences_when_it_wakes_and_exits_3() {
    let server = Server::start().await;
    let mut agents = gossip_cluster(&server, "frozen", 3, &["--down-after-ms", "1500"]).await;
    let mut target = agents.remove(2);
    let address = target.address();
    target.process.signal("STOP");
    // The other two down and remove it.
    members_up(&server, "frozen", 2, &address).await;
    target.relay.pause();
    target.process.signal("CONT");
    // It wakes removed: either a gossip still on its way tells it so, or, when nobody talks to
    // it any more, it finds the two others unreachable, is the minority side of one and downs
    // itself (keep-majority, the agent's default). Either way it fences.
    assert_fenced(
        &mut target,
        &server,
        "frozen",
        &[
            "removed from the cluster",
            "keep-majority",
            "downed by the cluster",
        ],
    )
    .await;
    for agent in &mut agents {
        agent.kill().await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_the_control_planes_leave_both_exit_0_after_draining() {
    let server = Server::start().await;
    let mut agents = gossip_cluster(&server, "leaving", 3, &["--drain-delay-ms", "500"]).await;
    let mut by_signal = agents.remove(2);
    let mut by_api = agents.remove(1);
    // SIGTERM: live and not ready during the drain delay, then gone with exit 0.
    by_signal.process.signal("TERM");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let live = by_signal.probe("/_troupe/health").await;
        let ready = by_signal.probe("/_troupe/health/ready").await;
        if let (Some((200, _)), Some((503, body))) = (&live, &ready)
            && body["status"] == "draining"
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never draining: {live:?} {ready:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = by_signal.process.wait(WAIT).await;
    assert_eq!(
        status.code(),
        Some(0),
        "{:#?}",
        by_signal.process.stderr_lines()
    );
    // The control plane's Leave, carried out by a member: exit 0 too, never fenced.
    server.operate("leaving", &by_api.address(), "Leave").await;
    let status = by_api.process.wait(WAIT).await;
    assert_eq!(
        status.code(),
        Some(0),
        "{:#?}",
        by_api.process.stderr_lines()
    );
    members_up(&server, "leaving", 1, &by_api.address()).await;
    for gone in [&by_signal, &by_api] {
        let incarnation = gone.incarnation.to_string();
        let nodes = server.nodes("leaving").await;
        let node = nodes
            .iter()
            .find(|n| n["incarnation"] == incarnation.as_str())
            .expect("the control plane knows the incarnation");
        assert_eq!(node["health"], "draining", "{node}");
        assert!(!gone.logged("exiting fenced"));
    }
    for agent in &mut agents {
        agent.kill().await;
    }
    server.stop().await;
}

async fn kube_agent(server: &Server, standin: &StandIn, system: &str) -> Agent {
    let agent = Agent::start(
        server,
        system,
        &args(&[
            "--membership",
            "kubernetes",
            "--kube-api-url",
            &standin.url(),
            "--kube-namespace",
            "default",
            "--membership-ttl-ms",
            "2000",
            "--membership-renew-ms",
            "500",
        ]),
    )
    .await;
    agent.wait_ready().await;
    agent
}

fn lease_name(system: &str, agent: &Agent) -> String {
    format!("{system}-{:016x}", agent.incarnation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_renewal_answered_404_fences_the_agent_which_never_recreates_its_lease() {
    let server = Server::start().await;
    let standin = StandIn::start().await.expect("stand-in API server");
    let mut other = kube_agent(&server, &standin, "kube-404").await;
    let mut agent = kube_agent(&server, &standin, "kube-404").await;
    let lease = lease_name("kube-404", &agent);
    assert!(
        standin.get("default", &lease).is_some(),
        "{:?}",
        standin.names("default")
    );
    agent.relay.pause();
    // The renewal meets 404, as when the Lease was deleted between two renewals.
    standin.inject(&lease, Fault::NotFound);
    assert_fenced(&mut agent, &server, "kube-404", &["404"]).await;
    let creates = standin
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.name.as_deref() == Some(lease.as_str()))
        .count();
    assert!(
        creates <= 1,
        "a fenced host never recreates its Lease ({creates} creates)"
    );
    standin.clear_faults();
    assert!(standin.delete("default", &lease) || standin.get("default", &lease).is_none());
    members_up(&server, "kube-404", 1, &agent.address()).await;
    other.kill().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_kubernetes_lease_fences_the_agent_and_exits_3() {
    let server = Server::start().await;
    let standin = StandIn::start().await.expect("stand-in API server");
    let mut agent = kube_agent(&server, &standin, "kube-deleted").await;
    let lease = lease_name("kube-deleted", &agent);
    agent.relay.pause();
    assert!(standin.delete("default", &lease));
    // The watch or the next renewal (404) notices, whichever comes first.
    assert_fenced(&mut agent, &server, "kube-deleted", &["deleted", "404"]).await;
    assert!(
        standin.get("default", &lease).is_none(),
        "a fenced host never recreates its Lease"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_kubernetes_renewal_deadline_fences_the_agent_and_exits_3() {
    let server = Server::start().await;
    let standin = StandIn::start().await.expect("stand-in API server");
    let mut agent = kube_agent(&server, &standin, "kube-slow").await;
    let lease = lease_name("kube-slow", &agent);
    agent.relay.pause();
    // Every renewal now hangs past the TTL: the host gives up at its local deadline.
    standin.inject(&lease, Fault::Delay(Duration::from_secs(30)));
    assert_fenced(
        &mut agent,
        &server,
        "kube-slow",
        &["renew", "deadline", "no answer"],
    )
    .await;
    server.stop().await;
}

fn etcd_endpoints() -> String {
    std::env::var("TROUPE_TEST_ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2379".into())
}

fn etcdctl(args: &[&str]) -> String {
    let output = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd_endpoints()))
        .args(args)
        .output()
        .expect("run etcdctl (Debian's etcd-client)");
    assert!(output.status.success(), "etcdctl {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_member_whose_key_is_deleted_fences_and_exits_3() {
    let server = Server::start().await;
    let prefix = format!(
        "/troupe-e2e/fencing-{}-{}/",
        std::process::id(),
        free_port()
    );
    let flags = args(&[
        "--membership",
        "etcd",
        "--etcd-endpoints",
        &etcd_endpoints(),
        "--etcd-prefix",
        &prefix,
        "--membership-ttl-ms",
        "3000",
        "--membership-renew-ms",
        "1000",
    ]);
    let mut other = Agent::start(&server, "etcd-deleted", &flags).await;
    let mut agent = Agent::start(&server, "etcd-deleted", &flags).await;
    other.wait_ready().await;
    agent.wait_ready().await;
    let marker = format!("#{}", agent.incarnation);
    let deadline = tokio::time::Instant::now() + WAIT;
    let key = loop {
        let keys = etcdctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("{prefix}members/"),
        ]);
        if let Some(key) = keys.lines().find(|k| k.ends_with(&marker)) {
            break key.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent's member key ({marker}) under {prefix}: {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    agent.relay.pause();
    etcdctl(&["del", &key]);
    assert_fenced(&mut agent, &server, "etcd-deleted", &["etcd membership"]).await;
    members_up(&server, "etcd-deleted", 1, &agent.address()).await;
    other.kill().await;
    etcdctl(&["del", "--prefix", &prefix]);
    server.stop().await;
}
