//! `troupe-server`: the control-plane binary.

use clap::Parser;

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let config = troupe_server::Config::parse();
    troupe_server::telemetry::init(&config);
    troupe_server::App::build(config).await?.run().await?;
    Ok(())
}
