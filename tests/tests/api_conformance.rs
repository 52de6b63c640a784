//! The control plane's HTTP API against its own OpenAPI document, as users' tools check it:
//! the server and three reporting agents as real processes on 127.0.0.1 (a live cluster
//! behind the API, coordination API on), then the pinned openapi-spec-validator on the
//! served `/api/v1/openapi.json` and a bounded schemathesis run (every check, fixed seed,
//! bounded examples) against the running server: no failure.
//!
//! The tools come from `$TROUPE_VENV` (default /var/tmp/troupe-venv; scripts/test installs
//! scripts/requirements.txt there).
//!
//! Left out of the fuzzing, on purpose: the two server-sent-event streams
//! (`streamEvents`, `streamDomainEvents`). Their 200 answer is a stream that does not end
//! while the server runs, so any request schemathesis makes that succeeds would hang until
//! its timeout; `server/tests/stream.rs` and `server/tests/management.rs` test them,
//! resume included.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e api conformance secret, long enough";
const INGEST: &str = "conformance-ingest";
const ADMIN: &str = "conformance-admin";
const COORDINATION: &str = "conformance-coordination";
/// The read credential: every read operation needs it (or the admin token), so schemathesis
/// also checks that each answers 401 without it (`ignored_auth`).
const VIEWER: &str = "conformance-viewer";
const WAIT: Duration = Duration::from_secs(60);
/// Upper bound of the whole schemathesis run.
const FUZZ_BUDGET: Duration = Duration::from_secs(300);

fn venv_tool(name: &str) -> PathBuf {
    let venv = std::env::var_os("TROUPE_VENV").unwrap_or_else(|| "/var/tmp/troupe-venv".into());
    let tool = PathBuf::from(venv).join("bin").join(name);
    assert!(
        tool.exists(),
        "{} is missing: install the pinned Python tools (`scripts/test` does, or \
         `python3 -m venv $TROUPE_VENV && $TROUPE_VENV/bin/pip install -r scripts/requirements.txt`)",
        tool.display()
    );
    tool
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

async fn start_server(dir: &Path) -> (Process, String) {
    let port = free_port();
    let args = strings(&[
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--sqlite-path",
        dir.join("control-plane.sqlite").to_str().unwrap(),
        "--ingest-token",
        INGEST,
        "--admin-token",
        ADMIN,
        "--coordination-token",
        COORDINATION,
        "--viewer-token",
        VIEWER,
        "--enable-member-operations",
    ]);
    let mut process = Process::start(&binary("troupe-server"), &args);
    let url = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(response) = client.get(format!("{url}/readyz")).send().await
            && response.status().is_success()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "server did not answer"
        );
        process.drain();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (process, url)
}

fn agent_args(port: u16, seed: u16, control_plane: &str) -> Vec<String> {
    strings(&[
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
        INGEST,
        "--report-interval-ms",
        "200",
        "--management-bind",
        "127.0.0.1:0",
    ])
}

async fn wait_up(url: &str, count: usize) {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let members: serde_json::Value = match client
            .get(format!("{url}/api/v1/clusters/e2e/members"))
            .bearer_auth(VIEWER)
            .send()
            .await
        {
            Ok(response) if response.status().is_success() => {
                response.json().await.unwrap_or_default()
            }
            _ => serde_json::Value::Null,
        };
        let up = members["members"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["status"] == "up").count());
        if up == count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} members up never reported: {members:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `tool` with `args` in `dir`; its exit status and combined output.
async fn run(tool: &Path, args: &[String], dir: &Path, budget: Duration) -> (bool, String) {
    let child = tokio::process::Command::new(tool)
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(budget, child)
        .await
        .unwrap_or_else(|_| panic!("{} ran longer than {budget:?}", tool.display()))
        .expect("run the tool");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The schemathesis configuration: each security scheme its own token, and the few narrow
/// exceptions, each with why.
fn config() -> String {
    format!(
        r#"
# Every check. (Set here rather than with `--checks all`, which would override the
# per-operation exceptions below.)
[checks]
enabled = true

[auth.openapi.ingest]
bearer = "{INGEST}"

[auth.openapi.admin]
bearer = "{ADMIN}"

[auth.openapi.coordination]
bearer = "{COORDINATION}"

[auth.openapi.viewer]
bearer = "{VIEWER}"

[auth.openapi.viewerBasic]
username = "schemathesis"
password = "{VIEWER}"

# renew_interval_ms must be at most a third of ttl_ms: a rule between two fields that JSON
# Schema cannot state, so a pair the schema allows may be refused (400, naming the rule).
[[operations]]
include-operation-id = "acquireLease"
checks.positive_data_acceptance.enabled = false

# Exactly one of `router` and `path`: a rule between two query parameters that OpenAPI cannot
# state, so giving both (which the schema allows) is refused (400, naming the rule).
[[operations]]
include-operation-id = "getRouterDepth"
checks.positive_data_acceptance.enabled = false

# A long poll: each answer without a change waits `wait_ms` (default 10 s); waiting 0 keeps
# the run bounded. The bounds of wait_ms are tested in server/tests/coordination.rs.
[[operations]]
include-operation-id = "watchDirectory"
parameters = {{ wait_ms = 0 }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_api_conforms_to_its_openapi_document_under_schemathesis() {
    let dir = std::env::temp_dir().join(format!("troupe-e2e-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = TempDir(dir);
    let (mut server, url) = start_server(&dir.0).await;
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let agent = binary("troupe-agent");
    let mut agents: Vec<Process> = ports
        .iter()
        .map(|&p| Process::start(&agent, &agent_args(p, ports[0], &url)))
        .collect();
    wait_up(&url, 3).await;

    // The document as served, through the validator.
    let document = reqwest::get(format!("{url}/api/v1/openapi.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let file = dir.0.join("openapi.json");
    std::fs::write(&file, &document).unwrap();
    let (ok, output) = run(
        &venv_tool("openapi-spec-validator"),
        &strings(&["--validation-errors", "all", file.to_str().unwrap()]),
        &dir.0,
        Duration::from_secs(60),
    )
    .await;
    assert!(ok, "openapi-spec-validator:\n{output}");

    std::fs::write(dir.0.join("schemathesis.toml"), config()).unwrap();
    let started = Instant::now();
    let (ok, output) = run(
        &venv_tool("schemathesis"),
        &strings(&[
            "--config-file",
            "schemathesis.toml",
            "run",
            &format!("{url}/api/v1/openapi.json"),
            "--url",
            &url,
            "--seed",
            "15",
            "--max-examples",
            "25",
            "--phases",
            "examples,coverage,fuzzing",
            "--generation-database",
            "none",
            "--request-timeout",
            "20",
            // One worker: CPython 3.11's parser is not safe to run from several threads as
            // hypothesis does ("AST constructor recursion depth mismatch").
            "--workers",
            "1",
            "--exclude-operation-id",
            "streamEvents",
            "--exclude-operation-id",
            "streamDomainEvents",
        ]),
        &dir.0,
        FUZZ_BUDGET,
    )
    .await;
    let took = started.elapsed();
    for agent in &mut agents {
        agent.kill().await;
    }
    server.kill().await;
    assert!(ok, "schemathesis found failures ({took:?}):\n{output}");
    eprintln!("schemathesis passed in {took:?}:\n{output}");
}
