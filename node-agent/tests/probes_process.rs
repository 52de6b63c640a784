//! The real `troupe-agent` binary's probes over HTTP through its life: 503 on both while it
//! waits for its seed, ready once joined, live-but-not-ready (with `Connection: close`) while it
//! drains after SIGTERM, then gone.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const SECRET: &str = "probe test secret, long enough";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running agent, killed if the test fails first.
struct AgentProcess(Child, String);

impl AgentProcess {
    fn start(port: u16, seed: u16, management: u16) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_troupe-agent"))
            .args(["--system", "probes", "--secret", SECRET])
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--seed", &format!("troupe://probes@127.0.0.1:{seed}")])
            .args(["--management-bind", &format!("127.0.0.1:{management}")])
            .args(["--drain-delay-ms", "2000", "--events-json"])
            .env_remove("TROUPE_CONTROL_PLANE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start troupe-agent");
        // The first line says where the management listener is.
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        // Keep reading the event lines so the agent never writes into a closed pipe.
        std::thread::spawn(move || for _ in stdout.lines() {});
        let line: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(line["event"], "AgentStarted", "{first}");
        let url = line["management"].as_str().unwrap().to_owned();
        if management != 0 {
            assert_eq!(url, format!("http://127.0.0.1:{management}"));
        }
        Self(child, url)
    }

    /// The management port it reported.
    fn management_port(&self) -> u16 {
        self.1.rsplit(':').next().unwrap().parse().unwrap()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Answer {
    status: u16,
    body: serde_json::Value,
    closes: bool,
}

async fn probe(client: &reqwest::Client, management: u16, path: &str) -> Option<Answer> {
    let response = client
        .get(format!("http://127.0.0.1:{management}{path}"))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let closes = response
        .headers()
        .get("connection")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let body = response.json().await.ok()?;
    Some(Answer {
        status,
        body,
        closes,
    })
}

/// Probe `path` until `want` holds; panics with `what` after [`WAIT`].
async fn until(
    client: &reqwest::Client,
    management: u16,
    path: &str,
    what: &str,
    want: impl Fn(&Answer) -> bool,
) -> Answer {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(answer) = probe(client, management, path).await
            && want(&answer)
        {
            return answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_over_http_from_waiting_for_a_seed_to_sigterm_draining() {
    let client = reqwest::Client::new();
    let (seed_port, port, management) = (free_port(), free_port(), free_port());
    // Its seed is not up yet: the agent is started but not a member.
    let mut agent = AgentProcess::start(port, seed_port, management);
    let live = until(
        &client,
        management,
        "/_troupe/health",
        "listener up",
        |_| true,
    )
    .await;
    assert_eq!(live.status, 503, "{}", live.body);
    assert_eq!(live.body["status"], "starting");
    let ready = probe(&client, management, "/_troupe/health/ready")
        .await
        .unwrap();
    assert_eq!(
        (ready.status, ready.body["status"].clone()),
        (503, "starting".into())
    );
    assert!(!ready.closes, "keep-alive until shutdown begins");

    // The seed comes up; the agent joins and becomes ready.
    let seed = AgentProcess::start(seed_port, seed_port, 0);
    until(&client, management, "/_troupe/health/ready", "ready", |a| {
        a.status == 200
    })
    .await;
    // The seed's management port was picked for it and printed on its first line.
    until(
        &client,
        seed.management_port(),
        "/_troupe/health/ready",
        "seed ready",
        |a| a.status == 200,
    )
    .await;
    let live = probe(&client, management, "/_troupe/health").await.unwrap();
    assert_eq!(
        (live.status, live.body["status"].clone()),
        (200, "ok".into())
    );

    // SIGTERM: live, not ready, connections closed after each answer.
    let status = Command::new("kill")
        .args(["-TERM", &agent.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let ready = until(
        &client,
        management,
        "/_troupe/health/ready",
        "draining",
        |a| a.status == 503,
    )
    .await;
    assert_eq!(ready.body["status"], "draining");
    assert!(ready.closes, "Connection: close from stop-begin on");
    let live = probe(&client, management, "/_troupe/health").await.unwrap();
    assert_eq!(
        live.status, 200,
        "a draining host stays live: {}",
        live.body
    );
    assert_eq!(live.body["state"], "draining");
    assert!(live.closes);

    // It leaves and exits cleanly; the listener is gone.
    let deadline = std::time::Instant::now() + WAIT;
    let exit = loop {
        if let Some(exit) = agent.0.try_wait().unwrap() {
            break exit;
        }
        assert!(std::time::Instant::now() < deadline, "agent did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit}");
    assert!(
        probe(&client, management, "/_troupe/health")
            .await
            .is_none()
    );
}

#[test]
fn help_lists_the_management_options_and_defaults() {
    let output = Command::new(env!("CARGO_BIN_EXE_troupe-agent"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for needle in [
        "--management-bind",
        "env: TROUPE_MANAGEMENT_BIND",
        "[default: 127.0.0.1:8558]",
        "--drain-delay-ms",
        "env: TROUPE_DRAIN_DELAY_MS",
    ] {
        assert!(
            help.contains(needle),
            "{needle} missing from --help: {help}"
        );
    }
}
