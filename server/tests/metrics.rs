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
