//! OpenTelemetry export: every stored event also leaves as an OTLP log record.
//!
//! # Configuration
//! The standard `OTEL_*` variables, each signal on its own, exactly as the agents read them
//! ([`troupe_telemetry::otlp`]): stored events go to the logs endpoint
//! (`OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/logs`).
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
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use troupe_protocol::{AgentHealth, EventBody, ReportBatch};

pub use troupe_telemetry::otlp::{Endpoint, ExportError, Signal};

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
        let provider = endpoint.logger_provider(resource())?;
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

/// The resource every export of the server carries: `service.name` = `troupe-server` and
/// `service.version` = this build's version unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` set them.
pub(crate) fn resource() -> Resource {
    troupe_telemetry::otlp::resource("troupe-server", env!("CARGO_PKG_VERSION"), Vec::new())
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
