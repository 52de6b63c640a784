//! What the control-plane server and the node agents expose the same way, so a scraper or a
//! collector sees one format and one configuration from both:
//!
//! - [`exposition`]: the two Prometheus text formats (OpenMetrics 1.0.0 and text 0.0.4, the one
//!   `promtool check metrics` reads) and how an `Accept` header picks one;
//! - [`process`]: the standard `process_*` metrics, read from `/proc/self` at each scrape;
//! - [`otlp`]: OpenTelemetry export over OTLP/HTTP — the standard `OTEL_*` settings per signal,
//!   the resource (`service.name`, `service.version`, `troupe.*`), `tracing` events as log
//!   records with structured bodies, and W3C trace context for outgoing requests.

pub mod exposition;
pub mod otlp;
pub mod process;

pub use exposition::{Exposition, to_text_004};
pub use process::ProcessCollector;
