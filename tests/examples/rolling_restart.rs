//! The rolling-restart bench (issue 12, item 7): five shop nodes of the example application and
//! a client node asking through the cluster router and the singleton's proxy, every shop node
//! restarted in turn — first with SIGTERM and a drain delay (the preStop stand-in), then with
//! SIGKILL — and a table of what was asked, answered and lost.
//!
//! ```sh
//! cargo run --release -p troupe-e2e --example rolling_restart -- [RATE] [DRAIN_MS]
//! ```
//! `RATE` asks per second on each path (default 1000), `DRAIN_MS` the drain delay (default 2000).
//! The run sends at that rate for as long as the five restarts take (about a minute), so the
//! default sends well over 100 000 asks per stop mode. Figures: `docs/benchmarks.md`.

use std::time::Duration;

use troupe_e2e::rolling::{Plan, Stop, run};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rate: u32 = args
        .next()
        .map_or(1_000, |a| a.parse().expect("RATE is a number"));
    let drain_ms: u64 = args
        .next()
        .map_or(2_000, |a| a.parse().expect("DRAIN_MS is a number"));
    for (title, stop) in [
        (
            format!("SIGTERM, drain {drain_ms} ms"),
            Stop::Term { drain_ms },
        ),
        ("SIGKILL".to_owned(), Stop::Kill),
    ] {
        let plan = Plan {
            shops: 5,
            rate,
            stop,
            settle: Duration::from_secs(5),
            gap: Duration::from_secs(2),
            ask_timeout_ms: 5_000,
            down_after_ms: 2_000,
        };
        let report = run(&plan).await;
        let lost = report.failed("router") + report.failed("singleton");
        let silent = report.silent("router") + report.silent("singleton");
        let sent = report.sent("router") + report.sent("singleton");
        println!(
            "{}",
            report.table(&format!(
                "## Rolling restart of 5 shop nodes, {title}, {rate} asks/s per path: {lost} lost of {sent} ({silent} silent)"
            ))
        );
    }
}
