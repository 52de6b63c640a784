//! The server's own request spans, exported to a real OTLP/HTTP receiver that decodes them:
//! HTTP server spans by the semantic conventions, the caller's `traceparent` honoured, the
//! store's child span with namespaced attributes, `service.version`, and (the real binary)
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` alone is enough to export.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::middleware::from_fn;
use actix_web::test::{TestRequest, call_service, init_service};
use actix_web::{HttpResponse, web};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::mpsc;
use troupe_server::testing::{BatchBuilder, HttpClient, TestSqliteFile};
use troupe_server::{AppState, Config};

#[path = "support/server_process.rs"]
mod server_process;
use server_process::ServerProcess;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP traces receiver at `path` on a free port.
fn receiver(path: &'static str) -> (String, mpsc::UnboundedReceiver<ExportTraceServiceRequest>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let server = actix_web::HttpServer::new(move || {
        let tx = tx.clone();
        actix_web::App::new().route(
            path,
            web::post().to(move |body: web::Bytes| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(ExportTraceServiceRequest::decode(body.as_ref()).unwrap());
                    HttpResponse::Ok()
                        .content_type("application/x-protobuf")
                        .body(ExportTraceServiceResponse::default().encode_to_vec())
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap();
    let addr = server.addrs()[0];
    actix_web::rt::spawn(server.run());
    (format!("http://{addr}"), rx)
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Int(i64),
}

fn attributes(attributes: &[KeyValue]) -> HashMap<String, Value> {
    attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Value::Str(s.clone()),
                any_value::Value::IntValue(i) => Value::Int(*i),
                _ => return None,
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

fn str(value: &str) -> Value {
    Value::Str(value.to_owned())
}

/// Spans (with their resource's attributes) until `wanted` are all seen by name.
async fn collect(
    received: &mut mpsc::UnboundedReceiver<ExportTraceServiceRequest>,
    wanted: &[&str],
) -> (Vec<Span>, HashMap<String, Value>) {
    let mut spans = Vec::new();
    let mut resource = HashMap::new();
    while !wanted
        .iter()
        .all(|w| spans.iter().any(|s: &Span| s.name == *w))
    {
        let request = tokio::time::timeout(Duration::from_secs(30), received.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "spans {wanted:?} not exported within 30 s; got {:?}",
                    spans.iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            })
            .unwrap();
        for resource_spans in request.resource_spans {
            if let Some(r) = &resource_spans.resource {
                resource = attributes(&r.attributes);
            }
            for scope in resource_spans.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    (spans, resource)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[actix_web::test]
async fn requests_are_server_spans_by_the_semantic_conventions_continuing_the_callers_trace() {
    let (base, mut received) = receiver("/v1/traces");
    let mut config = Config::defaults();
    config.otlp.endpoint = Some(base);
    config.ingest_token = Some("t".into());
    let telemetry = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || troupe_server::telemetry::init(&config))
            .await
            .unwrap()
            .expect("telemetry")
    };
    let file = TestSqliteFile::new();
    let store = file.store().await.unwrap();
    let state = AppState::new(config, store.clone()).0;
    let app = init_service(
        actix_web::App::new()
            .wrap(from_fn(troupe_server::observe::request))
            .configure(troupe_server::api::configure(state)),
    )
    .await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let resp = call_service(
        &app,
        TestRequest::get()
            .uri("/api/v1/clusters/nope?x=1")
            .insert_header(("host", "troupe.example:8443"))
            .insert_header(("traceparent", traceparent.as_str()))
            .insert_header(("user-agent", "trace-test/1"))
            .to_request(),
    )
    .await;
    assert_eq!(resp.status(), 404);
    let batch = BatchBuilder::new("app", "10.0.0.1:2552", 7)
        .incarnation(15_365_700_884_095_386_388)
        .build();
    let resp = call_service(
        &app,
        TestRequest::post()
            .uri("/api/v1/ingest")
            .insert_header(("authorization", "Bearer t"))
            .set_json(&batch)
            .to_request(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // The store goes away: the answer is a 503, and the span says it failed.
    store.close().await;
    let resp = call_service(
        &app,
        TestRequest::get().uri("/api/v1/clusters").to_request(),
    )
    .await;
    assert_eq!(resp.status(), 503);
    let telemetry = tokio::task::spawn_blocking(move || {
        telemetry.flush();
        telemetry
    })
    .await
    .unwrap();

    let (spans, resource) = collect(
        &mut received,
        &[
            "GET /api/v1/clusters/{cluster}",
            "POST /api/v1/ingest",
            "store.ingest",
            "GET /api/v1/clusters",
        ],
    )
    .await;
    assert_eq!(resource["service.name"], str("troupe-server"));
    assert_eq!(resource["service.version"], str(env!("CARGO_PKG_VERSION")));

    let span = spans
        .iter()
        .find(|s| s.name == "GET /api/v1/clusters/{cluster}")
        .unwrap();
    assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");
    assert_eq!(
        hex(&span.trace_id),
        TRACE_ID,
        "the caller's trace continues"
    );
    assert_eq!(hex(&span.parent_span_id), PARENT_ID);
    let a = attributes(&span.attributes);
    assert_eq!(a["http.request.method"], str("GET"));
    assert_eq!(a["http.route"], str("/api/v1/clusters/{cluster}"));
    assert_eq!(a["http.response.status_code"], Value::Int(404));
    assert_eq!(a["url.path"], str("/api/v1/clusters/nope"));
    assert_eq!(a["url.query"], str("x=1"));
    assert_eq!(a["url.scheme"], str("http"));
    assert_eq!(a["server.address"], str("troupe.example"));
    assert_eq!(a["server.port"], Value::Int(8443));
    assert_eq!(a["user_agent.original"], str("trace-test/1"));
    assert!(!a.contains_key("error.type"), "a 404 is not a server error");

    let ingest = spans
        .iter()
        .find(|s| s.name == "POST /api/v1/ingest")
        .unwrap();
    assert_ne!(
        hex(&ingest.trace_id),
        TRACE_ID,
        "no traceparent: a new trace"
    );
    assert!(ingest.parent_span_id.is_empty(), "a root span");
    let store_span = spans.iter().find(|s| s.name == "store.ingest").unwrap();
    assert_eq!(store_span.parent_span_id, ingest.span_id);
    let a = attributes(&store_span.attributes);
    assert_eq!(a["troupe.cluster"], str("app"));
    assert_eq!(a["troupe.node"], str("10.0.0.1:2552"));
    assert_eq!(
        a["troupe.incarnation"],
        str("15365700884095386388"),
        "u64 identifiers are strings, never negative"
    );
    assert_eq!(a["troupe.batch.sequence"], str("7"));
    assert_eq!(a["db.system.name"], str("sqlite"));
    for key in a.keys() {
        assert!(
            key.contains('.') || key.starts_with("code") || key.starts_with("thread"),
            "un-namespaced attribute {key}"
        );
    }

    let failed = spans
        .iter()
        .find(|s| s.name == "GET /api/v1/clusters")
        .unwrap();
    let a = attributes(&failed.attributes);
    assert_eq!(a["http.response.status_code"], Value::Int(503));
    assert_eq!(a["error.type"], str("503"));
    assert_eq!(
        failed.status.as_ref().map(|s| s.code),
        Some(2),
        "STATUS_CODE_ERROR"
    );

    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
}

#[actix_web::test]
async fn the_binary_exports_traces_with_only_the_traces_endpoint_set() {
    let (base, mut received) = receiver("/collector/spans");
    let file = TestSqliteFile::new();
    let mut command = ServerProcess::command();
    command
        .args(["--ingest-token", "t"])
        .arg("--sqlite-path")
        .arg(file.path())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("{base}/collector/spans"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_SERVICE_NAME", "control-plane-under-test");
    let server = ServerProcess::spawn(command);
    let addr = server.addr;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let status = tokio::task::spawn_blocking(move || {
        let mut client = HttpClient::new(addr);
        client
            .request_with_headers("GET", "/livez", &[("traceparent", &traceparent)], b"")
            .map(|r| r.status)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 200);
    let (spans, resource) = collect(&mut received, &["GET /livez"]).await;
    drop(server);
    assert_eq!(resource["service.name"], str("control-plane-under-test"));
    let span = spans.iter().find(|s| s.name == "GET /livez").unwrap();
    assert_eq!(hex(&span.trace_id), TRACE_ID);
    assert_eq!(attributes(&span.attributes)["http.route"], str("/livez"));
}
