//! A rolling restart loses nothing (issue 12, seed 003's "122 lost calls out of ~1.7M"): five
//! shop nodes of the example application and a client node sending a steady stream of asks
//! through the cluster router and through the singleton's proxy; every shop node is stopped in
//! turn — SIGTERM with a drain delay, as Kubernetes' preStop sleep gives — and a fresh
//! incarnation started at its address and waited for. Every ask is answered, the singleton moves
//! each time its host restarts, and no two instances are ever alive together. With SIGKILL
//! instead, asks are lost, and every one of them is visible as an ask error (none silent).
//!
//! The bench with ≥ 100 000 asks is `cargo run --release -p troupe-e2e --example
//! rolling_restart` (figures in `docs/benchmarks.md`).

use std::time::Duration;

use troupe_e2e::rolling::{Plan, Report, Stop, run};

fn plan(stop: Stop) -> Plan {
    Plan {
        shops: 5,
        rate: 100,
        stop,
        settle: Duration::from_secs(2),
        gap: Duration::from_millis(500),
        ask_timeout_ms: 5_000,
        down_after_ms: 2_000,
    }
}

fn assert_singleton_moved_each_time_its_host_restarted(report: &Report) {
    let hosts = report
        .restarts
        .iter()
        .filter(|r| r.hosted_singleton)
        .count();
    assert!(
        hosts >= 1,
        "no restart stopped the singleton's host:\n{}",
        report.table("")
    );
    for restart in report.restarts.iter().filter(|r| r.hosted_singleton) {
        let moved = restart.singleton_moved_to.as_deref();
        assert!(
            moved.is_some_and(|to| to != restart.node),
            "the singleton did not move when {} restarted:\n{}",
            restart.node,
            report.table("")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_sigterm_and_a_drain_delay_loses_no_ask() {
    let report = run(&plan(Stop::Term { drain_ms: 1_000 })).await;
    println!("{}", report.table("rolling restart, SIGTERM + 1 s drain"));
    for path in ["router", "singleton"] {
        assert!(report.sent(path) >= 1_000, "{path}:\n{}", report.table(""));
        assert_eq!(
            report.ok(path),
            report.sent(path),
            "every ask through the {path} answered:\n{}",
            report.table("")
        );
    }
    for restart in &report.restarts {
        assert_eq!(
            restart.exit_code,
            Some(0),
            "{} left gracefully",
            restart.node
        );
    }
    assert_singleton_moved_each_time_its_host_restarted(&report);
    assert_eq!(
        report.max_overlap(),
        Duration::ZERO,
        "two singleton instances alive together:\n{:#?}",
        report.instances
    );
    assert_eq!(report.totals["duplicate_numbers"], 0, "{}", report.totals);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_with_sigkill_loses_asks_but_every_loss_is_an_ask_error() {
    let report = run(&plan(Stop::Kill)).await;
    println!("{}", report.table("rolling restart, SIGKILL"));
    for path in ["router", "singleton"] {
        assert!(report.sent(path) >= 1_000, "{path}:\n{}", report.table(""));
        assert_eq!(
            report.silent(path),
            0,
            "every ask through the {path} answered or failed visibly:\n{}",
            report.table("")
        );
        assert!(
            report.ok(path) > report.failed(path),
            "most asks through the {path} answered:\n{}",
            report.table("")
        );
    }
    assert_singleton_moved_each_time_its_host_restarted(&report);
}
