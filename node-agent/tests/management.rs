//! The management listener over real HTTP: `/metrics` after real dead letters, a membership
//! change, queued mailboxes and reporter traffic; the health probes through the agent's life,
//! fencing included; the reporter's drop counters. The stand-in control plane speaks the real
//! ingest wire format (ReportBatch JSON in, IngestAck out).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use troupe::{Actor, ActorError, Context, Props};
use troupe_agent::reporter::buffer::BufferLimits;
use troupe_agent::reporter::{self, ReporterSettings};
use troupe_agent::{Agent, AgentConfig};
use troupe_protocol::{AgentHealth, EventBody, IngestAck, ReportBatch};
use troupe_telemetry::Exposition;

const WAIT: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Received {
    batches: Mutex<Vec<ReportBatch>>,
    /// Answer 503 to this many more requests.
    refuse: AtomicUsize,
}

impl Received {
    fn health_reports(&self) -> Vec<AgentHealth> {
        self.batches
            .lock()
            .iter()
            .flat_map(|b| b.events.iter())
            .filter_map(|e| match &e.body {
                EventBody::AgentHealthChanged(change) => Some(change.health),
                _ => None,
            })
            .collect()
    }
}

async fn ingest(body: web::Json<ReportBatch>, received: web::Data<Arc<Received>>) -> HttpResponse {
    if received
        .refuse
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        return HttpResponse::ServiceUnavailable().finish();
    }
    let batch = body.into_inner();
    let ack = IngestAck {
        sequence: batch.sequence,
        duplicate: false,
        stored_events: batch.events.len() as u64,
        operations: Vec::new(),
    };
    received.batches.lock().push(batch);
    HttpResponse::Ok().json(ack)
}

/// A stand-in control plane on its own thread; returns its base URL.
fn control_plane(received: Arc<Received>) -> (String, actix_web::dev::ServerHandle) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(web::Data::new(Arc::clone(&received)))
                    .route("/api/v1/ingest", web::post().to(ingest))
            })
            .workers(1)
            .bind(("127.0.0.1", 0))
            .expect("bind the stand-in");
            let addr = server.addrs()[0];
            let server = server.run();
            tx.send((format!("http://{addr}"), server.handle()))
                .expect("hand out the handle");
            let _ = server.await;
        });
    });
    rx.recv().expect("stand-in started")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(port: u16, seed: u16, control_plane: Option<&str>) -> AgentConfig {
    let mut config = AgentConfig::new(
        "mgmt",
        format!("127.0.0.1:{port}").parse().unwrap(),
        "management test secret, long enough",
    );
    config.seeds = vec![format!("troupe://mgmt@127.0.0.1:{seed}").parse().unwrap()];
    config.control_plane = control_plane.map(ToOwned::to_owned);
    config.ingest_token = "test-token".into();
    config.report_interval_ms = 50;
    config
}

/// The value of the sample `series` (name with labels, exactly as exposed), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

async fn scrape(client: &reqwest::Client, agent: &Agent) -> String {
    let response = client
        .get(format!("http://{}/metrics", agent.management_addr()))
        .header("accept", "application/openmetrics-text")
        .send()
        .await
        .expect("scrape /metrics");
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    response.text().await.unwrap()
}

/// Scrape until `series` has `want`; the last scrape on timeout.
async fn scrape_until(
    client: &reqwest::Client,
    agent: &Agent,
    series: &str,
    want: impl Fn(f64) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = scrape(client, agent).await;
        if sample(&text, series).is_some_and(&want) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} never reached the expected value; last scrape:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn probe(client: &reqwest::Client, agent: &Agent, path: &str) -> (u16, serde_json::Value) {
    let response = client
        .get(format!("http://{}{path}", agent.management_addr()))
        .send()
        .await
        .expect("probe");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON probe body"))
}

/// Holds every message until the test adds permits: its mailbox fills.
struct Gate(Arc<Semaphore>);

impl Actor for Gate {
    type Msg = u32;

    async fn handle(&mut self, _: u32, _: &mut Context<Self>) -> Result<(), ActorError> {
        self.0.acquire().await?.forget();
        Ok(())
    }
}

struct Sink;

impl Actor for Sink {
    type Msg = u32;

    async fn handle(&mut self, _: u32, _: &mut Context<Self>) -> Result<(), ActorError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_dead_letters_membership_depths_and_reporter_traffic() {
    let received = Arc::new(Received::default());
    received.refuse.store(2, Ordering::Relaxed);
    let (url, server) = control_plane(Arc::clone(&received));
    let port = free_port();
    let agent = Agent::start(config(port, port, Some(&url))).await.unwrap();
    let client = reqwest::Client::new();

    // Membership: this node alone, up.
    scrape_until(
        &client,
        &agent,
        r#"troupe_agent_members{status="up"}"#,
        |v| v == 1.0,
    )
    .await;

    // Dead letters: three messages to a stopped actor.
    let short = agent.system().spawn("short", Props::new(|| Sink)).unwrap();
    short.stop();
    short.terminated().await;
    for n in 0..3 {
        short.tell(n);
    }
    // Mailbox depth: a gated actor holding one message in hand and five queued, and two gated
    // routees of one router, summed into one series.
    let gate = Arc::new(Semaphore::new(0));
    let held = agent
        .system()
        .spawn(
            "held",
            Props::new({
                let gate = Arc::clone(&gate);
                move || Gate(Arc::clone(&gate))
            }),
        )
        .unwrap();
    for path in ["/user/w1", "/user/w2"] {
        let worker = agent
            .system()
            .spawn(
                &path[6..],
                Props::new({
                    let gate = Arc::clone(&gate);
                    move || Gate(Arc::clone(&gate))
                }),
            )
            .unwrap();
        for n in 0..4 {
            worker.tell(n);
        }
        agent.watch_depth(path, Some("workers"));
    }
    for n in 0..6 {
        held.tell(n);
    }
    agent.watch_depth("/user/held", None);

    let text = scrape_until(
        &client,
        &agent,
        r#"troupe_agent_dead_letters_total{reason="recipient_stopped"}"#,
        |v| v == 3.0,
    )
    .await;
    assert_eq!(
        sample(
            &text,
            r#"troupe_agent_dead_letters_total{reason="mailbox_full"}"#
        ),
        Some(0.0),
        "reasons that did not happen are at 0"
    );
    let text = scrape_until(
        &client,
        &agent,
        r#"troupe_agent_mailbox_depth{path="/user/held"}"#,
        |v| v == 5.0,
    )
    .await;
    assert_eq!(
        sample(
            &text,
            r#"troupe_agent_router_mailbox_depth{router="workers"}"#
        ),
        Some(6.0),
        "two routees with three queued each, one series:\n{text}"
    );
    assert!(
        !text.contains("/user/w1"),
        "routees are not exported one by one"
    );
    assert_eq!(
        sample(&text, r#"troupe_agent_health{state="ready"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"troupe_agent_health{state="starting"}"#),
        Some(0.0)
    );

    // Reporter traffic: two refused attempts, then acknowledged batches.
    let text = scrape_until(
        &client,
        &agent,
        "troupe_agent_reporter_batches_shipped_total",
        |v| v >= 2.0,
    )
    .await;
    assert_eq!(
        sample(&text, "troupe_agent_reporter_batches_failed_total"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "troupe_agent_reporter_buffer_capacity_items"),
        Some(BufferLimits::default().items as f64)
    );
    for kind in ["event", "depth_sample"] {
        assert!(
            sample(
                &text,
                &format!(r#"troupe_agent_reporter_buffer_items{{kind="{kind}"}}"#)
            )
            .is_some(),
            "{kind} occupancy exported:\n{text}"
        );
    }
    assert_eq!(
        sample(
            &text,
            r#"troupe_agent_reporter_dropped_total{kind="dead_letter"}"#
        ),
        Some(0.0)
    );

    // A second node joins: two members up, as both see it.
    let second_port = free_port();
    let second = Agent::start(config(second_port, port, None)).await.unwrap();
    scrape_until(
        &client,
        &agent,
        r#"troupe_agent_members{status="up"}"#,
        |v| v == 2.0,
    )
    .await;
    scrape_until(
        &client,
        &second,
        r#"troupe_agent_members{status="up"}"#,
        |v| v == 2.0,
    )
    .await;
    // It leaves: the first node counts one again.
    second.shutdown().await;
    scrape_until(
        &client,
        &agent,
        r#"troupe_agent_members{status="up"}"#,
        |v| v == 1.0,
    )
    .await;

    gate.add_permits(100);
    agent.shutdown().await;
    // The reporter's last batch told the control plane what the probes said on the way out.
    assert_eq!(
        received.health_reports(),
        [
            AgentHealth::Starting,
            AgentHealth::Ready,
            AgentHealth::Draining
        ]
    );
    server.stop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_follow_the_agent_from_ready_to_fenced_and_the_reporter_says_the_same() {
    let received = Arc::new(Received::default());
    let (url, server) = control_plane(Arc::clone(&received));
    let port = free_port();
    let agent = Agent::start(config(port, port, Some(&url))).await.unwrap();
    let client = reqwest::Client::new();

    let deadline = tokio::time::Instant::now() + WAIT;
    while probe(&client, &agent, "/_troupe/health/ready").await.0 != 200 {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        probe(&client, &agent, "/_troupe/health").await,
        (200, serde_json::json!({"status": "ok", "state": "ready"}))
    );

    // A membership provider lost this host's lease.
    agent.health().fence("lease renewal got 404");
    let (status, body) = probe(&client, &agent, "/_troupe/health").await;
    assert_eq!(status, 503);
    assert_eq!(body["status"], "fatal");
    assert_eq!(body["reason"], "lease renewal got 404");
    assert_eq!(probe(&client, &agent, "/_troupe/health/ready").await.0, 503);
    // Never back: a drain or a join after the fence changes nothing.
    agent.health().joined();
    agent.health().drain("too late");
    assert_eq!(
        probe(&client, &agent, "/_troupe/health").await.1["status"],
        "fatal"
    );

    // The control plane heard the same story, in order.
    let deadline = tokio::time::Instant::now() + WAIT;
    while received.health_reports().last() != Some(&AgentHealth::Fenced) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reported: {:?}",
            received.health_reports()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        received.health_reports(),
        [
            AgentHealth::Starting,
            AgentHealth::Ready,
            AgentHealth::Fenced
        ]
    );

    // Unknown routes and methods say what is served.
    let missing = client
        .get(format!("http://{}/_troupe/nope", agent.management_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(
        missing
            .text()
            .await
            .unwrap()
            .contains("/_troupe/health/ready")
    );
    let post = client
        .post(format!("http://{}/metrics", agent.management_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), 405);

    let addr = agent.management_addr();
    agent.shutdown().await;
    assert!(
        client
            .get(format!("http://{addr}/_troupe/health"))
            .send()
            .await
            .is_err(),
        "the listener closes with the agent"
    );
    server.stop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_management_port_fails_the_start_and_says_how_to_fix_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free_port();
    let mut config = config(port, port, None);
    config.management_bind = taken.local_addr().unwrap();
    let error = Agent::start(config).await.unwrap_err().to_string();
    assert!(error.contains("--management-bind"), "{error}");
    assert!(
        error.contains(&taken.local_addr().unwrap().to_string()),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_items_are_counted_by_kind_while_the_control_plane_is_away() {
    let port = free_port();
    let agent = Agent::start(config(port, port, None)).await.unwrap();
    // A reporter with room for ten items, shipping to a port nobody listens on.
    let identity = troupe_protocol::AgentIdentity {
        cluster: "mgmt".into(),
        node: format!("127.0.0.1:{port}"),
        incarnation: 1,
        meta: troupe_protocol::AgentMeta::default(),
        cluster_identity: None,
    };
    let shipper = reporter::shipper::Shipper::new(
        &format!("http://127.0.0.1:{}", free_port()),
        "t",
        identity,
    );
    let settings = ReporterSettings {
        limits: BufferLimits {
            items: 10,
            batch_events: 5,
        },
        // At most the first tick (at start) cuts a batch.
        flush_interval: Duration::from_secs(3_600),
        ..ReporterSettings::default()
    };
    let handle = reporter::start(agent.system(), agent.cluster(), shipper, settings);
    let short = agent.system().spawn("gone", Props::new(|| Sink)).unwrap();
    short.stop();
    short.terminated().await;
    for n in 0..25 {
        short.tell(n);
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = agent.metrics().render(
            Exposition::OpenMetrics,
            agent.system(),
            agent.cluster(),
            agent.health(),
            Some(&handle),
        );
        let dropped = sample(
            &text,
            r#"troupe_agent_reporter_dropped_total{kind="dead_letter"}"#,
        );
        let queued = sample(&text, r#"troupe_agent_reporter_buffer_items{kind="event"}"#);
        let total = sample(&text, "troupe_agent_reporter_events_total");
        let all_drops: f64 = [
            "membership",
            "singleton",
            "router",
            "dead_letter",
            "health",
            "depth_sample",
        ]
        .iter()
        .filter_map(|kind| {
            sample(
                &text,
                &format!(r#"troupe_agent_reporter_dropped_total{{kind="{kind}"}}"#),
            )
        })
        .sum();
        // 25 dead letters (beside the node's last membership events) into ten places, plus at
        // most one batch of five cut by the first tick: at least ten dropped, and every event
        // either queued, in flight or counted as dropped.
        let in_flight = total.zip(queued).map(|(t, q)| t - q - all_drops);
        if dropped.is_some_and(|d| d >= 10.0)
            && total.is_some_and(|t| t >= 25.0)
            && queued.is_some_and(|q| (5.0..=10.0).contains(&q))
            && in_flight.is_some_and(|n| (0.0..=5.0).contains(&n))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "drops not counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singleton_hosting_hand_overs_and_leader_changes_are_counted() {
    let client = reqwest::Client::new();
    let hosting = r#"troupe_agent_singleton_hosting{singleton="job-scheduler"}"#;
    let completed =
        r#"troupe_agent_singleton_hand_overs_total{singleton="job-scheduler",outcome="completed"}"#;
    let first_port = free_port();
    let first = Agent::start(AgentConfig {
        demo: true,
        ..config(first_port, first_port, None)
    })
    .await
    .unwrap();
    // Alone: it hands over to nobody (a round with no peers completes) and hosts.
    scrape_until(&client, &first, hosting, |v| v == 1.0).await;
    let text = scrape_until(&client, &first, completed, |v| v >= 1.0).await;
    assert!(sample(&text, "troupe_agent_leader_changes_total").is_some_and(|v| v >= 1.0));
    assert!(
        sample(
            &text,
            r#"troupe_agent_singleton_hand_over_duration_seconds_count{singleton="job-scheduler"}"#
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    // Series that have not happened yet are there at 0, so queries over them are not empty.
    for series in [
        r#"troupe_agent_singleton_hand_overs_total{singleton="job-scheduler",outcome="timed_out"}"#,
        r#"troupe_agent_singleton_dead_letters_total{singleton="job-scheduler",cause="hold_full"}"#,
        r#"troupe_agent_singleton_messages_flushed_total{singleton="job-scheduler"}"#,
    ] {
        assert!(sample(&text, series).is_some(), "{series} missing:\n{text}");
    }

    // A second node runs the manager too; exactly one of the two hosts.
    let second_port = free_port();
    let second = Agent::start(AgentConfig {
        demo: true,
        ..config(second_port, first_port, None)
    })
    .await
    .unwrap();
    scrape_until(
        &client,
        &second,
        r#"troupe_agent_members{status="up"}"#,
        |v| v == 2.0,
    )
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let a = sample(&scrape(&client, &first).await, hosting);
        let b = sample(&scrape(&client, &second).await, hosting);
        if a.zip(b).is_some_and(|(a, b)| a + b == 1.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never exactly one host: first {a:?}, second {b:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first leaves: the second hosts after a hand-over round of its own.
    first.shutdown().await;
    scrape_until(&client, &second, hosting, |v| v == 1.0).await;
    let text = scrape(&client, &second).await;
    let rounds = sample(&text, completed).unwrap_or(0.0)
        + sample(
            &text,
            r#"troupe_agent_singleton_hand_overs_total{singleton="job-scheduler",outcome="timed_out"}"#,
        )
        .unwrap_or(0.0);
    assert!(rounds >= 1.0, "no hand-over round counted:\n{text}");
    assert!(sample(&text, "troupe_agent_leader_changes_total").is_some_and(|v| v >= 1.0));
    second.shutdown().await;
}
