//! The agent reports to a control plane that is away at first: it keeps what happened,
//! retries with the same sequence, and delivers everything once the server is back. The
//! stand-in server speaks the real ingest wire format (ReportBatch JSON in, IngestAck out).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use parking_lot::Mutex;
use troupe_agent::{Agent, AgentConfig};
use troupe_protocol::{EventKind, IngestAck, ReportBatch};

#[derive(Default)]
struct Received {
    batches: Mutex<Vec<ReportBatch>>,
    /// Answer 503 to this many more requests before accepting.
    refuse: AtomicUsize,
    unauthorized: AtomicUsize,
}

async fn ingest(
    request: HttpRequest,
    body: web::Json<ReportBatch>,
    received: web::Data<Arc<Received>>,
) -> HttpResponse {
    let authorized = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        == Some("Bearer test-token");
    if !authorized {
        received.unauthorized.fetch_add(1, Ordering::Relaxed);
        return HttpResponse::Unauthorized().finish();
    }
    if received
        .refuse
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        received.batches.lock().push(body.0.clone());
        return HttpResponse::ServiceUnavailable().finish();
    }
    let batch = body.into_inner();
    let duplicate = received
        .batches
        .lock()
        .iter()
        .any(|b| b.sequence == batch.sequence && b.events == batch.events);
    let ack = IngestAck {
        sequence: batch.sequence,
        duplicate,
        stored_events: batch.events.len() as u64,
        operations: Vec::new(),
    };
    received.batches.lock().push(batch);
    HttpResponse::Ok().json(ack)
}

fn serve(port: u16, received: Arc<Received>) -> actix_web::dev::ServerHandle {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(web::Data::new(Arc::clone(&received)))
                    .route("/api/v1/ingest", web::post().to(ingest))
            })
            .workers(1)
            // The agent keeps its connection alive; do not wait the default 30 s for it on stop.
            .shutdown_timeout(1)
            .bind(("127.0.0.1", port))
            .expect("bind the stand-in")
            .run();
            tx.send(server.handle()).expect("hand out the handle");
            let _ = server.await;
        });
    });
    rx.recv().expect("server started")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(port: u16, control_plane: u16) -> AgentConfig {
    let mut config = AgentConfig::new(
        "report",
        format!("127.0.0.1:{port}").parse().unwrap(),
        "reporting test secret, long enough",
    );
    config.control_plane = Some(format!("http://127.0.0.1:{control_plane}"));
    config.ingest_token = "test-token".into();
    config.node_name = Some("machine-1".into());
    config.report_interval_ms = 50;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_while_the_server_was_away_arrive_once_it_is_back_with_a_retried_sequence() {
    let control_plane = free_port();
    let agent = Agent::start(config(free_port(), control_plane))
        .await
        .unwrap();
    let reporter = agent.reporter().unwrap().clone();
    // The server is away: attempts fail and are counted, nothing is lost.
    tokio::time::timeout(Duration::from_secs(20), async {
        while reporter.stats().failed_attempts.load(Ordering::Relaxed) < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("failed attempts while the server is away");

    let received = Arc::new(Received::default());
    received.refuse.store(1, Ordering::Relaxed);
    let server = serve(control_plane, Arc::clone(&received));
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            // Only accepted batches count: the first one is the refused one.
            let kinds: Vec<EventKind> = received
                .batches
                .lock()
                .iter()
                .skip(1)
                .flat_map(|b| b.events.iter().map(|e| e.body.kind()))
                .collect();
            if kinds.contains(&EventKind::SelfUp) && kinds.contains(&EventKind::AgentHealthChanged)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("membership and health events reach the server");

    let batches = received.batches.lock().clone();
    // The first request was refused; the same batch came again with the same sequence.
    assert!(batches.len() >= 2);
    assert_eq!(batches[0].sequence, batches[1].sequence);
    assert_eq!(batches[0].events, batches[1].events);
    // Sequences never go backwards, and every batch names the agent.
    for pair in batches.windows(2) {
        assert!(pair[1].sequence >= pair[0].sequence);
    }
    for batch in &batches {
        assert_eq!(batch.identity.cluster, "report");
        assert_eq!(batch.identity.meta.node.as_deref(), Some("machine-1"));
    }
    assert_eq!(received.unauthorized.load(Ordering::Relaxed), 0);
    // The agent first: while it reports every 50 ms, the stand-in's graceful stop would wait
    // out its 30 s shutdown timeout on the open keep-alive connection.
    agent.shutdown().await;
    server.stop(true).await;
}
