//! What the control-plane server and the node agents expose the same way, so a scraper or a
//! collector sees one format from both:
//!
//! - [`exposition`]: the two Prometheus text formats (OpenMetrics 1.0.0 and text 0.0.4, the one
//!   `promtool check metrics` reads) and how an `Accept` header picks one;
//! - [`process`]: the standard `process_*` metrics, read from `/proc/self` at each scrape.

pub mod exposition;
pub mod process;

pub use exposition::{Exposition, to_text_004};
pub use process::ProcessCollector;
