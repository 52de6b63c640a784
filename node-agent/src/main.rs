//! `troupe-agent`: parse the command line, start the node, and exit with what ended it:
//! 0 after a graceful leave, 3 when fenced, 1 when it cannot start.

use clap::Parser;
use troupe_agent::{Agent, AgentConfig};

#[tokio::main]
pub(crate) async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = match AgentConfig::try_parse() {
        Ok(config) => config,
        // --help and --version exit 0; a usage error exits 1 like any start-up error.
        Err(error) if !error.use_stderr() => error.exit(),
        Err(error) => {
            let _ = error.print();
            std::process::exit(1);
        }
    };
    let agent = match Agent::start(config).await {
        Ok(agent) => agent,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    };
    let exit = agent.run().await;
    std::process::exit(exit.code());
}
