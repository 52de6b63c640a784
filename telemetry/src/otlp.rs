//! OpenTelemetry export, configured the same way for the server and the agents.
//!
//! # Configuration
//! The standard variables, each signal on its own ([`Endpoint::for_signal`]), read through
//! [`OtlpArgs`] (which both command lines flatten in, so `--help` lists them): a signal is
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
//! # Resource
//! [`resource`]: the environment's (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), with the
//! process's default `service.name`, `service.version` = its build's version and its own
//! attributes (namespaced `troupe.*`) wherever the environment does not set them.
//!
//! # Log records from `tracing`
//! [`LogBridge`] turns every `tracing` event the subscriber's filter lets through into an OTLP
//! log record: severity from the level, the instrumentation scope named by the event's target,
//! `code.file.path` and `code.line.number`, the trace and span id of the span it happened in
//! (when spans are exported too), and a structured body: a map of the event's fields, its
//! message under `message`. Unsigned integers are strings (identifiers such as incarnations are
//! u64 and exceed what an `i64`, or a JavaScript number, holds), as `tracing-opentelemetry`
//! exports them on spans. Events of the exporter's own stack (`opentelemetry*`, `hyper*`,
//! `reqwest`, `h2`) are left out so an export never logs itself into the next one.
//!
//! # Trace context
//! [`trace_headers`]: the W3C `traceparent` (and `tracestate`) of a `tracing` span, for an
//! outgoing request, so the receiver's span continues the caller's trace.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::{Key, KeyValue};
use opentelemetry_otlp::{LogExporter, Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_opentelemetry::{OpenTelemetrySpanExt, OtelData};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

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

/// The standard `OTEL_*` settings that pick where each signal goes, as flags and variables
/// (flatten it into a command line with `#[command(flatten)]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct OtlpArgs {
    /// OTLP base URL for every signal: log records go to `<url>/v1/logs`, spans to
    /// `<url>/v1/traces`. Unset (and no per-signal URL): no export.
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub endpoint: Option<String>,

    /// Full OTLP logs URL (used as is); wins over --otlp-endpoint for log records.
    #[arg(long = "otlp-logs-endpoint", env = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")]
    pub logs_endpoint: Option<String>,

    /// Full OTLP traces URL (used as is); wins over --otlp-endpoint for spans.
    #[arg(
        long = "otlp-traces-endpoint",
        env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )]
    pub traces_endpoint: Option<String>,

    /// OTLP transport of every signal; only http/protobuf is supported.
    #[arg(long = "otlp-protocol", env = "OTEL_EXPORTER_OTLP_PROTOCOL")]
    pub protocol: Option<String>,

    /// OTLP transport of log records; wins over --otlp-protocol (only http/protobuf).
    #[arg(long = "otlp-logs-protocol", env = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")]
    pub logs_protocol: Option<String>,

    /// OTLP transport of spans; wins over --otlp-protocol (only http/protobuf).
    #[arg(
        long = "otlp-traces-protocol",
        env = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    )]
    pub traces_protocol: Option<String>,

    /// Log-record exporter: `otlp` (default) or `none`.
    #[arg(long = "otel-logs-exporter", env = "OTEL_LOGS_EXPORTER")]
    pub logs_exporter: Option<String>,

    /// Span exporter: `otlp` (default) or `none`.
    #[arg(long = "otel-traces-exporter", env = "OTEL_TRACES_EXPORTER")]
    pub traces_exporter: Option<String>,

    /// Turn OpenTelemetry export off whatever the endpoint settings.
    #[arg(
        long = "otel-sdk-disabled",
        env = "OTEL_SDK_DISABLED",
        default_value_t = false
    )]
    pub sdk_disabled: bool,
}

/// A kind of telemetry exported over OTLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Log records (`/v1/logs`).
    Logs,
    /// Spans (`/v1/traces`).
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
    pub fn for_signal(args: &OtlpArgs, signal: Signal) -> Result<Option<Self>, ExportError> {
        let (exporter, exporter_var, signal_url, protocol, protocol_var) = match signal {
            Signal::Logs => (
                args.logs_exporter.as_deref(),
                "OTEL_LOGS_EXPORTER",
                args.logs_endpoint.as_deref(),
                args.logs_protocol.as_deref(),
                "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
            ),
            Signal::Traces => (
                args.traces_exporter.as_deref(),
                "OTEL_TRACES_EXPORTER",
                args.traces_endpoint.as_deref(),
                args.traces_protocol.as_deref(),
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            ),
        };
        if args.sdk_disabled {
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
            None => (args.protocol.as_deref(), "OTEL_EXPORTER_OTLP_PROTOCOL"),
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
            .or_else(|| nonempty(args.endpoint.as_deref()).map(Self::Base)))
    }

    /// The URL `signal` is posted to.
    #[must_use]
    pub fn url(&self, signal: Signal) -> String {
        match self {
            Self::Base(base) => format!("{}{}", base.trim_end_matches('/'), signal.path()),
            Self::Signal(url) => url.clone(),
        }
    }

    /// A span exporter and its provider, posting to this endpoint's traces URL with batches
    /// (the SDK's own thread and blocking HTTP client: build it off the async runtime).
    pub fn tracer_provider(&self, resource: Resource) -> Result<SdkTracerProvider, ExportError> {
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(self.url(Signal::Traces))
            .build()?;
        Ok(SdkTracerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(exporter)
            .build())
    }

    /// A log exporter and its provider, posting to this endpoint's logs URL with batches
    /// (build it off the async runtime, as [`Endpoint::tracer_provider`]).
    pub fn logger_provider(&self, resource: Resource) -> Result<SdkLoggerProvider, ExportError> {
        let exporter = LogExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(self.url(Signal::Logs))
            .build()?;
        Ok(SdkLoggerProvider::builder()
            .with_resource(resource)
            .with_batch_exporter(exporter)
            .build())
    }
}

/// The resource every export of a process carries: the `OTEL_*` environment's
/// (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), with `service.name` = `service_name`,
/// `service.version` = `version` and each of `attributes` unless the environment sets them.
#[must_use]
pub fn resource(
    service_name: &'static str,
    version: &'static str,
    attributes: Vec<KeyValue>,
) -> Resource {
    let env = std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    resource_from(
        &env,
        std::env::var_os("OTEL_SERVICE_NAME").is_some(),
        service_name,
        version,
        attributes,
    )
}

fn resource_from(
    env_attributes: &str,
    env_service_name: bool,
    service_name: &'static str,
    version: &'static str,
    attributes: Vec<KeyValue>,
) -> Resource {
    let set_by_env = |key: &str| {
        env_attributes
            .split(',')
            .any(|pair| pair.split_once('=').is_some_and(|(k, _)| k.trim() == key))
    };
    let mut resource = Resource::builder();
    if !env_service_name && !set_by_env("service.name") {
        resource = resource.with_service_name(service_name);
    }
    if !set_by_env("service.version") {
        resource = resource.with_attribute(KeyValue::new("service.version", version));
    }
    for attribute in attributes {
        if !set_by_env(attribute.key.as_str()) {
            resource = resource.with_attribute(attribute);
        }
    }
    resource.build()
}

/// The W3C trace-context headers (`traceparent`, and `tracestate` when there is one) of
/// `span`, to send on a request it stands for. None when the span is not exported (no
/// OpenTelemetry layer, or the span is disabled).
#[must_use]
pub fn trace_headers(span: &tracing::Span) -> Vec<(String, String)> {
    let context = span.context();
    let mut headers: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut headers);
    let mut headers: Vec<(String, String)> = headers.into_iter().collect();
    headers.sort();
    headers
}

/// A `tracing` layer that emits each event as an OTLP log record (see the module header).
#[derive(Debug)]
pub struct LogBridge {
    logger: SdkLogger,
}

impl LogBridge {
    /// Emits through `provider` (its logger named `scope`).
    #[must_use]
    pub fn new(provider: &SdkLoggerProvider, scope: &'static str) -> Self {
        Self {
            logger: provider.logger(scope),
        }
    }
}

/// Targets of the exporter's own stack: never exported (an export must not log itself).
fn own_stack(target: &str) -> bool {
    ["opentelemetry", "hyper", "reqwest", "h2", "tower"]
        .iter()
        .any(|prefix| target.starts_with(prefix))
}

/// The severity of a `tracing` level.
#[must_use]
pub fn severity(level: Level) -> Severity {
    match level {
        Level::TRACE => Severity::Trace,
        Level::DEBUG => Severity::Debug,
        Level::INFO => Severity::Info,
        Level::WARN => Severity::Warn,
        Level::ERROR => Severity::Error,
    }
}

/// The fields of an event as body entries.
#[derive(Default)]
struct Fields(Vec<(Key, AnyValue)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((
            Key::from(field.name()),
            AnyValue::from(format!("{value:?}")),
        ));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .push((Key::from(field.name()), AnyValue::from(value.to_owned())));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.push((Key::from(field.name()), AnyValue::Int(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0
            .push((Key::from(field.name()), AnyValue::from(value.to_string())));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0
            .push((Key::from(field.name()), AnyValue::Boolean(value)));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0
            .push((Key::from(field.name()), AnyValue::Double(value)));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .push((Key::from(field.name()), AnyValue::from(value.to_string())));
    }
}

impl<S> tracing_subscriber::Layer<S> for LogBridge
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        if own_stack(meta.target()) {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut record = self.logger.create_log_record();
        record.set_target(meta.target().to_owned());
        let now = SystemTime::now();
        record.set_timestamp(now);
        record.set_observed_timestamp(now);
        let severity = severity(*meta.level());
        record.set_severity_number(severity);
        record.set_severity_text(severity.name());
        record.set_body(AnyValue::Map(Box::new(fields.0.into_iter().collect())));
        if let Some(file) = meta.file() {
            record.add_attribute("code.file.path", file.to_owned());
        }
        if let Some(line) = meta.line() {
            record.add_attribute("code.line.number", i64::from(line));
        }
        if let Some(span) = ctx.event_span(event)
            && let Some(data) = span.extensions().get::<OtelData>()
            && let (Some(trace_id), Some(span_id)) = (data.trace_id(), data.span_id())
        {
            record.set_trace_context(trace_id, span_id, None);
        }
        self.logger.emit(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(adjust: impl FnOnce(&mut OtlpArgs)) -> OtlpArgs {
        let mut args = OtlpArgs::default();
        adjust(&mut args);
        args
    }

    fn url(args: &OtlpArgs, signal: Signal) -> Option<String> {
        Endpoint::for_signal(args, signal)
            .unwrap()
            .map(|e| e.url(signal))
    }

    #[test]
    fn each_signal_uses_its_own_endpoint_as_given_or_the_base_with_its_path() {
        let base = args(|c| c.endpoint = Some("http://collector:4318/".into()));
        assert_eq!(
            url(&base, Signal::Logs).as_deref(),
            Some("http://collector:4318/v1/logs")
        );
        assert_eq!(
            url(&base, Signal::Traces).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        let traces_only = args(|c| c.traces_endpoint = Some("http://t:1/spans".into()));
        assert_eq!(
            url(&traces_only, Signal::Traces).as_deref(),
            Some("http://t:1/spans")
        );
        assert_eq!(url(&traces_only, Signal::Logs), None);
        let logs_only = args(|c| c.logs_endpoint = Some("http://l:1/records".into()));
        assert_eq!(
            url(&logs_only, Signal::Logs).as_deref(),
            Some("http://l:1/records")
        );
        assert_eq!(url(&logs_only, Signal::Traces), None);
        let both = args(|c| {
            c.endpoint = Some("http://base:4318".into());
            c.logs_endpoint = Some("http://logs:1/in".into());
        });
        assert_eq!(
            url(&both, Signal::Logs).as_deref(),
            Some("http://logs:1/in")
        );
        assert_eq!(
            url(&both, Signal::Traces).as_deref(),
            Some("http://base:4318/v1/traces")
        );
        assert_eq!(url(&args(|_| {}), Signal::Traces), None, "export is opt-in");
    }

    #[test]
    fn a_signal_is_off_when_the_sdk_is_disabled_or_its_exporter_is_none() {
        let on = |c: &mut OtlpArgs| c.endpoint = Some("http://collector:4318".into());
        let disabled = args(|c| {
            on(c);
            c.sdk_disabled = true;
        });
        assert_eq!(url(&disabled, Signal::Logs), None);
        let no_traces = args(|c| {
            on(c);
            c.traces_exporter = Some("none".into());
        });
        assert_eq!(url(&no_traces, Signal::Traces), None);
        assert!(url(&no_traces, Signal::Logs).is_some());
    }

    #[test]
    fn another_protocol_or_exporter_is_refused_naming_the_variable() {
        let grpc = args(|c| {
            c.endpoint = Some("http://collector:4318".into());
            c.traces_protocol = Some("grpc".into());
        });
        let error = Endpoint::for_signal(&grpc, Signal::Traces).unwrap_err();
        assert_eq!(
            error.to_string(),
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc is not supported; use http/protobuf"
        );
        assert!(Endpoint::for_signal(&grpc, Signal::Logs).is_ok());
        let all_grpc = args(|c| {
            c.endpoint = Some("http://collector:4318".into());
            c.protocol = Some("grpc".into());
        });
        assert_eq!(
            Endpoint::for_signal(&all_grpc, Signal::Logs)
                .unwrap_err()
                .to_string(),
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported; use http/protobuf"
        );
        let zipkin = args(|c| c.logs_exporter = Some("zipkin".into()));
        assert_eq!(
            Endpoint::for_signal(&zipkin, Signal::Logs)
                .unwrap_err()
                .to_string(),
            "OTEL_LOGS_EXPORTER=zipkin is not supported; use otlp or none"
        );
    }

    fn attribute(resource: &Resource, key: &str) -> Option<String> {
        resource
            .get(&Key::from(key.to_owned()))
            .map(|v| v.to_string())
    }

    #[test]
    fn the_environment_wins_over_the_processes_own_resource_attributes() {
        let own = || vec![KeyValue::new("troupe.cluster", "demo")];
        let plain = resource_from("", false, "troupe-agent", "1.2.3", own());
        assert_eq!(
            attribute(&plain, "service.name").as_deref(),
            Some("troupe-agent")
        );
        assert_eq!(
            attribute(&plain, "service.version").as_deref(),
            Some("1.2.3")
        );
        assert_eq!(attribute(&plain, "troupe.cluster").as_deref(), Some("demo"));
        let set = resource_from(
            "service.version=9, troupe.cluster=other",
            false,
            "troupe-agent",
            "1.2.3",
            own(),
        );
        // The SDK's environment detector reads the real environment, not this string: the
        // keys the environment names are only left out here.
        assert_ne!(attribute(&set, "service.version").as_deref(), Some("1.2.3"));
        assert_ne!(attribute(&set, "troupe.cluster").as_deref(), Some("demo"));
    }

    #[test]
    fn a_span_outside_any_exporting_subscriber_sends_no_trace_context() {
        let span = tracing::info_span!("nothing");
        assert!(trace_headers(&span).is_empty());
    }
}
