//! The launcher's command line.

use std::path::PathBuf;

use clap::Parser;

/// `troupe-dev`: a local Troupe cluster with its control plane, in one command.
///
/// Starts the control-plane server on an embedded SQLite file, then `--agents` node agents on
/// 127.0.0.1 that form one cluster, run the demo workload and report to the server. Prints
/// where the dashboard and the API are. Ctrl-C stops everything: the agents leave the cluster
/// gracefully, then the server shuts down.
#[derive(Debug, Clone, Parser)]
#[command(name = "troupe-dev", version, about, long_about = None)]
pub struct Config {
    /// Number of node agents to start (1 to 16).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub agents: u16,

    /// Port of the control plane on 127.0.0.1 (dashboard, API, ingest). Default: 8080 if it
    /// is free, otherwise any free port.
    #[arg(long)]
    pub port: Option<u16>,

    /// Where the SQLite file and the logs go (created if missing).
    #[arg(long, default_value = ".troupe-dev")]
    pub data_dir: PathBuf,

    /// Keep the history from earlier runs (by default each run starts with an empty SQLite
    /// file; the files of the last run stay in --data-dir either way).
    #[arg(long, default_value_t = false)]
    pub keep_data: bool,

    /// Start the agents without the demo workload (membership only).
    #[arg(long, default_value_t = false)]
    pub no_demo: bool,

    /// Cluster (actor system) name.
    #[arg(long, default_value = "demo")]
    pub cluster: String,

    /// Directory holding the `troupe-server` and `troupe-agent` binaries. Default: the
    /// directory of this launcher (`cargo build` puts them side by side).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,

    /// Seconds to wait for the server and every agent to be up before giving up (1 to 3600).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub startup_timeout_secs: u64,

    /// Seconds a child gets to exit after SIGTERM before it is killed (1 to 600).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub stop_grace_secs: u64,
}
