//! OpenTelemetry export: every stored event also leaves as an OTLP log record.
//!
//! On when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT`, or the logs-only
//! `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`) and `OTEL_SDK_DISABLED` is not `true`. Transport is
//! http/protobuf (the OTLP default, port 4318). The SDK reads the other standard variables
//! itself: `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`
//! (default here: `troupe-server`), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BLRP_*`.
//!
//! # Records
//! One log record per stored event (dead letters included), after its batch committed: event
//! name = the kind (`MemberUp`), timestamp = the event's time on the agent, body = the event's
//! JSON, attributes `troupe.cluster`, `troupe.node`, `troupe.incarnation`, `troupe.event.kind`,
//! `troupe.event.category`, `troupe.event.subject`. Severity is WARN for dead letters, downs,
//! unreachability, hand-over timeouts, lost leases and fencing; INFO otherwise.
//!
//! # Back-pressure
//! Records go through the SDK's batch processor (its own thread, the blocking HTTP client):
//! ingest never waits for the collector, and when its queue is full records are dropped (the
//! SDK logs how many).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry_otlp::{LogExporter, Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use troupe_protocol::{AgentHealth, EventBody, ReportBatch};

use crate::config::Config;

/// The export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The OTLP exporter could not be built.
    #[error("building the OTLP log exporter failed: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A protocol other than http/protobuf was asked for.
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0} is not supported; use http/protobuf")]
    Protocol(String),
}

/// Where the records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A base URL; `/v1/logs` is appended (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    Base(String),
    /// The full logs URL (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`).
    Logs(String),
}

impl Endpoint {
    /// The configured endpoint, if export is on.
    #[must_use]
    pub fn from_config(config: &Config) -> Option<Self> {
        if config.otel_sdk_disabled {
            return None;
        }
        config
            .otlp_logs_endpoint
            .clone()
            .map(Self::Logs)
            .or_else(|| config.otlp_endpoint.clone().map(Self::Base))
    }

    fn logs_url(&self) -> String {
        match self {
            Self::Base(base) => format!("{}/v1/logs", base.trim_end_matches('/')),
            Self::Logs(url) => url.clone(),
        }
    }
}

/// Exports stored events as OTLP log records.
#[derive(Debug)]
pub struct EventExport {
    provider: SdkLoggerProvider,
    logger: SdkLogger,
    url: String,
}

impl EventExport {
    /// Sets up the exporter for `endpoint`. Call it off the async runtime (the blocking HTTP
    /// client must not be created or dropped on a runtime thread).
    pub fn new(endpoint: &Endpoint, protocol: Option<&str>) -> Result<Self, ExportError> {
        if let Some(protocol) = protocol
            && protocol != "http/protobuf"
        {
            return Err(ExportError::Protocol(protocol.to_owned()));
        }
        let url = endpoint.logs_url();
        let exporter = LogExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .build()?;
        let provider = SdkLoggerProvider::builder()
            .with_resource(resource())
            .with_batch_exporter(exporter)
            .build();
        let logger = provider.logger("troupe-server");
        Ok(Self {
            provider,
            logger,
            url,
        })
    }

    /// The URL records are posted to.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Hands every event of a stored batch to the exporter (never blocks on the network).
    pub fn export_batch(&self, batch: &ReportBatch) {
        let id = &batch.identity;
        for event in &batch.events {
            let kind = event.body.kind();
            let mut record = self.logger.create_log_record();
            record.set_event_name(kind.as_str());
            record.set_timestamp(UNIX_EPOCH + Duration::from_millis(event.at_ms.max(0) as u64));
            record.set_observed_timestamp(SystemTime::now());
            let severity = severity(&event.body);
            record.set_severity_number(severity);
            record.set_severity_text(severity.name());
            record.set_body(AnyValue::from(
                serde_json::to_string(&event.body).unwrap_or_default(),
            ));
            record.add_attribute("troupe.cluster", id.cluster.clone());
            record.add_attribute("troupe.node", id.node.clone());
            record.add_attribute("troupe.incarnation", id.incarnation as i64);
            record.add_attribute("troupe.event.kind", kind.as_str());
            record.add_attribute("troupe.event.category", kind.category().as_str());
            if let Some(subject) = event.body.subject() {
                record.add_attribute("troupe.event.subject", subject.to_owned());
            }
            self.logger.emit(record);
        }
    }

    /// Exports what is queued now and waits for it (blocking).
    pub fn flush(&self) {
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!(%error, "flushing OpenTelemetry log records failed");
        }
    }

    /// Flushes and stops the exporter (blocking).
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "shutting the OpenTelemetry exporter down failed");
        }
    }
}

/// The resource every export carries: the `OTEL_*` environment's, named `troupe-server` unless
/// the environment names it.
pub(crate) fn resource() -> Resource {
    let mut resource = Resource::builder();
    let named_by_env = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name"));
    if !named_by_env {
        resource = resource.with_service_name("troupe-server");
    }
    resource.build()
}

fn severity(body: &EventBody) -> Severity {
    match body {
        EventBody::DeadLetter(_)
        | EventBody::MemberDown(_)
        | EventBody::MemberUnreachable(_)
        | EventBody::SingletonHandOverTimedOut(_)
        | EventBody::SingletonMessagesDeadLettered(_)
        | EventBody::LeaseLost(_) => Severity::Warn,
        EventBody::AgentHealthChanged(h) if h.health == AgentHealth::Fenced => Severity::Warn,
        _ => Severity::Info,
    }
}
