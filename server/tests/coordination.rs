//! The coordination API (`/api/v1/coordination/…`) through the HTTP client of
//! troupe-coordination: the shared conformance suite against a real server backed by
//! PostgreSQL (`TROUPE_TEST_DATABASE_URL`), by etcd (`TROUPE_TEST_ETCD_ENDPOINTS`) and by the
//! SQLite store's grants (the directory in memory); every
//! route refuses a missing or wrong token; malformed input gets 400 saying what is allowed; a
//! client cut off from the server reports the loss before another owner can acquire.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use troupe_coordination::http::HttpCoordination;
use troupe_lease::lease::{LeaseProvider, LeaseSettings};
use troupe_lease::testing::conformance::Backend;
use troupe_server::testing::{TestDatabase, TestSqliteFile};
use troupe_server::{App, Config};

#[path = "support/cut_proxy.rs"]
mod cut_proxy;
use cut_proxy::CutProxy;

const TOKEN: &str = "coordination-secret";

fn unique(tag: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!(
        "{tag}_{secs}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn etcd_endpoints() -> Vec<String> {
    std::env::var("TROUPE_TEST_ETCD_ENDPOINTS")
        .unwrap_or_else(|_| "http://127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

enum Store {
    Postgres,
    Etcd,
    Sqlite,
}

/// A server on a free port, running until the test's runtime ends (which drops its database
/// or file too). Answers its base URL.
async fn server(store: Store, token: Option<&str>) -> String {
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.coordination_token = token.map(str::to_owned);
    config.ingest_token = Some("ingest".to_owned());
    config.workers = Some(2);
    config.shutdown_timeout_secs = 1;
    config.db_max_connections = 4;
    let sqlite = TestSqliteFile::new();
    config.sqlite_path = sqlite.path().to_owned();
    let database = match store {
        Store::Postgres => {
            let database = TestDatabase::create().await;
            config.database_url = Some(database.url().to_owned());
            config.db_max_connections = 12;
            Some(database)
        }
        Store::Etcd => {
            config.etcd_endpoints = etcd_endpoints();
            config.coordination_prefix = format!("/troupe-test/{}/", unique("http"));
            None
        }
        Store::Sqlite => None,
    };
    let app = App::build(config).await.unwrap_or_else(|e| {
        panic!("server starts (TROUPE_TEST_DATABASE_URL / TROUPE_TEST_ETCD_ENDPOINTS): {e}")
    });
    let base = format!("http://{}", app.local_addr());
    tokio::spawn(async move {
        let _keep = (database, sqlite);
        let _ = app.run().await;
    });
    base
}

mod postgres {
    use super::*;

    async fn through_server() -> Backend {
        let base = server(Store::Postgres, Some(TOKEN)).await;
        let client = HttpCoordination::new(&base, TOKEN).unwrap();
        let settings =
            LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(250)).unwrap();
        Backend::new(
            "http+postgres",
            Arc::new(client.leases()),
            Arc::new(client.directory()),
            settings,
        )
        .with_expiry_slack(Duration::from_millis(1000))
    }

    troupe_lease::conformance_tests!(through_server);
}

mod etcd {
    use super::*;

    async fn through_server() -> Backend {
        let base = server(Store::Etcd, Some(TOKEN)).await;
        let client = HttpCoordination::new(&base, TOKEN).unwrap();
        // etcd grants whole seconds.
        let settings =
            LeaseSettings::new(Duration::from_secs(2), Duration::from_millis(500)).unwrap();
        Backend::new(
            "http+etcd",
            Arc::new(client.leases()),
            Arc::new(client.directory()),
            settings,
        )
        .with_expiry_slack(Duration::from_millis(1500))
    }

    troupe_lease::conformance_tests!(through_server);
}

mod sqlite {
    use super::*;

    async fn through_server() -> Backend {
        let base = server(Store::Sqlite, Some(TOKEN)).await;
        let client = HttpCoordination::new(&base, TOKEN).unwrap();
        let settings =
            LeaseSettings::new(Duration::from_secs(1), Duration::from_millis(250)).unwrap();
        Backend::new(
            "http+sqlite",
            Arc::new(client.leases()),
            Arc::new(client.directory()),
            settings,
        )
        .with_expiry_slack(Duration::from_millis(1000))
    }

    troupe_lease::conformance_tests!(through_server);
}

/// Every route, with a valid body.
fn routes() -> Vec<(reqwest::Method, &'static str, Option<serde_json::Value>)> {
    use reqwest::Method;
    use serde_json::json;
    vec![
        (
            Method::POST,
            "/leases/l/acquire",
            Some(json!({"owner": "o", "ttl_ms": 3000})),
        ),
        (
            Method::POST,
            "/leases/l/renew",
            Some(json!({"owner": "o", "token": 1})),
        ),
        (
            Method::POST,
            "/leases/l/release",
            Some(json!({"owner": "o", "token": 1})),
        ),
        (Method::GET, "/leases/l", None),
        (Method::POST, "/claims/a", Some(json!({"host": "h"}))),
        (Method::GET, "/claims/a", None),
        (Method::DELETE, "/claims/a?host=h", None),
        (Method::POST, "/hosts/h/evict", None),
        (Method::GET, "/directory", None),
        (Method::GET, "/directory/watch?after=0&wait_ms=0", None),
    ]
}

async fn send(
    base: &str,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, String) {
    let (status, message, _) = send_coded(base, method, path, token, body).await;
    (status, message)
}

/// Like [`send`], with the error body's `code` too (`""` when there is none).
async fn send_coded(
    base: &str,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, String, String) {
    let mut request =
        reqwest::Client::new().request(method, format!("{base}/api/v1/coordination{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    // Error bodies are `{"error": "...", "status": N, "code": "..."}`: answer the message
    // and the code.
    let body = serde_json::from_str::<serde_json::Value>(&text).ok();
    let field = |name: &str| {
        body.as_ref()
            .and_then(|v| v.get(name).and_then(|e| e.as_str()).map(str::to_owned))
    };
    let code = field("code").unwrap_or_default();
    (status, field("error").unwrap_or(text), code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_a_missing_or_wrong_token() {
    let base = server(Store::Sqlite, Some(TOKEN)).await;
    for (method, path, body) in routes() {
        let (status, text) = send(&base, method.clone(), path, None, body.clone()).await;
        assert_eq!(status, 401, "{method} {path} without a token: {text}");
        assert!(text.contains("missing bearer token"), "{text}");
        let (status, text) = send(&base, method.clone(), path, Some("wrong"), body.clone()).await;
        assert_eq!(status, 401, "{method} {path} with a wrong token: {text}");
        assert!(text.contains("wrong bearer token"), "{text}");
        let (status, text) = send(&base, method.clone(), path, Some(TOKEN), body).await;
        assert_eq!(status, 200, "{method} {path} with the token: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_is_off_without_a_coordination_token() {
    let base = server(Store::Sqlite, None).await;
    for (method, path, body) in routes() {
        let (status, text) = send(&base, method.clone(), path, Some(TOKEN), body).await;
        assert_eq!(status, 403, "{method} {path}: {text}");
        assert!(text.contains("--coordination-token"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_400_saying_what_is_allowed() {
    use reqwest::Method;
    use serde_json::json;
    let base = server(Store::Sqlite, Some(TOKEN)).await;
    let cases: Vec<(Method, &str, Option<serde_json::Value>, &str)> = vec![
        (
            Method::POST,
            "/leases/l/acquire",
            Some(json!({"owner": "o"})),
            r#"expected {"owner": string, "ttl_ms": integer"#,
        ),
        (
            Method::POST,
            "/leases/l/acquire",
            Some(json!({"owner": "o", "ttl_ms": "soon"})),
            "ttl_ms",
        ),
        (
            Method::POST,
            "/leases/l/acquire",
            Some(json!({"owner": "o", "ttl_ms": 1000, "renew_interval_ms": 900})),
            "renew_interval_ms",
        ),
        (
            Method::POST,
            "/leases/l/acquire",
            Some(json!({"owner": "", "ttl_ms": 3000})),
            "owner must not be empty",
        ),
        (
            Method::POST,
            "/leases/l/renew",
            Some(json!({"owner": "o", "token": -1})),
            r#"expected {"owner": string, "token": integer}"#,
        ),
        (
            Method::POST,
            "/claims/a",
            Some(json!({"hots": "h"})),
            r#"expected {"host": string}"#,
        ),
        (
            Method::POST,
            "/claims/a",
            Some(json!({"host": "bad\u{7}host"})),
            "only printable characters are allowed",
        ),
        (Method::DELETE, "/claims/a", None, "?host=<host>"),
        (
            Method::GET,
            "/directory/watch?after=x",
            None,
            "?after=<revision>",
        ),
        (
            Method::GET,
            "/directory/watch?after=0&wait_ms=600000",
            None,
            "at most 60000",
        ),
    ];
    for (method, path, body, says) in cases {
        let (status, text) = send(&base, method.clone(), path, Some(TOKEN), body).await;
        assert_eq!(status, 400, "{method} {path}: {text}");
        assert!(
            text.contains(says),
            "{method} {path}: {text:?} should say {says:?}"
        );
    }
    // Not JSON at all.
    let response = reqwest::Client::new()
        .post(format!("{base}/api/v1/coordination/leases/l/acquire"))
        .bearer_auth(TOKEN)
        .body("owner=o")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert!(
        response
            .text()
            .await
            .unwrap()
            .contains("malformed JSON body")
    );
}

/// Absurd TTLs, renewals and over-long or unprintable owners, names, actor ids and hosts are bad
/// input whatever the backend (a renewal of a grant not held is 409 `not_owner`):
/// 400 with one message naming the value and the allowed range — exactly what
/// `LeaseSettings::new` and the name limits say, so the same on every backend, with the code
/// of the error — never a
/// retryable 503, and nothing granted (u64::MAX milliseconds least of all).
async fn bad_lease_input_gets_400_with_the_shared_message(store: Store, backend: &str) {
    use reqwest::Method;
    use serde_json::json;
    let settings = |ttl_ms: u64, renew_ms: u64| {
        format!(
            "ttl_ms/renew_interval_ms: {}",
            LeaseSettings::new(
                Duration::from_millis(ttl_ms),
                Duration::from_millis(renew_ms)
            )
            .unwrap_err()
        )
    };
    let long_owner = "o".repeat(100 * 1024);
    let long_name = "n".repeat(513);
    let owner_too_long = format!(
        "lease \"l\": lease owner \"{}…\" is 102400 bytes long; at most 512 bytes are allowed",
        "o".repeat(32)
    );
    let cases: Vec<(String, serde_json::Value, String, &str)> = vec![
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "o", "ttl_ms": u64::MAX.to_string()}),
            settings(u64::MAX, u64::MAX / 5),
            "ttl_out_of_range",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "o", "ttl_ms": 999}),
            settings(999, 199),
            "ttl_out_of_range",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "o", "ttl_ms": 3_600_001}),
            settings(3_600_001, 720_000),
            "ttl_out_of_range",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "o", "ttl_ms": 0}),
            settings(0, 0),
            "ttl_out_of_range",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "o", "ttl_ms": 3000, "renew_interval_ms": 10}),
            settings(3000, 10),
            "renew_interval_out_of_range",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "o", "ttl_ms": 3000, "renew_interval_ms": 1001}),
            settings(3000, 1001),
            "renew_interval_out_of_range",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": long_owner, "ttl_ms": 3000}),
            owner_too_long.clone(),
            "owner_too_long",
        ),
        (
            "/leases/l/renew".to_owned(),
            json!({"owner": long_owner, "token": 1}),
            owner_too_long.clone(),
            "owner_too_long",
        ),
        (
            "/leases/l/release".to_owned(),
            json!({"owner": long_owner, "token": 1}),
            owner_too_long,
            "owner_too_long",
        ),
        (
            "/leases/l/acquire".to_owned(),
            json!({"owner": "", "ttl_ms": 3000}),
            "lease \"l\": lease owner must not be empty".to_owned(),
            "owner_empty",
        ),
        (
            "/leases/l/renew".to_owned(),
            json!({"owner": "o\u{1b}", "token": 1}),
            "lease \"l\": lease owner \"o\\u{1b}\" contains the control character '\\u{1b}'; only printable characters are allowed".to_owned(),
            "owner_control_character",
        ),
        (
            format!("/leases/{long_name}/acquire"),
            json!({"owner": "o", "ttl_ms": 3000}),
            format!(
                "lease \"{n}…\": lease name \"{n}…\" is 513 bytes long; at most 512 bytes are allowed",
                n = "n".repeat(32)
            ),
            "name_too_long",
        ),
        (
            "/leases/l/renew".to_owned(),
            json!({"owner": "o", "token": 7}),
            "lease \"l\": not held by \"o\" with token 7; acquire it again".to_owned(),
            "not_owner",
        ),
        (
            format!("/claims/{long_name}"),
            json!({"host": "h"}),
            format!(
                "directory: actor id \"{n}…\" is 513 bytes long; at most 512 bytes are allowed",
                n = "n".repeat(32)
            ),
            "actor_too_long",
        ),
        (
            "/claims/a".to_owned(),
            json!({"host": ""}),
            "directory: host must not be empty".to_owned(),
            "host_empty",
        ),
        (
            format!("/hosts/{long_name}/evict"),
            json!(null),
            format!(
                "directory: host \"{n}…\" is 513 bytes long; at most 512 bytes are allowed",
                n = "n".repeat(32)
            ),
            "host_too_long",
        ),
    ];
    assert!(
        cases[0].2.contains("outside the allowed range 1s to 3600s"),
        "{}",
        cases[0].2
    );
    let base = server(store, Some(TOKEN)).await;
    for (path, body, expected, code) in &cases {
        let body = (!body.is_null()).then(|| body.clone());
        let (status, text, got) = send_coded(&base, Method::POST, path, Some(TOKEN), body).await;
        let want = if *code == "not_owner" { 409 } else { 400 };
        assert_eq!(status, want, "{backend}: POST {path}: {text}");
        assert_eq!(&text, expected, "{backend}: POST {path}");
        assert_eq!(&got, code, "{backend}: POST {path}: the body's code");
    }
    let (status, text) = send(&base, Method::GET, "/leases/l", Some(TOKEN), None).await;
    assert_eq!(status, 200, "{text}");
    let state: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    assert!(
        state.get("holder").is_some_and(serde_json::Value::is_null),
        "{backend}: nothing was granted: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lease_input_gets_the_shared_400_on_sqlite() {
    bad_lease_input_gets_400_with_the_shared_message(Store::Sqlite, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lease_input_gets_the_shared_400_on_postgres() {
    bad_lease_input_gets_400_with_the_shared_message(Store::Postgres, "postgres").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lease_input_gets_the_shared_400_on_etcd() {
    bad_lease_input_gets_400_with_the_shared_message(Store::Etcd, "etcd").await;
}

/// The HTTP client maps the server's error code back to the backend's own variant: etcd's
/// whole-seconds rule, refused by the server's etcd backend, is `LeaseError::Settings`
/// (`unsupported_settings`) at the client too, with the backend's message once (not wrapped
/// in a second `lease "…": `), not a retryable error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_client_gets_the_backends_own_error_by_its_code() {
    use troupe_lease::lease::LeaseError;
    let base = server(Store::Etcd, Some(TOKEN)).await;
    let client = HttpCoordination::new(&base, TOKEN).unwrap();
    let settings =
        LeaseSettings::new(Duration::from_millis(1500), Duration::from_millis(500)).unwrap();
    let lease = client
        .leases()
        .lease("whole-seconds", "owner-a", &settings)
        .unwrap();
    let error = lease.acquire(Box::new(|_| {})).await.unwrap_err();
    assert!(matches!(error, LeaseError::Settings { .. }), "{error:?}");
    assert_eq!(error.code(), "unsupported_settings");
    assert!(!error.is_retryable());
    let text = error.to_string();
    assert!(text.contains("whole number of seconds"), "{text}");
    assert_eq!(text.matches("lease \"whole-seconds\"").count(), 1, "{text}");
    assert!(!lease.holds());
}

/// A client cut off from the server longer than the TTL reports the loss before another owner
/// can acquire, and the next holder's token is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_off_from_the_server_reports_the_loss_before_another_can_acquire() {
    let base = server(Store::Postgres, Some(TOKEN)).await;
    let target = base
        .trim_start_matches("http://")
        .parse()
        .expect("server address");
    let proxy = CutProxy::start(target).await;
    let settings = LeaseSettings::new(Duration::from_secs(3), Duration::from_secs(1)).unwrap();
    let cut_off = HttpCoordination::new(&proxy.endpoint(), TOKEN)
        .unwrap()
        .leases();
    let direct = HttpCoordination::new(&base, TOKEN).unwrap().leases();

    let holder = cut_off.lease("fenced", "cut-off-node", &settings).unwrap();
    let (lost_tx, lost_rx) = std::sync::mpsc::channel();
    let first = holder
        .acquire(Box::new(move |lost| {
            let _ = lost_tx.send((tokio::time::Instant::now(), lost));
        }))
        .await
        .unwrap()
        .expect("a free lease is granted");
    // A few renewals go through.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(holder.holds());
    proxy.cut();
    let cut_at = tokio::time::Instant::now();

    let other = direct.lease("fenced", "other-node", &settings).unwrap();
    let (acquired_at, token) = loop {
        assert!(
            cut_at.elapsed() < Duration::from_secs(10),
            "the server never let the lease go"
        );
        if let Some(token) = other.acquire(Box::new(|_| {})).await.unwrap() {
            break (tokio::time::Instant::now(), token);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let (lost_at, lost) = lost_rx
        .try_recv()
        .expect("the cut-off holder reported the loss before another owner acquired");
    assert!(lost_at < acquired_at);
    assert_eq!(lost.token, first);
    assert!(!holder.holds());
    assert!(token > first, "{token} after {first}");
    assert!(
        acquired_at - cut_at >= settings.ttl() - settings.renew_interval(),
        "another owner acquired {:?} after the cut, before the TTL could pass",
        acquired_at - cut_at
    );
    other.release().await.unwrap();
}
