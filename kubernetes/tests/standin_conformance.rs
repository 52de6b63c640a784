//! The stand-in API server against recorded API-server responses (`tests/fixtures/`): the same
//! fields with the same types, the same `Status` codes, reasons and messages, the same watch
//! stream — and the semantics the real kube client relies on.

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::Value;
use troupe_kubernetes::api_code;
use troupe_kubernetes::standin::StandIn;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn json_fixture(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Every (path, JSON type) in `value`; array elements share the path `[]`.
fn shape(value: &Value) -> BTreeSet<(String, &'static str)> {
    fn walk(value: &Value, path: String, out: &mut BTreeSet<(String, &'static str)>) {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(items) => {
                for item in items {
                    walk(item, format!("{path}[]"), out);
                }
                "array"
            }
            Value::Object(map) => {
                for (key, item) in map {
                    // Keys under these maps are data, not schema.
                    let key = if path.ends_with(".labels")
                        || path.ends_with(".annotations")
                        || path.contains("fieldsV1")
                    {
                        "*"
                    } else {
                        key
                    };
                    walk(item, format!("{path}.{key}"), out);
                }
                "object"
            }
        };
        out.insert((path, kind));
    }
    let mut out = BTreeSet::new();
    walk(value, String::new(), &mut out);
    out
}

/// The stand-in's answer has the recorded answer's shape; only `managedFields` (which the
/// stand-in does not keep) may be missing.
fn assert_same_shape(recorded: &Value, ours: &Value, what: &str) {
    let recorded = shape(recorded);
    let ours = shape(ours);
    let extra: Vec<_> = ours.difference(&recorded).collect();
    assert!(
        extra.is_empty(),
        "{what}: fields the API server does not send: {extra:?}"
    );
    let missing: Vec<_> = recorded
        .difference(&ours)
        .filter(|(path, _)| !path.contains("managedFields"))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: fields the API server sends but the stand-in does not: {missing:?}"
    );
}

/// One raw HTTP request (no kube client in between), to see the exact bytes.
async fn raw(server: &StandIn, method: &str, path: &str, body: Option<&Value>) -> (u16, Bytes) {
    let addr = server.url().trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let body = body.map_or_else(Vec::new, |b| serde_json::to_vec(b).unwrap());
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

/// The first `n` lines of a watch stream.
async fn watch_lines(server: &StandIn, query: &str, n: usize) -> Vec<Value> {
    let addr = server.url().trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .uri(format!("{LEASES}?{query}"))
        .header("host", addr)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "a watch answers 200");
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    let mut lines = Vec::new();
    while lines.len() < n {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("watch events arrive")
            .expect("the stream stays open")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.extend_from_slice(&data);
        }
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            lines.push(serde_json::from_slice(&line).expect("each line is one JSON event"));
        }
    }
    lines
}

fn lease(name: &str, holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(chrono::Utc::now())),
            renew_time: Some(MicroTime(chrono::Utc::now())),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }),
    }
}

fn without(mut status: Value, field: &str) -> Value {
    status.as_object_mut().unwrap().remove(field);
    status
}

#[tokio::test]
async fn a_lease_read_back_has_the_recorded_shape() {
    let server = StandIn::start().await.unwrap();
    let api: Api<Lease> = Api::default_namespaced(server.client());
    api.create(
        &PostParams::default(),
        &lease("web-leader", "web-7d9f8c6b5-x2k4q"),
    )
    .await
    .unwrap();
    let (status, body) = raw(&server, "GET", &format!("{LEASES}/web-leader"), None).await;
    assert_eq!(status, 200);
    let ours: Value = serde_json::from_slice(&body).unwrap();
    assert_same_shape(&json_fixture("lease_get.json"), &ours, "GET lease");
    assert_eq!(ours["kind"], "Lease");
    assert_eq!(ours["apiVersion"], "coordination.k8s.io/v1");
    // MicroTime keeps six fractional digits, as the API server writes it.
    let renew = ours["spec"]["renewTime"].as_str().unwrap();
    assert_eq!(renew.len(), "2026-11-02T09:20:41.902117Z".len(), "{renew}");
}

#[tokio::test]
async fn error_answers_are_the_recorded_status_objects() {
    let server = StandIn::start().await.unwrap();
    let api: Api<Lease> = Api::default_namespaced(server.client());

    let (status, body) = raw(&server, "GET", &format!("{LEASES}/missing"), None).await;
    assert_eq!(status, 404);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json_fixture("status_not_found.json")
    );

    let created = api
        .create(&PostParams::default(), &lease("web-leader", "a"))
        .await
        .unwrap();
    let again = serde_json::to_value(lease("web-leader", "b")).unwrap();
    let (status, body) = raw(&server, "POST", LEASES, Some(&again)).await;
    assert_eq!(status, 409);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json_fixture("status_already_exists.json")
    );

    let mut current = created.clone();
    current.spec.as_mut().unwrap().holder_identity = Some("c".into());
    api.replace("web-leader", &PostParams::default(), &current)
        .await
        .unwrap();
    // `created` now carries a stale resourceVersion.
    let stale = serde_json::to_value(&created).unwrap();
    let (status, body) = raw(
        &server,
        "PUT",
        &format!("{LEASES}/web-leader"),
        Some(&stale),
    )
    .await;
    assert_eq!(status, 409);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json_fixture("status_conflict.json")
    );

    let (status, body) = raw(&server, "DELETE", &format!("{LEASES}/web-leader"), None).await;
    assert_eq!(status, 200);
    let ours: Value = serde_json::from_slice(&body).unwrap();
    let recorded = json_fixture("status_delete_success.json");
    assert_same_shape(&recorded, &ours, "DELETE");
    assert_eq!(
        without(ours["details"].clone(), "uid"),
        without(recorded["details"].clone(), "uid")
    );
    assert_eq!(ours["status"], "Success");

    // And through the kube client: the codes it branches on.
    let error = api.get("web-leader").await.unwrap_err();
    assert_eq!(api_code(&error), Some(404));
    let error = api
        .delete("web-leader", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(api_code(&error), Some(404));
}

#[tokio::test]
async fn a_list_has_the_recorded_shape_and_filters_by_label() {
    let server = StandIn::start().await.unwrap();
    let api: Api<Lease> = Api::default_namespaced(server.client());
    let mut member = lease(
        "demo-00000000075bcd15",
        "troupe://demo@10.0.0.7:7355#123456789",
    );
    member.metadata.labels = Some([("troupe.dev/cluster".to_owned(), "demo".to_owned())].into());
    member.metadata.annotations = Some([("troupe.dev/address".to_owned(), "x".to_owned())].into());
    api.create(&PostParams::default(), &member).await.unwrap();
    let mut other = lease("other", "x");
    other.metadata.labels = Some([("troupe.dev/cluster".to_owned(), "else".to_owned())].into());
    api.create(&PostParams::default(), &other).await.unwrap();

    let (status, body) = raw(
        &server,
        "GET",
        &format!("{LEASES}?labelSelector=troupe.dev%2Fcluster%3Ddemo"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let ours: Value = serde_json::from_slice(&body).unwrap();
    assert_same_shape(&json_fixture("lease_list.json"), &ours, "LIST");
    assert_eq!(ours["items"].as_array().unwrap().len(), 1);

    let listed = api
        .list(&ListParams::default().labels("troupe.dev/cluster=demo"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].metadata.name.as_deref(),
        Some("demo-00000000075bcd15")
    );
    let not_demo = api
        .list(&ListParams::default().labels("troupe.dev/cluster!=demo"))
        .await
        .unwrap();
    assert_eq!(not_demo.items.len(), 1);
    let set_based = api
        .list(&ListParams::default().labels("troupe.dev/cluster in (demo)"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&set_based), Some(400));
}

#[tokio::test]
async fn a_watch_streams_the_recorded_events_and_expires_old_versions() {
    let server = StandIn::start().await.unwrap();
    let client = server.client();
    let api: Api<Lease> = Api::default_namespaced(client);
    let start = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    let query =
        format!("watch=1&resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=30");
    let api2 = api.clone();
    let writes = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let created = api2
            .create(&PostParams::default(), &lease("web-leader", "a"))
            .await
            .unwrap();
        let mut renewed = created.clone();
        renewed.spec.as_mut().unwrap().renew_time = Some(MicroTime(chrono::Utc::now()));
        api2.replace("web-leader", &PostParams::default(), &renewed)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        api2.delete("web-leader", &DeleteParams::default())
            .await
            .unwrap();
    });
    let lines = watch_lines(&server, &query, 4).await;
    writes.await.unwrap();
    let recorded: Vec<Value> = fixture("watch_events.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "BOOKMARK", "DELETED"]);
    for (ours, recorded) in lines.iter().zip(&recorded) {
        assert_same_shape(recorded, ours, ours["type"].as_str().unwrap());
    }
    let version = |l: &Value| {
        l["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(
        lines.windows(2).all(|w| version(&w[0]) <= version(&w[1])),
        "versions never go back"
    );

    // Resuming after the MODIFIED event replays only what followed.
    let after = version(&lines[1]);
    let resumed = watch_lines(&server, &format!("watch=1&resourceVersion={after}"), 1).await;
    assert_eq!(resumed[0]["type"], "DELETED");

    // After compaction an old version gets the recorded 410 Expired ERROR event.
    server.compact();
    let expired = watch_lines(&server, &format!("watch=1&resourceVersion={start}"), 1).await;
    let recorded = json_fixture_line("watch_expired.jsonl");
    assert_same_shape(&recorded, &expired[0], "ERROR");
    assert_eq!(
        without(expired[0]["object"].clone(), "message"),
        without(recorded["object"].clone(), "message")
    );
    assert!(
        expired[0]["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version: ")
    );
}

fn json_fixture_line(name: &str) -> Value {
    serde_json::from_str(fixture(name).lines().next().unwrap()).unwrap()
}

#[tokio::test]
async fn the_kube_client_watches_resumes_and_sees_410() {
    let server = StandIn::start().await.unwrap();
    let api: Api<Lease> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &lease("first", "a"))
        .await
        .unwrap();
    // From "0": the current objects first.
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    let Some(Ok(WatchEvent::Added(first))) = stream.next().await else {
        panic!("the existing Lease is replayed as ADDED")
    };
    assert_eq!(first.metadata.name.as_deref(), Some("first"));
    let version = first.metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &lease("second", "b"))
        .await
        .unwrap();
    let next = loop {
        match stream.next().await {
            Some(Ok(WatchEvent::Added(lease))) => break lease,
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(next.metadata.name.as_deref(), Some("second"));
    // Resume from the first version: the second Lease comes again, nothing before it.
    let mut resumed = api
        .watch(&WatchParams::default().timeout(10), &version)
        .await
        .unwrap()
        .boxed();
    let Some(Ok(WatchEvent::Added(again))) = resumed.next().await else {
        panic!("resumed watch replays later events")
    };
    assert_eq!(again.metadata.name.as_deref(), Some("second"));
    server.compact();
    let mut old = api
        .watch(&WatchParams::default().timeout(10), &version)
        .await
        .unwrap()
        .boxed();
    match old.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn updates_check_the_resource_version_and_validation_matches_the_api_server() {
    let server = StandIn::start().await.unwrap();
    let api: Api<Lease> = Api::default_namespaced(server.client());
    let created = api
        .create(&PostParams::default(), &lease("l", "a"))
        .await
        .unwrap();
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let updated = api
        .replace("l", &PostParams::default(), &mine)
        .await
        .unwrap();
    assert!(
        updated
            .metadata
            .resource_version
            .as_ref()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > created
                .metadata
                .resource_version
                .as_ref()
                .unwrap()
                .parse::<u64>()
                .unwrap()
    );
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    // A no-op update keeps the version, as the API server does.
    let same = api
        .replace("l", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version,
        updated.metadata.resource_version
    );
    // Stale version: 409.
    let error = api
        .replace("l", &PostParams::default(), &mine)
        .await
        .unwrap_err();
    assert_eq!(api_code(&error), Some(409));
    // Update of a missing Lease: 404 (Leases are not created by PUT).
    let mut ghost = lease("ghost", "a");
    ghost.metadata.resource_version = Some("1".into());
    assert_eq!(
        api_code(
            &api.replace("ghost", &PostParams::default(), &ghost)
                .await
                .unwrap_err()
        ),
        Some(404)
    );
    // Validation: 422 Invalid.
    let mut bad = lease("Bad_Name", "a");
    bad.metadata.name = Some("Bad_Name".into());
    let raw_bad = serde_json::to_value(&bad).unwrap();
    let (status, body) = raw(&server, "POST", LEASES, Some(&raw_bad)).await;
    assert_eq!(status, 422);
    let status_object: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status_object["reason"], "Invalid");
    let mut zero = lease("zero", "a");
    zero.spec.as_mut().unwrap().lease_duration_seconds = Some(0);
    let error = api.create(&PostParams::default(), &zero).await.unwrap_err();
    assert_eq!(api_code(&error), Some(422));
    // Delete preconditions.
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: created.metadata.resource_version.clone(),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(
        api_code(&api.delete("l", &stale).await.unwrap_err()),
        Some(409)
    );
    assert!(api.delete("l", &DeleteParams::default()).await.is_ok());
}
