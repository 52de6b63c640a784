//! The server's own request spans, exported to a real OTLP/HTTP receiver that decodes them.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::test::{TestRequest, call_service, init_service};
use actix_web::{HttpResponse, web};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message;
use tokio::sync::mpsc;
use troupe_server::testing::TestSqliteFile;
use troupe_server::{AppState, Config};

fn receiver() -> (String, mpsc::UnboundedReceiver<ExportTraceServiceRequest>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let server = actix_web::HttpServer::new(move || {
        let tx = tx.clone();
        actix_web::App::new().route(
            "/v1/traces",
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

#[actix_web::test]
async fn api_requests_are_traced_as_server_spans_named_by_route() {
    let (base, mut received) = receiver();
    let mut config = Config::defaults();
    config.otlp_endpoint = Some(base);
    config.log_filter = "info".into();
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
    let app =
        init_service(actix_web::App::new().configure(troupe_server::api::configure(state))).await;
    let resp = call_service(
        &app,
        TestRequest::get().uri("/api/v1/clusters/nope").to_request(),
    )
    .await;
    assert_eq!(resp.status(), 404);
    let telemetry = tokio::task::spawn_blocking(move || {
        telemetry.flush();
        telemetry
    })
    .await
    .unwrap();

    let request = tokio::time::timeout(Duration::from_secs(30), received.recv())
        .await
        .expect("spans exported within 30 s")
        .unwrap();
    let spans: Vec<_> = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect();
    let span = spans
        .iter()
        .find(|s| s.name == "GET /api/v1/clusters/{cluster}")
        .unwrap_or_else(|| {
            panic!(
                "no request span in {:?}",
                spans
                    .iter()
                    .map(|s| (&s.name, &s.attributes))
                    .collect::<Vec<_>>()
            )
        });
    let attributes: HashMap<_, _> = span
        .attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => s.clone(),
                any_value::Value::IntValue(i) => i.to_string(),
                _ => return None,
            };
            Some((kv.key.as_str(), value))
        })
        .collect();
    assert_eq!(attributes["http.route"], "/api/v1/clusters/{cluster}");
    assert_eq!(attributes["http.response.status_code"], "404");
    assert_eq!(attributes["url.path"], "/api/v1/clusters/nope");
    assert_eq!(span.kind, 2, "SPAN_KIND_SERVER");

    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
    store.close().await;
}
