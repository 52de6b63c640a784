//! `troupe-agent`: parse the command line, set up logging and OpenTelemetry export, start the
//! node, and exit with what ended it: 0 after a graceful leave, 3 when fenced, 1 when it
//! cannot start. Spans and log records still queued are exported before the exit.

use clap::Parser;
use troupe_agent::{Agent, AgentConfig};

pub(crate) fn main() {
    let mut config = match AgentConfig::try_parse() {
        Ok(config) => config,
        // --help and --version exit 0; a usage error exits 1 like any start-up error.
        Err(error) if !error.use_stderr() => error.exit(),
        Err(error) => {
            let _ = error.print();
            std::process::exit(1);
        }
    };
    // Chosen here so the telemetry resource names the incarnation the node runs as.
    config.incarnation = Some(config.incarnation.unwrap_or_else(rand::random));
    // Before the runtime: the exporters' blocking HTTP clients must not live on its threads.
    let telemetry = match troupe_agent::telemetry::init(&config) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the async runtime: {error}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async move {
        match Agent::start(config).await {
            Ok(agent) => agent.run().await.code(),
            Err(error) => {
                eprintln!("error: {error}");
                1
            }
        }
    });
    // The runtime is left as it is (a blocking task could hold its drop up); this thread is not
    // one of its workers, so the exporters may block here.
    telemetry.shutdown();
    std::process::exit(code);
}
