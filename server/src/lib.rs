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
//!
//! # Layers
//! [`app`] is the composition root: it builds the [`store`], the export ([`otel`]), the
//! [`coordination`] service and the shared [`state`], and mounts the routes of [`api`] and
//! [`ui`]. Resources in `api/` and pages in `ui/` use the state, the store and the helpers
//! ([`error`], [`time`], [`paging`], `request`, `json`), never the file that mounts them; no module
//! imports one that imports it back (`scripts/check-module-cycles` keeps it so).
//!
//! # Features
//! `test-util` adds `testing` (throw-away databases, a batch builder, a tiny HTTP client)
//! for tests and benchmarks; production builds leave it out, so nothing in them can drop a
//! database.

pub mod address;
pub mod api;
pub mod app;
pub mod auth;
pub mod cidr;
pub mod config;
pub mod coordination;
pub mod error;
pub mod feed;
mod json;
pub mod live;
pub mod member_health;
pub mod metrics;
pub mod observe;
pub mod otel;
pub mod paging;
mod request;
pub mod sse;
pub mod state;
pub mod store;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod time;
pub mod tls;
pub mod ui;
pub mod viewer;

pub use app::{App, AppError};
pub use config::Config;
pub use state::{AppState, ShutdownTrigger};
