//! OpenTelemetry export against a real OTLP/HTTP receiver that decodes the protobuf.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::test::{TestRequest, call_service, init_service};
use actix_web::{HttpResponse, web};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::sync::mpsc;
use troupe_protocol::{EventBody, HandOverTimedOut, MemberStatus};
use troupe_server::otel::{Endpoint, EventExport};
use troupe_server::testing::{BatchBuilder, TestSqliteFile};
use troupe_server::{AppState, Config};

/// Starts an OTLP/HTTP logs receiver on a free port; decoded requests arrive on the channel.
fn receiver() -> (String, mpsc::UnboundedReceiver<ExportLogsServiceRequest>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let server = actix_web::HttpServer::new(move || {
        let tx = tx.clone();
        actix_web::App::new().route(
            "/v1/logs",
            web::post().to(move |body: web::Bytes| {
                let tx = tx.clone();
                async move {
                    let request = ExportLogsServiceRequest::decode(body.as_ref())
                        .expect("the exporter sends OTLP protobuf");
                    let _ = tx.send(request);
                    HttpResponse::Ok()
                        .content_type("application/x-protobuf")
                        .body(ExportLogsServiceResponse::default().encode_to_vec())
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

fn string_value(value: &Option<AnyValue>) -> Option<String> {
    match value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

fn string(value: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(value.to_owned())),
    }
}

/// A structured (map) body, by key.
fn map(body: &Option<AnyValue>) -> HashMap<String, AnyValue> {
    match body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(any_value::Value::KvlistValue(list)) => list
            .values
            .iter()
            .filter_map(|kv| Some((kv.key.clone(), kv.value.clone()?)))
            .collect(),
        other => panic!("the body is not a map: {other:?}"),
    }
}

fn attributes(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .filter_map(|kv| Some((kv.key.clone(), string_value(&kv.value)?)))
        .collect()
}

#[actix_web::test]
async fn stored_events_are_exported_as_otlp_log_records_with_troupe_attributes() {
    let (base, mut received) = receiver();
    let endpoint = Endpoint::Base(base);
    let export = tokio::task::spawn_blocking(move || EventExport::new(&endpoint))
        .await
        .unwrap()
        .expect("exporter");
    let export = Arc::new(export);

    let file = TestSqliteFile::new();
    let store = file.store().await.unwrap();
    let mut config = Config::defaults();
    config.ingest_token = Some("t".into());
    let state = AppState::new(config, store.clone())
        .0
        .with_export(export.clone());
    let app =
        init_service(actix_web::App::new().configure(troupe_server::api::configure(state))).await;

    let batch = BatchBuilder::new("app", "10.0.0.1:2552", 1)
        .incarnation(15_365_700_884_095_386_388)
        .member(
            1_700_000_000_000,
            EventBody::MemberUp,
            "10.0.0.2:2552",
            MemberStatus::Up,
            &[],
        )
        .event(
            1_700_000_000_001,
            EventBody::SingletonHandOverTimedOut(HandOverTimedOut {
                singleton: "Scheduler".into(),
                role: None,
                new_host: "10.0.0.1:2552".into(),
                silent_peers: vec!["10.0.0.3:2552".into()],
                duration_ms: 10_000,
            }),
        )
        .dead_letter(1_700_000_000_002, "/user/gone", "app::Ping")
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
    assert!(resp.status().is_success());
    let flushing = export.clone();
    tokio::task::spawn_blocking(move || flushing.flush())
        .await
        .unwrap();

    let mut records = Vec::new();
    let mut resource = HashMap::new();
    while records.len() < 3 {
        let request = tokio::time::timeout(Duration::from_secs(30), received.recv())
            .await
            .expect("the exporter posts within 30 s")
            .expect("receiver open");
        for resource_logs in request.resource_logs {
            if let Some(r) = &resource_logs.resource {
                resource = attributes(&r.attributes);
            }
            for scope_logs in resource_logs.scope_logs {
                records.extend(scope_logs.log_records);
            }
        }
    }
    assert_eq!(
        resource.get("service.name").map(String::as_str),
        Some("troupe-server")
    );
    assert_eq!(
        resource.get("service.version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let names: Vec<_> = records.iter().map(|r| r.event_name.as_str()).collect();
    assert_eq!(
        names,
        ["MemberUp", "SingletonHandOverTimedOut", "DeadLetter"]
    );

    let member_up = attributes(&records[0].attributes);
    assert_eq!(member_up["troupe.cluster"], "app");
    assert_eq!(member_up["troupe.node"], "10.0.0.1:2552");
    assert_eq!(
        member_up["troupe.incarnation"], "15365700884095386388",
        "a string, never a wrapped negative"
    );
    assert!(matches!(
        records[0]
            .attributes
            .iter()
            .find(|kv| kv.key == "troupe.incarnation")
            .and_then(|kv| kv.value.as_ref()?.value.as_ref()),
        Some(any_value::Value::StringValue(_))
    ));
    assert_eq!(member_up["troupe.event.kind"], "MemberUp");
    assert_eq!(member_up["troupe.event.category"], "membership");
    assert_eq!(member_up["troupe.event.subject"], "10.0.0.2:2552");
    assert_eq!(records[0].time_unix_nano, 1_700_000_000_000 * 1_000_000);
    assert_eq!(records[0].severity_text, "INFO");

    let timeout = &records[1];
    assert_eq!(timeout.severity_text, "WARN");
    let body = map(&timeout.body);
    assert_eq!(body["kind"], string("SingletonHandOverTimedOut"));
    assert_eq!(body["singleton"], string("Scheduler"));
    assert_eq!(
        body["duration_ms"],
        string("10000"),
        "u64 values are strings"
    );
    let Some(any_value::Value::ArrayValue(peers)) = body["silent_peers"].value.clone() else {
        panic!("silent_peers is a list: {body:?}");
    };
    assert_eq!(peers.values, [string("10.0.0.3:2552")]);
    assert!(!body.contains_key("role"), "absent fields are left out");
    assert_eq!(
        attributes(&records[2].attributes)["troupe.event.category"],
        "dead-letter"
    );

    tokio::task::spawn_blocking(move || export.shutdown())
        .await
        .unwrap();
    store.close().await;
}
