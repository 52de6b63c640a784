//! KubeLease latencies against the STAND-IN API server on loopback (not a real Kubernetes API
//! server: no etcd, no admission, no TLS), through the real kube client.
//!
//! `cargo bench -p troupe-kubernetes --bench kube_lease` — prints a table:
//! - acquire of a free (released) Lease: GET + PUT; acquire of a new Lease: GET + POST;
//! - renew: one PUT carrying the resourceVersion (what the renewal task sends);
//! - holder death → next holder's acquire, with default timing (TTL 15 s, renew 5 s) and the
//!   singleton's default acquire retry interval (5 s).
//!
//! `KUBE_BENCH_SAMPLES` (default 500) sets the latency sample count; `KUBE_BENCH_DEATHS`
//! (default 2) the number of death→acquire trials.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as LeaseObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;
use troupe::lease::Lease;
use troupe_kubernetes::standin::StandIn;
use troupe_kubernetes::{KubeLease, KubeTiming};

const DEFAULT_RETRY: Duration = Duration::from_secs(5);

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn row(name: &str, samples: &mut [Duration]) {
    let p50 = percentile(samples, 0.50);
    let p99 = percentile(samples, 0.99);
    println!(
        "| {name:<34} | {:>7} | {:>10.3} | {:>10.3} |",
        samples.len(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run());
}

async fn run() {
    let samples = env("KUBE_BENCH_SAMPLES", 500);
    let deaths = env("KUBE_BENCH_DEATHS", 2);
    let server = StandIn::start().await.expect("the stand-in starts");
    let client = server.client();
    let timing = KubeTiming::default();
    println!(
        "KubeLease against the stand-in API server on loopback (NOT a real Kubernetes API server)"
    );
    println!("timing: {timing}; {samples} samples per row\n");
    println!("| operation                          | samples |   p50 (ms) |   p99 (ms) |");
    println!("|------------------------------------|---------|------------|------------|");

    // Acquire of a new Lease (GET 404 + POST).
    let mut new = Vec::with_capacity(samples);
    for i in 0..samples {
        let lease = KubeLease::new(
            client.clone(),
            "default",
            &format!("new-{i}"),
            "bench",
            timing,
        )
        .expect("valid timing");
        let start = Instant::now();
        let token = lease.acquire(Box::new(|_| {})).await.expect("acquire");
        new.push(start.elapsed());
        assert!(token.is_some());
        lease.release().await.expect("release");
    }
    row("acquire, new Lease (GET+POST)", &mut new);

    // Acquire of a released Lease (GET + PUT), alternating owners.
    let a = KubeLease::new(client.clone(), "default", "shared", "a", timing).expect("valid");
    let b = KubeLease::new(client.clone(), "default", "shared", "b", timing).expect("valid");
    let mut free = Vec::with_capacity(samples);
    for i in 0..samples {
        let lease = if i % 2 == 0 { &a } else { &b };
        let start = Instant::now();
        let token = lease.acquire(Box::new(|_| {})).await.expect("acquire");
        free.push(start.elapsed());
        assert!(token.is_some(), "a released Lease is free");
        lease.release().await.expect("release");
    }
    row("acquire, released Lease (GET+PUT)", &mut free);

    // Renew: the renewal task's request, a PUT with the last resourceVersion.
    let api: Api<LeaseObject> = Api::default_namespaced(client.clone());
    let mut current = api.get("shared").await.expect("exists");
    let mut renew = Vec::with_capacity(samples);
    for _ in 0..samples {
        if let Some(spec) = current.spec.as_mut() {
            spec.renew_time = Some(MicroTime(chrono::Utc::now()));
        }
        current.metadata.managed_fields = None;
        let start = Instant::now();
        current = api
            .replace("shared", &PostParams::default(), &current)
            .await
            .expect("renewed");
        renew.push(start.elapsed());
    }
    row("renew (PUT with resourceVersion)", &mut renew);

    println!(
        "\nholder death → next holder's acquire (default timing, acquire retried every {DEFAULT_RETRY:?}):\n"
    );
    println!("| trial | death after last renewal (s) | next acquire after death (s) |");
    println!("|-------|------------------------------|------------------------------|");
    for trial in 0..deaths {
        let name = format!("death-{trial}");
        let holder =
            KubeLease::new(client.clone(), "default", &name, "holder", timing).expect("valid");
        let next = KubeLease::new(client.clone(), "default", &name, "next", timing).expect("valid");
        holder
            .acquire(Box::new(|_| {}))
            .await
            .expect("acquire")
            .expect("free");
        // Die at a different point of the renewal cycle in each trial.
        let phase = timing
            .renew_interval
            .mul_f64((trial as f64 + 0.5) / deaths as f64);
        tokio::time::sleep(timing.renew_interval + phase).await;
        let renewed: LeaseObject = api.get(&name).await.expect("exists");
        let last_renewal = renewed.spec.and_then(|s| s.renew_time).expect("renewed").0;
        drop(holder); // the process dies: no release, no more renewals
        let died = Instant::now();
        let since_renewal = (chrono::Utc::now() - last_renewal).num_milliseconds() as f64 / 1e3;
        // The contender tries at once, then every DEFAULT_RETRY, as the singleton manager does.
        loop {
            if next
                .acquire(Box::new(|_| {}))
                .await
                .expect("acquire")
                .is_some()
            {
                break;
            }
            tokio::time::sleep(DEFAULT_RETRY).await;
        }
        println!(
            "| {trial:>5} | {since_renewal:>28.2} | {:>28.2} |",
            died.elapsed().as_secs_f64()
        );
        next.release().await.expect("release");
    }
}
