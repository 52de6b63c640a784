//! The live streams against the real server on both backends: a client that keeps
//! disconnecting while agents keep reporting gets every stored event exactly once by resuming
//! with `Last-Event-ID`; an opening snapshot is followed by exactly what came after it; Akka's
//! `/cluster/domain-events` resumes the same way.

use std::collections::HashMap;
use std::time::Duration;

use troupe_protocol::{EventBody, MemberStatus, SingletonInstance};
use troupe_server::testing::{BatchBuilder, TestDatabase, TestSqliteFile};
use troupe_server::{App, Config};

#[path = "support/sse.rs"]
mod sse;
use sse::SseClient;

const TOKEN: &str = "stream-token";
const AGENTS: usize = 4;
const BATCHES: u64 = 30;

enum Backend {
    Postgres,
    Sqlite,
}

/// A running server; the database (or file) lives as long as the returned guard.
async fn server(backend: Backend) -> (String, Box<dyn std::any::Any + Send>) {
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest_token = Some(TOKEN.to_owned());
    config.retention_days = 0;
    config.workers = Some(2);
    let file = TestSqliteFile::new();
    config.sqlite_path = file.path().to_owned();
    let database = match backend {
        Backend::Postgres => {
            let database = TestDatabase::create().await;
            config.database_url = Some(database.url().to_owned());
            Some(database)
        }
        Backend::Sqlite => None,
    };
    let app = App::build(config).await.expect("server starts");
    let base = format!("http://{}", app.local_addr());
    let task = tokio::spawn(app.run());
    (base, Box::new((database, file, task)))
}

/// Batch `sequence` of agent `agent`: two events and a dead letter, each named uniquely.
fn batch(agent: usize, sequence: u64) -> troupe_protocol::ReportBatch {
    let node = format!("10.0.0.{}:2552", agent + 1);
    let at = 1_700_000_000_000 + sequence as i64 * 10 + agent as i64;
    BatchBuilder::new("app", &node, sequence)
        .event(
            at,
            EventBody::SingletonStarted(SingletonInstance {
                singleton: format!("s-{agent}-{sequence}"),
                role: None,
                host: node.clone(),
                backoff_ms: None,
                reason: None,
            }),
        )
        .member(
            at + 1,
            EventBody::MemberUp,
            &format!("m-{agent}-{sequence}:1"),
            MemberStatus::Up,
            &[],
        )
        .dead_letter(at + 2, "/user/x", &format!("d-{agent}-{sequence}"))
        .build()
}

/// What identifies an ingested item in a streamed event.
fn marker(data: &serde_json::Value) -> String {
    if let Some(singleton) = data["singleton"].as_str() {
        return singleton.to_owned();
    }
    if let Some(message_type) = data["message_type"].as_str() {
        return message_type.to_owned();
    }
    data["member"]["address"].as_str().unwrap_or("?").to_owned()
}

async fn ingest(base: &str, batch: &troupe_protocol::ReportBatch) {
    let client = reqwest::Client::new();
    for _ in 0..50 {
        match client
            .post(format!("{base}/api/v1/ingest"))
            .bearer_auth(TOKEN)
            .json(batch)
            .send()
            .await
        {
            Ok(r) if r.status() == 200 => return,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("ingest failed");
}

async fn disconnects_lose_and_repeat_nothing(backend: Backend) {
    let (base, _guard) = server(backend).await;
    // The cluster exists before the stream opens; the first batch is before the stream.
    ingest(&base, &batch(0, 1)).await;
    let url = format!("{base}/api/v1/events/stream?cluster=app");
    let mut stream = SseClient::connect(&url, None).await;
    let writers: Vec<_> = (0..AGENTS)
        .map(|agent| {
            let base = base.clone();
            tokio::spawn(async move {
                let first = if agent == 0 { 2 } else { 1 };
                for sequence in first..=BATCHES {
                    ingest(&base, &batch(agent, sequence)).await;
                    if sequence % 7 == 0 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            })
        })
        .collect();
    let expected = (AGENTS as u64 * BATCHES - 1) * 3;
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut last_id: Option<String> = None;
    let mut received = 0u64;
    let mut reconnects = 0;
    let mut per_connection = 1;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received < expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "got {received} of {expected} events"
        );
        // Read a few events, then drop the connection mid-stream and resume.
        let mut this_connection = 0;
        while this_connection < per_connection {
            let Some(event) = stream.next(Duration::from_secs(10)).await else {
                break;
            };
            assert!(event.id.is_some(), "every event carries an id: {event:?}");
            *seen.entry(marker(&event.data)).or_default() += 1;
            last_id = event.id;
            received += 1;
            this_connection += 1;
        }
        drop(stream);
        reconnects += 1;
        per_connection = per_connection % 17 + 3;
        // Let a few batches land while nobody listens.
        tokio::time::sleep(Duration::from_millis(15)).await;
        stream = SseClient::connect(&url, last_id.as_deref()).await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    // Nothing more than what was ingested arrives.
    assert_eq!(
        stream.next(Duration::from_millis(1500)).await,
        None,
        "an event arrived twice or out of nowhere"
    );
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "repeated: {repeated:?}");
    for agent in 0..AGENTS {
        let first = if agent == 0 { 2 } else { 1 };
        for sequence in first..=BATCHES {
            for name in [
                format!("s-{agent}-{sequence}"),
                format!("m-{agent}-{sequence}:1"),
                format!("d-{agent}-{sequence}"),
            ] {
                assert_eq!(seen.get(&name), Some(&1), "{name} missed");
            }
        }
    }
    assert!(
        !seen.contains_key("s-0-1"),
        "the stream starts after what was stored before it"
    );
    assert!(
        reconnects > 10,
        "the test disconnected only {reconnects} times"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_resumed_stream_misses_and_repeats_nothing_under_concurrent_ingest() {
    disconnects_lose_and_repeat_nothing(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_resumed_stream_misses_and_repeats_nothing_under_concurrent_ingest() {
    disconnects_lose_and_repeat_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_opens_the_stream_and_exactly_what_follows_it_is_streamed() {
    let (base, _guard) = server(Backend::Postgres).await;
    ingest(&base, &batch(0, 1)).await;
    ingest(&base, &batch(1, 1)).await;
    let mut stream = SseClient::connect(
        &format!("{base}/api/v1/events/stream?cluster=app&snapshot=true"),
        None,
    )
    .await;
    let snapshot = stream.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(snapshot.event, "CurrentClusterState");
    let members: Vec<&str> = snapshot.data["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["node"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["m-0-1:1", "m-1-1:1"]);
    ingest(&base, &batch(2, 1)).await;
    let mut after = Vec::new();
    while let Some(event) = stream.next(Duration::from_millis(1500)).await {
        after.push(marker(&event.data));
    }
    after.sort();
    assert_eq!(
        after,
        ["d-2-1", "m-2-1:1", "s-2-1"],
        "only what came after the snapshot"
    );

    // Akka's domain events: membership only, Akka's names, and the same resume.
    let url = format!("{base}/management/app/cluster/domain-events?snapshot=true");
    let mut akka = SseClient::connect(&url, None).await;
    let state = akka.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(state.event, "CurrentClusterState");
    assert_eq!(state.data["members"].as_array().unwrap().len(), 3);
    assert_eq!(state.data["members"][0]["node"], "troupe://app@m-0-1:1");
    assert_eq!(state.data["members"][0]["status"], "Up");
    let resume = state.id.clone().unwrap();
    drop(akka);
    ingest(&base, &batch(3, 1)).await;
    let mut akka = SseClient::connect(&url, Some(&resume)).await;
    let up = akka.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(up.event, "MemberUp", "{up:?}");
    assert_eq!(up.data["type"], "MemberUp");
    assert_eq!(up.data["member"]["node"], "troupe://app@m-3-1:1");
    assert_eq!(up.data["member"]["nodeUid"], "1");
    assert_eq!(
        akka.next(Duration::from_millis(1500)).await,
        None,
        "no snapshot on a resume, and no non-membership events"
    );
}

#[tokio::test]
async fn a_last_event_id_no_stream_sent_is_refused_saying_what_is_allowed() {
    let (base, _guard) = server(Backend::Sqlite).await;
    ingest(&base, &batch(0, 1)).await;
    let response = reqwest::Client::new()
        .get(format!("{base}/api/v1/events/stream?cluster=app"))
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("<cluster id>:<event id>.<dead-letter id>"),
        "{body}"
    );
}

/// Many writers commit small batches while a reader walks the feed position as fast as it
/// can: if ids were not assigned in commit order, the reader would step over a row that
/// commits after a higher id was read (found missing at the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stream_positions_only_ever_reveal_rows_after_what_was_read() {
    let database = TestDatabase::create().await;
    let store = troupe_server::store::Store::connect_postgres(database.url(), 16)
        .await
        .unwrap();
    store.ingest(&batch(0, 1), 0).await.unwrap();
    let cluster = store.cluster("app").await.unwrap().unwrap().id;
    const WRITERS: usize = 8;
    const PER_WRITER: u64 = 150;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let store = store.clone();
            tokio::spawn(async move {
                for sequence in 1..=PER_WRITER {
                    let node = format!("w{writer}:1");
                    let one = BatchBuilder::new("app", &node, sequence)
                        .dead_letter(sequence as i64, "/user/x", &format!("{writer}-{sequence}"))
                        .member(
                            sequence as i64,
                            EventBody::MemberUp,
                            &node,
                            MemberStatus::Up,
                            &[],
                        )
                        .build();
                    store.ingest(&one, 0).await.unwrap();
                }
            })
        })
        .collect();
    let mut events = 0i64;
    let mut dead_letters = 0i64;
    let mut seen_events = Vec::new();
    let mut seen_dead_letters = Vec::new();
    let total = WRITERS as u64 * PER_WRITER;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while (seen_dead_letters.len() as u64) < total + 1 || (seen_events.len() as u64) < total + 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "reader fell behind for good"
        );
        for row in store.stream_events(cluster, events, 50).await.unwrap() {
            events = row.id;
            seen_events.push(row.id);
        }
        for row in store
            .stream_dead_letters(cluster, dead_letters, 50)
            .await
            .unwrap()
        {
            dead_letters = row.id;
            seen_dead_letters.push(row.id);
        }
        if writers.iter().all(|w| w.is_finished()) {
            // Everything is committed: the walk must have come by every row.
            let all_events = store.stream_events(cluster, 0, 100_000).await.unwrap();
            let all_dead_letters = store
                .stream_dead_letters(cluster, 0, 100_000)
                .await
                .unwrap();
            let stepped_over = all_events.len()
                - seen_events.len()
                - store
                    .stream_events(cluster, events, 100_000)
                    .await
                    .unwrap()
                    .len();
            let stepped_over_dl = all_dead_letters.len()
                - seen_dead_letters.len()
                - store
                    .stream_dead_letters(cluster, dead_letters, 100_000)
                    .await
                    .unwrap()
                    .len();
            assert_eq!(
                (stepped_over, stepped_over_dl),
                (0, 0),
                "rows committed below a position already read (events, dead letters)"
            );
        }
    }
    for writer in writers {
        writer.await.unwrap();
    }
    store.close().await;
}
