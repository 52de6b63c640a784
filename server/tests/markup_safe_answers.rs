//! Against the real server (HTTP on loopback, the production middleware stack): every answer
//! carries `X-Content-Type-Options: nosniff` (every operation of the OpenAPI document with and
//! without credentials, every dashboard page, assets, 404, 405, the viewer gate's 401, both
//! live streams), and no JSON answer or live-stream event holds a raw `<`, `>` or `&` while
//! every client still reads back exactly the hostile string an agent reported (the corpus of
//! `tests/hostile/` in every field of a batch, as `\u003c`, `\u003e`, `\u0026`).

#[path = "support/hostile.rs"]
mod hostile;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use troupe_server::testing::TestSqliteFile;
use troupe_server::{App, Config};

use hostile::{encoded, hostile_batch};

const INGEST: &str = "answers-ingest";
const ADMIN: &str = "answers-admin";
const VIEWER: &str = "answers-viewer";

/// A running server on its own SQLite file; the guard keeps file and task.
async fn server(viewer: Option<&str>) -> (String, Box<dyn std::any::Any + Send>) {
    let mut config = Config::defaults();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest_token = Some(INGEST.to_owned());
    config.admin_token = Some(ADMIN.to_owned());
    config.viewer_token = viewer.map(str::to_owned);
    config.enable_member_operations = true;
    config.retention_days = 0;
    config.workers = Some(2);
    let file = TestSqliteFile::new();
    config.sqlite_path = file.path().to_owned();
    let app = App::build(config).await.expect("server starts");
    let base = format!("http://{}", app.local_addr());
    let task = tokio::spawn(app.run());
    (base, Box::new((file, task)))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Every string of a JSON value, keys included.
fn strings(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.insert(k.clone());
                strings(v, out);
            }
        }
        _ => {}
    }
}

/// One answer, checked: `nosniff`, and a JSON body with no raw markup character. Returns the
/// status and the parsed JSON body (if it is JSON).
async fn checked(
    what: &str,
    response: reqwest::Response,
    shown: &mut BTreeSet<String>,
) -> (u16, Option<Value>) {
    let status = response.status().as_u16();
    assert_eq!(
        response
            .headers()
            .get("x-content-type-options")
            .map(|v| v.to_str().unwrap().to_owned())
            .as_deref(),
        Some("nosniff"),
        "{what}: {status} says nosniff"
    );
    assert!(status < 500, "{what}: {status}");
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.text().await.expect("a body");
    if !content_type.starts_with("application/json") {
        return (status, None);
    }
    assert!(
        !body.contains(['<', '>', '&']),
        "{what}: {status}: raw markup characters in JSON: {}",
        &body[..body.len().min(400)]
    );
    let value: Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: {e}: {body}"));
    strings(&value, shown);
    (status, Some(value))
}

/// Opens a live stream: 200, `nosniff`; the cursor is fixed when the answer starts, so what
/// is stored after this returns is in it.
async fn open_stream(url: &str) -> reqwest::Response {
    let response = reqwest::Client::new()
        .get(url)
        .send()
        .await
        .expect("stream request");
    assert_eq!(response.status(), 200, "{url}");
    assert_eq!(
        response.headers()["x-content-type-options"],
        "nosniff",
        "{url} says nosniff"
    );
    response
}

/// The strings of the `data:` lines of an open stream, read for `wait` or until `enough`
/// holds of them; fails on a raw markup character in any.
async fn read_stream(
    url: &str,
    mut response: reqwest::Response,
    wait: Duration,
    enough: impl Fn(&BTreeSet<String>) -> bool,
) -> BTreeSet<String> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut text = String::new();
    let mut shown = BTreeSet::new();
    while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, response.chunk())
        .await
        .map(|chunk| chunk.expect("stream readable"))
    {
        text.push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            for data in block.lines().filter_map(|l| l.strip_prefix("data: ")) {
                assert!(
                    !data.contains(['<', '>', '&']),
                    "{url}: raw markup characters in an event: {data}"
                );
                let value: Value = serde_json::from_str(data).expect("event data is JSON");
                strings(&value, &mut shown);
            }
        }
        if enough(&shown) {
            break;
        }
    }
    shown
}

/// The corpus strings an agent may report (a NUL is refused everywhere; see `hostile_input`).
fn reportable() -> Vec<String> {
    let mut seen = BTreeSet::new();
    hostile::strings()
        .into_iter()
        .map(|p| p.text)
        .filter(|s| !s.contains('\0') && !s.trim().is_empty() && seen.insert(s.clone()))
        .collect()
}

#[tokio::test]
async fn every_answer_says_nosniff_and_no_json_answer_or_event_holds_raw_markup() {
    let (base, _guard) = server(None).await;
    let http = reqwest::Client::new();
    let corpus = reportable();
    let t = now();

    // The live stream opens before the reports, so it carries them as they are stored.
    let stream = {
        // Every cluster: `app` does not exist yet (a filter on it would be a 404).
        let url = format!("{base}/api/v1/events/stream");
        let response = open_stream(&url).await;
        let corpus = corpus.clone();
        tokio::spawn(async move {
            read_stream(&url, response, Duration::from_secs(60), |shown| {
                corpus.iter().all(|s| shown.contains(s))
            })
            .await
        })
    };

    let mut accepted = Vec::new();
    for p in &corpus {
        let batch = hostile_batch("app", p, t);
        let response = http
            .post(format!("{base}/api/v1/ingest"))
            .bearer_auth(INGEST)
            .json(&batch)
            .send()
            .await
            .unwrap();
        let mut shown = BTreeSet::new();
        let (status, body) = checked(&format!("ingest {p:?}"), response, &mut shown).await;
        match status {
            200 => accepted.push(p.clone()),
            400 => {
                let error = body.expect("a JSON error")["error"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(!error.is_empty(), "{p:?}");
            }
            other => panic!("ingest {p:?}: {other}"),
        }
    }
    assert!(
        accepted.len() * 10 >= corpus.len() * 9,
        "most of the corpus is reportable: {} of {}",
        accepted.len(),
        corpus.len()
    );

    // Every documented operation, with its parameters filled from the corpus, without and with
    // the credentials it asks for.
    let document: Value = http
        .get(format!("{base}/api/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let hostile = encoded(&accepted[0]);
    let mut shown = BTreeSet::new();
    let mut answers = 0;
    for (path, operations) in document["paths"].as_object().unwrap() {
        if path.ends_with("/events/stream") || path.ends_with("/domain-events") {
            continue; // Streams: below.
        }
        let mut uri = path.clone();
        for (name, value) in [
            ("{cluster}", "app".to_owned()),
            ("{address}", hostile.clone()),
            ("{name}", hostile.clone()),
        ] {
            uri = uri.replace(name, &value);
        }
        // Other parameters (lease names, hosts, keys) get a hostile spelling too.
        while let (Some(open), Some(close)) = (uri.find('{'), uri.find('}')) {
            uri.replace_range(open..=close, &hostile);
        }
        for method in operations.as_object().unwrap().keys() {
            let method = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .unwrap_or_else(|_| panic!("{path}: {method}"));
            for token in [None, Some(ADMIN), Some(INGEST)] {
                let mut request = http.request(method.clone(), format!("{base}{uri}"));
                if let Some(token) = token {
                    request = request.bearer_auth(token);
                }
                let what = format!("{method} {uri} ({token:?})");
                checked(&what, request.send().await.unwrap(), &mut shown).await;
                answers += 1;
            }
        }
    }
    // The dashboard, its assets, and what no route serves.
    let c = "app";
    let n = encoded(&accepted[0]);
    let mut pages = vec![
        "/".to_owned(),
        "/ui".to_owned(),
        format!("/ui/?cluster={c}"),
        format!("/ui/timeline?cluster={c}"),
        format!("/ui/singletons?cluster={c}"),
        format!("/ui/routers?cluster={c}"),
        format!("/ui/dead-letters?cluster={c}"),
        format!("/ui/node?cluster={c}&node={n}"),
        format!("/ui/map?cluster={c}"),
        format!("/ui/timeline?cluster={c}&kind={n}"),
        format!("/ui/assets/{n}"),
        format!("/nowhere/{n}"),
        format!("/api/v1/nowhere/{n}"),
        format!("/management/{c}/cluster/nowhere"),
    ];
    let overview = http.get(format!("{base}/ui/")).send().await.unwrap();
    let overview = overview.text().await.unwrap();
    for link in overview.split("\"/ui/assets/").skip(1) {
        pages.push(format!("/ui/assets/{}", &link[..link.find('"').unwrap()]));
    }
    assert!(pages.len() > 15, "the overview links its assets");
    for page in &pages {
        checked(
            page,
            http.get(format!("{base}{page}")).send().await.unwrap(),
            &mut shown,
        )
        .await;
        answers += 1;
    }
    let (status, _) = checked(
        "POST /api/v1/clusters",
        http.post(format!("{base}/api/v1/clusters"))
            .send()
            .await
            .unwrap(),
        &mut shown,
    )
    .await;
    assert_eq!(status, 405);

    // Each accepted string was read back exactly from the JSON answers and from the stream.
    let missing: Vec<&String> = accepted.iter().filter(|s| !shown.contains(*s)).collect();
    assert!(
        missing.is_empty(),
        "not read back from the API: {missing:?}"
    );
    let streamed = stream.await.unwrap();
    let missing: Vec<&String> = accepted.iter().filter(|s| !streamed.contains(*s)).collect();
    assert!(
        missing.is_empty(),
        "not read back from the live stream: {missing:?}"
    );
    // The opening snapshot of both streams (members by their hostile addresses).
    let url = format!("{base}/api/v1/events/stream?cluster=app&snapshot=true");
    let snapshot = read_stream(
        &url,
        open_stream(&url).await,
        Duration::from_secs(5),
        |shown| shown.contains("CurrentClusterState") || shown.len() > 10,
    )
    .await;
    assert!(
        snapshot.contains(&accepted[0]),
        "the snapshot names the members"
    );
    let url = format!("{base}/management/app/cluster/domain-events?snapshot=true");
    let domain = read_stream(
        &url,
        open_stream(&url).await,
        Duration::from_secs(5),
        |shown| shown.contains(&accepted[0]),
    )
    .await;
    assert!(
        domain.contains(&accepted[0]),
        "domain events name the members"
    );
    println!(
        "{answers} answers and pages checked, {} of {} corpus strings reported and read back from the API and the stream",
        accepted.len(),
        corpus.len()
    );
}

#[tokio::test]
async fn the_viewer_gates_refusal_says_nosniff_too() {
    let (base, _guard) = server(Some(VIEWER)).await;
    let http = reqwest::Client::new();
    let mut shown = BTreeSet::new();
    for page in [
        "/ui/",
        "/api/v1/clusters",
        "/api/v1/events/stream",
        "/management/app/cluster/members",
    ] {
        let (status, _) = checked(
            page,
            http.get(format!("{base}{page}")).send().await.unwrap(),
            &mut shown,
        )
        .await;
        assert_eq!(status, 401, "{page}");
        let with = http
            .get(format!("{base}{page}"))
            .bearer_auth(VIEWER)
            .send()
            .await
            .unwrap();
        if page.ends_with("/stream") {
            // A stream does not end: its header is what is checked.
            assert_eq!(with.status(), 200, "{page}");
            assert_eq!(
                with.headers()["x-content-type-options"],
                "nosniff",
                "{page}"
            );
            continue;
        }
        let (status, _) = checked(page, with, &mut shown).await;
        assert!(status == 200 || status == 404, "{page}: {status}");
    }
}
