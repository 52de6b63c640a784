//! `GET /metrics` as scrapers read it: `promtool check metrics` accepts the text format, the
//! format follows `Accept`, known label values are there at 0, process metrics are there, and
//! HTTP requests are counted per route template, never per raw path.

use std::io::Write;
use std::process::{Command, Stdio};

use actix_web::middleware::from_fn;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use troupe_server::testing::{BatchBuilder, TestSqliteFile};
use troupe_server::{AppState, Config};

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

#[actix_web::test]
async fn promtool_accepts_the_metrics_and_the_format_follows_accept() {
    let file = TestSqliteFile::new();
    let store = file.store().await.unwrap();
    let mut config = Config::defaults();
    config.ingest_token = Some("t".into());
    let state = AppState::new(config, store.clone()).0;
    let app = init_service(
        actix_web::App::new()
            .wrap(from_fn(troupe_server::observe::request))
            .configure(troupe_server::api::configure(state)),
    )
    .await;
    let scrape = |accept: Option<&'static str>| {
        let mut req = TestRequest::get().uri("/metrics");
        if let Some(accept) = accept {
            req = req.insert_header(("accept", accept));
        }
        req.to_request()
    };

    // Before anything happened: every outcome at 0, process metrics, no agent.
    let resp = call_service(&app, scrape(Some("text/plain;version=0.0.4"))).await;
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let fresh = String::from_utf8(read_body(resp).await.to_vec()).unwrap();
    let (ok, said) = promtool(&fresh);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{fresh}");
    assert!(fresh.contains("troupe_ingest_batches_total{outcome=\"rejected\"} 0"));
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            fresh.contains(&format!("\n{name} ")),
            "{name} missing:\n{fresh}"
        );
    }

    let batch = BatchBuilder::new("app", "10.0.0.1:2552", 1)
        .dead_letter(1, "/user/x", "app::Ping")
        .build();
    for (path, body) in [
        ("/api/v1/ingest", Some(&batch)),
        ("/api/v1/clusters/app", None),
        ("/api/v1/clusters/a-name-nobody-uses", None),
        ("/no/such/route/42", None),
    ] {
        let req = match body {
            Some(batch) => TestRequest::post()
                .uri(path)
                .insert_header(("authorization", "Bearer t"))
                .set_json(batch),
            None => TestRequest::get().uri(path),
        };
        let _ = call_service(&app, req.to_request()).await;
    }
    let unauthorized = TestRequest::post()
        .uri("/api/v1/ingest")
        .set_json(&batch)
        .to_request();
    assert_eq!(call_service(&app, unauthorized).await.status(), 401);

    let text = String::from_utf8(
        read_body(call_service(&app, scrape(None)).await)
            .await
            .to_vec(),
    )
    .unwrap();
    let (ok, said) = promtool(&text);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{text}");
    assert!(text.contains("troupe_ingest_batches_total{outcome=\"stored\"} 1"));
    assert!(text.contains("troupe_ingest_batches_total{outcome=\"rejected\"} 1"));
    assert!(text.contains("troupe_ingest_items_total{kind=\"dead_letter\"} 1"));
    assert!(text.contains(
        "troupe_agent_last_report_timestamp_seconds{cluster=\"app\",node=\"10.0.0.1:2552\"}"
    ));
    assert!(text.contains(
        "troupe_http_server_request_duration_seconds_count{method=\"GET\",route=\"/api/v1/clusters/{cluster}\",status=\"404\"} 1"
    ), "{text}");
    assert!(text.contains("route=\"unmatched\",status=\"404\""));
    for raw in ["a-name-nobody-uses", "/no/such/route"] {
        assert!(
            !text.contains(raw),
            "a raw path became a label value: {raw}"
        );
    }

    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let resp = call_service(&app, scrape(Some(prometheus))).await;
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert_eq!(resp.headers().get("vary").unwrap(), "Accept");
    let openmetrics = String::from_utf8(read_body(resp).await.to_vec()).unwrap();
    assert!(openmetrics.ends_with("# EOF\n"));
    assert!(openmetrics.contains("# TYPE troupe_ingest_batches counter\n"));
    assert!(openmetrics.contains("# UNIT troupe_agent_lag_seconds seconds\n"));
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
    store.close().await;
}

/// The real server binary on a throw-away SQLite file, with a short silence limit.
struct ServerProcess {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl ServerProcess {
    fn start(sqlite: &std::path::Path, silence_ms: u64) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_troupe-server"))
            .args(["--listen", "127.0.0.1:0", "--log-json"])
            .args(["--ingest-token", "t", "--retention-days", "0"])
            .args(["--agent-silence-ms", &silence_ms.to_string()])
            .arg("--sqlite-path")
            .arg(sqlite)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start troupe-server");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(log) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(api) = log["api"].as_str()
                {
                    let _ = tx.send(api.to_owned());
                }
            }
        });
        let api = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the server logs its address");
        let addr = api
            .trim_start_matches("http://")
            .trim_end_matches("/api/v1")
            .parse()
            .unwrap();
        Self { child, addr }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `troupe_members{cluster="app",health=…}` of each health in `text`.
fn members_of_app(text: &str) -> std::collections::BTreeMap<String, i64> {
    text.lines()
        .filter_map(|line| line.strip_prefix("troupe_members{cluster=\"app\",health=\""))
        .filter_map(|rest| {
            let (health, value) = rest.split_once("\"} ")?;
            Some((health.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

fn scrape(http: &mut troupe_server::testing::HttpClient) -> String {
    let resp = http.request("GET", "/metrics", None, b"").unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body);
    let (ok, said) = promtool(&resp.body);
    assert!(
        ok && said.trim().is_empty(),
        "promtool: {said}\n{}",
        resp.body
    );
    resp.body
}

/// Scrapes until `want` holds of the `app` counts, for at most `within`; the counts then.
fn scrape_until(
    http: &mut troupe_server::testing::HttpClient,
    within: std::time::Duration,
    want: impl Fn(&std::collections::BTreeMap<String, i64>) -> bool,
) -> std::collections::BTreeMap<String, i64> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let counts = members_of_app(&scrape(http));
        if want(&counts) {
            return counts;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {within:?}: {counts:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn count(counts: &std::collections::BTreeMap<String, i64>, health: &str) -> i64 {
    counts.get(health).copied().unwrap_or(-1)
}

#[test]
fn troupe_members_counts_members_by_health_after_real_ingest_and_turns_unknown_when_an_agent_goes_silent()
 {
    use std::time::{Duration, Instant};
    use troupe_protocol::{AgentHealth, EventBody, HealthChange, MemberStatus};

    let file = TestSqliteFile::new();
    let silence_ms = 3_000;
    let server = ServerProcess::start(file.path(), silence_ms);
    let mut http = troupe_server::testing::HttpClient::new(server.addr);
    let now = || chrono::Utc::now().timestamp_millis();
    let (a, b, c) = ("10.0.0.1:2552", "10.0.0.2:2552", "10.0.0.3:2552");
    let mut ingest = |batch: troupe_protocol::ReportBatch| {
        let body = serde_json::to_vec(&batch).unwrap();
        let resp = http
            .request("POST", "/api/v1/ingest", Some("t"), &body)
            .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.body);
    };
    let ready = |node: &str, t: i64| {
        let health = HealthChange {
            health: AgentHealth::Ready,
            reason: None,
        };
        BatchBuilder::new("app", node, 1).event(t, EventBody::AgentHealthChanged(health))
    };
    let t = now();
    // a sees all three up and c unreachable; every agent says it is ready.
    let mut first = ready(a, t);
    for node in [a, b, c] {
        first = first.member(t, EventBody::MemberUp, node, MemberStatus::Up, &[]);
    }
    ingest(
        first
            .member(t, EventBody::MemberUnreachable, c, MemberStatus::Up, &[])
            .sent_at(t)
            .build(),
    );
    let b_last_report = Instant::now();
    ingest(ready(b, t).sent_at(t).build());
    ingest(ready(c, t).sent_at(t).build());

    let mut http = troupe_server::testing::HttpClient::new(server.addr);
    let counts = scrape_until(&mut http, Duration::from_secs(5), |c| {
        count(c, "ready") == 2 && count(c, "unreachable") == 1
    });
    assert_eq!(counts.len(), 10, "every health is exported: {counts:?}");
    for health in [
        "joining", "up", "starting", "draining", "fenced", "leaving", "down", "unknown",
    ] {
        assert_eq!(count(&counts, health), 0, "{health}: {counts:?}");
    }

    // a keeps reporting; b and c go silent. c stays unreachable (that comes first), b turns
    // unknown once it has sent nothing for the silence limit, within one sweep (1 s) more.
    let mut ingest = {
        let mut http = troupe_server::testing::HttpClient::new(server.addr);
        move |batch: troupe_protocol::ReportBatch| {
            let body = serde_json::to_vec(&batch).unwrap();
            let resp = http
                .request("POST", "/api/v1/ingest", Some("t"), &body)
                .unwrap();
            assert_eq!(resp.status, 200, "{}", resp.body);
        }
    };
    let mut sequence = 1;
    let deadline = Instant::now() + Duration::from_secs(15);
    let turned = loop {
        sequence += 1;
        ingest(BatchBuilder::new("app", a, sequence).sent_at(now()).build());
        let counts = members_of_app(&scrape(&mut http));
        if count(&counts, "unknown") == 1 {
            break (b_last_report.elapsed(), counts);
        }
        assert_eq!(
            count(&counts, "ready"),
            2,
            "b is ready until silent: {counts:?}"
        );
        assert!(
            Instant::now() < deadline,
            "b never turned unknown: {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let (after, counts) = turned;
    assert!(
        after >= Duration::from_millis(silence_ms),
        "unknown only past the silence limit, not after {after:?}"
    );
    assert!(
        after < Duration::from_millis(silence_ms) + Duration::from_secs(3),
        "unknown within a sweep of the limit, not after {after:?}"
    );
    assert_eq!(
        (count(&counts, "ready"), count(&counts, "unreachable")),
        (1, 1),
        "{counts:?}"
    );

    // b reports again: ready again, on ingest (not waiting for the silence sweep).
    ingest(BatchBuilder::new("app", b, 2).sent_at(now()).build());
    scrape_until(&mut http, Duration::from_millis(900), |c| {
        count(c, "ready") == 2 && count(c, "unknown") == 0
    });
}
