//! The real `troupe-agent` binary's `/metrics` as scrapers read it: `promtool check metrics`
//! accepts what a plain scrape gets (text 0.0.4) on a two-node cluster running the demo
//! workload (singleton, router, dead letters, cluster transport); `Accept:
//! application/openmetrics-text` gets OpenMetrics 1.0.0 with the same samples; closed label
//! sets are there at 0 before anything happened; the `process_*` metrics are there.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const SECRET: &str = "metrics test secret, long enough";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running agent, killed if the test fails first.
struct AgentProcess {
    child: Child,
    management: String,
}

impl AgentProcess {
    fn start(port: u16, seed: u16) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_troupe-agent"))
            .args(["--system", "metrics", "--secret", SECRET, "--demo"])
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--seed", &format!("troupe://metrics@127.0.0.1:{seed}")])
            .args(["--management-bind", "127.0.0.1:0", "--events-json"])
            .env_remove("TROUPE_CONTROL_PLANE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start troupe-agent");
        let mut first = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        std::thread::spawn(move || for _ in stdout.lines() {});
        let line: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(line["event"], "AgentStarted", "{first}");
        let management = line["management"].as_str().unwrap().to_owned();
        Self { child, management }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `promtool check metrics` on `text`: its exit status and what it printed.
fn promtool(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/test installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// The value of the sample `series` (name with labels, exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// One scrape: content type, `Vary`, body.
async fn scrape(
    client: &reqwest::Client,
    agent: &AgentProcess,
    accept: Option<&str>,
) -> (String, String, String) {
    let mut request = client.get(format!("{}/metrics", agent.management));
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.expect("scrape /metrics");
    assert_eq!(response.status(), 200);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (content_type, vary) = (header("content-type"), header("vary"));
    (content_type, vary, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_each_agents_metrics_and_the_format_follows_accept() {
    let client = reqwest::Client::new();
    let (first_port, second_port) = (free_port(), free_port());
    let first = AgentProcess::start(first_port, first_port);

    // Before the cluster formed: closed label sets are already there, at 0.
    let (content_type, vary, fresh) = scrape(&client, &first, None).await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert_eq!(vary, "Accept");
    let (ok, said) = promtool(&fresh);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{fresh}");
    for series in [
        r#"troupe_agent_transport_handshakes_total{outcome="rejected"}"#,
        r#"troupe_agent_reporter_dropped_total{kind="dead_letter"}"#,
        r#"troupe_agent_reporter_buffer_items{kind="event"}"#,
        r#"troupe_agent_dead_letters_total{reason="mailbox_full"}"#,
        r#"troupe_agent_members{status="exiting"}"#,
        r#"troupe_agent_health{state="fenced"}"#,
        r#"troupe_agent_transport_connections_closed_total{reason="evicted"}"#,
        r#"troupe_agent_wire_extension_records_total{outcome="skipped"}"#,
    ] {
        assert_eq!(sample(&fresh, series), Some(0.0), "{series}:\n{fresh}");
    }
    for series in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_threads",
        "process_start_time_seconds",
    ] {
        assert!(
            sample(&fresh, series).is_some_and(|v| v >= 0.0),
            "{series}:\n{fresh}"
        );
    }
    assert!(sample(&fresh, "process_resident_memory_bytes").unwrap() > 0.0);

    // A second node joins and the demo workload runs on both: every family that fills with
    // traffic (members, handshakes, singleton series, router depths) still passes.
    let second = AgentProcess::start(second_port, first_port);
    let deadline = tokio::time::Instant::now() + WAIT;
    let busy = loop {
        let (_, _, text) = scrape(&client, &first, None).await;
        let up = sample(&text, r#"troupe_agent_members{status="up"}"#);
        let singleton = text.contains("troupe_agent_singleton_hosting{");
        let handshakes = sample(
            &text,
            r#"troupe_agent_transport_handshakes_total{outcome="ok"}"#,
        );
        if up == Some(2.0) && singleton && handshakes.is_some_and(|v| v >= 1.0) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cluster never formed with the demo running; last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (ok, said) = promtool(&busy);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{busy}");
    let (_, _, other) = scrape(&client, &second, Some("text/plain;version=0.0.4")).await;
    let (ok, said) = promtool(&other);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{other}");

    // What Prometheus sends: OpenMetrics, ending in `# EOF`, with the same counter samples.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (content_type, vary, om) = scrape(&client, &first, Some(prometheus)).await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert_eq!(vary, "Accept");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        om.contains("# TYPE troupe_agent_dead_letters counter\n"),
        "OpenMetrics names a counter by its family:\n{om}"
    );
    assert!(om.contains("troupe_agent_dead_letters_total{reason=\"mailbox_full\"} 0"));
    assert!(!busy.contains("# EOF"));
    assert!(busy.contains("# TYPE troupe_agent_dead_letters_total counter\n"));
    drop(second);
    drop(first);
}
