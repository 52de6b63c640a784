//! The real `troupe-server` binary: configuration help, SIGTERM, and a restart mid-ingest.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use troupe_protocol::IngestAck;
use troupe_server::testing::{BatchBuilder, HttpClient, TestDatabase, TestSqliteFile};

const TOKEN: &str = "process-test-token";

#[path = "support/server_process.rs"]
mod server_process;
use server_process::ServerProcess;

/// A server on `storage` (flag, value pairs) with the ingest token.
fn start(storage: &[(&str, &str)]) -> ServerProcess {
    let mut command = ServerProcess::command();
    command
        .args(["--ingest-token", TOKEN])
        .args(["--shutdown-timeout-secs", "5"])
        // Test events are stamped near 1970: keep them.
        .args(["--retention-days", "0"]);
    for (flag, value) in storage {
        command.args([flag, value]);
    }
    ServerProcess::spawn(command)
}

#[test]
fn help_lists_every_option_its_environment_variable_and_default() {
    let output = Command::new(env!("CARGO_BIN_EXE_troupe-server"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    // Help wraps to the terminal width; compare with the whitespace collapsed.
    let help = String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for (flag, env) in [
        ("--listen", "TROUPE_LISTEN"),
        ("--database-url", "DATABASE_URL"),
        ("--sqlite-path", "TROUPE_SQLITE_PATH"),
        ("--db-max-connections", "TROUPE_DB_MAX_CONNECTIONS"),
        ("--db-acquire-timeout-ms", "TROUPE_DB_ACQUIRE_TIMEOUT_MS"),
        ("--ingest-token", "TROUPE_INGEST_TOKEN"),
        ("--cluster-ingest-token", "TROUPE_CLUSTER_INGEST_TOKENS"),
        (
            "--cluster-ingest-tokens-file",
            "TROUPE_CLUSTER_INGEST_TOKENS_FILE",
        ),
        ("--admin-token", "TROUPE_ADMIN_TOKEN"),
        (
            "--enable-member-operations",
            "TROUPE_ENABLE_MEMBER_OPERATIONS",
        ),
        ("--retention-days", "TROUPE_RETENTION_DAYS"),
        ("--max-body-bytes", "TROUPE_MAX_BODY_BYTES"),
        ("--workers", "TROUPE_WORKERS"),
        ("--shutdown-timeout-secs", "TROUPE_SHUTDOWN_TIMEOUT_SECS"),
        ("--otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ("--otlp-logs-endpoint", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
        ("--otlp-protocol", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ("--otel-sdk-disabled", "OTEL_SDK_DISABLED"),
        ("--log-json", "TROUPE_LOG_JSON"),
        ("--log-filter", "RUST_LOG"),
        ("--tls-cert", "TROUPE_TLS_CERT"),
        ("--tls-key", "TROUPE_TLS_KEY"),
        ("--viewer-token", "TROUPE_VIEWER_TOKEN"),
        ("--trusted-proxy-header", "TROUPE_TRUSTED_PROXY_HEADER"),
        ("--trusted-proxy-cidrs", "TROUPE_TRUSTED_PROXY_CIDRS"),
        ("--allow-anonymous-read", "TROUPE_ALLOW_ANONYMOUS_READ"),
        ("--coordination-token", "TROUPE_COORDINATION_TOKEN"),
        ("--etcd-endpoints", "TROUPE_ETCD_ENDPOINTS"),
        ("--coordination-prefix", "TROUPE_COORDINATION_PREFIX"),
        ("--coordination-schema", "TROUPE_COORDINATION_SCHEMA"),
        ("--agent-series-ttl-secs", "TROUPE_AGENT_SERIES_TTL_SECS"),
        ("--max-clock-skew-ms", "TROUPE_MAX_CLOCK_SKEW_MS"),
        ("--agent-silence-ms", "TROUPE_AGENT_SILENCE_MS"),
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
        assert!(
            help.contains(&format!("env: {env}")),
            "{env} missing from --help"
        );
    }
    for default in [
        "127.0.0.1:8080",
        "[default: 7]",
        "[default: 8388608]",
        "troupe-control-plane.sqlite",
        "[default: 15000]",
    ] {
        assert!(
            help.contains(default),
            "default {default} missing from --help"
        );
    }
}

#[test]
fn a_bad_agent_silence_from_the_environment_stops_the_start_saying_what_is_allowed() {
    for bad in ["0", "ten"] {
        let output = Command::new(env!("CARGO_BIN_EXE_troupe-server"))
            .env("TROUPE_AGENT_SILENCE_MS", bad)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("--agent-silence-ms")
                && stderr.contains("from 3000")
                && stderr.contains("to 86400000"),
            "{bad}: {stderr}"
        );
    }
}

#[test]
fn sigterm_ends_live_streams_and_exits_cleanly() {
    let file = TestSqliteFile::new();
    let mut server = start(&[("--sqlite-path", file.path().to_str().unwrap())]);

    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .write_all(b"GET /api/v1/events/stream?type=MemberUp HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // The response head and the `retry:` line arrive before any event: the stream is open.
    while !line.starts_with("retry:") {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "stream ended early"
        );
    }

    let batch = BatchBuilder::new("app", "a:1", 1)
        .member(
            1,
            troupe_protocol::EventBody::MemberLeft,
            "a:1",
            troupe_protocol::MemberStatus::Leaving,
            &[],
        )
        .member(
            2,
            troupe_protocol::EventBody::MemberUp,
            "b:1",
            troupe_protocol::MemberStatus::Up,
            &[],
        )
        .build();
    let mut client = HttpClient::new(server.addr);
    let ack = client
        .request(
            "POST",
            "/api/v1/ingest",
            Some(TOKEN),
            &serde_json::to_vec(&batch).unwrap(),
        )
        .unwrap();
    assert_eq!(ack.status, 200, "{}", ack.body);

    let mut seen = Vec::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "stream ended before the event"
        );
        if line.contains("event: ") || line.contains("data: ") {
            seen.push(line.trim().to_owned());
        }
        if line.contains("data: ") {
            break;
        }
    }
    assert!(
        seen[0].ends_with("event: MemberUp"),
        "filtered to MemberUp: {seen:?}"
    );
    assert!(seen[1].contains(r#""member":{"address":"b:1""#), "{seen:?}");

    let status = server.terminate();
    assert!(status.success(), "exit status {status}");
    // The live stream was ended by the shutdown: reading reaches its end.
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
}

/// An agent's retry discipline: resend the same sequence until it is acknowledged.
fn send_until_acknowledged(client: &mut HttpClient, body: &[u8]) -> Option<IngestAck> {
    let response = client
        .request("POST", "/api/v1/ingest", Some(TOKEN), body)
        .ok()?;
    (response.status == 200).then(|| serde_json::from_str(&response.body).unwrap())
}

#[test]
fn server_restarted_mid_ingest_loses_no_acknowledged_batch() {
    const BATCHES: u64 = 60;
    const PER_BATCH: i64 = 50;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(TestDatabase::create());
    let storage = [("--database-url", db.url())];
    let mut server = start(&storage);
    let batches: Vec<Vec<u8>> = (1..=BATCHES)
        .map(|sequence| {
            let mut batch = BatchBuilder::new("app", "a:1", sequence).sent_at(1);
            for i in 0..PER_BATCH {
                batch = batch.dead_letter(sequence as i64 * 1000 + i, "/user/x", "T");
            }
            serde_json::to_vec(&batch.build()).unwrap()
        })
        .collect();

    let mut client = HttpClient::new(server.addr);
    let mut acknowledged = 0u64;
    let mut next = 0usize;
    // Half the batches, then SIGTERM while the agent keeps sending.
    while next < batches.len() / 2 {
        if send_until_acknowledged(&mut client, &batches[next]).is_some() {
            acknowledged += 1;
            next += 1;
        }
    }
    let (done_tx, done_rx) = mpsc::channel();
    let pid = server.child.id();
    std::thread::spawn(move || {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let _ = done_tx.send(());
    });
    // Keep sending until the server stops answering.
    while next < batches.len() {
        match send_until_acknowledged(&mut client, &batches[next]) {
            Some(_) => {
                acknowledged += 1;
                next += 1;
            }
            None => break,
        }
    }
    done_rx.recv().unwrap();
    assert!(server.child.wait().unwrap().success());

    // A new server on the same database; the agent resends from its first unacknowledged batch
    // and also repeats the last acknowledged one, as an agent that lost the ack would.
    let server = start(&storage);
    let mut client = HttpClient::new(server.addr);
    let replay_from = next.saturating_sub(1);
    let mut committed_unacknowledged = 0u64;
    for (index, body) in batches.iter().enumerate().skip(replay_from) {
        let ack = send_until_acknowledged(&mut client, body).expect("restarted server answers");
        if !ack.duplicate {
            acknowledged += 1;
        } else if index == next {
            // The batch in flight when the server stopped was committed but its answer was
            // cut off (the shutdown timeout can end a slow request after its commit): the
            // resend is recognised and it is still stored once.
            committed_unacknowledged += 1;
        } else {
            assert_eq!(
                index, replay_from,
                "only the repeated batch and the one in flight can be duplicates"
            );
        }
    }
    assert_eq!(
        acknowledged + committed_unacknowledged,
        BATCHES,
        "every batch acknowledged as new exactly once (or committed just before the stop)"
    );

    let store = runtime.block_on(db.store()).unwrap();
    let totals = runtime.block_on(store.totals()).unwrap();
    assert_eq!(totals.batches, BATCHES as i64);
    assert_eq!(totals.dead_letters, BATCHES as i64 * PER_BATCH);
    runtime.block_on(store.close());
    drop(server);
}

/// Issue 14, item 10: one batch of 60,000 dead letters (under the 8 MiB body limit) on SQLite
/// while four other agents keep sending small batches. Every small batch is stored within a
/// second or refused with 503 and `Retry-After`; none gets a 500; the small batches are
/// stored while the big one is being written, and everything is stored once.
#[test]
fn a_big_batch_on_sqlite_never_starves_small_ones() {
    const BIG: i64 = 60_000;
    const SENDERS: usize = 4;
    const SMALL: i64 = 5;
    let file = TestSqliteFile::new();
    let path = file.path().to_str().unwrap().to_owned();
    let server = start(&[("--sqlite-path", &path)]);
    let addr = server.addr;
    let mut big = BatchBuilder::new("app", "big:1", 1).sent_at(1);
    for i in 0..BIG {
        big = big.dead_letter(1_000 + i, "/user/x", "T");
    }
    let big = serde_json::to_vec(&big.build()).unwrap();
    assert!(big.len() < 8 * 1024 * 1024, "{} bytes", big.len());

    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let started = std::time::Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|n| {
            let writing = std::sync::Arc::clone(&writing);
            std::thread::spawn(move || {
                let mut client = HttpClient::new(addr);
                // (sent, answered) of each stored batch, as offsets from `started`.
                let mut stored = Vec::new();
                let mut refused = 0u32;
                let mut sequence = 1u64;
                // Keep sending while the big batch is written, and a little after.
                while writing.load(std::sync::atomic::Ordering::SeqCst) || stored.len() < 3 {
                    let mut batch = BatchBuilder::new("app", &format!("small-{n}:1"), sequence);
                    for i in 0..SMALL {
                        batch = batch.dead_letter(sequence as i64 * 100 + i, "/user/y", "U");
                    }
                    let body = serde_json::to_vec(&batch.build()).unwrap();
                    let sent = std::time::Instant::now();
                    let response = client
                        .request("POST", "/api/v1/ingest", Some(TOKEN), &body)
                        .expect("the server answers");
                    let took = sent.elapsed();
                    match response.status {
                        200 => {
                            assert!(
                                took < Duration::from_secs(1),
                                "a small batch was stored after {took:?}"
                            );
                            stored.push((sent - started, started.elapsed()));
                            sequence += 1;
                        }
                        503 => {
                            assert!(
                                response.retry_after.is_some(),
                                "503 without Retry-After: {response:?}"
                            );
                            refused += 1;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        status => panic!("a small batch got {status}: {}", response.body),
                    }
                    assert!(
                        started.elapsed() < Duration::from_secs(120),
                        "bounded in time"
                    );
                }
                (stored, refused)
            })
        })
        .collect();
    // The small senders are under way; then the big batch, resent on 503 as an agent would.
    std::thread::sleep(Duration::from_millis(200));
    let mut client = HttpClient::new(addr);
    let big_started = std::time::Instant::now();
    let big_window_start = big_started - started;
    let big_took = loop {
        let response = client
            .request("POST", "/api/v1/ingest", Some(TOKEN), &big)
            .expect("the server answers");
        match response.status {
            200 => break big_started.elapsed(),
            503 => std::thread::sleep(Duration::from_millis(100)),
            status => panic!("the big batch got {status}: {}", response.body),
        }
        assert!(big_started.elapsed() < Duration::from_secs(60));
    };
    let big_window_end = started.elapsed();
    writing.store(false, std::sync::atomic::Ordering::SeqCst);
    let mut small_stored = 0i64;
    let mut during = 0usize;
    let mut slowest = Duration::ZERO;
    let mut refused = 0u32;
    for sender in senders {
        let (stored, r) = sender.join().expect("sender");
        small_stored += stored.len() as i64;
        during += stored
            .iter()
            .filter(|(sent, answered)| *sent >= big_window_start && *answered <= big_window_end)
            .count();
        slowest = slowest.max(
            stored
                .iter()
                .map(|(sent, answered)| *answered - *sent)
                .max()
                .unwrap_or_default(),
        );
        refused += r;
    }
    eprintln!(
        "60,000 dead letters stored in {big_took:?}; small batches: {small_stored} stored \
         ({during} while it was written, slowest {slowest:?}), {refused} refused with 503"
    );
    assert!(
        during >= SENDERS,
        "small batches are stored while the big one is written: {during} \
         (it took {big_took:?})"
    );
    drop(server);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let store = runtime.block_on(file.store()).unwrap();
    let totals = runtime.block_on(store.totals()).unwrap();
    assert_eq!(totals.dead_letters, BIG + small_stored * SMALL);
    assert_eq!(totals.batches, 1 + small_stored);
}
