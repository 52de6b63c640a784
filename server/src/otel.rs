//! OpenTelemetry export: every stored event also leaves as an OTLP log record.
//!
//! # Configuration
//! The standard variables, each signal on its own ([`Endpoint::for_signal`]): a signal is
//! exported when its endpoint (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, used as given) or the base endpoint
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, with `/v1/logs` or `/v1/traces` appended) is set, unless
//! `OTEL_SDK_DISABLED=true` or its exporter (`OTEL_LOGS_EXPORTER`, `OTEL_TRACES_EXPORTER`) is
//! `none`. Transport is http/protobuf (`OTEL_EXPORTER_OTLP_[LOGS_|TRACES_]PROTOCOL`; another
//! protocol is refused at start). The SDK reads the rest itself, per signal before the generic
//! one: `OTEL_EXPORTER_OTLP_[LOGS_|TRACES_]HEADERS`, `…_TIMEOUT`, `…_COMPRESSION` (`gzip`),
//! and `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BLRP_*`, `OTEL_BSP_*`,
//! `OTEL_TRACES_SAMPLER[_ARG]`.
//!
//! # Records
//! One log record per stored event (dead letters included), after its batch committed: event
//! name = the kind (`MemberUp`), timestamp = the event's time on the agent, body = the event
//! as a structured map (the ingest JSON without `at_ms`; u64 values as strings), attributes
//! `troupe.cluster`, `troupe.node`, `troupe.incarnation` (a string), `troupe.event.kind`,
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
    #[error("building the OTLP exporter failed: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A protocol other than http/protobuf was asked for.
    #[error("{variable}={value} is not supported; use http/protobuf")]
    Protocol {
        /// The variable (or flag) that asked.
        variable: &'static str,
        /// What it asked for.
        value: String,
    },
    /// An exporter other than `otlp` or `none` was asked for.
    #[error("{variable}={value} is not supported; use otlp or none")]
    UnsupportedExporter {
        /// The variable (or flag) that asked.
        variable: &'static str,
        /// What it asked for.
        value: String,
    },
}

/// A kind of telemetry the server exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Stored events as log records (`/v1/logs`).
    Logs,
    /// The server's request spans (`/v1/traces`).
    Traces,
}

impl Signal {
    fn path(self) -> &'static str {
        match self {
            Self::Logs => "/v1/logs",
            Self::Traces => "/v1/traces",
        }
    }
}

/// Where one signal goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A base URL; the signal's path (`/v1/logs`, `/v1/traces`) is appended
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    Base(String),
    /// The signal's full URL, used as is (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    Signal(String),
}

impl Endpoint {
    /// Where `signal` goes as configured, or `None` when it is not exported: the SDK is
    /// disabled, the signal's exporter is `none`, or no endpoint (per-signal or base) is set.
    /// A protocol other than http/protobuf, or an exporter other than `otlp`/`none`, is an error.
    pub fn for_signal(config: &Config, signal: Signal) -> Result<Option<Self>, ExportError> {
        let (exporter, exporter_var, signal_url, protocol, protocol_var) = match signal {
            Signal::Logs => (
                config.otel_logs_exporter.as_deref(),
                "OTEL_LOGS_EXPORTER",
                config.otlp_logs_endpoint.as_deref(),
                config.otlp_logs_protocol.as_deref(),
                "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
            ),
            Signal::Traces => (
                config.otel_traces_exporter.as_deref(),
                "OTEL_TRACES_EXPORTER",
                config.otlp_traces_endpoint.as_deref(),
                config.otlp_traces_protocol.as_deref(),
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            ),
        };
        if config.otel_sdk_disabled {
            return Ok(None);
        }
        match exporter.map(str::trim).filter(|e| !e.is_empty()) {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(ExportError::UnsupportedExporter {
                    variable: exporter_var,
                    value: other.to_owned(),
                });
            }
        }
        let (protocol, protocol_var) = match protocol {
            Some(p) => (Some(p), protocol_var),
            None => (
                config.otlp_protocol.as_deref(),
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
        };
        if let Some(protocol) = protocol.map(str::trim).filter(|p| !p.is_empty())
            && protocol != "http/protobuf"
        {
            return Err(ExportError::Protocol {
                variable: protocol_var,
                value: protocol.to_owned(),
            });
        }
        let nonempty = |v: Option<&str>| v.filter(|v| !v.trim().is_empty()).map(str::to_owned);
        Ok(nonempty(signal_url)
            .map(Self::Signal)
            .or_else(|| nonempty(config.otlp_endpoint.as_deref()).map(Self::Base)))
    }

    /// The URL `signal` is posted to.
    #[must_use]
    pub fn url(&self, signal: Signal) -> String {
        match self {
            Self::Base(base) => format!("{}{}", base.trim_end_matches('/'), signal.path()),
            Self::Signal(url) => url.clone(),
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
    pub fn new(endpoint: &Endpoint) -> Result<Self, ExportError> {
        let url = endpoint.url(Signal::Logs);
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
            record.set_body(
                serde_json::to_value(&event.body).map_or(AnyValue::Map(Box::default()), any_value),
            );
            record.add_attribute("troupe.cluster", id.cluster.clone());
            record.add_attribute("troupe.node", id.node.clone());
            record.add_attribute("troupe.incarnation", id.incarnation.to_string());
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

/// The resource every export carries: the `OTEL_*` environment's (`OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`), with `service.name` = `troupe-server` and `service.version` =
/// this build's version unless the environment sets them.
pub(crate) fn resource() -> Resource {
    let mut resource = Resource::builder();
    let attributes = std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    let set_by_env = |key: &str| {
        attributes
            .split(',')
            .any(|pair| pair.split_once('=').is_some_and(|(k, _)| k.trim() == key))
    };
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() && !set_by_env("service.name") {
        resource = resource.with_service_name("troupe-server");
    }
    if !set_by_env("service.version") {
        resource = resource.with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ));
    }
    resource.build()
}

/// A JSON value as an OpenTelemetry value: objects become maps, arrays lists; integers that
/// do not fit an `i64` become strings.
fn any_value(value: serde_json::Value) -> AnyValue {
    use serde_json::Value;
    match value {
        Value::Null => AnyValue::String("".into()),
        Value::Bool(b) => AnyValue::Boolean(b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AnyValue::Int(i),
            None if n.is_u64() => AnyValue::String(n.to_string().into()),
            None => AnyValue::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => AnyValue::String(s.into()),
        Value::Array(items) => {
            AnyValue::ListAny(Box::new(items.into_iter().map(any_value).collect()))
        }
        Value::Object(fields) => AnyValue::Map(Box::new(
            fields
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (opentelemetry::Key::from(k), any_value(v)))
                .collect(),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(adjust: impl FnOnce(&mut Config)) -> Config {
        let mut config = Config::defaults();
        adjust(&mut config);
        config
    }

    fn url(config: &Config, signal: Signal) -> Option<String> {
        Endpoint::for_signal(config, signal)
            .unwrap()
            .map(|e| e.url(signal))
    }

    #[test]
    fn each_signal_uses_its_own_endpoint_as_given_or_the_base_with_its_path() {
        let base = config(|c| c.otlp_endpoint = Some("http://collector:4318/".into()));
        assert_eq!(
            url(&base, Signal::Logs).as_deref(),
            Some("http://collector:4318/v1/logs")
        );
        assert_eq!(
            url(&base, Signal::Traces).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        let traces_only = config(|c| c.otlp_traces_endpoint = Some("http://t:1/spans".into()));
        assert_eq!(
            url(&traces_only, Signal::Traces).as_deref(),
            Some("http://t:1/spans")
        );
        assert_eq!(url(&traces_only, Signal::Logs), None);
        let both = config(|c| {
            c.otlp_endpoint = Some("http://base:4318".into());
            c.otlp_logs_endpoint = Some("http://logs:1/in".into());
        });
        assert_eq!(
            url(&both, Signal::Logs).as_deref(),
            Some("http://logs:1/in")
        );
        assert_eq!(
            url(&both, Signal::Traces).as_deref(),
            Some("http://base:4318/v1/traces")
        );
        assert_eq!(
            url(&config(|_| {}), Signal::Traces),
            None,
            "export is opt-in"
        );
    }

    #[test]
    fn a_signal_is_off_when_the_sdk_is_disabled_or_its_exporter_is_none() {
        let on = |c: &mut Config| c.otlp_endpoint = Some("http://collector:4318".into());
        let disabled = config(|c| {
            on(c);
            c.otel_sdk_disabled = true;
        });
        assert_eq!(url(&disabled, Signal::Logs), None);
        let no_traces = config(|c| {
            on(c);
            c.otel_traces_exporter = Some("none".into());
        });
        assert_eq!(url(&no_traces, Signal::Traces), None);
        assert!(url(&no_traces, Signal::Logs).is_some());
    }

    #[test]
    fn another_protocol_or_exporter_is_refused_naming_the_variable() {
        let grpc = config(|c| {
            c.otlp_endpoint = Some("http://collector:4318".into());
            c.otlp_traces_protocol = Some("grpc".into());
        });
        let error = Endpoint::for_signal(&grpc, Signal::Traces).unwrap_err();
        assert_eq!(
            error.to_string(),
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc is not supported; use http/protobuf"
        );
        assert!(Endpoint::for_signal(&grpc, Signal::Logs).is_ok());
        let zipkin = config(|c| c.otel_logs_exporter = Some("zipkin".into()));
        assert_eq!(
            Endpoint::for_signal(&zipkin, Signal::Logs)
                .unwrap_err()
                .to_string(),
            "OTEL_LOGS_EXPORTER=zipkin is not supported; use otlp or none"
        );
    }

    #[test]
    fn event_bodies_become_maps_with_lists_and_without_nulls() {
        let value = any_value(serde_json::json!({"a": [1, "x"], "b": null, "c": {"d": true}}));
        let AnyValue::Map(map) = value else {
            panic!("{value:?}")
        };
        assert_eq!(map.len(), 2);
        assert!(
            matches!(&map[&opentelemetry::Key::from("a")], AnyValue::ListAny(l) if l.len() == 2)
        );
        assert!(matches!(
            &map[&opentelemetry::Key::from("c")],
            AnyValue::Map(_)
        ));
    }
}
