//! `troupe-agent`: runs an actor system until Ctrl-C, then shuts it down in order.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let name = std::env::args().nth(1).unwrap_or_else(|| "troupe".to_owned());
    let system = troupe_agent::start(&name)?;
    tracing::info!(system = system.name(), "agent started; Ctrl-C stops it");
    tokio::signal::ctrl_c().await?;
    system.shutdown().await;
    Ok(())
}
