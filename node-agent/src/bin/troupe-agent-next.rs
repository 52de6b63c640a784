//! `troupe-agent-next`: the agent built one wire-protocol version ahead (feature `wire-next`),
//! for the mixed-version rolling-upgrade test only. The same program as `src/main.rs`; keep
//! the two in step.

use std::time::Duration;

use clap::Parser;
use troupe_agent::{Agent, AgentConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = AgentConfig::parse();
    let agent = Agent::start(config).await?;
    shutdown_signal().await?;
    tracing::info!("shutting down: leaving the cluster");
    agent.shutdown(Duration::from_secs(10)).await;
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        biased;
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
