//! `troupe-server`: the control-plane binary.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    let config = troupe_server::Config::parse();
    // Before the runtime: the OTLP exporters' blocking HTTP clients must not be made on it.
    let telemetry = troupe_server::telemetry::init(&config)?;
    let served = actix_web::rt::System::new()
        .block_on(async move { troupe_server::App::build(config).await?.run().await });
    telemetry.shutdown();
    Ok(served?)
}
