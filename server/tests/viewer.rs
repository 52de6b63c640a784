//! The read credential on the real `troupe-server` binary: with `--viewer-token` every
//! dashboard page, API read and the live stream answer 401 with `WWW-Authenticate` without it
//! and 200 with it (Bearer, Basic password, or the admin token); the trusted proxy header
//! counts from its stated sources only; probes, metrics and the document stay open; and a
//! non-loopback listener without a read credential refuses to start, naming the flags.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use reqwest::StatusCode;
use troupe_protocol::{EventBody, MemberStatus};
use troupe_server::testing::{BatchBuilder, TestSqliteFile};

const INGEST: &str = "viewer-test-ingest";
const VIEWER: &str = "viewer-test-viewer";
const ADMIN: &str = "viewer-test-admin";

#[path = "support/server_process.rs"]
mod server_process;

/// A running server on its own SQLite file.
struct ServerProcess {
    process: server_process::ServerProcess,
    _file: TestSqliteFile,
}

impl ServerProcess {
    fn start(extra: &[&str]) -> Self {
        let file = TestSqliteFile::new();
        let mut command = server_process::ServerProcess::command();
        command
            .args(["--ingest-token", INGEST, "--admin-token", ADMIN])
            .args(["--retention-days", "0"])
            .arg("--sqlite-path")
            .arg(file.path())
            .args(extra)
            .env_remove("TROUPE_VIEWER_TOKEN");
        Self {
            process: server_process::ServerProcess::spawn(command),
            _file: file,
        }
    }

    fn url(&self, path: &str) -> String {
        self.process.url(path)
    }
}

/// Every read surface: dashboard pages and assets, API reads, the live stream, and the
/// Akka-management reads.
const READS: &[&str] = &[
    "/ui/",
    "/ui/?cluster=app",
    "/ui/timeline?cluster=app",
    "/ui/singletons?cluster=app",
    "/ui/routers?cluster=app",
    "/ui/dead-letters?cluster=app",
    "/ui/node?cluster=app&node=a%3A1",
    "/api/v1/clusters",
    "/api/v1/clusters/app",
    "/api/v1/clusters/app/members",
    "/api/v1/clusters/app/nodes",
    "/api/v1/clusters/app/events",
    "/api/v1/clusters/app/dead-letters",
    "/api/v1/clusters/app/singletons",
    "/api/v1/clusters/app/routers",
    "/api/v1/events/stream",
    "/management/app/cluster/members",
];

/// Routes answered without a read credential.
const OPEN: &[&str] = &["/livez", "/readyz", "/metrics", "/api/v1/openapi.json"];

async fn ingest_one_cluster(client: &reqwest::Client, server: &ServerProcess) {
    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(1, EventBody::MemberUp, "a:1", MemberStatus::Up, &[])
        .build();
    let response = client
        .post(server.url("/api/v1/ingest"))
        .bearer_auth(INGEST)
        .json(&batch)
        .send()
        .await
        .unwrap();
    // Ingest has its own token and is not behind the read credential.
    assert_eq!(response.status(), StatusCode::OK, "ingest");
}

/// The status of `GET path` (headers only: the live stream's body never ends).
async fn get(
    client: &reqwest::Client,
    server: &ServerProcess,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client.get(server.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn assert_refused(response: reqwest::Response, what: &str) {
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
    let challenges: Vec<&str> = response
        .headers()
        .get_all("www-authenticate")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert!(
        challenges.iter().any(|c| c.starts_with("Basic realm=")),
        "{what}: no Basic challenge in {challenges:?}"
    );
    assert!(
        challenges.iter().any(|c| c.starts_with("Bearer")),
        "{what}: no Bearer challenge in {challenges:?}"
    );
    let body = response.text().await.unwrap();
    assert!(
        !body.contains("a:1") && !body.contains("\"app\""),
        "{what}: a refusal shows data: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_viewer_token_every_read_answers_401_without_it_and_200_with_it() {
    let server = ServerProcess::start(&["--viewer-token", VIEWER]);
    let client = client();
    ingest_one_cluster(&client, &server).await;

    // "viewer:<token>" and "someone:<admin token>", base64.
    let basic_viewer = "Basic dmlld2VyOnZpZXdlci10ZXN0LXZpZXdlcg==";
    let basic_admin = "Basic c29tZW9uZTp2aWV3ZXItdGVzdC1hZG1pbg==";
    let bearer_viewer = format!("Bearer {VIEWER}");
    let bearer_admin = format!("Bearer {ADMIN}");
    for path in READS.iter().chain(&["/", "/ui", "/ui/assets/nope.js"]) {
        assert_refused(get(&client, &server, path, &[]).await, path).await;
        for wrong in [
            format!("Bearer {INGEST}"),
            "Bearer viewer-test-viewe".to_owned(),
            // "viewer-test-viewer:x": the token as the user name.
            "Basic dmlld2VyLXRlc3Qtdmlld2VyOng=".to_owned(),
        ] {
            let response = get(&client, &server, path, &[("Authorization", &wrong)]).await;
            assert_refused(response, &format!("{path} with {wrong}")).await;
        }
        // The proxy header from an untrusted source (no --trusted-proxy-header at all).
        let response = get(&client, &server, path, &[("X-Forwarded-User", "mallory")]).await;
        assert_refused(response, &format!("{path} with a proxy header")).await;
    }
    for path in READS {
        for credential in [&bearer_viewer, &bearer_admin, basic_viewer, basic_admin] {
            let response = get(&client, &server, path, &[("Authorization", credential)]).await;
            assert_eq!(
                response.status(),
                StatusCode::OK,
                "{path} with {credential}"
            );
            if *path == "/api/v1/events/stream" {
                assert_eq!(
                    response.headers()["content-type"],
                    "text/event-stream",
                    "the stream is open"
                );
            }
        }
    }
    for path in OPEN {
        let response = get(&client, &server, path, &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "{path} stays open");
    }
    // Member operations pass the gate with the admin token and are then checked for it.
    let response = client
        .put(server.url("/api/v1/clusters/app/members/a:1"))
        .bearer_auth(VIEWER)
        .json(&serde_json::json!({ "operation": "leave" }))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::UNAUTHORIZED,
        "the viewer token is not the admin token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trusted_proxy_header_counts_only_from_the_stated_sources() {
    let client = client();
    // The test connects from 127.0.0.1: inside the first server's range, outside the second's.
    let trusted = ServerProcess::start(&[
        "--trusted-proxy-header",
        "X-Forwarded-User",
        "--trusted-proxy-cidrs",
        "10.0.0.0/8,127.0.0.1/32",
    ]);
    let untrusted = ServerProcess::start(&[
        "--trusted-proxy-header",
        "X-Forwarded-User",
        "--trusted-proxy-cidrs",
        "192.0.2.0/24",
    ]);
    ingest_one_cluster(&client, &trusted).await;
    ingest_one_cluster(&client, &untrusted).await;
    for path in READS {
        let response = get(&client, &trusted, path, &[("X-Forwarded-User", "alice")]).await;
        assert_eq!(response.status(), StatusCode::OK, "{path} via the proxy");
        assert_refused(get(&client, &trusted, path, &[]).await, path).await;
        let response = get(&client, &trusted, path, &[("X-Forwarded-User", "")]).await;
        assert_refused(response, &format!("{path} with an empty user")).await;

        let response = get(&client, &untrusted, path, &[("X-Forwarded-User", "alice")]).await;
        assert_refused(response, &format!("{path} from an untrusted source")).await;
        // The admin token still works there.
        let response = get(
            &client,
            &untrusted,
            path,
            &[("Authorization", &format!("Bearer {ADMIN}"))],
        )
        .await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{path} with the admin token"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_viewer_credential_a_loopback_listener_serves_reads_to_anyone() {
    let server = ServerProcess::start(&[]);
    let client = client();
    ingest_one_cluster(&client, &server).await;
    for path in READS {
        let response = get(&client, &server, path, &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
}

/// Runs the server on `listen` with `extra` until it exits (or 30 s pass): its status and stderr.
fn run_to_exit(listen: &str, extra: &[&str]) -> (Option<std::process::ExitStatus>, String) {
    let file = TestSqliteFile::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_troupe-server"))
        .args(["--listen", listen, "--ingest-token", INGEST])
        .arg("--sqlite-path")
        .arg(file.path())
        .args(extra)
        .env_remove("DATABASE_URL")
        .env_remove("TROUPE_VIEWER_TOKEN")
        .env_remove("TROUPE_ALLOW_ANONYMOUS_READ")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start troupe-server");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        while let Ok(line) = rx.try_recv() {
            log.push_str(&line);
            log.push('\n');
        }
        if log.contains("troupe control plane listening") || std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(100));
    while let Ok(line) = rx.try_recv() {
        log.push_str(&line);
        log.push('\n');
    }
    (status, log)
}

#[test]
fn a_non_loopback_listener_without_a_read_credential_refuses_to_start_naming_the_flags() {
    let (status, log) = run_to_exit("0.0.0.0:0", &[]);
    let status = status.unwrap_or_else(|| panic!("the server started:\n{log}"));
    assert!(!status.success(), "{log}");
    for flag in [
        "--viewer-token",
        "TROUPE_VIEWER_TOKEN",
        "--trusted-proxy-header",
        "--trusted-proxy-cidrs",
        "--allow-anonymous-read",
        "not a loopback address",
    ] {
        assert!(log.contains(flag), "{flag} missing from:\n{log}");
    }

    // With a viewer token it starts there.
    let (status, log) = run_to_exit("0.0.0.0:0", &["--viewer-token", VIEWER]);
    assert!(
        status.is_none(),
        "did not start with a viewer token:\n{log}"
    );

    // The explicit opt-out starts, and says loudly what it means.
    let (status, log) = run_to_exit("0.0.0.0:0", &["--allow-anonymous-read"]);
    assert!(status.is_none(), "did not start with the opt-out:\n{log}");
    assert!(
        log.contains("WARN") && log.contains("readable by ANYONE"),
        "the opt-out is not logged loudly:\n{log}"
    );
}
