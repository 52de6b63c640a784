//! Issue 14: a member whose agent went silent (no report for longer than `--agent-silence-ms`)
//! is shown with health `unknown`, not what it last said (`ready`), in the API (members, one
//! member, nodes), the live stream's opening state and the dashboard (overview and node page);
//! decided when read from the last report time, so the agent's next report shows its real
//! health again. Every test runs on PostgreSQL and SQLite.
//!
//! Last report times are set by ingesting through the store with a chosen receive time; the
//! request is then served at the real clock, so the boundary is checked a second either side
//! of the limit (the exact millisecond is `AgentRow::silent_at`'s unit test).

use actix_web::http::StatusCode;
use actix_web::test::{TestRequest, call_service, init_service, read_body};
use serde_json::Value;
use troupe_protocol::{AgentHealth, EventBody, HealthChange, MemberStatus, ReportBatch};
use troupe_server::store::Store;
use troupe_server::testing::BatchBuilder;
use troupe_server::{AppState, Config};

const INGEST: &str = "ingest-secret";

troupe_server::on_every_store!(
    a_silent_agent_is_unknown_everywhere_until_it_reports_again,
    silence_starts_only_past_the_limit,
);

fn state(store: Store, silence_ms: u64) -> AppState {
    let mut config = Config::defaults();
    config.ingest_token = Some(INGEST.to_owned());
    config.agent_silence_ms = silence_ms;
    AppState::new(config, store).0
}

macro_rules! service {
    ($state:expr) => {
        init_service(
            actix_web::App::new()
                .configure(troupe_server::api::configure($state))
                .configure(troupe_server::ui::configure),
        )
        .await
    };
}

/// GETs `uri`, asserting 200; the body as text.
macro_rules! get_text {
    ($app:expr, $uri:expr) => {{
        let resp = call_service(&$app, TestRequest::get().uri(&$uri).to_request()).await;
        assert_eq!(resp.status(), StatusCode::OK, "GET {}", $uri);
        String::from_utf8(read_body(resp).await.to_vec()).unwrap()
    }};
}

macro_rules! get_json {
    ($app:expr, $uri:expr) => {{
        let text = get_text!($app, $uri);
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }};
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Agent `node`'s first batch: it is up and ready.
fn ready_batch(node: &str, t: i64) -> ReportBatch {
    BatchBuilder::new("app", node, 1)
        .member(t, EventBody::MemberUp, node, MemberStatus::Up, &[])
        .event(
            t + 1,
            EventBody::AgentHealthChanged(HealthChange {
                health: AgentHealth::Ready,
                reason: None,
            }),
        )
        .sent_at(t + 2)
        .build()
}

/// The `(health, reported_health)` of `node`'s agent in a members answer.
fn member_health(members: &Value, node: &str) -> (String, String) {
    let member = members["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node"] == node)
        .unwrap_or_else(|| panic!("no member {node} in {members}"));
    let agent = &member["agent"];
    (
        agent["health"].as_str().unwrap_or("null").to_owned(),
        agent["reported_health"]
            .as_str()
            .unwrap_or("null")
            .to_owned(),
    )
}

/// The `(health, reported_health)` of `node` in a nodes answer.
fn node_health(nodes: &Value, node: &str) -> (String, String) {
    let agent = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["node"] == node)
        .unwrap_or_else(|| panic!("no node {node} in {nodes}"));
    (
        agent["health"].as_str().unwrap_or("null").to_owned(),
        agent["reported_health"]
            .as_str()
            .unwrap_or("null")
            .to_owned(),
    )
}

fn pair(health: &str, reported: &str) -> (String, String) {
    (health.to_owned(), reported.to_owned())
}

/// The live stream's opening `CurrentClusterState` frame of cluster `app`, as JSON.
async fn opening_state<S>(app: &S) -> Value
where
    S: actix_web::dev::Service<
            actix_http::Request,
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
        >,
{
    let resp = call_service(
        app,
        TestRequest::get()
            .uri("/api/v1/events/stream?cluster=app&snapshot=true")
            .to_request(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK, "stream");
    let mut body = resp.into_body();
    let mut text = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(start) = text.find("event: CurrentClusterState")
            && let Some(data) = text[start..].find("data: ")
            && let Some(end) = text[start + data..].find('\n')
        {
            let line = &text[start + data + "data: ".len()..start + data + end];
            return serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no CurrentClusterState within 10 s: {text}"
        );
        let chunk = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            std::future::poll_fn(|cx| {
                actix_web::body::MessageBody::poll_next(std::pin::Pin::new(&mut body), cx)
            }),
        )
        .await
        .expect("a frame within 10 s")
        .expect("the stream stays open")
        .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

async fn a_silent_agent_is_unknown_everywhere_until_it_reports_again(store: Store) {
    let silence = 15_000;
    let app = service!(state(store.clone(), silence));
    let (quiet, talking) = ("10.0.0.1:2552", "10.0.0.2:2552");
    let t = now();
    // The quiet agent's last report arrived a minute ago; the other's just now.
    store
        .ingest(&ready_batch(quiet, t - 60_000), t - 60_000)
        .await
        .unwrap();
    store.ingest(&ready_batch(talking, t), t).await.unwrap();

    let members = get_json!(app, "/api/v1/clusters/app/members");
    assert_eq!(member_health(&members, quiet), pair("unknown", "ready"));
    assert_eq!(member_health(&members, talking), pair("ready", "ready"));
    let one = get_json!(app, format!("/api/v1/clusters/app/members/{quiet}"));
    assert_eq!(one["agent"]["health"], "unknown");
    let nodes = get_json!(app, "/api/v1/clusters/app/nodes");
    assert_eq!(node_health(&nodes, quiet), pair("unknown", "ready"));
    assert_eq!(node_health(&nodes, talking), pair("ready", "ready"));
    let opening = opening_state(&app).await;
    assert_eq!(
        member_health(&opening, quiet),
        pair("unknown", "ready"),
        "{opening}"
    );
    assert_eq!(member_health(&opening, talking), pair("ready", "ready"));

    // The dashboard: the overview's member rows and each node page.
    let overview = get_text!(app, "/ui/?cluster=app");
    let row = |node: &str| {
        let start = overview
            .find(&format!("<tr data-member=\"{node}\""))
            .unwrap_or_else(|| panic!("no row for {node}: {overview}"));
        let end = overview[start..].find("</tr>").unwrap() + start;
        overview[start..end].to_owned()
    };
    assert!(
        row(quiet).contains(r#"<span class="badge idle">unknown</span>"#),
        "{}",
        row(quiet)
    );
    assert!(!row(quiet).contains(">ready<"), "{}", row(quiet));
    assert!(
        row(talking).contains(r#"<span class="badge ok">ready</span>"#),
        "{}",
        row(talking)
    );
    let quiet_page = get_text!(app, format!("/ui/node?cluster=app&node={quiet}"));
    assert!(quiet_page.contains(r#"<span class="badge idle">unknown</span>"#));
    assert!(!quiet_page.contains(">ready<"), "{quiet_page}");
    let talking_page = get_text!(app, format!("/ui/node?cluster=app&node={talking}"));
    assert!(talking_page.contains(r#"<span class="badge ok">ready</span>"#));
    assert!(!talking_page.contains(">unknown<"), "{talking_page}");

    // A heartbeat (an empty batch) from the quiet agent: its real health is back.
    let heartbeat = BatchBuilder::new("app", quiet, 2).sent_at(now()).build();
    let resp = call_service(
        &app,
        TestRequest::post()
            .uri("/api/v1/ingest")
            .insert_header(("content-type", "application/json"))
            .insert_header(("authorization", format!("Bearer {INGEST}")))
            .set_payload(serde_json::to_vec(&heartbeat).unwrap())
            .to_request(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK, "heartbeat");
    let members = get_json!(app, "/api/v1/clusters/app/members");
    assert_eq!(member_health(&members, quiet), pair("ready", "ready"));
    let overview = get_text!(app, "/ui/?cluster=app");
    assert!(!overview.contains(">unknown<"), "{overview}");
}

async fn silence_starts_only_past_the_limit(store: Store) {
    let silence: i64 = 60_000;
    let app = service!(state(store.clone(), silence as u64));
    let (inside, past) = ("10.0.0.1:2552", "10.0.0.2:2552");
    let t = now();
    // One second inside the limit and one second past it (the request runs well within it).
    store
        .ingest(
            &ready_batch(inside, t - silence + 1_000),
            t - silence + 1_000,
        )
        .await
        .unwrap();
    store
        .ingest(&ready_batch(past, t - silence - 1_000), t - silence - 1_000)
        .await
        .unwrap();
    let members = get_json!(app, "/api/v1/clusters/app/members");
    assert!(
        now() - t < 1_000,
        "the check took over a second: the margins no longer hold"
    );
    assert_eq!(member_health(&members, inside), pair("ready", "ready"));
    assert_eq!(member_health(&members, past), pair("unknown", "ready"));

    // The same history read with a longer limit: nobody is silent (computed when read).
    let patient = service!(state(store.clone(), silence as u64 * 2));
    let members = get_json!(patient, "/api/v1/clusters/app/members");
    assert_eq!(member_health(&members, inside), pair("ready", "ready"));
    assert_eq!(member_health(&members, past), pair("ready", "ready"));
}
