//! The Troupe control-plane server: ingests agents' reports, keeps their history in
//! PostgreSQL (or an embedded SQLite file), and serves the management API.

pub mod config;
pub mod store;

pub use config::Config;
pub mod testing;
