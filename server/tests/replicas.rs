//! Two real `troupe-server` processes on one PostgreSQL database: a stream on the replica that
//! did not receive a batch gets it (once, in order, within a second); it catches up with no gap
//! and no repeat when its LISTEN connection is cut mid-ingest; a client that reconnects to a
//! restarted replica with `Last-Event-ID` gets what it missed. A coordination grant made
//! through one replica is renewed through the other, outlives a crash of the first, and still
//! expires one TTL after its last renewal.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use troupe_server::testing::{BatchBuilder, TestDatabase};

#[path = "support/server_process.rs"]
mod server_process;
#[path = "support/sse.rs"]
mod sse;
use server_process::ServerProcess;
use sse::SseClient;

const TOKEN: &str = "replicas-test-token";
const COORDINATION_TOKEN: &str = "replicas-coordination-token";

/// A replica on `database_url`, with the ingest and coordination APIs on.
fn replica(database_url: &str) -> ServerProcess {
    let mut command = ServerProcess::command();
    command
        .args(["--ingest-token", TOKEN])
        .args(["--coordination-token", COORDINATION_TOKEN])
        .args(["--database-url", database_url])
        .args(["--shutdown-timeout-secs", "5", "--workers", "2"])
        // Test events are stamped near 1970: keep them.
        .args(["--retention-days", "0"]);
    ServerProcess::spawn(command)
}

/// Stops `replica` with SIGTERM; it must exit cleanly.
fn terminate(replica: &mut ServerProcess) {
    let status = replica.terminate();
    assert!(status.success(), "server exited with {status}");
}

/// Batch `sequence` of agent `a:1`: one dead letter whose message type names the batch.
fn batch(sequence: u64) -> troupe_protocol::ReportBatch {
    BatchBuilder::new("app", "a:1", sequence)
        .sent_at(1)
        .dead_letter(sequence as i64, "/user/x", &format!("d-{sequence}"))
        .build()
}

async fn ingest(client: &reqwest::Client, base: &str, sequence: u64) {
    let response = client
        .post(format!("{base}/api/v1/ingest"))
        .bearer_auth(TOKEN)
        .json(&batch(sequence))
        .send()
        .await
        .expect("ingest request");
    assert_eq!(response.status(), 200, "ingest of batch {sequence}");
}

/// The batch sequence an event on the stream came from.
fn sequence_of(event: &sse::SseEvent) -> u64 {
    event.data["message_type"]
        .as_str()
        .and_then(|t| t.strip_prefix("d-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a test dead letter: {event:?}"))
}

/// Reads the events of batches `from..=to` off `stream`, each exactly once and in order;
/// `sent[n]` is when batch `n`'s ingest request started (for latencies). Returns the latencies
/// and the last event id.
async fn expect_batches(
    stream: &mut SseClient,
    from: u64,
    to: u64,
    sent: &std::sync::Mutex<Vec<Option<Instant>>>,
) -> (Vec<Duration>, String) {
    let mut latencies = Vec::new();
    let mut last = String::new();
    for expected in from..=to {
        let event = stream
            .next(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("batch {expected} never arrived"));
        let arrived = Instant::now();
        assert_eq!(
            sequence_of(&event),
            expected,
            "events arrive once each and in order"
        );
        if let Some(at) = sent.lock().unwrap()[expected as usize] {
            latencies.push(arrived.saturating_duration_since(at));
        }
        last = event.id.expect("every event has an id");
    }
    (latencies, last)
}

fn p50_max(latencies: &mut [Duration]) -> (Duration, Duration) {
    latencies.sort();
    (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    )
}

/// Ingests batches `from..=to` through `base`, `gap` apart, noting when each started.
fn spawn_ingest(
    base: String,
    from: u64,
    to: u64,
    gap: Duration,
    sent: std::sync::Arc<std::sync::Mutex<Vec<Option<Instant>>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        for sequence in from..=to {
            sent.lock().unwrap()[sequence as usize] = Some(Instant::now());
            ingest(&client, &base, sequence).await;
            tokio::time::sleep(gap).await;
        }
    })
}

/// Backend pids of replica `pid`'s LISTEN connection.
async fn listener_backends(admin: &mut PgConnection, database: &str, pid: u32) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
    )
    .bind(database)
    .bind(format!("troupe-live {pid}"))
    .fetch_all(admin)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_on_the_other_replica_gets_every_event_once_in_order_and_survives_cuts() {
    const LIVE: u64 = 40;
    const CUT: u64 = 40;
    const DOWN: u64 = 15;
    let database = TestDatabase::create().await;
    let name = database
        .url()
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    let a = replica(database.url());
    let mut b = replica(database.url());
    let client = reqwest::Client::new();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(vec![None; 200]));
    // The cluster exists before the stream opens.
    ingest(&client, &a.base(), 1).await;
    let url = format!("{}/api/v1/events/stream?cluster=app", b.base());
    let mut stream = SseClient::connect(&url, None).await;

    // 1. Live: every batch stored through A reaches the stream on B.
    let writer = spawn_ingest(
        a.base(),
        2,
        LIVE + 1,
        Duration::from_millis(25),
        sent.clone(),
    );
    let (mut latencies, _) = expect_batches(&mut stream, 2, LIVE + 1, &sent).await;
    writer.await.unwrap();
    let (p50, max) = p50_max(&mut latencies);
    println!(
        "replica B stream, {LIVE} batches ingested through A: latency p50 {p50:?}, max {max:?}"
    );
    assert!(max < Duration::from_secs(1), "max latency {max:?}");
    // Woken by A's notifications, not by the once-a-second poll (which would make it ~500 ms).
    assert!(
        p50 < Duration::from_millis(250),
        "p50 latency {p50:?}: B's streams are not woken by notifications"
    );

    // 2. B's LISTEN connection is cut mid-ingest: it reconnects and catches up.
    let mut admin = PgConnection::connect(&troupe_server::testing::admin_database_url())
        .await
        .unwrap();
    let before = listener_backends(&mut admin, &name, b.pid()).await;
    assert_eq!(before.len(), 1, "B listens on one connection: {before:?}");
    let first = LIVE + 2;
    let last = LIVE + 1 + CUT;
    let writer = spawn_ingest(
        a.base(),
        first,
        last,
        Duration::from_millis(25),
        sent.clone(),
    );
    let cutter = {
        let mut admin = PgConnection::connect(&troupe_server::testing::admin_database_url())
            .await
            .unwrap();
        let backend = before[0];
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let cut: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                .bind(backend)
                .fetch_one(&mut admin)
                .await
                .unwrap();
            assert!(cut, "B's LISTEN connection was terminated");
        })
    };
    let (mut latencies, _) = expect_batches(&mut stream, first, last, &sent).await;
    writer.await.unwrap();
    cutter.await.unwrap();
    let (p50, max) = p50_max(&mut latencies);
    println!(
        "replica B stream, {CUT} batches with its LISTEN connection cut: latency p50 {p50:?}, max {max:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let now = listener_backends(&mut admin, &name, b.pid()).await;
        if now.len() == 1 && now != before {
            break now;
        }
        assert!(Instant::now() < deadline, "B listens again: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Listening again, it is live again.
    let probe = last + 1;
    sent.lock().unwrap()[probe as usize] = Some(Instant::now());
    ingest(&client, &a.base(), probe).await;
    let (latency, last_id) = expect_batches(&mut stream, probe, probe, &sent).await;
    println!(
        "replica B listens again on backend {after:?}; next batch after {:?}",
        latency[0]
    );
    assert!(latency[0] < Duration::from_secs(1));

    // 3. B restarts while A ingests: a client resuming on the new B gets exactly what it missed.
    terminate(&mut b);
    assert_eq!(
        stream.next(Duration::from_secs(2)).await,
        None,
        "the stream ends with its replica"
    );
    let first = probe + 1;
    let last = probe + DOWN;
    for sequence in first..=last {
        ingest(&client, &a.base(), sequence).await;
    }
    let b = replica(database.url());
    let url = format!("{}/api/v1/events/stream?cluster=app", b.base());
    let mut stream = SseClient::connect(&url, Some(&last_id)).await;
    expect_batches(&mut stream, first, last, &sent).await;
    assert_eq!(
        stream.next(Duration::from_millis(1500)).await,
        None,
        "nothing more than what was ingested arrives"
    );
    drop(a);
}

/// `POST /api/v1/coordination/leases/{name}/{action}` on `replica`: the status and the body.
async fn lease_call(
    client: &reqwest::Client,
    replica: &ServerProcess,
    action: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = client
        .post(replica.url(&format!("/api/v1/coordination/leases/{LEASE}/{action}")))
        .bearer_auth(COORDINATION_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{action} through {}: {e}", replica.base()));
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

const LEASE: &str = "replicated-lease";

fn acquire_body(owner: &str, ttl_ms: u64) -> serde_json::Value {
    serde_json::json!({"owner": owner, "ttl_ms": ttl_ms})
}

fn grant_body(owner: &str, token: &str) -> serde_json::Value {
    serde_json::json!({"owner": owner, "token": token})
}

/// Renews `token` of `owner` through `replica`; panics unless it is still held.
async fn renew_ok(client: &reqwest::Client, replica: &ServerProcess, owner: &str, token: &str) {
    let (status, body) = lease_call(client, replica, "renew", grant_body(owner, token)).await;
    assert_eq!(status, 200, "renewal through {}: {body}", replica.base());
    assert_eq!(body["token"], token, "{body}");
    assert_eq!(body["expires_in_ms"], TTL_MS.to_string(), "{body}");
}

const TTL_MS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_on_one_replica_is_renewed_on_the_other_and_outlives_a_crash_of_the_first() {
    let database = TestDatabase::create().await;
    let mut a = replica(database.url());
    let b = replica(database.url());
    let client = reqwest::Client::new();

    // Granted through A.
    let (status, grant) = lease_call(&client, &a, "acquire", acquire_body("agent-1", TTL_MS)).await;
    assert_eq!(status, 200, "{grant}");
    assert_eq!(grant["granted"], true, "{grant}");
    let token = grant["token"].as_str().expect("a token").to_owned();
    let (_, refused) = lease_call(&client, &b, "acquire", acquire_body("agent-2", TTL_MS)).await;
    assert_eq!(refused["granted"], false, "B sees A's grant: {refused}");

    // Renewed alternately through B and A, every second, for twice the TTL: it holds.
    let started = Instant::now();
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let through = if round % 2 == 0 { &b } else { &a };
        renew_ok(&client, through, "agent-1", &token).await;
    }
    let alternated = started.elapsed();
    let shown: serde_json::Value = client
        .get(b.url(&format!("/api/v1/coordination/leases/{LEASE}")))
        .bearer_auth(COORDINATION_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["backend"], "postgres", "{shown}");
    assert_eq!(
        shown["holder"]["owner"], "agent-1",
        "B shows A's grant: {shown}"
    );
    assert_eq!(shown["holder"]["token"], token.as_str(), "{shown}");

    // A crashes (SIGKILL) and starts again; the grant holds through B meanwhile and through
    // the new A after.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let crashed = Instant::now();
    renew_ok(&client, &b, "agent-1", &token).await;
    let a = replica(database.url());
    let restart = crashed.elapsed();
    renew_ok(&client, &a, "agent-1", &token).await;
    let (_, refused) = lease_call(&client, &a, "acquire", acquire_body("agent-2", TTL_MS)).await;
    assert_eq!(
        refused["granted"], false,
        "the restarted A sees the grant: {refused}"
    );

    // Nobody renews: it expires one TTL after the last renewal (by the database's clock) and
    // the next holder gets a larger token, through either replica.
    let last_renewal = Instant::now();
    renew_ok(&client, &b, "agent-1", &token).await;
    let taken = loop {
        let (status, answer) =
            lease_call(&client, &a, "acquire", acquire_body("agent-2", TTL_MS)).await;
        assert_eq!(status, 200, "{answer}");
        if answer["granted"] == true {
            break answer;
        }
        assert!(
            last_renewal.elapsed() < Duration::from_millis(TTL_MS + 2000),
            "the unrenewed grant never expired"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let expired_after = last_renewal.elapsed();
    let new_token: u64 = taken["token"].as_str().unwrap().parse().unwrap();
    assert!(
        new_token > token.parse().unwrap(),
        "{new_token} after {token}"
    );
    assert!(
        expired_after >= Duration::from_millis(TTL_MS - 100),
        "taken over {expired_after:?} after the last renewal, before the ttl {TTL_MS} ms"
    );
    let (status, gone) = lease_call(&client, &b, "renew", grant_body("agent-1", &token)).await;
    assert_eq!(status, 409, "the expired grant cannot be renewed: {gone}");
    let (status, released) = lease_call(
        &client,
        &b,
        "release",
        grant_body("agent-2", &new_token.to_string()),
    )
    .await;
    assert_eq!(
        (status, &released["released"]),
        (200, &serde_json::json!(true))
    );
    println!(
        "lease (ttl {TTL_MS} ms) renewed alternately through B and A for {alternated:?}; held while A crashed and restarted ({restart:?} down); taken over {expired_after:?} after its last renewal"
    );
}
