//! The agents' own OpenTelemetry, end to end: a real `troupe-server` and a real `troupe-agent`
//! export to one real OTLP/HTTP receiver that decodes the protobuf (opentelemetry-proto). The
//! agent, configured by the per-signal variables only (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`) plus `OTEL_RESOURCE_ATTRIBUTES`, exports its report
//! requests as HTTP client spans by the semantic conventions and its `tracing` events as log
//! records with structured bodies; its resource names `service.name`, `service.version` and the
//! `troupe.*` identity with the incarnation as a string; and the server's span for a report is
//! a child of the agent's span in the same trace (W3C `traceparent` on the request).

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use actix_web::{HttpResponse, web};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind};
use prost::Message;
use tokio::sync::mpsc;
use troupe_e2e::{binary, free_port};

const WAIT: Duration = Duration::from_secs(60);
const SECRET: &str = "e2e telemetry secret, long enough";

/// What the receiver decoded.
enum Export {
    Traces(ExportTraceServiceRequest),
    Logs(ExportLogsServiceRequest),
}

/// An OTLP/HTTP receiver for `/v1/traces` and `/v1/logs` on its own thread; returns its base
/// URL and the decoded requests.
fn receiver() -> (String, mpsc::UnboundedReceiver<Export>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let server = actix_web::HttpServer::new(move || {
                let traces = tx.clone();
                let logs = tx.clone();
                actix_web::App::new()
                    .route(
                        "/v1/traces",
                        web::post().to(move |body: web::Bytes| {
                            let tx = traces.clone();
                            async move {
                                let request = ExportTraceServiceRequest::decode(body.as_ref())
                                    .expect("the exporter sends OTLP protobuf");
                                let _ = tx.send(Export::Traces(request));
                                HttpResponse::Ok()
                                    .content_type("application/x-protobuf")
                                    .body(ExportTraceServiceResponse::default().encode_to_vec())
                            }
                        }),
                    )
                    .route(
                        "/v1/logs",
                        web::post().to(move |body: web::Bytes| {
                            let tx = logs.clone();
                            async move {
                                let request = ExportLogsServiceRequest::decode(body.as_ref())
                                    .expect("the exporter sends OTLP protobuf");
                                let _ = tx.send(Export::Logs(request));
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
            addr_tx.send(server.addrs()[0]).unwrap();
            let _ = server.run().await;
        });
    });
    let addr = addr_rx.recv().unwrap();
    (format!("http://{addr}"), rx)
}

/// A child process killed when the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Int(i64),
    Other,
}

fn value(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::Str(s.clone()),
        Some(any_value::Value::IntValue(i)) => Value::Int(*i),
        _ => Value::Other,
    }
}

fn attributes(attributes: &[KeyValue]) -> HashMap<String, Value> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
        .collect()
}

fn str(s: &str) -> Value {
    Value::Str(s.to_owned())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span or log record with its resource's attributes.
struct Seen<T> {
    resource: HashMap<String, Value>,
    item: T,
}

#[derive(Default)]
struct Collected {
    spans: Vec<Seen<Span>>,
    logs: Vec<Seen<LogRecord>>,
}

impl Collected {
    fn add(&mut self, export: Export) {
        match export {
            Export::Traces(request) => {
                for batch in request.resource_spans {
                    let resource = attributes(&batch.resource.unwrap_or_default().attributes);
                    for scope in batch.scope_spans {
                        for span in scope.spans {
                            self.spans.push(Seen {
                                resource: resource.clone(),
                                item: span,
                            });
                        }
                    }
                }
            }
            Export::Logs(request) => {
                for batch in request.resource_logs {
                    let resource = attributes(&batch.resource.unwrap_or_default().attributes);
                    for scope in batch.scope_logs {
                        for record in scope.log_records {
                            self.logs.push(Seen {
                                resource: resource.clone(),
                                item: record,
                            });
                        }
                    }
                }
            }
        }
    }

    fn of(&self, service: &str) -> impl Iterator<Item = &Seen<Span>> {
        self.spans
            .iter()
            .filter(move |s| s.resource.get("service.name") == Some(&str(service)))
    }

    /// An agent report span and the server span that continues it.
    fn report_pair(&self) -> Option<(&Seen<Span>, &Seen<Span>)> {
        self.of("troupe-agent")
            .filter(|s| s.item.name == "POST /api/v1/ingest")
            .find_map(|agent| {
                let server = self.of("troupe-server").find(|s| {
                    s.item.trace_id == agent.item.trace_id
                        && s.item.parent_span_id == agent.item.span_id
                })?;
                Some((agent, server))
            })
    }

    fn agent_started(&self) -> Option<&Seen<LogRecord>> {
        self.logs.iter().find(|l| {
            l.resource.get("service.name") == Some(&str("troupe-agent"))
                && body(&l.item).get("message") == Some(&str("agent started"))
        })
    }
}

/// A log record's body as a map (empty when it is not one).
fn body(record: &LogRecord) -> HashMap<String, Value> {
    match record.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(any_value::Value::KvlistValue(list)) => attributes(&list.values),
        _ => HashMap::new(),
    }
}

async fn collect_until(
    received: &mut mpsc::UnboundedReceiver<Export>,
    collected: &mut Collected,
    what: &str,
    done: impl Fn(&Collected) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done(collected) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, received.recv()).await {
            Ok(Some(export)) => collected.add(export),
            _ => panic!(
                "{what} not exported within {WAIT:?}; spans seen: {:?}; log bodies seen: {:?}",
                collected
                    .spans
                    .iter()
                    .map(|s| (s.resource.get("service.name").cloned(), s.item.name.clone()))
                    .collect::<Vec<_>>(),
                collected
                    .logs
                    .iter()
                    .map(|l| body(&l.item).get("message").cloned())
                    .collect::<Vec<_>>()
            ),
        }
    }
}

#[actix_web::test]
async fn an_agents_logs_and_report_spans_are_exported_and_the_servers_span_continues_its_trace() {
    let (base, mut received) = receiver();
    let dir = std::env::temp_dir().join(format!("troupe-e2e-otel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server_port = free_port();
    let _server = Killed(
        Command::new(binary("troupe-server"))
            .args(["--listen", &format!("127.0.0.1:{server_port}")])
            .arg("--sqlite-path")
            .arg(dir.join("control-plane.sqlite"))
            .args(["--ingest-token", "ingest-secret"])
            .env_remove("DATABASE_URL")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &base)
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env("OTEL_BLRP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start troupe-server"),
    );
    let control_plane = format!("http://127.0.0.1:{server_port}");
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !client
        .get(format!("{control_plane}/livez"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server did not answer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let port = free_port();
    let mut agent = Killed(
        Command::new(binary("troupe-agent"))
            .args(["--system", "otel", "--secret", SECRET])
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args(["--seed", &format!("troupe://otel@127.0.0.1:{port}")])
            .args(["--management-bind", "127.0.0.1:0"])
            .args(["--control-plane", &control_plane])
            .args(["--ingest-token", "ingest-secret"])
            .args(["--report-interval-ms", "100"])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("TROUPE_CONTROL_PLANE_URL")
            .env(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                format!("{base}/v1/traces"),
            )
            .env(
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                format!("{base}/v1/logs"),
            )
            .env(
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment.name=e2e",
            )
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env("OTEL_BLRP_SCHEDULE_DELAY", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start troupe-agent"),
    );

    let mut collected = Collected::default();
    collect_until(
        &mut received,
        &mut collected,
        "an agent report span continued by a server span",
        |c| c.report_pair().is_some(),
    )
    .await;
    let (agent_span, server_span) = collected.report_pair().unwrap();

    // The agent's resource: who it is, with u64 identifiers as strings; the environment's
    // attributes kept.
    let resource = &agent_span.resource;
    assert_eq!(resource["service.version"], str(env!("CARGO_PKG_VERSION")));
    assert_eq!(resource["troupe.cluster"], str("otel"));
    assert_eq!(resource["troupe.node"], str(&format!("127.0.0.1:{port}")));
    assert_eq!(resource["deployment.environment.name"], str("e2e"));
    let Value::Str(incarnation) = &resource["troupe.incarnation"] else {
        panic!("troupe.incarnation is a string: {resource:?}")
    };
    let incarnation = &incarnation.clone();
    assert!(incarnation.parse::<u64>().is_ok(), "{incarnation}");
    assert_eq!(resource["service.instance.id"], str(incarnation));

    // The report request: an HTTP client span by the semantic conventions.
    let span = &agent_span.item;
    assert_eq!(span.kind, SpanKind::Client as i32);
    let attrs = attributes(&span.attributes);
    assert_eq!(attrs["http.request.method"], str("POST"));
    assert_eq!(attrs["http.response.status_code"], Value::Int(200));
    assert_eq!(
        attrs["url.full"],
        str(&format!("{control_plane}/api/v1/ingest"))
    );
    assert_eq!(attrs["url.template"], str("/api/v1/ingest"));
    assert_eq!(attrs["server.address"], str("127.0.0.1"));
    assert_eq!(attrs["server.port"], Value::Int(i64::from(server_port)));
    assert_eq!(attrs["troupe.cluster"], str("otel"));
    assert_eq!(attrs["troupe.incarnation"], str(incarnation));
    let Value::Str(sequence) = &attrs["troupe.sequence"] else {
        panic!("troupe.sequence is a string: {attrs:?}")
    };
    assert!(sequence.parse::<u64>().is_ok());
    assert!(!attrs.contains_key("error.type"), "{attrs:?}");
    for unwanted in ["target", "level", "busy_ns", "idle_ns"] {
        assert!(!attrs.contains_key(unwanted), "{unwanted} in {attrs:?}");
    }

    // The server's span for it: same trace, the agent's span its parent.
    let server = &server_span.item;
    assert_eq!(server.kind, SpanKind::Server as i32);
    assert_eq!(server.name, "POST /api/v1/ingest");
    assert_eq!(hex(&server.trace_id), hex(&span.trace_id));
    assert_eq!(hex(&server.parent_span_id), hex(&span.span_id));

    // The agent's own log records: structured bodies, severity, the node's identity.
    collect_until(
        &mut received,
        &mut collected,
        "the agent's `agent started` log record",
        |c| c.agent_started().is_some(),
    )
    .await;
    let started = collected.agent_started().unwrap();
    assert_eq!(started.resource["troupe.incarnation"], str(incarnation));
    let record = &started.item;
    assert_eq!(record.severity_text, "INFO");
    assert_eq!(record.severity_number, 9, "SEVERITY_NUMBER_INFO");
    let fields = body(record);
    assert_eq!(
        fields["incarnation"],
        str(incarnation),
        "a u64 field is a string: {fields:?}"
    );
    assert!(
        matches!(&fields["node"], Value::Str(node) if node.contains(&format!("127.0.0.1:{port}"))),
        "{fields:?}"
    );
    assert!(
        attributes(&record.attributes).contains_key("code.file.path"),
        "{:?}",
        record.attributes
    );
    // No record of the exporter's own HTTP stack.
    assert!(collected.logs.iter().all(
        |l| !matches!(body(&l.item).get("message"), Some(Value::Str(m)) if m.contains("hyper"))
    ),);

    // SIGTERM: the agent leaves, and what it logged on the way out is exported before it exits.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(agent.0.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = agent.0.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "agent did not exit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0));
    collect_until(
        &mut received,
        &mut collected,
        "the agent's shutdown log record",
        |c| {
            c.logs.iter().any(|l| {
                l.resource.get("service.name") == Some(&str("troupe-agent"))
                    && body(&l.item).get("message")
                        == Some(&str("shutting down: draining, then leaving the cluster"))
            })
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
