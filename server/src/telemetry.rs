//! Logging and tracing: `tracing` to stderr as text or JSON lines, filtered by `--log-filter`;
//! with a traces endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`; see [`crate::otel`]) the server's own request
//! spans also leave as OpenTelemetry traces (http/protobuf).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::Config;
use crate::otel::{Endpoint, ExportError, Signal, resource};

/// What [`init`] installed; flush or shut it down before exiting.
#[derive(Debug, Default)]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans finished so far (blocking).
    pub fn flush(&self) {
        if let Some(provider) = &self.tracer_provider
            && let Err(error) = provider.force_flush()
        {
            tracing::warn!(%error, "flushing spans failed");
        }
    }

    /// Flushes and stops the span exporter (blocking).
    pub fn shutdown(&self) {
        if let Some(provider) = &self.tracer_provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(%error, "shutting the span exporter down failed");
        }
    }
}

/// The traces URL as configured, if request tracing is on.
pub fn traces_url(config: &Config) -> Result<Option<String>, ExportError> {
    Ok(Endpoint::for_signal(&config.otlp, Signal::Traces)?.map(|e| e.url(Signal::Traces)))
}

/// Installs the global subscriber (a second call, as in tests, keeps the first). Call it
/// before the async runtime starts: the span exporter's blocking HTTP client must not be made
/// on a runtime thread.
pub fn init(config: &Config) -> Result<Telemetry, ExportError> {
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if config.log_json {
        fmt.json().flatten_event(true).boxed()
    } else {
        fmt.boxed()
    };
    let mut telemetry = Telemetry::default();
    let otel = match traces_url(config)? {
        Some(url) => {
            let provider = Endpoint::Signal(url).tracer_provider(resource())?;
            let tracer = provider.tracer("troupe-server");
            telemetry.tracer_provider = Some(provider);
            // `target`, `level`, `busy_ns`, `idle_ns` are not semantic-convention attributes;
            // `code.*` and `thread.*` are.
            Some(
                tracing_opentelemetry::layer()
                    .with_target(false)
                    .with_level(false)
                    .with_tracked_inactivity(false)
                    .with_tracer(tracer),
            )
        }
        None => None,
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init();
    Ok(telemetry)
}
