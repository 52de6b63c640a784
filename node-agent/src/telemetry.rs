//! The agent's own logs and traces: `tracing` to stderr (filtered by `RUST_LOG`, default
//! `info`) and, when the standard `OTEL_*` settings name an endpoint, over OTLP/HTTP — read
//! exactly as the server reads them ([`troupe_telemetry::otlp`]): per signal
//! (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given) or
//! the base (`OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/logs`, `/v1/traces`), `OTEL_SDK_DISABLED`,
//! `OTEL_{LOGS,TRACES}_EXPORTER=none`, http/protobuf only.
//!
//! # Resource
//! `service.name` = `troupe-agent` (unless `OTEL_SERVICE_NAME`), `service.version` = this
//! build's, `service.instance.id` and `troupe.incarnation` = the incarnation (a u64, as a
//! string), `troupe.cluster` = the system name, `troupe.node` = the advertised `host:port`
//! (when the port is fixed), plus `OTEL_RESOURCE_ATTRIBUTES`, which wins.
//!
//! # Log records
//! Every `tracing` event that passes the filter, with a structured body (its fields, the
//! message under `message`, u64 values as strings) and the trace context of the span it
//! happened in ([`troupe_telemetry::otlp::LogBridge`]).
//!
//! # Spans
//! Each report request is an HTTP client span by the semantic conventions ([`report_span`]):
//! named `POST /api/v1/ingest`, kind client, `http.request.method`, `url.full`,
//! `url.template`, `server.address`, `server.port`, `http.response.status_code` (an integer),
//! `error.type` (the status code, or the failure's kind) with the span status set to error on a
//! failure, and `troupe.cluster`, `troupe.node`, `troupe.incarnation`, `troupe.sequence` (u64
//! values as strings). The request carries the span's W3C `traceparent`, so the server's span
//! for it continues the agent's trace.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use troupe_protocol::AgentIdentity;
use troupe_telemetry::otlp::{self, Endpoint, ExportError, LogBridge, Signal};

use crate::config::AgentConfig;

/// What [`init`] installed; [`Telemetry::shutdown`] it before the process exits.
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    logger_provider: Option<SdkLoggerProvider>,
}

impl Telemetry {
    /// Where spans go, if they are exported.
    #[must_use]
    pub fn exports_traces(&self) -> bool {
        self.tracer_provider.is_some()
    }

    /// Where log records go, if they are exported.
    #[must_use]
    pub fn exports_logs(&self) -> bool {
        self.logger_provider.is_some()
    }

    /// Exports what is queued and stops the exporters (blocking; call it off the runtime).
    pub fn shutdown(&self) {
        if let Some(provider) = &self.tracer_provider
            && let Err(error) = provider.shutdown()
        {
            eprintln!("warning: shutting the span exporter down failed: {error}");
        }
        if let Some(provider) = &self.logger_provider
            && let Err(error) = provider.shutdown()
        {
            eprintln!("warning: shutting the log exporter down failed: {error}");
        }
    }
}

/// The resource of this agent's exports.
fn resource(config: &AgentConfig) -> opentelemetry_sdk::Resource {
    let mut attributes = vec![KeyValue::new("troupe.cluster", config.system.clone())];
    if let Some(incarnation) = config.incarnation {
        attributes.push(KeyValue::new(
            "service.instance.id",
            incarnation.to_string(),
        ));
        attributes.push(KeyValue::new("troupe.incarnation", incarnation.to_string()));
    }
    if config.bind.port() != 0 {
        let host = config
            .advertised_host
            .clone()
            .unwrap_or_else(|| config.bind.ip().to_string());
        attributes.push(KeyValue::new(
            "troupe.node",
            format!("{host}:{}", config.bind.port()),
        ));
    }
    otlp::resource("troupe-agent", env!("CARGO_PKG_VERSION"), attributes)
}

/// Installs the global subscriber: stderr always, OTLP logs and traces as configured. Call it
/// before the async runtime starts (the exporters' blocking HTTP clients must not be made on
/// a runtime thread). A second call keeps the first subscriber.
pub fn init(config: &AgentConfig) -> Result<Telemetry, ExportError> {
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    };
    let traces = Endpoint::for_signal(&config.otlp, Signal::Traces)?;
    let logs = Endpoint::for_signal(&config.otlp, Signal::Logs)?;
    let mut telemetry = Telemetry::default();
    let resource = (traces.is_some() || logs.is_some()).then(|| resource(config));
    let trace_layer = match (&traces, &resource) {
        (Some(endpoint), Some(resource)) => {
            let provider = endpoint.tracer_provider(resource.clone())?;
            let tracer = provider.tracer("troupe-agent");
            telemetry.tracer_provider = Some(provider);
            Some(
                tracing_opentelemetry::layer()
                    .with_target(false)
                    .with_level(false)
                    .with_tracked_inactivity(false)
                    .with_tracer(tracer),
            )
        }
        _ => None,
    };
    let log_layer = match (&logs, &resource) {
        (Some(endpoint), Some(resource)) => {
            let provider = endpoint.logger_provider(resource.clone())?;
            let bridge = LogBridge::new(&provider, "troupe-agent");
            telemetry.logger_provider = Some(provider);
            Some(bridge)
        }
        _ => None,
    };
    let _ = tracing_subscriber::registry()
        .with(filter())
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .with(trace_layer)
        .with(log_layer)
        .try_init();
    Ok(telemetry)
}

/// The client span of one report request to `url` (see the module header); its fields
/// `http.response.status_code`, `error.type` and `otel.status_code` are filled by
/// [`record_answer`].
#[must_use]
pub fn report_span(url: &str, identity: &AgentIdentity, sequence: u64) -> tracing::Span {
    let (address, port) = server_of(url);
    tracing::info_span!(
        "report",
        otel.name = "POST /api/v1/ingest",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = "POST",
        url.full = url,
        url.template = "/api/v1/ingest",
        server.address = address.as_str(),
        server.port = i64::from(port),
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        troupe.cluster = identity.cluster.as_str(),
        troupe.node = identity.node.as_str(),
        troupe.incarnation = %identity.incarnation,
        troupe.sequence = %sequence,
    )
}

/// Records how a report request ended on its span: the status code, and for a failure the
/// error type (the status code, or `timeout`/`connect`/`request`) and an error status.
pub fn record_answer(span: &tracing::Span, status: Option<u16>, failure: Option<&'static str>) {
    if let Some(status) = status {
        span.record("http.response.status_code", i64::from(status));
        if status >= 400 {
            span.record("error.type", status.to_string().as_str());
            span.record("otel.status_code", "ERROR");
        }
    }
    if let Some(failure) = failure {
        span.record("error.type", failure);
        span.record("otel.status_code", "ERROR");
    }
}

/// The host and port a URL names (the scheme's default port when it names none).
fn server_of(url: &str) -> (String, u16) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let default = if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        80
    };
    // `[::1]:9000`, `host:81`; `[::1]` has colons but no port (its "port" does not parse).
    match authority
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host, port.parse().ok()?)))
    {
        Some((host, port)) => (host.trim_matches(['[', ']']).to_owned(), port),
        None => (authority.trim_matches(['[', ']']).to_owned(), default),
    }
}

#[cfg(test)]
mod tests {
    use super::server_of;

    #[test]
    fn the_server_of_a_url_is_its_host_and_port_or_the_schemes_default() {
        assert_eq!(
            server_of("http://127.0.0.1:8080/api/v1/ingest"),
            ("127.0.0.1".to_owned(), 8080)
        );
        assert_eq!(
            server_of("https://control.example/api/v1/ingest"),
            ("control.example".to_owned(), 443)
        );
        assert_eq!(
            server_of("http://[::1]:9000/api/v1/ingest"),
            ("::1".to_owned(), 9000)
        );
        assert_eq!(server_of("http://[::1]/x"), ("::1".to_owned(), 80));
        assert_eq!(server_of("http://user@host:81/x"), ("host".to_owned(), 81));
    }
}
