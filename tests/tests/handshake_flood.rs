//! Five `troupe-agent` processes on 127.0.0.1; one node's cluster port is flooded from 1,000
//! loopback source addresses by someone without the secret — first a steady 1,500
//! connections/s, then a burst of 100,000 as fast as this machine goes — while another member
//! restarts (joining through the flooded node). No member may be downed, the restarted member
//! must be up again within its normal time (measured first, without a flood), and the flooded
//! node's file descriptors, memory and warning lines must stay bounded (issue 14).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use troupe_e2e::flood::{
    Flood, FloodReport, ResourceSample, loopback_sources, peak_resources, raise_fd_limit, sample,
};
use troupe_e2e::{Process, binary, free_port};

const SECRET: &str = "e2e flood cluster secret, long enough";
const WAIT: Duration = Duration::from_secs(20);
const AGENTS: usize = 5;
/// The flooded node and the member that restarts.
const FLOODED: usize = 1;
const RESTARTED: usize = 3;
/// Connections the flooder holds open at once.
const MAX_OPEN: usize = 4_000;

fn address(port: u16) -> String {
    format!("troupe://e2e@127.0.0.1:{port}")
}

fn agent_args(port: u16, seed: u16) -> Vec<String> {
    [
        "--system",
        "e2e",
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--seed",
        &address(seed),
        "--secret",
        SECRET,
        "--events-json",
        "--management-bind",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

fn is_up(line: &serde_json::Value, port: u16) -> bool {
    line["event"] == "MemberUp" && line["member"]["address"] == address(port)
}

/// Starts the member at `ports[RESTARTED]` (joining through the flooded node) and returns how
/// long until it is up in its own view and in every other agent's.
async fn start_restarted(agents: &mut [Process], ports: &[u16]) -> Duration {
    let started = Instant::now();
    agents[RESTARTED] = Process::start(
        &binary("troupe-agent"),
        &agent_args(ports[RESTARTED], ports[FLOODED]),
    );
    let me = agents[RESTARTED]
        .wait_for(WAIT, "SelfUp of the restarted member", |l| {
            l["event"] == "SelfUp"
        })
        .await;
    let incarnation = me["member"]["incarnation"].clone();
    for (i, agent) in agents.iter_mut().enumerate() {
        if i == RESTARTED {
            continue;
        }
        agent
            .wait_for(
                WAIT,
                &format!("agent {i} sees the restarted member up"),
                |l| is_up(l, ports[RESTARTED]) && l["member"]["incarnation"] == incarnation,
            )
            .await;
    }
    started.elapsed()
}

/// Stops the restarting member gracefully (remembering the stopped incarnation), then starts
/// it again; returns the time to up.
async fn restart(
    agents: &mut [Process],
    ports: &[u16],
    stopped: &mut Vec<serde_json::Value>,
) -> Duration {
    let me = agents[RESTARTED]
        .wait_for(WAIT, "SelfUp of the member to restart", |l| {
            l["event"] == "SelfUp"
        })
        .await;
    stopped.push(me["member"]["incarnation"].clone());
    let status = agents[RESTARTED].terminate(WAIT).await;
    assert!(status.success(), "graceful leave exits 0, got {status}");
    start_restarted(agents, ports).await
}

async fn metric(management: &str, name: &str) -> Option<f64> {
    let body = reqwest::get(format!("{management}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']) && l.contains(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_downs_no_member_and_a_restarted_member_rejoins_in_its_normal_time() {
    let fd_limit = raise_fd_limit(MAX_OPEN as u64 + 2_000);
    let agent = binary("troupe-agent");
    let ports: Vec<u16> = (0..AGENTS).map(|_| free_port()).collect();
    let flooded_started = Instant::now();
    let mut agents: Vec<Process> = ports
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let args = agent_args(p, ports[0]);
            if i == FLOODED {
                Process::start_capturing_stderr(&agent, &args)
            } else {
                Process::start(&agent, &args)
            }
        })
        .collect();
    let mut managements = Vec::new();
    for agent in &mut agents {
        let started = agent
            .wait_for(WAIT, "AgentStarted", |l| l["event"] == "AgentStarted")
            .await;
        managements.push(started["management"].as_str().unwrap().to_owned());
        for &port in &ports {
            agent
                .wait_for(WAIT, &format!("MemberUp of {port}"), |l| is_up(l, port))
                .await;
        }
    }

    // The member's normal restart time, without a flood.
    let mut stopped = Vec::new();
    let normal = restart(&mut agents, &ports, &mut stopped).await;
    let pid = agents[FLOODED].id().expect("flooded agent runs");
    let before = sample(pid).expect("sample the flooded agent");
    let target = format!("127.0.0.1:{}", ports[FLOODED]).parse().unwrap();
    let (stop_sampling, sampling) = watch::channel(false);
    let peak = tokio::spawn(peak_resources(pid, Duration::from_millis(50), sampling));

    // A steady flood, during which the member restarts.
    let steady = Flood {
        target,
        sources: loopback_sources(1_000),
        total: 1_500 * 14,
        rate: Some(1_500),
        max_open: MAX_OPEN,
        hold: Duration::from_secs(8),
        deadline: Duration::from_secs(20),
    };
    let steady_run = tokio::spawn(async move { steady.run().await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during_steady = restart(&mut agents, &ports, &mut stopped).await;
    let steady: FloodReport = steady_run.await.unwrap();

    // A burst of 100,000, as fast as it goes, during which the member restarts again.
    let burst = Flood {
        target,
        sources: loopback_sources(1_000),
        total: 100_000,
        rate: None,
        max_open: MAX_OPEN,
        hold: Duration::from_secs(8),
        deadline: Duration::from_secs(45),
    };
    let burst_run = tokio::spawn(async move { burst.run().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let during_burst = restart(&mut agents, &ports, &mut stopped).await;
    let burst: FloodReport = burst_run.await.unwrap();
    // Long enough after the flood for an unreachable member to have been downed (5 s).
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop_sampling.send_replace(true);
    let peak: ResourceSample = peak.await.unwrap();

    eprintln!(
        "flood: steady {} connections in {:.1?} ({:.0}/s, {} closed by the node), burst {} in {:.1?} ({:.0}/s, {} failed to connect); \
         restart to up: normal {normal:.2?}, during the steady flood {during_steady:.2?}, during the burst {during_burst:.2?}; \
         flooded node: {} fds and {} KiB before, peak {} fds and {} KiB (fd limit {fd_limit})",
        steady.connected,
        steady.elapsed,
        steady.connections_per_second(),
        steady.closed_by_node,
        burst.connected,
        burst.elapsed,
        burst.connections_per_second(),
        burst.failed,
        before.fds,
        before.rss_kib,
        peak.fds,
        peak.rss_kib,
    );

    // No running member was downed, and every agent counts five up and none unreachable. A
    // member that left and came back at the same address may see its stopped incarnation
    // downed by a node that had not yet seen it leave when the new one joined: that is the
    // stopped process, not a healthy member; it is counted and printed.
    let mut stopped_downed = 0;
    for (i, agent) in agents.iter_mut().enumerate() {
        agent.drain();
        let (of_stopped, healthy): (Vec<_>, Vec<_>) = agent
            .seen
            .iter()
            .filter(|l| l["event"] == "MemberDown")
            .partition(|l| {
                l["member"]["address"] == address(ports[RESTARTED])
                    && stopped.contains(&l["member"]["incarnation"])
            });
        stopped_downed += of_stopped.len();
        assert!(
            healthy.is_empty(),
            "agent {i} saw running members downed (ports {ports:?}, flooded {FLOODED}, restarted {RESTARTED}): {healthy:#?}"
        );
    }
    eprintln!("stopped incarnations downed (seen by any agent): {stopped_downed}");
    for (i, management) in managements.iter().enumerate() {
        if i == RESTARTED {
            continue;
        }
        assert_eq!(
            metric(management, "troupe_agent_members{status=\"up\"}").await,
            Some(AGENTS as f64),
            "agent {i} counts {AGENTS} up"
        );
        assert_eq!(
            metric(management, "troupe_agent_unreachable_members").await,
            Some(0.0),
            "agent {i} counts none unreachable"
        );
    }

    // The flood was what the issue asks for: at least 1,000 connections/s, and a burst of
    // 100,000 attempts (a few may find the accept queue full and time out).
    assert!(steady.connections_per_second() >= 1_000.0, "{steady:?}");
    assert_eq!(burst.attempted, 100_000, "{burst:?}");
    assert!(burst.connected >= 95_000, "{burst:?}");

    // Up again within its normal time (with a margin for a machine the flood keeps busy).
    let allowed = normal * 2 + Duration::from_secs(2);
    assert!(during_steady <= allowed, "{during_steady:?} > {allowed:?}");
    assert!(during_burst <= allowed, "{during_burst:?} > {allowed:?}");

    // Bounded, whatever the flooder holds open (4,000): 320 handshake slots, and at most 80
    // more evicted connections whose task has not been dropped yet (the accept loop waits);
    // plus the members' established connections.
    assert!(
        peak.fds <= before.fds + 400 + 20,
        "{} fds, {} before",
        peak.fds,
        before.fds
    );
    assert!(
        peak.rss_kib <= before.rss_kib + 64 * 1024,
        "{} KiB, {} before",
        peak.rss_kib,
        before.rss_kib
    );

    // The flood was felt, and counted on /metrics.
    let flooded = &managements[FLOODED];
    let evicted = metric(
        flooded,
        "troupe_agent_transport_connections_closed_total{reason=\"evicted\"}",
    )
    .await
    .unwrap_or(0.0);
    let refused = metric(
        flooded,
        "troupe_agent_transport_connections_closed_total{reason=\"source_limit\"}",
    )
    .await
    .unwrap_or(0.0);
    let rejected = metric(
        flooded,
        "troupe_agent_transport_handshakes_total{outcome=\"rejected\"}",
    )
    .await
    .unwrap_or(0.0);
    let suppressed = metric(flooded, "troupe_agent_transport_warnings_suppressed_total")
        .await
        .unwrap_or(0.0);
    eprintln!(
        "flooded node's /metrics: {evicted} evicted, {refused} refused at its source's share, \
         {rejected} handshakes rejected, {suppressed} warnings suppressed"
    );
    assert!(evicted + refused + rejected >= 10_000.0);
    assert!(suppressed > 0.0);

    // One global budget for the warnings about closed connections: a burst of 5, then one
    // per 10 s, whatever the number of source addresses.
    let warnings = agents[FLOODED]
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("WARN") && l.contains("closing connection"))
        .count();
    let budget = 5 + flooded_started.elapsed().as_secs() / 10 + 1;
    assert!(
        warnings as u64 <= budget,
        "{warnings} warning lines, budget {budget}"
    );

    for agent in &mut agents {
        agent.kill().await;
    }
}
