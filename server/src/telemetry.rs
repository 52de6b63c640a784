//! Logging: `tracing` to stderr as text or JSON lines, filtered by `--log-filter`.

use tracing_subscriber::EnvFilter;

use crate::Config;

/// Installs the global subscriber; a second call (tests) is a no-op.
pub fn init(config: &Config) {
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if config.log_json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
