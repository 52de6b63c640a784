//! `troupe-dev`: a local Troupe cluster in one command — the control-plane server on an
//! embedded SQLite file plus node agents on 127.0.0.1 running the demo workload.
//!
//! The launcher depends on neither `troupe-server` nor `troupe-agent`: it starts their
//! binaries as child processes, as an operator would. Its lifecycle is the pure state machine
//! in [`supervisor`]; [`launcher`] is the shell that performs it.

pub mod config;
pub mod launcher;
pub mod supervisor;

pub use config::Config;
