//! The Troupe control-plane server: ingests agents' reports, keeps their history in
//! PostgreSQL (or an embedded SQLite file), and serves the management API, a live event
//! stream, Prometheus metrics and the web dashboard (`/ui/`).
//!
//! ```no_run
//! # async fn run() -> Result<(), troupe_server::AppError> {
//! let config = troupe_server::Config::defaults();
//! troupe_server::App::build(config).await?.run().await
//! # }
//! ```

pub mod api;
pub mod app;
pub mod auth;
pub mod config;
pub mod live;
pub mod metrics;
pub mod otel;
pub mod store;
pub mod telemetry;
pub mod testing;
pub mod ui;

pub use app::{App, AppError, AppState, ShutdownTrigger};
pub use config::Config;
